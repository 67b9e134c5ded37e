"""ACLs (docs/acl.md) on a running `ferromq serve`, with paho-mqtt 3.1.1 and 5.0 over
real sockets, under uvloop and asyncio: denied publishes (v5 PUBACK 0x87, 3.1.1
acknowledged and dropped) and filters (SUBACK 0x87 / 0x80, shared filters too), a
denied will, retained messages a subscriber may not read, %u / %c placeholders, rules
from a JWT claim and from an HTTP authentication service, certificate rules and %C
over TLS, Mosquitto's acl_file, the $SYS counters, a watched rules file, and a SIGHUP
that revokes a live subscription and allows a publish.

"Not delivered" is asserted by order: the same publisher sends the denied message
first and an allowed one after it on a topic the subscriber also holds, so the
allowed one arriving first and alone proves the denied one was not sent."""

from __future__ import annotations

import json
import queue
import ssl
import threading
import time
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from tests.conftest import RunningBroker, hang_up, start_broker
from tests.support.json_service import json_service
from tests.support.jwt_keys import SigningKey
from tests.support.mqtt_raw import RawClient
from tests.support.tls_certs import authority

VERSIONS = pytest.mark.parametrize("version", [4, 5])
NOT_AUTHORIZED = 0x87


class Client:
    """A connected paho client that records what it receives and each ack's reason."""

    def __init__(
        self,
        broker: RunningBroker,
        client_id: str,
        version: int,
        username: str | None = None,
        password: str | None = None,
    ) -> None:
        protocol = paho.MQTTv5 if version == 5 else paho.MQTTv311
        self.paho = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=protocol)
        if username is not None:
            self.paho.username_pw_set(username, password)
        self.inbox: queue.Queue[paho.MQTTMessage] = queue.Queue()
        self.acks: dict[int, queue.Queue[list[int]]] = {}
        self._lock = threading.Lock()
        connected: queue.Queue[Any] = queue.Queue()
        self.paho.on_message = lambda _c, _u, message: self.inbox.put(message)
        self.paho.on_connect = lambda _c, _u, _f, code, _p: connected.put(code)
        self.paho.on_subscribe = lambda _c, _u, mid, codes, _p: self._ack(mid, codes)
        self.paho.on_publish = lambda _c, _u, mid, code, _p: self._ack(mid, [code])
        self.paho.connect(broker.host, broker.port)
        self.paho.loop_start()
        self.connack = connected.get(timeout=5)

    def _slot(self, mid: int) -> queue.Queue[list[int]]:
        with self._lock:
            return self.acks.setdefault(mid, queue.Queue())

    def _ack(self, mid: int, codes: list[Any]) -> None:
        self._slot(mid).put([int(getattr(code, "value", code)) for code in codes])

    def subscribe(self, *filters: str, qos: int = 1) -> list[int]:
        """The SUBACK's reason code per filter."""
        _, mid = self.paho.subscribe([(f, qos) for f in filters])
        assert mid is not None  # None: not connected
        return self._slot(mid).get(timeout=5)

    def publish(self, topic: str, payload: bytes, qos: int = 1, retain: bool = False) -> int:
        """The PUBACK's reason code (0 for 3.1.1, which has none)."""
        info = self.paho.publish(topic, payload, qos=qos, retain=retain)
        return self._slot(info.mid).get(timeout=5)[0]

    def received(self, timeout: float = 5.0) -> tuple[str, bytes]:
        message = self.inbox.get(timeout=timeout)
        return message.topic, bytes(message.payload)

    def stop(self) -> None:
        self.paho.disconnect()
        self.paho.loop_stop()


