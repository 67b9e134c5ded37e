"""TLS listeners (``protocol = "tls"``, ferromq.tls) with real clients and certificates
the test makes (tests/support/tls_certs.py), under uvloop and asyncio: paho-mqtt 3.1.1 and 5.0
and mosquitto_pub/sub over TLS, a TCP and a TLS listener side by side, client
certificates required and used as user names, the TLS version floor, certificates
reloaded on SIGHUP while a connection stays up, and handshakes that fail or never
finish dropped and counted in $SYS."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import time
import warnings
from pathlib import Path

import pytest

from ferromq import bench
from ferromq._core import BenchError
from tests.conftest import RunningBroker, Starter, hang_up
from tests.support.commands import users_add
from tests.support.mqtt_raw import RawClient, sys_value_reaches
from tests.support.paho_clients import paho_client, round_trip
from tests.support.services import free_port
from tests.support.tls_certs import Pem, Pki, authority, client_context, tls_keys, x509_serial


def tls_config(pki: Pki, extra: str = "", sections: str = "") -> str:
    """A broker whose first listener (moved by FERROMQ_LISTEN) is TLS."""
    return f'[[listeners]]\n{tls_keys(pki, extra)}\n[storage]\nbackend = "memory"\n{sections}'


def tls_client(
    broker: RunningBroker, cafile: Path, cert: Pem | None = None, version: int = 4
) -> RawClient:
    return RawClient(broker.host, broker.port, version, tls=client_context(cafile, cert))


@pytest.mark.parametrize("version", [4, 5])
@pytest.mark.parametrize("qos", [0, 1])
def test_paho_round_trip_over_tls(
    started: Starter, loop: str, pki: Pki, version: int, qos: int
) -> None:
    broker = started(loop, tls_config(pki))
    sub, inbox = paho_client(
        broker, f"sub-{version}", version, configure=lambda c: c.tls_set(str(pki.ca.cafile))
    )
    pub, _ = paho_client(
        broker, f"pub-{version}", version, configure=lambda c: c.tls_set(str(pki.ca.cafile))
    )
    round_trip(sub, inbox, pub, qos)


def test_tcp_and_tls_listeners_side_by_side(started: Starter, loop: str, pki: Pki) -> None:
    tcp_port = free_port()
    broker = started(
        loop,
        f"[[listeners]]\n{tls_keys(pki)}\n"
        f'[[listeners]]\nname = "plain"\nport = {tcp_port}\n[storage]\nbackend = "memory"\n',
    )
    secure = tls_client(broker, pki.ca.cafile)
    assert secure.connect("secure")["reason_code"] == 0
    secure.send({"type": "subscribe", "packet_id": 1, "filters": [{"filter": "mix", "qos": 0}]})
    assert secure.recv()["type"] == "suback"
    plain = RawClient(broker.host, tcp_port)
    assert plain.connect("plain")["reason_code"] == 0
    plain.send({"type": "publish", "topic": "mix", "payload": b"from tcp"})
    assert bytes(secure.recv()["payload"]) == b"from tcp"
    # The TLS port does not speak plain MQTT.
    with pytest.raises((ConnectionError, TimeoutError, OSError)):
        RawClient(broker.host, broker.port).connect("confused")


def mosquitto(
    tool: str, broker: RunningBroker, pki: Pki, cert: Pem | None, *args: str
) -> list[str]:
    command = [tool, "-h", "localhost", "-p", str(broker.port), "--cafile", str(pki.ca.cafile)]
    if cert is not None:
        command += ["--cert", str(cert.cert), "--key", str(cert.key)]
    return [*command, *args]


@pytest.mark.skipif(shutil.which("mosquitto_sub") is None, reason="mosquitto-clients missing")
@pytest.mark.parametrize("require", [False, True])
def test_mosquitto_clients_over_tls(started: Starter, loop: str, pki: Pki, require: bool) -> None:
    extra = "require_certificate = true\n" if require else ""
    broker = started(loop, tls_config(pki, extra))
    cert = pki.client if require else None
    sub = subprocess.Popen(
        mosquitto("mosquitto_sub", broker, pki, cert, "-t", "fleet/#", "-q", "1", "-C", "3", "-v"),
        stdout=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.5)  # as test_broker_clients: time for mosquitto_sub to subscribe
    for i in range(3):
        subprocess.run(
            mosquitto(
                "mosquitto_pub", broker, pki, cert, "-t", f"fleet/{i}", "-m", f"m{i}", "-q", "1"
            ),
            check=True,
            timeout=10,
        )
    out, _ = sub.communicate(timeout=10)
    assert out.splitlines() == ["fleet/0 m0", "fleet/1 m1", "fleet/2 m2"]


def refused_at_handshake(broker: RunningBroker, context: ssl.SSLContext) -> None:
    """The handshake (or, with TLS 1.3, the first read after it) fails."""
    with pytest.raises((ssl.SSLError, ConnectionError)):
        client = RawClient(broker.host, broker.port, tls=context)
        client.connect("no-cert")


def test_require_certificate_refuses_clients_without_a_valid_one(
    started: Starter, loop: str, pki: Pki, tmp_path: Path
) -> None:
    broker = started(loop, tls_config(pki, "require_certificate = true\n"))
    refused_at_handshake(broker, client_context(pki.ca.cafile))
    stranger = authority(tmp_path, "stranger").issue("stranger", "device-7")
    refused_at_handshake(broker, client_context(pki.ca.cafile, stranger))
    log = broker.wait_for_log("TLS handshake failed")
    assert "peer=127.0.0.1:" in log
    client = tls_client(broker, pki.ca.cafile, pki.client)
    assert client.connect("with-cert")["reason_code"] == 0


def identity_as_username(source: str) -> str:
    return (
        "require_certificate = true\nuse_identity_as_username = true\n"
        f'identity_source = "{source}"\n'
    )


@pytest.mark.parametrize(("source", "identity"), [("cn", "device-7"), ("san_uri", "urn:dev:7")])
def test_certificate_identity_is_the_user_name(
    started: Starter, loop: str, pki: Pki, source: str, identity: str
) -> None:
    broker = started(loop, tls_config(pki, identity_as_username(source)))
    client = tls_client(broker, pki.ca.cafile, pki.client, version=5)
    # The CONNECT's user name is replaced and no password is needed.
    assert client.connect("dev-7", username="mallory")["reason_code"] == 0
    log = broker.wait_for_log("authenticated")
    line = next(line for line in log.splitlines() if "authenticated" in line)
    assert f"username={identity}" in line and "mallory" not in line


def test_a_certificate_user_needs_no_password_beside_a_users_file(
    started: Starter, loop: str, pki: Pki, tmp_path: Path
) -> None:
    users = tmp_path / "users.toml"
    assert users_add(users, "alice", "alice pw").returncode == 0
    tcp_port = free_port()
    broker = started(
        loop,
        f"[[listeners]]\n{tls_keys(pki, identity_as_username('cn'))}\n"
        f'[[listeners]]\nname = "plain"\nport = {tcp_port}\n'
        f'[auth]\nusers_file = "{users}"\n[storage]\nbackend = "memory"\n',
    )
    device = tls_client(broker, pki.ca.cafile, pki.client)
    assert device.connect("dev-7")["reason_code"] == 0
    # The plain listener still asks the users file.
    assert RawClient(broker.host, tcp_port).connect("anon")["reason_code"] == 5
    alice = RawClient(broker.host, tcp_port)
    assert alice.connect("alice", username="alice", password=b"alice pw")["reason_code"] == 0
    assert "username=device-7" in broker.wait_for_log("username=alice")


def test_a_certificate_without_the_identity_is_refused(
    started: Starter, loop: str, pki: Pki
) -> None:
    broker = started(loop, tls_config(pki, identity_as_username("san_dns")))
    client = tls_client(broker, pki.ca.cafile, pki.client)  # no DNS name in it
    assert client.connect("dev-7", username="device-7", password=b"x")["reason_code"] == 5


def test_tls_1_2_minimum_refuses_a_tls_1_1_client(started: Starter, loop: str, pki: Pki) -> None:
    context = client_context(pki.ca.cafile)
    try:
        with warnings.catch_warnings():  # TLS 1.1 is deprecated: the point here
            warnings.simplefilter("ignore", DeprecationWarning)
            context.minimum_version = ssl.TLSVersion.TLSv1_1
            context.maximum_version = ssl.TLSVersion.TLSv1_1
        context.set_ciphers("DEFAULT:@SECLEVEL=0")
    except (ValueError, ssl.SSLError) as exc:
        pytest.skip(f"this OpenSSL cannot make a TLS 1.1 client: {exc}")
    broker = started(loop, tls_config(pki))
    try:
        RawClient(broker.host, broker.port, tls=context)
    except ssl.SSLError as exc:
        if "NO_PROTOCOLS_AVAILABLE" in str(exc):
            pytest.skip(f"this OpenSSL refuses TLS 1.1 on the client side: {exc}")
    else:
        pytest.fail("a TLS 1.1 handshake succeeded")
    assert "UNSUPPORTED_PROTOCOL" in broker.wait_for_log("TLS handshake failed")
    assert tls_client(broker, pki.ca.cafile).connect("modern")["reason_code"] == 0


def test_tls_1_3_minimum_refuses_a_tls_1_2_client(started: Starter, loop: str, pki: Pki) -> None:
    broker = started(loop, tls_config(pki, 'tls_version = "1.3"\n'))
    context = client_context(pki.ca.cafile)
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(ssl.SSLError):
        RawClient(broker.host, broker.port, tls=context)
    assert tls_client(broker, pki.ca.cafile).connect("modern")["reason_code"] == 0


@pytest.mark.parametrize("renewal", ["files replaced", "paths changed"])
def test_sighup_reloads_certificates_keeping_connections(
    started: Starter, loop: str, pki: Pki, tmp_path: Path, renewal: str
) -> None:
    broker = started(loop, tls_config(pki))
    old = tls_client(broker, pki.ca.cafile)
    assert old.connect("old")["reason_code"] == 0
    old.send({"type": "subscribe", "packet_id": 1, "filters": [{"filter": "r", "qos": 0}]})
    assert old.recv()["type"] == "suback"
    renewed = authority(tmp_path, "renewed")
    new_server = renewed.server("renewed-server")
    if renewal == "files replaced":
        shutil.copy(new_server.cert, pki.server.cert)
        shutil.copy(new_server.key, pki.server.key)
    else:
        broker.config_path.write_text(tls_config(Pki(renewed, new_server, pki.client)))
    hang_up(broker, "TLS certificates reloaded")
    assert "restart" not in broker.log()
    # The old connection goes on; a new one gets the new certificate.
    old.send({"type": "publish", "topic": "r", "payload": b"ping"})
    assert bytes(old.recv()["payload"]) == b"ping"
    refused_at_handshake(broker, client_context(pki.ca.cafile))
    assert tls_client(broker, renewed.cafile).connect("new")["reason_code"] == 0


def test_a_bad_certificate_on_sighup_keeps_the_old_one(
    started: Starter, loop: str, pki: Pki, tmp_path: Path
) -> None:
    broker = started(loop, tls_config(pki))
    other = authority(tmp_path, "other").server("other-server")
    original_key = pki.server.key.read_bytes()
    shutil.copy(other.key, pki.server.key)  # no longer matches certfile
    hang_up(broker, "reload refused")
    broker.wait_for_log("listeners[0].keyfile")
    broker.wait_for_log("does not match")
    assert tls_client(broker, pki.ca.cafile).connect("still")["reason_code"] == 0
    pki.server.key.write_bytes(original_key)


def _subscribed(client: RawClient, topic: str) -> None:
    client.send({"type": "subscribe", "packet_id": 1, "filters": [{"filter": topic, "qos": 1}]})
    assert client.recv()["type"] == "suback"


@pytest.mark.parametrize("reload", ["file changed", "sighup"])
def test_a_revoked_certificate_fails_its_handshake_and_a_new_crl_closes_its_connection(
    started: Starter, loop: str, pki: Pki, reload: str
) -> None:
    ca = pki.ca
    early, later = ca.issue("early", "early"), ca.issue("later", "later")
    ca.revoke(early)
    watch = 1 if reload == "file changed" else 0
    keys = f'require_certificate = true\ncrlfile = "{ca.crlfile}"\nwatch = {watch}\n'
    broker = started(loop, tls_config(pki, keys, "[sys]\ninterval = 1\n"))
    refused_at_handshake(broker, client_context(ca.cafile, early))
    victim = tls_client(broker, ca.cafile, later)
    will = {"topic": "wills/later", "payload": b"gone", "qos": 1, "retain": False}
    assert victim.connect("victim", will=will)["reason_code"] == 0
    survivor = tls_client(broker, ca.cafile, pki.client)
    assert survivor.connect("survivor")["reason_code"] == 0
    _subscribed(survivor, "wills/#")

    ca.revoke(early, later)  # a new list, renamed over the old one
    if reload == "sighup":
        hang_up(broker, "TLS certificates reloaded")
    victim.expect_closed(timeout=10)
    assert bytes(survivor.recv(timeout=10)["payload"]) == b"gone"  # as any lost client
    log = broker.log()
    assert "client certificate revoked: connection closed" in log
    assert f"serial={x509_serial(later):x}" in log
    # The survivor is served on; the revoked certificate cannot come back.
    survivor.send({"type": "publish", "topic": "wills/x", "payload": b"still", "qos": 0})
    assert bytes(survivor.recv()["payload"]) == b"still"
    refused_at_handshake(broker, client_context(ca.cafile, later))
    sys_value_reaches(survivor, "$SYS/broker/clients/tls_revoked", 1)


def test_a_new_ca_is_trusted_after_its_file_changes_without_a_restart(
    started: Starter, loop: str, pki: Pki, tmp_path: Path
) -> None:
    keys = "require_certificate = true\nwatch = 1\n"
    broker = started(loop, tls_config(pki, keys))
    kept = tls_client(broker, pki.ca.cafile, pki.client)
    assert kept.connect("kept")["reason_code"] == 0
    second = authority(tmp_path, "second")
    newcomer = second.issue("newcomer", "newcomer")
    refused_at_handshake(broker, client_context(pki.ca.cafile, newcomer))
    bundle = pki.ca.cafile.read_bytes() + second.cafile.read_bytes()
    fresh = pki.ca.cafile.with_suffix(".new")
    fresh.write_bytes(bundle)
    fresh.replace(pki.ca.cafile)
    deadline = time.monotonic() + 10
    while True:
        try:
            client = tls_client(broker, pki.ca.cafile, newcomer)
            assert client.connect("newcomer")["reason_code"] == 0
            break
        except (ssl.SSLError, ConnectionError):
            assert time.monotonic() < deadline, broker.log()
            time.sleep(0.2)
    kept.send({"type": "pingreq"})
    assert kept.recv()["type"] == "pingresp"


def test_a_crlfile_that_holds_no_crl_is_refused_naming_the_key(pki: Pki, tmp_path: Path) -> None:
    config = tmp_path / "ferromq.toml"
    keys = f'require_certificate = true\ncrlfile = "{pki.ca.cafile}"\n'
    config.write_text(tls_config(pki, keys))
    checked = subprocess.run(
        ["ferromq", "check-config", "-c", str(config)], capture_output=True, text=True
    )
    assert checked.returncode == 2
    assert checked.stderr.strip().splitlines() == [
        f"ferromq: error: listeners[0].crlfile: {pki.ca.cafile}: no PEM CRL "
        "(-----BEGIN X509 CRL-----) in it"
    ]


def wait_for_sys_value(broker: RunningBroker, pki: Pki, topic: str, at_least: int) -> None:
    """``topic`` reaches ``at_least`` within a few of the broker's $SYS intervals."""
    client = tls_client(broker, pki.ca.cafile)
    client.connect("sys-reader")
    sys_value_reaches(client, topic, at_least)


