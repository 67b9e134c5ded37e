"""11 MQTT 5.0 edges with exact packets: broker-to-client topic alias overflow, expiry
while queued (counted in $SYS), a delivery too large for one of several subscribers
(and for all of them), every announced CONNACK limit broken, Reason Strings and Request
Problem Information, the publish quota, redirection, Response Topics with wildcards,
and a client PUBLISH carrying a Subscription Identifier."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import RunningBroker, start_broker
from tests.support.mqtt_raw import RawClient

from .support import (
    LOOPS,
    V5,
    V311,
    VERSIONS,
    closed_with,
    connect,
    connected,
    disconnect,
    fence,
    open_client,
    prop,
    publish,
    receive,
    recv_publish,
    subscribe,
)

RESTRICTED_CONFIG = """
[limits]
max_publish_rate = 10

[mqtt5]
maximum_qos = 1
retain_available = false
wildcard_subscription_available = false
subscription_identifiers_available = false
shared_subscription_available = false
validate_utf8_payload = true

[sys]
interval = 1
"""

DROPPED = "$SYS/broker/publish/messages/dropped"


@pytest.fixture(params=LOOPS)
def restricted(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunningBroker]:
    running = start_broker(tmp_path, request.param, RESTRICTED_CONFIG)
    yield running
    running.stop()


@pytest.fixture
def sys_broker(tmp_path: Path) -> Iterator[RunningBroker]:
    running = start_broker(tmp_path, "uvloop", "[sys]\ninterval = 1\n")
    yield running
    running.stop()


def dropped_counter(client: RawClient) -> int:
    """The next value of the $SYS dropped counter `client` subscribed to."""
    packet = recv_publish(client)
    assert packet["topic"] == DROPPED, packet
    return int(packet["payload"])


def wait_for_dropped(client: RawClient, at_least: int) -> int:
    """Read the counter (published every second) until it reaches `at_least`."""
    for _ in range(10):
        value = dropped_counter(client)
        if value >= at_least:
            return value
    raise AssertionError(f"dropped counter stayed below {at_least}")


# ---------------------------------------------------------------------------------------
# Broker → client topic aliases


def test_v5_outbound_alias_overflow_reuses_the_least_recently_used(broker: RunningBroker) -> None:
    # §3.3.2.3.4: the topic is sent once with its alias, then the alias alone; with
    # the client's maximum (2) taken, the least recently used alias is remapped by a
    # PUBLISH that carries the topic again; no alias above 2 [MQTT-3.3.2-11].
    sub = connected(broker, "ovf-sub", V5, properties=[("topic_alias_maximum", 2)])
    subscribe(sub, "ovf/#")
    publisher = connected(broker, "ovf-pub", V5)
    for topic in ["ovf/a", "ovf/a", "ovf/b", "ovf/a", "ovf/c", "ovf/c", "ovf/b"]:
        publish(publisher, topic, b"x")
    got = [recv_publish(sub) for _ in range(7)]
    assert [(p["topic"], prop(p, "topic_alias")) for p in got] == [
        ("ovf/a", 1),
        ("", 1),
        ("ovf/b", 2),
        ("", 1),
        ("ovf/c", 2),
        ("", 2),
        ("ovf/b", 1),
    ]


@VERSIONS
def test_no_outbound_alias_without_a_topic_alias_maximum(
    broker: RunningBroker, version: int
) -> None:
    sub = connected(broker, "noalias-sub", version)
    subscribe(sub, "noalias/t")
    publisher = connected(broker, "noalias-pub", version)
    for _ in range(2):
        publish(publisher, "noalias/t", b"x")
    for packet in (recv_publish(sub), recv_publish(sub)):
        assert packet["topic"] == "noalias/t"
        assert prop(packet, "topic_alias") is None


# ---------------------------------------------------------------------------------------
# Expiry while queued, oversize deliveries: dropped and counted


def test_v5_expiry_while_queued_is_dropped_and_counted(sys_broker: RunningBroker) -> None:
    watch = connected(sys_broker, "exq-watch", V5)
    subscribe(watch, DROPPED)
    before = dropped_counter(watch)
    sub = connected(
        sys_broker, "exq-sub", V5, clean=False, properties=[("session_expiry_interval", 60)]
    )
    subscribe(sub, ("exq/t", 1))
    disconnect(sub)
    publisher = connected(sys_broker, "exq-pub", V5)
    publish(publisher, "exq/t", b"short", qos=1, properties=[("message_expiry_interval", 1)])
    publish(publisher, "exq/t", b"long", qos=1, properties=[("message_expiry_interval", 60)])
    time.sleep(1.2)  # the first message's lifetime
    sub = connected(
        sys_broker, "exq-sub", V5, clean=False, properties=[("session_expiry_interval", 60)]
    )
    got = receive(sub)
    assert got["payload"] == b"long"
    remaining = prop(got, "message_expiry_interval")
    assert remaining is not None and remaining <= 59  # [MQTT-3.3.2-6]
    assert wait_for_dropped(watch, before + 1) == before + 1


def test_v5_oversize_for_one_of_several_subscribers(sys_broker: RunningBroker) -> None:
    # [MQTT-3.1.2-25/26]: the large message is not sent to the client whose Maximum
    # Packet Size it exceeds, and is completed for it: with Receive Maximum 1 the
    # next QoS 1 message still comes without any PUBACK from that client.
    watch = connected(sys_broker, "ovs-watch", V5)
    subscribe(watch, DROPPED)
    before = dropped_counter(watch)
    small = connected(
        sys_broker,
        "ovs-small",
        V5,
        properties=[("maximum_packet_size", 64), ("receive_maximum", 1)],
    )
    others = [connected(sys_broker, f"ovs-big-{i}", V5) for i in range(2)]
    for client in (small, *others):
        subscribe(client, ("ovs/t", 1))
    publisher = connected(sys_broker, "ovs-pub", V5)
    publish(publisher, "ovs/t", b"L" * 100, qos=1)
    publish(publisher, "ovs/t", b"small", qos=1)
    got = recv_publish(small)
    assert got["payload"] == b"small"
    for client in others:
        assert [receive(client)["payload"] for _ in range(2)] == [b"L" * 100, b"small"]
    assert wait_for_dropped(watch, before + 1) == before + 1


def test_v5_reason_string_is_left_out_to_fit_the_clients_maximum(
    restricted: RunningBroker,
) -> None:
    # [MQTT-3.2.2-19 and the like]: the Reason String goes first.
    roomy = connected(restricted, "rs-roomy", V5)
    roomy.send({"type": "publish", "topic": "t", "payload": b"", "qos": 2, "packet_id": 1})
    got = roomy.expect_closed()
    assert [p["reason_code"] for p in got] == [0x9B]
    assert prop(got[0], "reason_string")
    # 30 bytes: room for this broker's CONNACK (26), not for the explained DISCONNECT.
    tight = connected(restricted, "rs-tight", V5, properties=[("maximum_packet_size", 30)])
    tight.send({"type": "publish", "topic": "t", "payload": b"", "qos": 2, "packet_id": 1})
    got = tight.expect_closed()
    assert [p["reason_code"] for p in got] == [0x9B]
    assert prop(got[0], "reason_string") is None


# ---------------------------------------------------------------------------------------
# Each announced CONNACK limit broken


def test_v5_connack_announces_the_restrictions(restricted: RunningBroker) -> None:
    _, connack = connect(restricted, "ann", V5)
    assert prop(connack, "maximum_qos") == 1
    assert prop(connack, "retain_available") == 0
    assert prop(connack, "wildcard_subscription_available") == 0
    assert prop(connack, "subscription_identifier_available") == 0
    assert prop(connack, "shared_subscription_available") == 0


@VERSIONS
@pytest.mark.parametrize(
    ("qos", "retain", "reason"), [(2, False, 0x9B), (0, True, 0x9A)], ids=["qos", "retain"]
)
def test_publish_breaking_a_limit(
    restricted: RunningBroker, version: int, qos: int, retain: bool, reason: int
) -> None:
    client = connected(restricted, "pbl", version)
    packet = {"type": "publish", "topic": "t", "payload": b"", "qos": qos, "retain": retain}
    client.send(packet | ({"packet_id": 1} if qos else {}))
    assert closed_with(client) == ([reason] if version == V5 else [])


@VERSIONS
def test_subscribe_breaking_a_limit(restricted: RunningBroker, version: int) -> None:
    client = connected(restricted, "sbl", version)
    refused = [0xA2, 0x9E] if version == V5 else [0x80, 0x80]
    assert subscribe(client, ("a/+", 1), ("$share/g/a", 1), ("a/b", 2)) == [*refused, 1]


def test_v5_subscription_identifier_when_not_available(restricted: RunningBroker) -> None:
    client = connected(restricted, "sid", V5)
    client.send(
        {
            "type": "subscribe",
            "packet_id": 1,
            "filters": [{"filter": "a", "qos": 0}],
            "properties": [("subscription_identifier", 4)],
        }
    )
    assert closed_with(client) == [0xA1]


@VERSIONS
@pytest.mark.parametrize(("will_qos", "will_retain", "reason"), [(2, False, 0x9B), (0, True, 0x9A)])
def test_will_breaking_a_limit_is_refused(
    restricted: RunningBroker, version: int, will_qos: int, will_retain: bool, reason: int
) -> None:
    will = {"topic": "w", "payload": b"bye", "qos": will_qos, "retain": will_retain}
    client, connack = connect(restricted, "wbl", version, will=will)
    assert connack["reason_code"] == (reason if version == V5 else 0x03)
    assert client.expect_closed() == []


def test_v5_invalid_utf8_payload(restricted: RunningBroker) -> None:
    sub = connected(restricted, "u8-sub", V5)
    subscribe(sub, ("u8/bad", 1), ("u8/fence", 1))  # no wildcards on this broker
    publisher = connected(restricted, "u8-pub", V5)
    bad = [("payload_format_indicator", 1)]
    ack = publish(publisher, "u8/bad", b"\xc3\x28", qos=1, properties=bad)
    assert ack is not None and ack["reason_code"] == 0x99
    assert prop(ack, "reason_string")  # Request Problem Information defaults to 1
    fence(publisher, sub, "u8/fence")  # not routed
    publisher.send({"type": "publish", "topic": "u8/bad", "payload": b"\xff", "properties": bad})
    assert closed_with(publisher) == [0x99]


def test_v5_request_problem_information_0(restricted: RunningBroker) -> None:
    # [MQTT-3.1.2-29]: no Reason String on a PUBACK, but DISCONNECT may carry one.
    quiet = connected(restricted, "rpi", V5, properties=[("request_problem_information", 0)])
    bad = [("payload_format_indicator", 1)]
    ack = publish(quiet, "u8/bad", b"\xff", qos=1, properties=bad)
    assert ack is not None and ack["reason_code"] == 0x99
    assert ack.get("properties", []) == []
    quiet.send({"type": "publish", "topic": "t", "payload": b"", "qos": 2, "packet_id": 9})
    got = quiet.expect_closed()
    assert [p["reason_code"] for p in got] == [0x9B]
    assert prop(got[0], "reason_string")


def test_publish_rate_v5_disconnects_with_0x96(restricted: RunningBroker) -> None:
    # limits.max_publish_rate = 10: a burst far above it ends a v5 connection.
    client = connected(restricted, "quota", V5)
    for _ in range(100):
        client.send({"type": "publish", "topic": "q", "payload": b""})
    assert closed_with(client) == [0x96]


def test_publish_rate_v311_is_read_less(restricted: RunningBroker) -> None:
    # 3.1.1 has no reason code for it: the broker stops reading the client until its
    # bucket refills and acknowledges the rest of the burst later, not never; the
    # connection stays open. (Which packet waits is the engine tests' business.)
    client = connected(restricted, "throttled", V311)
    for packet_id in range(1, 16):
        client.send({"type": "publish", "topic": "q", "qos": 1, "packet_id": packet_id})
    client.send({"type": "pingreq"})
    got = [client.recv(timeout=5) for _ in range(16)]
    acks = [p["packet_id"] for p in got if p["type"] == "puback"]
    assert acks == list(range(1, 16))
    assert [p["type"] for p in got].count("pingresp") == 1


# ---------------------------------------------------------------------------------------
# Redirection and Response Information


@VERSIONS
def test_redirect(tmp_path: Path, version: int) -> None:
    running = start_broker(
        tmp_path, "asyncio", '[redirect]\nserver_reference = "b2.example:1883"\n'
    )
    try:
        client, connack = connect(running, "redir", version)
        if version == V5:
            assert connack["reason_code"] == 0x9C
            assert prop(connack, "server_reference") == "b2.example:1883"
        else:
            assert connack["reason_code"] == 0x03
        assert client.expect_closed() == []
    finally:
        running.stop()


def test_v5_no_response_information_without_a_prefix(broker: RunningBroker) -> None:
    _, connack = connect(broker, "rri", V5, properties=[("request_response_information", 1)])
    assert prop(connack, "response_information") is None


def test_v311_maximum_qos_downgrades_the_grant(restricted: RunningBroker) -> None:
    client = connected(restricted, "grant", V311)
    assert subscribe(client, ("g/t", 2)) == [1]


def test_v5_publisher_hears_success_when_every_copy_is_too_large(broker: RunningBroker) -> None:
    # [MQTT-3.1.2-25]: a PUBLISH above the subscriber's Maximum Packet Size is discarded
    # and the broker behaves as if it had sent it, so the publisher is not told 0x10
    # (No matching subscribers) when that subscriber was its only match.
    small = connected(broker, "all-small", V5, properties=[("maximum_packet_size", 64)])
    subscribe(small, ("all/t", 1))
    publisher = connected(broker, "all-pub", V5)
    for qos in (1, 2):
        ack = publish(publisher, "all/t", b"L" * 100, qos=qos)
        assert ack is not None and ack["reason_code"] == 0x00, (qos, ack)
    ack = publish(publisher, "all/nobody", b"x", qos=1)
    assert ack is not None and ack["reason_code"] == 0x10
    publish(publisher, "all/t", b"fits", qos=1)
    assert receive(small)["payload"] == b"fits"


@pytest.mark.parametrize("response_topic", ["reply/+", "reply/#", "#"])
def test_v5_response_topic_with_a_wildcard_is_a_protocol_error(
    broker: RunningBroker, response_topic: str
) -> None:
    # [MQTT-3.3.2-14]: the Response Topic MUST NOT contain wildcards. The packet parses,
    # so it is a Protocol Error (§1.2, §4.13): DISCONNECT 0x82, and it is not forwarded
    # (the broker would send a non-conforming PUBLISH [MQTT-3.3.2-15]).
    watch = connected(broker, "rt-watch", V5)
    subscribe(watch, ("rt/#", 1))
    publisher = connected(broker, "rt-pub", V5)
    properties = [("response_topic", response_topic)]
    publish(publisher, "rt/request", b"q", properties=properties)
    assert closed_with(publisher) == [0x82]
    fence(connected(broker, "rt-fence", V5), watch, "rt/fence")


def test_v5_client_publish_with_a_subscription_identifier_is_a_protocol_error(
    broker: RunningBroker,
) -> None:
    # [MQTT-3.3.4-6]: a PUBLISH from a client MUST NOT contain a Subscription
    # Identifier (the server's way of naming the subscriptions a delivery matched):
    # DISCONNECT 0x82, and nothing is forwarded.
    watch = connected(broker, "si-watch", V5)
    subscribe(watch, ("si/#", 1))
    publisher = connected(broker, "si-pub", V5)
    publish(publisher, "si/t", b"x", properties=[("subscription_identifier", 7)])
    assert closed_with(publisher) == [0x82]
    fence(connected(broker, "si-fence", V5), watch, "si/fence")


def test_v5_will_response_topic_with_a_wildcard_is_refused(broker: RunningBroker) -> None:
    # The will becomes a PUBLISH carrying its Response Topic [MQTT-3.3.2-14]: CONNACK
    # 0x82 Protocol Error, and no will is kept.
    client = open_client(broker, V5)
    will = {
        "topic": "wills/rt",
        "payload": b"x",
        "qos": 0,
        "retain": False,
        "properties": [("response_topic", "reply/+")],
    }
    client.send({"type": "connect", "protocol_version": V5, "client_id": "rt-w", "will": will})
    got = client.expect_closed()
    assert [(p["type"], p["reason_code"]) for p in got] == [("connack", 0x82)]
