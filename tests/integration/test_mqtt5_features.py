"""MQTT 5.0 features with a real v5 client (paho-mqtt) against `ferromq serve` over real
sockets, under uvloop and asyncio: topic aliases both ways, message expiry, subscription
identifiers, no-local, retain-as-published, retain handling, request/response, properties
passed through, UTF-8 payload validation, Maximum Packet Size, the CONNACK limits and the
reason codes for breaking them, the publish quota, redirection and the server's
DISCONNECT reasons."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.subscribeoptions import SubscribeOptions

from tests.conftest import RunningBroker, start_broker
from tests.support.paho_clients import new_properties, property_of

FEATURES_CONFIG = """
[mqtt5]
response_information_prefix = "reply/"
validate_utf8_payload = true

[sys]
interval = 1
"""

RESTRICTED_CONFIG = """
[limits]
max_publish_rate = 20

[mqtt5]
maximum_qos = 1
retain_available = false
wildcard_subscription_available = false
subscription_identifiers_available = false
shared_subscription_available = false
"""


@pytest.fixture(params=["uvloop", "asyncio"])
def features_broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunningBroker]:
    running = start_broker(tmp_path, request.param, FEATURES_CONFIG)
    yield running
    running.stop()


@pytest.fixture(params=["uvloop", "asyncio"])
def restricted_broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunningBroker]:
    running = start_broker(tmp_path, request.param, RESTRICTED_CONFIG)
    yield running
    running.stop()


@dataclass
class V5Client:
    """A paho v5 client with everything it was told collected in queues."""

    client: paho.Client
    messages: queue.Queue[paho.MQTTMessage] = field(default_factory=queue.Queue)
    connack: queue.Queue[tuple[int, Any]] = field(default_factory=queue.Queue)
    disconnects: queue.Queue[int] = field(default_factory=queue.Queue)
    acks: queue.Queue[tuple[int, int]] = field(default_factory=queue.Queue)

    def message(self, timeout: float = 5.0) -> paho.MQTTMessage:
        return self.messages.get(timeout=timeout)

    def subscribe(self, topic: str, qos: int = 0, **options: Any) -> list[int]:
        done: queue.Queue[list[int]] = queue.Queue()
        self.client.on_subscribe = lambda _c, _u, _mid, codes, _p: done.put(
            [code.value for code in codes]
        )
        properties = None
        if "subscription_id" in options:
            properties = new_properties(PacketTypes.SUBSCRIBE)
            properties.SubscriptionIdentifier = options.pop("subscription_id")
        self.client.subscribe(
            topic, options=SubscribeOptions(qos=qos, **options), properties=properties
        )
        return done.get(timeout=5)

    def publish(
        self, topic: str, payload: bytes, qos: int = 0, retain: bool = False, **props: Any
    ) -> None:
        properties = new_properties(PacketTypes.PUBLISH)
        for name, value in props.items():
            setattr(properties, name, value)
        info = self.client.publish(topic, payload, qos=qos, retain=retain, properties=properties)
        if qos:
            info.wait_for_publish(5)

    def stop(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def v5_client(
    broker: RunningBroker,
    client_id: str,
    clean: bool = True,
    expect_accept: bool = True,
    **props: Any,
) -> V5Client:
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=paho.MQTTv5)
    wrapped = V5Client(client)
    client.on_message = lambda _c, _u, message: wrapped.messages.put(message)
    client.on_connect = lambda _c, _u, _f, code, properties: wrapped.connack.put(
        (code.value, properties)
    )
    client.on_disconnect = lambda _c, _u, _f, code, _p: wrapped.disconnects.put(code.value)
    client.on_publish = lambda _c, _u, mid, code, _p: wrapped.acks.put((mid, code.value))
    properties = new_properties(PacketTypes.CONNECT)
    properties.SessionExpiryInterval = 0 if clean else 300
    for name, value in props.items():
        setattr(properties, name, value)
    client.connect(broker.host, broker.port, clean_start=clean, properties=properties)
    client.loop_start()
    if expect_accept:
        code, _ = wrapped.connack.get(timeout=5)
        assert code == 0, code
    return wrapped


def fence(publisher: V5Client, subscriber: V5Client, topic: str) -> None:
    """Publish a marker on `topic` (subscribed by `subscriber`) and wait for it: what was
    published before it and has not arrived will not."""
    publisher.publish(topic, b"fence", qos=1)
    got = subscriber.message()
    assert (got.topic, got.payload) == (topic, b"fence"), (got.topic, got.payload)


# ---------------------------------------------------------------------------------------
# Topic aliases


def test_broker_to_client_topic_aliases(broker: RunningBroker) -> None:
    # paho 2.x announces what it is told but resolves no aliases itself, so the test
    # resolves them as a client must (§3.3.2.3.4): two aliases for three topics, each
    # used within the client's maximum, reassigned to the least recently used alias;
    # a wrong mapping would resolve to the wrong topic.
    sub = v5_client(broker, "alias-sub", TopicAliasMaximum=2)
    sub.subscribe("alias/#", 1)
    pub = v5_client(broker, "alias-pub")
    topics = [f"alias/{name}" for name in "aabacabcca" * 5]
    for index, topic in enumerate(topics):
        pub.publish(topic, str(index).encode(), qos=1)
    mapping: dict[int, str] = {}
    resolved = []
    alias_only = 0
    for _ in topics:
        message = sub.message()
        alias = property_of(message, "TopicAlias")
        assert 1 <= alias <= 2  # [MQTT-3.3.2-11]
        if message.topic:
            mapping[alias] = message.topic
        else:
            alias_only += 1
        resolved.append((mapping[alias], message.payload))
    assert resolved == [(topic, str(index).encode()) for index, topic in enumerate(topics)]
    assert alias_only > len(topics) // 3  # hot topics keep their alias


def test_client_to_broker_topic_alias(broker: RunningBroker) -> None:
    sub = v5_client(broker, "in-alias-sub")
    sub.subscribe("in/alias", 1)
    pub = v5_client(broker, "in-alias-pub")
    pub.publish("in/alias", b"first", qos=1, TopicAlias=3)
    pub.publish("", b"second", qos=1, TopicAlias=3)
    assert [(m.topic, m.payload) for m in (sub.message(), sub.message())] == [
        ("in/alias", b"first"),
        ("in/alias", b"second"),
    ]


# ---------------------------------------------------------------------------------------
# Message expiry, subscription options


def test_forwarded_message_carries_its_remaining_expiry(broker: RunningBroker) -> None:
    sub = v5_client(broker, "exp-sub")
    sub.subscribe("exp/t", 1)
    pub = v5_client(broker, "exp-pub")
    pub.publish("exp/t", b"x", qos=1, MessageExpiryInterval=60)
    got = sub.message()
    assert 0 < property_of(got, "MessageExpiryInterval") <= 60


def test_expired_message_is_not_delivered_to_a_returning_session(broker: RunningBroker) -> None:
    sub = v5_client(broker, "exp-away", clean=False)
    sub.subscribe("away/#", 1)
    sub.stop()
    pub = v5_client(broker, "exp-away-pub")
    pub.publish("away/short", b"expires", qos=1, MessageExpiryInterval=1)
    pub.publish("away/long", b"stays", qos=1, MessageExpiryInterval=600)
    time.sleep(1.5)  # the first message's lifetime, not a measured timing
    back = v5_client(broker, "exp-away", clean=False)
    got = back.message()
    assert (got.topic, got.payload) == ("away/long", b"stays")
    assert property_of(got, "MessageExpiryInterval") <= 599  # the time queued is deducted
    with pytest.raises(queue.Empty):
        back.message(timeout=0.5)


def test_subscription_identifiers_of_every_matching_subscription(broker: RunningBroker) -> None:
    sub = v5_client(broker, "subid")
    sub.subscribe("ids/+", 1, subscription_id=5)
    sub.subscribe("ids/#", 1, subscription_id=7)
    pub = v5_client(broker, "subid-pub")
    pub.publish("ids/a", b"x", qos=1)
    got = sub.message()
    assert sorted(property_of(got, "SubscriptionIdentifier")) == [5, 7]


def test_no_local(broker: RunningBroker) -> None:
    client = v5_client(broker, "nolocal")
    client.subscribe("nl/t", 1, noLocal=True)
    client.subscribe("nl/fence", 1)
    client.publish("nl/t", b"own", qos=1)
    fence(client, client, "nl/fence")


def test_retain_as_published(broker: RunningBroker) -> None:
    keep = v5_client(broker, "rap-keep")
    keep.subscribe("rap/t", 1, retainAsPublished=True)
    plain = v5_client(broker, "rap-plain")
    plain.subscribe("rap/t", 1)
    pub = v5_client(broker, "rap-pub")
    pub.publish("rap/t", b"r", qos=1, retain=True)
    assert keep.message().retain is True
    assert plain.message().retain is False


@pytest.mark.parametrize(
    ("handling", "first", "again"), [(0, True, True), (1, True, False), (2, False, False)]
)
def test_retain_handling(broker: RunningBroker, handling: int, first: bool, again: bool) -> None:
    # 0: on every subscribe; 1: only when the subscription is new; 2: never. The
    # retained message follows the SUBACK, so the fence after it proves absence.
    pub = v5_client(broker, "rh-pub")
    pub.publish("rh/t", b"kept", qos=1, retain=True)
    sub = v5_client(broker, "rh-sub")
    sub.subscribe("rh/fence", 1)
    for expected in (first, again):
        sub.subscribe("rh/t", 1, retainHandling=handling)
        if expected:
            got = sub.message()
            assert (got.topic, got.payload, got.retain) == ("rh/t", b"kept", True)
        fence(pub, sub, "rh/fence")


def test_retained_message_expires(broker: RunningBroker) -> None:
    pub = v5_client(broker, "rexp-pub")
    pub.publish("rexp/t", b"short", qos=1, retain=True, MessageExpiryInterval=1)
    time.sleep(1.5)  # the message's lifetime
    sub = v5_client(broker, "rexp-sub")
    sub.subscribe("rexp/fence", 1)
    sub.subscribe("rexp/t", 1)
    fence(pub, sub, "rexp/fence")


# ---------------------------------------------------------------------------------------
# Request/response and the properties passed through


def test_response_topic_and_correlation_data_pass_through(broker: RunningBroker) -> None:
    responder = v5_client(broker, "responder")
    responder.subscribe("rr/request", 1)
    requester = v5_client(broker, "requester")
    correlation = bytes(range(256))
    requester.publish(
        "rr/request",
        b"ping",
        qos=1,
        ResponseTopic="rr/reply/requester",
        CorrelationData=correlation,
    )
    got = responder.message()
    assert property_of(got, "ResponseTopic") == "rr/reply/requester"
    assert property_of(got, "CorrelationData") == correlation


def test_response_information_is_returned_on_request(features_broker: RunningBroker) -> None:
    code, props = connack_properties(features_broker, "asker", RequestResponseInformation=1)
    assert (code, props.ResponseInformation) == (0, "reply/asker")
    _, props = connack_properties(features_broker, "quiet")
    assert not hasattr(props, "ResponseInformation")


def test_user_properties_content_type_and_format_pass_through_in_order(
    broker: RunningBroker,
) -> None:
    sub = v5_client(broker, "props-sub")
    sub.subscribe("props/t", 1)
    pub = v5_client(broker, "props-pub")
    pairs = [("b", "2"), ("a", "1"), ("b", "1"), ("a", "1")]  # order and repeats matter
    pub.publish(
        "props/t",
        "text ✓".encode(),
        qos=1,
        UserProperty=pairs,
        ContentType="text/plain; charset=utf-8",
        PayloadFormatIndicator=1,
    )
    got = sub.message()
    assert property_of(got, "UserProperty") == pairs
    assert property_of(got, "ContentType") == "text/plain; charset=utf-8"
    assert property_of(got, "PayloadFormatIndicator") == 1


def test_invalid_utf8_payload_is_refused_when_validation_is_on(
    features_broker: RunningBroker,
) -> None:
    sub = v5_client(features_broker, "utf8-sub")
    sub.subscribe("utf8/#", 1)
    pub = v5_client(features_broker, "utf8-pub")
    pub.publish("utf8/bad", b"\xff\xfe", qos=1, PayloadFormatIndicator=1)
    assert pub.acks.get(timeout=5)[1] == 0x99
    pub.publish("utf8/raw", b"\xff\xfe", qos=1)  # no indicator: not checked
    got = sub.message()
    assert (got.topic, got.payload) == ("utf8/raw", b"\xff\xfe")
    pub.publish("utf8/bad", b"\xff", qos=0, PayloadFormatIndicator=1)
    assert pub.disconnects.get(timeout=5) == 0x99


# ---------------------------------------------------------------------------------------
# Maximum Packet Size


def test_oversize_delivery_is_dropped_for_that_client_only(features_broker: RunningBroker) -> None:
    small = v5_client(features_broker, "mps-small", MaximumPacketSize=128)
    small.subscribe("mps/#", 1)
    big = v5_client(features_broker, "mps-big")
    big.subscribe("mps/#", 1)
    watcher = v5_client(features_broker, "mps-sys")
    watcher.subscribe("$SYS/broker/publish/messages/dropped", 0)
    before = int(watcher.message().payload)
    pub = v5_client(features_broker, "mps-pub")
    pub.publish("mps/big", b"x" * 1000, qos=1)
    pub.publish("mps/small", b"fits", qos=1)
    assert [m.topic for m in (big.message(), big.message())] == ["mps/big", "mps/small"]
    got = small.message()
    assert (got.topic, got.payload) == ("mps/small", b"fits")
    # Counted: the $SYS dropped counter reaches before + 1 (published every second).
    deadline = time.monotonic() + 10
    while (dropped := int(watcher.message().payload)) < before + 1:
        assert time.monotonic() < deadline, dropped
    assert dropped == before + 1


# ---------------------------------------------------------------------------------------
# CONNACK limits and the reason codes for breaking them


def connack_properties(broker: RunningBroker, client_id: str, **props: Any) -> tuple[int, Any]:
    client = v5_client(broker, client_id, expect_accept=False, **props)
    result = client.connack.get(timeout=5)
    client.client.loop_stop()
    return result


def test_connack_announces_the_restrictions(restricted_broker: RunningBroker) -> None:
    code, props = connack_properties(restricted_broker, "announce")
    assert code == 0
    assert props.MaximumQoS == 1
    assert props.RetainAvailable == 0
    assert props.WildcardSubscriptionAvailable == 0
    assert props.SubscriptionIdentifierAvailable == 0
    assert props.SharedSubscriptionAvailable == 0


@pytest.mark.parametrize(
    ("qos", "retain", "reason"), [(2, False, 0x9B), (0, True, 0x9A)], ids=["qos", "retain"]
)
def test_publish_above_the_limits_is_disconnected(
    restricted_broker: RunningBroker, qos: int, retain: bool, reason: int
) -> None:
    client = v5_client(restricted_broker, "breaker")
    client.client.publish("t", b"x", qos=qos, retain=retain)
    assert client.disconnects.get(timeout=5) == reason


def test_subscribe_above_the_limits(restricted_broker: RunningBroker) -> None:
    client = v5_client(restricted_broker, "limited-sub")
    assert client.subscribe("a/+", 1) == [0xA2]
    assert client.subscribe("$share/g/a", 1) == [0x9E]
    assert client.subscribe("a/b", 2) == [1]  # granted Maximum QoS
    properties = new_properties(PacketTypes.SUBSCRIBE)
    properties.SubscriptionIdentifier = 3
    client.client.subscribe("a/c", 1, properties=properties)
    assert client.disconnects.get(timeout=5) == 0xA1


def test_publish_rate_quota(restricted_broker: RunningBroker) -> None:
    client = v5_client(restricted_broker, "flooder")
    for _ in range(200):
        client.client.publish("flood", b"x", qos=0)
    assert client.disconnects.get(timeout=5) == 0x96  # Message rate too high


# ---------------------------------------------------------------------------------------
# The server's DISCONNECT reasons and redirection


def test_takeover_disconnects_the_old_client_with_0x8e(broker: RunningBroker) -> None:
    first = v5_client(broker, "twin")
    first.client.reconnect_delay_set(60, 120)  # no automatic comeback during the test
    v5_client(broker, "twin")
    assert first.disconnects.get(timeout=5) == 0x8E


@pytest.mark.parametrize(("permanent", "reason"), [(False, 0x9C), (True, 0x9D)])
def test_redirect(tmp_path: Path, permanent: bool, reason: int) -> None:
    config = "\n".join(
        [
            "[redirect]",
            'server_reference = "other.example:1883"',
            f"permanent = {str(permanent).lower()}",
        ]
    )
    running = start_broker(tmp_path, "asyncio", config)
    try:
        code, props = connack_properties(running, "redirected")
        assert code == reason
        assert props.ServerReference == "other.example:1883"
    finally:
        running.stop()