def test_garbage_and_stalled_handshakes_are_dropped_and_counted(
    started: Starter, loop: str, pki: Pki
) -> None:
    broker = started(
        loop,
        tls_config(
            pki, "max_connections = 2\n", '[limits]\nconnect_timeout = "1s"\n[sys]\ninterval = 1\n'
        ),
    )
    garbage = socket.create_connection((broker.host, broker.port), timeout=10)
    garbage.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    stalled = socket.create_connection((broker.host, broker.port), timeout=10)
    stalled.sendall(b"\x16\x03\x01\x02\x00\x01")  # the start of a ClientHello, then nothing
    # Both slots of the listener are held until each handshake fails: the garbage at
    # once, the stalled one at the connect timeout. Then a real client gets a slot.
    wait_closed(garbage)
    wait_closed(stalled)
    assert tls_client(broker, pki.ca.cafile).connect("after")["reason_code"] == 0
    wait_for_sys_value(broker, pki, "$SYS/broker/clients/tls_handshake_failed", 2)


def wait_closed(sock: socket.socket) -> None:
    """The broker closes ``sock``: reads reach EOF (after any alert) before the socket's
    timeout, which raises."""
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    finally:
        sock.close()


def test_load_generator_over_tls_accounts_every_message(
    started: Starter, loop: str, pki: Pki
) -> None:
    """``ferromq bench --transport tls`` (rustls in the generator) against the TLS
    listener: QoS 1 both ways, every message delivered exactly once."""
    broker = started(loop, tls_config(pki))
    generator_delivers_exactly_once(broker, "tls", pki.ca.cafile)


