"""The admin listener end to end: a real `ferromq serve` with `[admin]`, real paho
clients, real Redis, and `/metrics` read with prometheus-client's own parser.

What a user would notice: the metrics move by exactly the traffic the test made (N
publishes, one refused password, one banned client id, one retained message, one
stored batch); `/healthz` answers while the process lives and `/readyz` turns 503 when
Redis goes away and 200 when it is back; a token is asked for and compared; a port in
use stops `ferromq serve` with one line and exit status 4.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import Starter, ferromq_command
from tests.support.admin_client import TOKEN, admin_config, get, scrape, value
from tests.support.commands import users_add
from tests.support.paho_clients import paho_client, paho_connect, stop, subscribe
from tests.support.services import RedisServer, free_port
from tests.support.tls_certs import authority
from tests.support.waiting import wait_for


def test_metrics_rise_by_the_traffic_paho_made(started: Starter, loop: str) -> None:
    port = free_port()
    broker = started(loop, admin_config(port))
    before = scrape(port)
    sub, inbox = paho_client(broker, "metrics-sub", 5)
    subscribe(sub, "metrics/#", 1)
    pub, _ = paho_client(broker, "metrics-pub", 4)
    count = 25
    for n in range(count):
        pub.publish("metrics/t", b"payload-%02d" % n, qos=1).wait_for_publish(5)
    pub.publish("metrics/kept", b"retained!", qos=1, retain=True).wait_for_publish(5)
    for _ in range(count + 1):
        inbox.get(timeout=5)
    after = scrape(port)

    def rose(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert rose("ferromq_messages_received_total") == count + 1
    assert rose("ferromq_packets_received_total", type="publish") == count + 1
    assert rose("ferromq_packets_sent_total", type="puback") == count + 1
    # Fixed header 2, topic 2 + 9 ("metrics/t") or 2 + 12, packet id 2, payload 10 or 9.
    assert rose("ferromq_packets_received_bytes_total", type="publish") == count * 25 + 27
    assert rose("ferromq_packets_received_total", type="subscribe") == 1
    assert rose("ferromq_packets_sent_total", type="publish") == count + 1
    assert rose("ferromq_retained_bytes") == len("metrics/kept") + len(b"retained!")
    assert value(after, "ferromq_clients_connected", protocol="5.0") == 1
    assert value(after, "ferromq_clients_connected", protocol="3.1.1") == 1
    assert value(after, "ferromq_connections_open", listener="default") == 2
    assert value(after, "ferromq_sessions_current", state="online") == 2
    assert value(after, "ferromq_subscriptions_current") == 1
    wait_for(
        lambda: value(scrape(port), "ferromq_eventloop_lag_seconds_count") > 0,
        "the loop-lag probe has measured",
    )
    for client in (sub, pub):
        stop(client)


def test_refusals_are_counted_by_reason(started: Starter, loop: str, tmp_path: Path) -> None:
    users = tmp_path / "users.toml"
    assert users_add(users, "sensor", "right").returncode == 0
    port = free_port()
    config = f'[auth]\nusers_file = "{users}"\n[bans]\nclient_ids = ["banned-one"]\n'
    broker = started(loop, config + admin_config(port))
    before = scrape(port)
    for client_id, password, refused in (
        ("guesser", "wrong", "Bad user name or password"),
        ("banned-one", "right", "Banned"),
    ):
        client, code, _ = paho_connect(broker, client_id, 5, "sensor", password)
        assert str(code) == refused
        stop(client)
    after = scrape(port)
    failures = ("ferromq_auth_failures_total", {"reason": "bad_credentials"})
    banned = ("ferromq_connections_refused_total", {"reason": "banned"})
    for name, labels in (failures, banned):
        assert value(after, name, **labels) - value(before, name, **labels) == 1, name


def test_a_stored_batch_is_measured(started: Starter, loop: str) -> None:
    port = free_port()
    broker = started(loop, admin_config(port))  # the embedded store, the default
    client, _ = paho_client(broker, "keeper", 5, clean=False)
    subscribe(client, "kept/#", 1)  # a persistent session's subscription is journaled
    stop(client)
    wait_for(lambda: value(scrape(port), "ferromq_store_batches_total") > 0, "a batch is stored")
    samples = scrape(port)
    assert value(samples, "ferromq_store_batch_size_bytes_count") >= 1
    assert value(samples, "ferromq_store_batch_size_bytes_sum") > 0
    assert value(samples, "ferromq_store_write_duration_seconds_count") >= 1
    assert value(samples, "ferromq_store_up") == 1
    assert value(samples, "ferromq_store_errors_total", store="embedded", operation="write") == 0


def test_readyz_follows_redis(redis_server: RedisServer, started: Starter, loop: str) -> None:
    port = free_port()
    store = f'[storage]\nbackend = "redis"\n[redis]\nurl = "{redis_server.url}"\n'
    broker = started(loop, store + admin_config(port))
    status, body = get(port, "/healthz")
    assert status == 200 and json.loads(body)["status"] == "ok"
    status, body = get(port, "/readyz")
    assert status == 200, body
    assert json.loads(body)["listeners"] == {"default": True}

    sub, _ = paho_client(broker, "ready-sub", 5, clean=False)
    subscribe(sub, "ready/#", 1)
    stop(sub)  # offline: what is published for it must be stored
    redis_server.stop()
    pub, _ = paho_client(broker, "ready-pub", 5)
    pub.publish("ready/t", b"while down", qos=1)  # its batch cannot be written
    wait_for(lambda: get(port, "/readyz")[0] == 503, "readyz says not ready")
    body = json.loads(get(port, "/readyz")[1])
    assert body["store"]["state"] == "failing" and body["store"]["errors"] >= 1, body
    assert get(port, "/healthz")[0] == 200  # alive all the same
    samples = scrape(port)
    assert value(samples, "ferromq_store_up") == 0
    assert value(samples, "ferromq_store_errors_total", store="redis", operation="write") >= 1

    redis_server.start()
    wait_for(lambda: get(port, "/readyz")[0] == 200, "readyz is ready again")
    stop(pub)


def test_the_token_is_required_and_compared(started: Starter, loop: str) -> None:
    port = free_port()
    started(loop, admin_config(port, f'token = "{TOKEN}"\n'))
    for token in (None, "0pen sesamE", "0pen"):
        status, body = get(port, "/metrics", token)
        assert status == 401, (token, body)
        assert "bearer token" in json.loads(body)["error"]
    assert get(port, "/healthz")[0] == 401
    assert get(port, "/no/such/path")[0] == 401  # strangers learn nothing of the routes
    assert get(port, "/metrics", TOKEN)[0] == 200
    assert get(port, "/readyz", TOKEN)[0] == 200


def test_metrics_public_opens_the_probes_and_metrics_only(
    started: Starter, loop: str, tmp_path: Path
) -> None:
    token_file = tmp_path / "admin-token"
    token_file.write_text(TOKEN + "\n")
    port = free_port()
    extra = f'token_file = "{token_file}"\nmetrics_public = true\nhost = "0.0.0.0"\n'
    started(loop, admin_config(port, extra))
    for path in ("/metrics", "/healthz", "/readyz"):
        assert get(port, path)[0] == 200, path
    assert get(port, "/no/such/path")[0] == 401
    assert get(port, "/no/such/path", TOKEN)[0] == 404


def test_https_with_certfile_and_keyfile(started: Starter, loop: str, tmp_path: Path) -> None:
    ca = authority(tmp_path)
    server = ca.server()
    port = free_port()
    started(loop, admin_config(port, f'certfile = "{server.cert}"\nkeyfile = "{server.key}"\n'))
    client = ssl.create_default_context(cafile=str(ca.cafile))
    status, body = get(port, "/healthz", tls=client)
    assert status == 200 and json.loads(body)["status"] == "ok"
    with pytest.raises(OSError):  # plain HTTP is not served: the TLS listener hangs up
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10)


def test_a_port_in_use_is_one_line_and_exit_4(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = tmp_path / "ferromq.toml"
        config.write_text(admin_config(port))
        result = subprocess.run(
            [*ferromq_command(), "serve", "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=30,
            env={
                **os.environ,
                "FERROMQ_LISTEN": f"127.0.0.1:{free_port()}",
                "FERROMQ_STORAGE__PATH": str(tmp_path / "store"),
            },
        )
    assert result.returncode == 4, result.stderr
    lines = result.stderr.strip().splitlines()
    expected = f"admin listener: cannot listen on 127.0.0.1:{port}: Address already in use"
    assert lines == [f"ferromq: error: {expected}"], result.stderr
    assert not (tmp_path / "store").exists()  # bound before the store was opened


def test_a_public_host_without_a_token_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "ferromq.toml"
    config.write_text('[admin]\nenabled = true\nhost = "0.0.0.0"\n')
    result = subprocess.run(
        [*ferromq_command(), "check-config", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        'ferromq: error: admin.token: required when admin.host ("0.0.0.0") is not a '
        "loopback address; set admin.token or admin.token_file"
    )
