"""03 PUBLISH and its acknowledgements (§3.3-3.7, §4.3, §4.9) for 3.1.1 and 5.0: QoS
0/1/2 both ways with downgrade, QoS 2 exactly once, packet ids, flow control, topic
aliases, message expiry and the properties forwarded with a message; MQTT 3.1's
retried PUBREL with DUP, and control characters in topic names."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.conftest import RunningBroker

from .support import (
    ALL_VERSIONS,
    CONTROL_CHARACTERS,
    V5,
    V31,
    V311,
    VERSIONS,
    closed_with,
    connected,
    disconnect,
    fence,
    prop,
    props,
    publish,
    receive,
    recv_publish,
    subscribe,
)


@VERSIONS
@pytest.mark.parametrize("pub_qos", [0, 1, 2])
def test_qos_flows_and_downgrade(broker: RunningBroker, version: int, pub_qos: int) -> None:
    # §4.3: each QoS flow both ways; delivered at min(message, subscription) QoS
    # [MQTT-3.8.4-6 (3.1.1) / 3.8.4-8 (5.0)].
    subs = [connected(broker, f"flow-sub-{qos}", version) for qos in (0, 1, 2)]
    for qos, sub in enumerate(subs):
        assert subscribe(sub, ("flow/t", qos)) == [qos]
    publisher = connected(broker, "flow-pub", version)
    ack = publish(publisher, "flow/t", b"payload", qos=pub_qos)
    if ack is not None:
        assert ack["reason_code"] == 0
    for sub_qos, sub in enumerate(subs):
        got = receive(sub)
        assert (got["topic"], got["payload"]) == ("flow/t", b"payload")
        assert got["qos"] == min(pub_qos, sub_qos)
        assert got["dup"] is False  # first delivery [MQTT-3.3.1-1]
        assert got["retain"] is False
        if got["qos"]:
            assert got["packet_id"] != 0  # [MQTT-2.3.1-1]


@VERSIONS
def test_qos2_duplicate_publish_is_not_delivered_twice(broker: RunningBroker, version: int) -> None:
    # [MQTT-4.3.3-9 (5.0) / 4.3.3-2 (3.1.1) method B]: until PUBREL the packet id
    # stays known; a resent PUBLISH (DUP=1) is only acknowledged again.
    sub = connected(broker, "qos2-sub", version)
    subscribe(sub, ("q2/t", 2), "fence/q2")
    publisher = connected(broker, "qos2-pub", version)
    message = {"type": "publish", "topic": "q2/t", "payload": b"once", "qos": 2, "packet_id": 7}
    publisher.send(message)
    assert publisher.recv()["type"] == "pubrec"
    publisher.send({**message, "dup": True})
    again = publisher.recv()
    assert (again["type"], again["packet_id"]) == ("pubrec", 7)
    publisher.send({"type": "pubrel", "packet_id": 7})
    comp = publisher.recv()
    assert (comp["type"], comp["packet_id"], comp["reason_code"]) == ("pubcomp", 7, 0)
    assert receive(sub)["payload"] == b"once"
    fence(publisher, sub, "fence/q2")


@VERSIONS
def test_pubrel_for_an_unknown_packet_id_gets_pubcomp(broker: RunningBroker, version: int) -> None:
    # [MQTT-4.3.3-11 (5.0)]: PUBCOMP with 0x92 (Packet Identifier not found); 3.1.1
    # PUBCOMP has no reason code.
    client = connected(broker, "pubrel-unknown", version)
    client.send({"type": "pubrel", "packet_id": 4242})
    comp = client.recv()
    assert (comp["type"], comp["packet_id"]) == ("pubcomp", 4242)
    assert comp["reason_code"] == (0x92 if version == V5 else 0)


@VERSIONS
@pytest.mark.parametrize("qos", [1, 2])
def test_packet_id_is_reusable_after_its_flow_completes(
    broker: RunningBroker, version: int, qos: int
) -> None:
    # [MQTT-2.3.1-3]: after PUBACK / PUBCOMP the id is free; a new PUBLISH with it is
    # a new message (QoS 2: not mistaken for a duplicate).
    sub = connected(broker, "reuse-sub", version)
    subscribe(sub, ("reuse/t", 2))
    publisher = connected(broker, "reuse-pub", version)
    publish(publisher, "reuse/t", b"first", qos=qos, packet_id=9)
    publish(publisher, "reuse/t", b"second", qos=qos, packet_id=9)
    assert [receive(sub)["payload"] for _ in range(2)] == [b"first", b"second"]


@VERSIONS
def test_outbound_packet_ids_are_distinct_while_in_flight(
    broker: RunningBroker, version: int
) -> None:
    # [MQTT-2.3.1-2]: the broker does not reuse an id that is still in flight.
    sub = connected(broker, "ids-sub", version)
    subscribe(sub, ("ids/t", 2))
    publisher = connected(broker, "ids-pub", version)
    for i in range(10):
        publish(publisher, "ids/t", bytes([i]), qos=1 + i % 2)
    got = [recv_publish(sub) for _ in range(10)]
    ids = [p["packet_id"] for p in got]
    assert len(set(ids)) == 10 and 0 not in ids
    assert [p["payload"] for p in got] == [bytes([i]) for i in range(10)]  # [MQTT-4.6.0-5]


def ack_of(packet: dict[str, Any]) -> tuple[str, int, int]:
    return packet["type"], packet["packet_id"], packet["reason_code"]


def test_mqtt31_qos2_retry_with_dup_pubrel_completes(broker: RunningBroker) -> None:
    # MQTT 3.1 §3.6, §4.2: PUBREL uses QoS 1 and is retried with DUP (flags 1010), which
    # 3.1.1 made a malformed packet [MQTT-3.6.1-1]; the 3.1 flow must still complete.
    sub = connected(broker, "v31-sub", V31)
    subscribe(sub, ("v31/t", 2))
    publisher = connected(broker, "v31-pub", V31)
    publisher.send(
        {"type": "publish", "topic": "v31/t", "payload": b"once", "qos": 2, "packet_id": 7}
    )
    assert ack_of(publisher.recv()) == ("pubrec", 7, 0)
    publisher.send_raw(b"\x6a\x02\x00\x07")
    assert ack_of(publisher.recv()) == ("pubcomp", 7, 0)
    publisher.send_raw(b"\x6a\x02\x00\x07")  # a second retry: still answered
    assert ack_of(publisher.recv())[:2] == ("pubcomp", 7)
    assert receive(sub)["payload"] == b"once"


@ALL_VERSIONS
def test_control_characters_in_a_topic_name_are_refused(
    broker: RunningBroker, version: int
) -> None:
    # 5.0 §1.5.4 / 3.1.1 §1.5.3 (limits.allow_control_characters off): v5 QoS 1/2 gets
    # PUBACK/PUBREC 0x90 "Topic Name not accepted" and stays connected, QoS 0 has no
    # ack and is disconnected with 0x90; 3.x has no negative ack: closed [MQTT-3.3.5-2].
    watch = connected(broker, "cc-watch", version)
    subscribe(watch, ("#", 1))
    publisher = connected(broker, "cc-pub", version)
    if version == V5:
        for text in CONTROL_CHARACTERS:
            publisher.send({"type": "publish", "topic": text, "qos": 1, "packet_id": 3})
            assert ack_of(publisher.recv()) == ("puback", 3, 0x90), text
            publisher.send({"type": "publish", "topic": text, "qos": 2, "packet_id": 4})
            assert ack_of(publisher.recv()) == ("pubrec", 4, 0x90), text
        fence(publisher, watch, "fence")
        publish(publisher, "a/\x07", b"x")
        assert closed_with(publisher) == [0x90]
    else:
        publisher.send({"type": "publish", "topic": "a/\x07", "qos": 1, "packet_id": 3})
        assert closed_with(publisher) == []
    fence(connected(broker, "cc-fence", version), watch, "fence")


@VERSIONS
def test_puback_with_no_subscribers(broker: RunningBroker, version: int) -> None:
    # 5.0 §3.4.2.1: 0x10 No matching subscribers (PUBACK and PUBREC); 3.1.1 has no
    # reason codes in acknowledgements.
    client = connected(broker, "lonely", version)
    expected = 0x10 if version == V5 else 0
    ack = publish(client, "nobody/listens", b"x", qos=1)
    assert ack is not None and ack["reason_code"] == expected
    rec = publish(client, "nobody/listens", b"x", qos=2)
    assert rec is not None and rec["reason_code"] == expected


@VERSIONS
def test_in_flight_window_holds_back_qos1_and_2(
    limited_broker: RunningBroker, version: int
) -> None:
    # `[limits] max_inflight = 4`: the fifth QoS 1 message waits for a PUBACK; QoS 0
    # is not counted (5.0 §4.9: "MAY continue to send PUBLISH packets with QoS 0").
    sub = connected(limited_broker, "window-sub", version)
    subscribe(sub, ("win/t", 1), "fence/win")
    publisher = connected(limited_broker, "window-pub", version)
    for i in range(6):
        publish(publisher, "win/t", bytes([i]), qos=1)
    held = [recv_publish(sub) for _ in range(4)]
    assert [p["payload"] for p in held] == [bytes([i]) for i in range(4)]
    fence(publisher, sub, "fence/win")
    sub.send({"type": "puback", "packet_id": held[0]["packet_id"]})
    assert recv_publish(sub)["payload"] == bytes([4])
    fence(publisher, sub, "fence/win")


def test_v5_client_receive_maximum_is_respected(broker: RunningBroker) -> None:
    # [MQTT-3.3.4-7]: no more unacknowledged QoS 1/2 PUBLISHes than the client's
    # Receive Maximum.
    sub = connected(broker, "rm-sub", V5, properties=[("receive_maximum", 1)])
    subscribe(sub, ("rm/t", 2), "fence/rm")
    publisher = connected(broker, "rm-pub", V5)
    publish(publisher, "rm/t", b"a", qos=2)
    publish(publisher, "rm/t", b"b", qos=1)
    first = recv_publish(sub)
    assert first["payload"] == b"a"
    fence(publisher, sub, "fence/rm")
    sub.send({"type": "pubrec", "packet_id": first["packet_id"]})
    rel = sub.recv()
    assert rel["type"] == "pubrel"
    fence(publisher, sub, "fence/rm")  # still in flight until PUBCOMP
    sub.send({"type": "pubcomp", "packet_id": first["packet_id"]})
    assert receive(sub)["payload"] == b"b"


def test_v5_receive_maximum_exceeded_disconnects(limited_broker: RunningBroker) -> None:
    # `[limits] receive_maximum = 2`: a third unreleased QoS 2 PUBLISH is more than the
    # client may send; DISCONNECT 0x93 [MQTT-3.3.4-9 and §4.9].
    client = connected(limited_broker, "rm-exceed", V5)
    for packet_id in (1, 2):
        client.send(
            {"type": "publish", "topic": "rmx", "payload": b"", "qos": 2, "packet_id": packet_id}
        )
        assert client.recv()["type"] == "pubrec"
    client.send({"type": "publish", "topic": "rmx", "payload": b"", "qos": 2, "packet_id": 3})
    assert closed_with(client) == [0x93]


def test_v5_client_maximum_packet_size_is_respected(broker: RunningBroker) -> None:
    # [MQTT-3.1.2-24]: a message too large for the client is not sent to it (it is
    # discarded for that client, §3.1.2.11.4).
    sub = connected(broker, "mps-sub", V5, properties=[("maximum_packet_size", 64)])
    subscribe(sub, ("mps/t", 1))
    publisher = connected(broker, "mps-pub", V5)
    publish(publisher, "mps/t", b"x" * 100, qos=1)
    publish(publisher, "mps/t", b"small", qos=1)
    assert receive(sub)["payload"] == b"small"


def test_v5_topic_alias(broker: RunningBroker) -> None:
    # §3.3.2.3.4: an alias is set by a PUBLISH with topic and alias, used by one with
    # an empty topic, and remapped by another; subscribers get the full topic name
    # and no Topic Alias [MQTT-3.3.2-12 is per connection].
    sub = connected(broker, "alias-sub", V5)
    subscribe(sub, ("alias/#", 1))
    publisher = connected(broker, "alias-pub", V5)
    publish(publisher, "alias/one", b"1", qos=1, properties=[("topic_alias", 3)])
    publish(publisher, "", b"2", qos=1, properties=[("topic_alias", 3)])
    publish(publisher, "alias/two", b"3", qos=1, properties=[("topic_alias", 3)])
    publish(publisher, "", b"4", qos=1, properties=[("topic_alias", 3)])
    got = [receive(sub) for _ in range(4)]
    assert [(p["topic"], p["payload"]) for p in got] == [
        ("alias/one", b"1"),
        ("alias/one", b"2"),
        ("alias/two", b"3"),
        ("alias/two", b"4"),
    ]
    assert all(prop(p, "topic_alias") is None for p in got)


def test_v5_topic_alias_is_per_connection(broker: RunningBroker) -> None:
    first = connected(broker, "alias-a", V5)
    publish(first, "alias/x", b"", qos=1, properties=[("topic_alias", 1)])
    second = connected(broker, "alias-b", V5)
    second.send(
        {
            "type": "publish",
            "topic": "",
            "payload": b"",
            "qos": 1,
            "packet_id": 1,
            "properties": [("topic_alias", 1)],
        }
    )
    assert closed_with(second) == [0x82]  # unknown alias: a Protocol Error


def test_v5_topic_alias_above_the_maximum_disconnects(broker: RunningBroker) -> None:
    # §3.3.2.3.4: an alias above the Topic Alias Maximum the broker sent (64) gets
    # DISCONNECT 0x94 (Topic Alias invalid).
    client = connected(broker, "alias-big", V5)
    client.send(
        {"type": "publish", "topic": "t", "payload": b"", "properties": [("topic_alias", 65)]}
    )
    assert closed_with(client) == [0x94]


def test_v5_topic_alias_0_disconnects(broker: RunningBroker) -> None:
    # [MQTT-3.3.2-8]: 0 is not a valid alias.
    client = connected(broker, "alias-zero", V5)
    client.send_raw(b"\x30\x07\x00\x01t\x03\x23\x00\x00")
    assert closed_with(client)[0] in (0x81, 0x82, 0x94)


def test_v5_empty_topic_without_alias_disconnects(broker: RunningBroker) -> None:
    client = connected(broker, "alias-none", V5)
    client.send_raw(b"\x30\x03\x00\x00\x00")
    assert closed_with(client) == [0x82]


@pytest.mark.parametrize("sub_version", [V311, V5], ids=["sub-v311", "sub-v5"])
def test_v5_message_expiry(broker: RunningBroker, sub_version: int) -> None:
    # [MQTT-3.3.2-5]: an expired message is not delivered to a waiting session;
    # [MQTT-3.3.2-6]: a forwarded one carries the remaining lifetime (v5 only).
    expiry = [("session_expiry_interval", 60)] if sub_version == V5 else []
    sub = connected(broker, "expiry-sub", sub_version, clean=False, properties=expiry)
    subscribe(sub, ("exp/t", 1))
    disconnect(sub)
    publisher = connected(broker, "expiry-pub", V5)
    publish(publisher, "exp/t", b"short", qos=1, properties=[("message_expiry_interval", 1)])
    publish(publisher, "exp/t", b"long", qos=1, properties=[("message_expiry_interval", 60)])
    publish(publisher, "exp/t", b"forever", qos=1)
    time.sleep(1.3)
    sub = connected(broker, "expiry-sub", sub_version, clean=False, properties=expiry)
    got = [receive(sub) for _ in range(2)]
    assert [p["payload"] for p in got] == [b"long", b"forever"]
    if sub_version == V5:
        remaining = prop(got[0], "message_expiry_interval")
        assert remaining is not None and remaining <= 59
        assert prop(got[1], "message_expiry_interval") is None
    else:
        assert got[0]["properties"] == []


def test_v5_live_message_carries_its_expiry(broker: RunningBroker) -> None:
    sub = connected(broker, "expiry-live", V5)
    subscribe(sub, "expl/t")
    publisher = connected(broker, "expiry-live-pub", V5)
    publish(publisher, "expl/t", b"x", properties=[("message_expiry_interval", 300)])
    remaining = prop(recv_publish(sub), "message_expiry_interval")
    assert remaining is not None and 0 < remaining <= 300


def test_v5_properties_are_forwarded_unchanged_and_in_order(broker: RunningBroker) -> None:
    # [MQTT-3.3.2-4] Payload Format Indicator, [MQTT-3.3.2-15] Response Topic,
    # [MQTT-3.3.2-16] Correlation Data, [MQTT-3.3.2-17, 3.3.2-18] User Properties in
    # order, [MQTT-3.3.2-20] Content Type: all unaltered.
    sub = connected(broker, "props-sub", V5)
    subscribe(sub, ("props/t", 1))
    publisher = connected(broker, "props-pub", V5)
    sent = [
        ("user_property", ("k", "1")),
        ("payload_format_indicator", 1),
        ("content_type", "application/json; charset=utf-8"),
        ("user_property", ("a", "2")),
        ("response_topic", "props/reply"),
        ("correlation_data", b"\x00\x01\xfe"),
        ("user_property", ("k", "3")),
    ]
    publish(publisher, "props/t", '{"é": 1}'.encode(), qos=1, properties=sent)
    got = receive(sub)
    assert got["payload"] == '{"é": 1}'.encode()
    assert props(got, "user_property") == [("k", "1"), ("a", "2"), ("k", "3")]
    assert got["properties"] == sent


@pytest.mark.parametrize("indicator", [0, 1])
def test_v5_payload_format_indicator_is_forwarded(broker: RunningBroker, indicator: int) -> None:
    sub = connected(broker, "pfi-sub", V5)
    subscribe(sub, "pfi/t")
    publisher = connected(broker, "pfi-pub", V5)
    publish(publisher, "pfi/t", b"text", properties=[("payload_format_indicator", indicator)])
    assert prop(recv_publish(sub), "payload_format_indicator") == indicator


def test_v311_subscriber_gets_no_properties(broker: RunningBroker) -> None:
    sub = connected(broker, "v311-sub", V311)
    subscribe(sub, "mixed/t")
    publisher = connected(broker, "v5-pub", V5)
    publish(publisher, "mixed/t", b"x", properties=[("user_property", ("k", "v"))])
    got = recv_publish(sub)
    assert (got["payload"], got["properties"]) == (b"x", [])