def generator_delivers_exactly_once(
    broker: RunningBroker, transport: str, cafile: Path | None = None
) -> None:
    """The load generator over ``transport``: 3 pairs, 500 QoS 1 messages each, every
    one delivered once."""
    ca = {} if cafile is None else {"tls_ca_file": str(cafile)}
    report = bench.run(
        {
            "port": broker.port,
            "transport": transport,
            **ca,
            "scenario": "p2p",
            "pairs": 3,
            "pub_qos": 1,
            "sub_qos": 1,
            "count": 500,
            "warmup": 0,
            "threads": 1,
            "drain_timeout": 20,
        }
    )
    assert report["clients"]["first_errors"] == []
    delivery = report["delivery"]
    assert (delivery["expected"], delivery["received"]) == (1500, 1500)
    assert (delivery["lost"], delivery["duplicates"]) == (0, 0)


def test_reconnecting_clients_resume_their_tls_sessions(
    started: Starter, loop: str, pki: Pki
) -> None:
    """The broker hands out TLS 1.3 session tickets, so a fleet that reconnects resumes
    its sessions (no certificate exchange) instead of a full handshake each time: of 200
    clients connecting one after another, nine in ten or more resume (the generator
    keeps the tickets each connection receives, as a device's TLS stack does; a client
    that starts before the previous one's ticket arrived makes a full handshake: the
    first ones, and a few more on a loaded machine; without tickets none would
    resume). In a node
    of several shards too: its shards share one ticket key, so a ticket one shard issued
    resumes on the shard the kernel gives the next connection to."""
    broker = started(loop, tls_config(pki))
    report = bench.run(
        {
            "port": broker.port,
            "transport": "tls",
            "tls_ca_file": str(pki.ca.cafile),
            "scenario": "conn",
            "clients": 200,
            "connect_rate": 400,
            "duration": 0.5,
            "threads": 1,
        }
    )
    clients = report["clients"]
    assert (clients["connected"], clients["first_errors"]) == (200, [])
    assert clients["tls_resumed"] >= 180


def test_load_generator_refuses_a_broker_its_ca_did_not_sign(
    started: Starter, loop: str, pki: Pki, tmp_path: Path
) -> None:
    broker = started(loop, tls_config(pki))
    stranger = authority(tmp_path, "stranger")
    with pytest.raises(BenchError, match="could not connect"):
        bench.run(
            {
                "port": broker.port,
                "transport": "tls",
                "tls_ca_file": str(stranger.cafile),
                "pairs": 1,
                "count": 10,
                "connect_timeout": 5,
            }
        )