def rules_file(tmp_path: Path, rules: list[dict[str, Any]], name: str = "acl.toml") -> Path:
    lines = []
    for rule in rules:
        lines.append("[[rules]]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in rule.items()]
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def acl_broker(
    tmp_path: Path, loop: str, rules: list[dict[str, Any]], extra: str = "", **acl: object
) -> RunningBroker:
    """A broker whose ``[acl] file`` holds ``rules``, with ``acl`` as more ``[acl]`` keys."""
    path = rules_file(tmp_path, rules)
    keys = "".join(f"{key} = {json.dumps(value)}\n" for key, value in acl.items())
    config = f'[acl]\nfile = "{path}"\n{keys}[storage]\nbackend = "memory"\n{extra}'
    return start_broker(tmp_path, loop, config)


def allow(action: str | list[str], topic: str, **subject: Any) -> dict[str, Any]:
    return {"permission": "allow", "action": action, "topic": topic, **subject}


def deny(action: str | list[str], topic: str, **subject: Any) -> dict[str, Any]:
    return {"permission": "deny", "action": action, "topic": topic, **subject}


@pytest.fixture
def brokers() -> Any:
    running: list[RunningBroker] = []
    yield running
    for broker in running:
        broker.stop()


@VERSIONS
def test_denied_publish_is_refused_in_v5_and_never_delivered(
    tmp_path: Path, loop: str, version: int, brokers: list[RunningBroker]
) -> None:
    broker = acl_broker(tmp_path, loop, [deny("publish", "secret/#"), allow("all", "#")])
    brokers.append(broker)
    sub = Client(broker, "sub", 5)
    assert sub.subscribe("secret/#", "open") == [1, 1]
    pub = Client(broker, "pub", version)
    refused = pub.publish("secret/x", b"no")
    assert refused == (NOT_AUTHORIZED if version == 5 else 0)
    assert pub.publish("open", b"yes") == 0
    assert sub.received() == ("open", b"yes")
    assert sub.inbox.empty()
    for client in (sub, pub):
        client.stop()


@VERSIONS
@pytest.mark.parametrize("wildcards", ["withhold", "refuse"])
def test_denied_filter_gets_its_own_suback_code_shared_filters_included(
    tmp_path: Path, loop: str, version: int, wildcards: str, brokers: list[RunningBroker]
) -> None:
    rules = [deny("subscribe", "secret/#"), allow("all", "#")]
    broker = acl_broker(tmp_path, loop, rules, wildcards=wildcards)
    brokers.append(broker)
    client = Client(broker, "c", version)
    refused = NOT_AUTHORIZED if version == 5 else 0x80
    codes = client.subscribe("open/#", "secret/x", "$share/g/secret/#", "$share/g/open/+", "#")
    # `#` reaches the denied secret/# and every other topic: granted with secret/#
    # withheld, or refused as a whole.
    assert codes == [1, refused, refused, 1, 1 if wildcards == "withhold" else refused]
    client.stop()


@VERSIONS
def test_a_wildcard_beside_a_denied_topic_is_granted_and_that_topic_withheld(
    tmp_path: Path, loop: str, version: int, brokers: list[RunningBroker]
) -> None:
    # Paho's test suite cleans up with a subscription to `#` after denying
    # test/nosubscribe: Mosquitto and EMQX grant it and withhold per message.
    rules = [deny("subscribe", "test/nosubscribe")]
    broker = acl_broker(tmp_path, loop, rules, "[sys]\ninterval = 1\n")
    brokers.append(broker)
    pub = Client(broker, "pub", 5)
    assert pub.publish("test/nosubscribe", b"retained", retain=True) == 0x10
    sub = Client(broker, "sub", version)
    assert sub.subscribe("#", "test/nosubscribe") == [1, NOT_AUTHORIZED if version == 5 else 0x80]
    for topic in ("test/nosubscribe", "test/open", "test/nosubscribe", "test/nosubscribe/x"):
        pub.publish(topic, topic.encode(), qos=2)
    got = [sub.received(), sub.received()]
    assert got == [("test/open", b"test/open"), ("test/nosubscribe/x", b"test/nosubscribe/x")]
    assert sub.inbox.empty()
    watcher = Client(broker, "sys", 5)
    assert watcher.subscribe("$SYS/broker/acl/withheld", qos=0) == [0]
    # The retained one and two live ones; published every second, retained, so the
    # first seen may be from before the last message.
    while (count := watcher.received()[1]) != b"3":
        assert count in (b"0", b"1", b"2"), count
    for client in (pub, sub, watcher):
        client.stop()


def test_denied_will_is_not_published(
    tmp_path: Path, loop: str, brokers: list[RunningBroker]
) -> None:
    broker = acl_broker(tmp_path, loop, [deny("publish", "wills/secret"), allow("all", "#")])
    brokers.append(broker)
    sub = Client(broker, "sub", 4)
    assert sub.subscribe("wills/#") == [1]
    for client_id, topic in (("a", "wills/secret"), ("b", "wills/open")):
        raw = RawClient(broker.host, broker.port, version=4)
        will = {"topic": topic, "payload": topic.encode(), "qos": 1, "retain": False}
        assert raw.connect(client_id, will=will)["reason_code"] == 0
        raw.close()  # no DISCONNECT: the will is due
    assert sub.received() == ("wills/open", b"wills/open")
    assert sub.inbox.empty()
    sub.stop()


@VERSIONS
def test_retained_messages_the_subscriber_may_not_read_are_not_sent(
    tmp_path: Path, loop: str, version: int, brokers: list[RunningBroker]
) -> None:
    broker = acl_broker(tmp_path, loop, [deny("read", "r/secret"), allow("all", "#")])
    brokers.append(broker)
    pub = Client(broker, "pub", 5)
    for topic in ("r/secret", "r/open"):
        assert pub.publish(topic, topic.encode(), retain=True) == 0x10  # no subscribers yet
    sub = Client(broker, "sub", version)
    assert sub.subscribe("r/#") == [1]
    assert pub.publish("r/live", b"after") == 0
    got = [sub.received(), sub.received()]
    assert got == [("r/open", b"r/open"), ("r/live", b"after")]
    for client in (pub, sub):
        client.stop()


@VERSIONS
def test_user_name_and_client_id_placeholders(
    tmp_path: Path, loop: str, version: int, brokers: list[RunningBroker]
) -> None:
    rules = [allow("all", "users/%u/#"), allow("publish", "clients/%c/out"), allow("all", "open")]
    broker = acl_broker(tmp_path, loop, rules, default="deny")
    brokers.append(broker)
    alice = Client(broker, "dev-1", version, "alice")
    refused = NOT_AUTHORIZED if version == 5 else 0x80
    assert alice.subscribe("users/alice/#", "users/bob/#", "open") == [1, refused, 1]
    denied = NOT_AUTHORIZED if version == 5 else 0
    assert alice.publish("users/bob/x", b"no") == denied
    assert alice.publish("clients/dev-2/out", b"no") == denied
    assert alice.publish("clients/dev-1/out", b"yes") in (0, 0x10)
    assert alice.publish("users/alice/x", b"mine") == 0
    assert alice.received() == ("users/alice/x", b"mine")
    alice.stop()


def test_rules_from_a_jwt_claim_bind_claims(
    tmp_path: Path, loop: str, brokers: list[RunningBroker]
) -> None:
    key = SigningKey.generate("ES256")
    key_file = key.key_file(tmp_path / "jwt.pem")
    empty = rules_file(tmp_path, [], "empty.toml")
    broker = start_broker(
        tmp_path,
        loop,
        f'[auth]\nproviders = ["jwt"]\njwt_key_file = "{key_file}"\n'
        f'[acl]\nfile = "{empty}"\ndefault = "deny"\n[storage]\nbackend = "memory"\n',
    )
    brokers.append(broker)
    claims = {
        "sub": "dev-1",
        "tenant": "t1",
        "exp": int(time.time() + 600),
        "acl": [
            {"permission": "deny", "action": "publish", "topic": "tenants/%{tenant}/locked"},
            {"permission": "allow", "action": "all", "topic": "tenants/%{tenant}/#"},
        ],
    }
    client = Client(broker, "dev-1", 5, "dev-1", key.sign(claims))
    assert str(client.connack) == "Success"
    assert client.subscribe("tenants/t1/#", "tenants/t2/#") == [1, NOT_AUTHORIZED]
    assert client.publish("tenants/t1/locked", b"no") == NOT_AUTHORIZED
    assert client.publish("tenants/t2/x", b"no") == NOT_AUTHORIZED
    assert client.publish("tenants/t1/x", b"yes") == 0
    assert client.received() == ("tenants/t1/x", b"yes")
    client.stop()
    bad = dict(claims, acl={"not": "a list"})
    refused = Client(broker, "dev-1", 5, "dev-1", key.sign(bad))
    assert refused.connack.value == NOT_AUTHORIZED  # malformed rules: fail closed
    refused.paho.loop_stop()
    broker.wait_for_log("authentication answer's ACL refused")


@VERSIONS
def test_rules_from_the_http_service_come_before_the_file(
    tmp_path: Path, loop: str, version: int, brokers: list[RunningBroker]
) -> None:
    def answer(_method: str, _path: str, body: Any) -> tuple[int, Any]:
        rules = [{"permission": "allow", "action": ["publish", "subscribe"], "topic": "svc/%u"}]
        return 200, {"result": "allow", "acl": rules}

    path = rules_file(tmp_path, [deny("all", "svc/#"), allow("all", "shared")])
    with json_service(answer) as service:
        broker = start_broker(
            tmp_path,
            loop,
            f'[auth]\nproviders = ["http"]\nhttp_url = "{service.url}/auth"\n'
            f'[acl]\nfile = "{path}"\ndefault = "deny"\n[storage]\nbackend = "memory"\n',
        )
        brokers.append(broker)
        client = Client(broker, f"svc-{version}", version, "alice", "pw")
        refused = NOT_AUTHORIZED if version == 5 else 0x80
        assert client.subscribe("svc/alice", "svc/bob", "shared") == [1, refused, 1]
        assert client.publish("svc/alice", b"mine") == 0
        assert client.received() == ("svc/alice", b"mine")
        client.stop()


def test_mosquitto_acl_file(tmp_path: Path, loop: str, brokers: list[RunningBroker]) -> None:
    acl = tmp_path / "acl"
    acl.write_text(
        "# anonymous clients\ntopic read public/#\n\n"
        "user alice\ntopic readwrite alice/#\ntopic deny alice/secret\n\n"
        "pattern write devices/%c/out\n"
    )
    broker = start_broker(
        tmp_path,
        loop,
        f'[acl]\nfile = "{acl}"\nformat = "mosquitto"\ndefault = "deny"\n'
        '[storage]\nbackend = "memory"\n',
    )
    brokers.append(broker)
    anonymous = Client(broker, "anon", 5)
    assert anonymous.subscribe("public/#", "alice/#") == [1, NOT_AUTHORIZED]
    alice = Client(broker, "dev-7", 5, "alice")
    # The deny line after the grant still wins: Mosquitto checks denials first.
    assert alice.subscribe("alice/x", "alice/secret", "public/#") == [1, NOT_AUTHORIZED, 0x87]
    assert alice.publish("alice/secret", b"no") == NOT_AUTHORIZED
    assert alice.publish("devices/dev-7/out", b"yes") == 0x10
    assert alice.publish("alice/x", b"mine") == 0
    assert alice.received() == ("alice/x", b"mine")
    for client in (anonymous, alice):
        client.stop()


def test_sighup_revokes_a_live_subscription_and_allows_a_publish(
    tmp_path: Path, loop: str, brokers: list[RunningBroker]
) -> None:
    broker = acl_broker(
        tmp_path,
        loop,
        [deny("publish", "news/late"), allow("all", "#")],
        "[sys]\ninterval = 1\n",
    )
    brokers.append(broker)
    sub = Client(broker, "sub", 5)
    assert sub.subscribe("alerts/#", "news/#") == [1, 1]
    pub = Client(broker, "pub", 5)
    assert pub.publish("news/late", b"before") == NOT_AUTHORIZED
    assert pub.publish("alerts/1", b"a1") == 0
    assert sub.received() == ("alerts/1", b"a1")

    rules_file(tmp_path, [deny("subscribe", "alerts/#"), allow("all", "#")])
    hang_up(broker, "configuration reloaded")

    assert pub.publish("alerts/2", b"a2") == 0x10  # nobody holds alerts/# any more
    assert pub.publish("news/late", b"after") == 0
    assert sub.received() == ("news/late", b"after")
    assert sub.inbox.empty()
    log = broker.log()
    assert "subscription revoked by the ACL" in log and "filter=alerts/#" in log
    watcher = Client(broker, "sys", 5)
    assert watcher.subscribe("$SYS/broker/acl/#", qos=0) == [0]
    expected = {"denied/publish": b"1", "denied/subscribe": b"0", "revoked": b"1"}
    counters: dict[str, bytes] = {}
    while any(counters.get(key) != value for key, value in expected.items()):
        topic, payload = watcher.received()  # published every second
        counters[topic.removeprefix("$SYS/broker/acl/")] = payload
    for client in (sub, pub, watcher):
        client.stop()


def test_a_rules_file_change_is_applied_when_watched(
    tmp_path: Path, loop: str, brokers: list[RunningBroker]
) -> None:
    broker = acl_broker(tmp_path, loop, [allow("all", "#")], watch=1)
    brokers.append(broker)
    pub = Client(broker, "pub", 5)
    assert pub.publish("t", b"1") == 0x10
    # Longer, so seen as changed even within the file system's time grain.
    rules_file(tmp_path, [deny("publish", "t"), allow("all", "#")])
    deadline = time.monotonic() + 10
    while pub.publish("t", b"2") != NOT_AUTHORIZED:
        assert time.monotonic() < deadline, broker.log()
        time.sleep(0.2)
    pub.stop()


def test_certificate_rules_and_placeholder_over_tls(
    tmp_path: Path, loop: str, brokers: list[RunningBroker]
) -> None:
    ca = authority(tmp_path)
    server, client_pem = ca.server(), ca.issue("client", "device-7")
    rules = rules_file(
        tmp_path,
        [allow("publish", "fleet/#", certificate="device-7"), allow("all", "certs/%C/#")],
    )
    broker = start_broker(
        tmp_path,
        loop,
        f'[[listeners]]\nprotocol = "tls"\ncertfile = "{server.cert}"\n'
        f'keyfile = "{server.key}"\ncafile = "{ca.cafile}"\nrequire_certificate = true\n'
        f'[acl]\nfile = "{rules}"\ndefault = "deny"\n[storage]\nbackend = "memory"\n',
    )
    brokers.append(broker)
    context = ssl.create_default_context(cafile=str(ca.cafile))
    context.load_cert_chain(client_pem.cert, client_pem.key)
    client = RawClient(broker.host, broker.port, 5, tls=context)
    assert client.connect("dev-7", username="someone")["reason_code"] == 0
    acks = []
    for packet_id, topic in enumerate(("fleet/1", "certs/device-7/x", "certs/device-8/x"), 1):
        client.send({"type": "publish", "topic": topic, "qos": 1, "packet_id": packet_id})
        acks.append(client.recv()["reason_code"])
    assert acks == [0x10, 0x10, NOT_AUTHORIZED]  # no subscribers, allowed; denied
    client.close()
