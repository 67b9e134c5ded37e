"""02 SUBSCRIBE / SUBACK / UNSUBSCRIBE / UNSUBACK (§3.8-3.11, §4.7) for 3.1.1 and 5.0:
reason codes per filter, invalid filters, overlapping subscriptions, subscription
options and identifiers, `$SYS` and `#`, and replacing a subscription; MQTT 3.1's
retried SUBSCRIBE / UNSUBSCRIBE with DUP, and control characters in filters."""

from __future__ import annotations

from tests.conftest import RunningBroker

from .support import (
    ALL_VERSIONS,
    CONTROL_CHARACTERS,
    V5,
    V31,
    VERSIONS,
    closed_with,
    connected,
    fence,
    next_packet_id,
    ping,
    props,
    publish,
    receive,
    recv_publish,
    subscribe,
    unsubscribe,
)


@VERSIONS
def test_suback_has_one_code_per_filter_in_order(broker: RunningBroker, version: int) -> None:
    # [MQTT-3.8.4-1, 3.8.4-2, 3.9.3-1]; granted QoS = requested (the broker does QoS 2).
    client = connected(broker, "sub-codes", version)
    assert subscribe(client, ("a/2", 2), ("a/0", 0), ("a/+", 1), ("a/#", 2)) == [2, 0, 1, 2]


@VERSIONS
def test_invalid_filter_closes(broker: RunningBroker, version: int) -> None:
    # [MQTT-4.7.1-1, 4.7.1-2, 4.8.2-2]: a filter that is not well formed is a
    # malformed SUBSCRIBE; the connection is closed (v5: DISCONNECT 0x8F first).
    for bad in ["a/#/b", "a+", "a/b#", "#/a", "$share/g", "$share/g+/t"]:
        client = connected(broker, "sub-bad", version)
        assert subscribe(client, "ok") == [0]
        raw = bytearray(b"\x82\x00\x00\x02")
        if version == V5:
            raw += b"\x00"
        raw += len(bad).to_bytes(2, "big") + bad.encode() + b"\x00"
        raw[1] = len(raw) - 2
        client.send_raw(bytes(raw))
        assert closed_with(client) == ([0x8F] if version == V5 else []), bad


@VERSIONS
def test_subscribe_without_filters_closes(broker: RunningBroker, version: int) -> None:
    # [MQTT-3.8.3-3]
    client = connected(broker, "sub-empty", version)
    client.send_raw(b"\x82\x03\x00\x07\x00" if version == V5 else b"\x82\x02\x00\x07")
    assert closed_with(client) == ([0x82] if version == V5 else [])


@VERSIONS
def test_subscription_qos_3_closes(broker: RunningBroker, version: int) -> None:
    # [MQTT-3.8.3-5] (3.1.1: [MQTT-3-8.3-4]): reserved bits / QoS 3 are malformed.
    client = connected(broker, "sub-qos3", version)
    props_len = b"\x00" if version == V5 else b""
    body = b"\x00\x07" + props_len + b"\x00\x01t\x03"
    client.send_raw(bytes([0x82, len(body)]) + body)
    assert closed_with(client) == ([0x81] if version == V5 else [])


def test_v5_no_local_on_a_shared_subscription_closes(broker: RunningBroker) -> None:
    # [MQTT-3.8.3-4]: a Protocol Error.
    client = connected(broker, "sub-nl-shared", V5)
    client.send(
        {
            "type": "subscribe",
            "packet_id": 3,
            "filters": [{"filter": "$share/g/t", "qos": 0, "no_local": True}],
        }
    )
    assert closed_with(client) == [0x82]


def test_v5_subscription_identifier_0_closes(broker: RunningBroker) -> None:
    # §3.8.2.1.2: a Subscription Identifier of 0 is a Protocol Error.
    client = connected(broker, "sub-id0", V5)
    # SUBSCRIBE id 9, properties: 0x0B 0x00, filter "t" QoS 0.
    client.send_raw(b"\x82\x08\x00\x09\x02\x0b\x00\x00\x01t\x00")
    assert closed_with(client)[0] in (0x81, 0x82)


@VERSIONS
def test_unsubscribe_stops_delivery(broker: RunningBroker, version: int) -> None:
    sub = connected(broker, "unsub", version)
    subscribe(sub, "uns/t", "uns/fence")
    unsuback = unsubscribe(sub, "uns/t")
    # [MQTT-3.11.3-1] (v5 one reason code per filter); 3.1.1 UNSUBACK has none.
    assert unsuback["reason_codes"] == ([0x00] if version == V5 else [])
    publisher = connected(broker, "unsub-pub", version)
    publish(publisher, "uns/t", b"gone")
    fence(publisher, sub, "uns/fence")


@VERSIONS
def test_unsubscribe_of_an_unknown_filter(broker: RunningBroker, version: int) -> None:
    # [MQTT-3.10.4-5]: UNSUBACK even when nothing matched; v5 says 0x11
    # (No subscription existed) for that filter.
    client = connected(broker, "unsub-none", version)
    subscribe(client, "known")
    unsuback = unsubscribe(client, "unknown", "known", "known")
    assert unsuback["reason_codes"] == ([0x11, 0x00, 0x11] if version == V5 else [])


def test_mqtt31_subscribe_and_unsubscribe_retried_with_dup(broker: RunningBroker) -> None:
    # MQTT 3.1 §3.8, §3.10, §4.2: SUBSCRIBE and UNSUBSCRIBE use QoS 1 and a retry sets
    # DUP (flags 1010), which 3.1.1 made a malformed packet [MQTT-3.8.1-1, 3.10.1-1].
    client = connected(broker, "v31-dup", V31)
    client.send_raw(b"\x8a\x08\x00\x05\x00\x03t31\x01")
    suback = client.recv()
    assert (suback["type"], suback["packet_id"], suback["reason_codes"]) == ("suback", 5, [1])
    client.send_raw(b"\xaa\x07\x00\x06\x00\x03t31")
    unsuback = client.recv()
    assert (unsuback["type"], unsuback["packet_id"]) == ("unsuback", 6)
    ping(client)


@ALL_VERSIONS
def test_control_characters_in_a_filter_refuse_that_filter_only(
    broker: RunningBroker, version: int
) -> None:
    # 5.0 §1.5.4 / 3.1.1 §1.5.3 (limits.allow_control_characters off): that filter gets
    # 0x8F Topic Filter invalid (3.x: 0x80 Failure), the others are granted; in
    # UNSUBSCRIBE it is 0x8F for v5 and left alone in 3.x (no per-filter code there).
    client = connected(broker, "cc-filter", version)
    refused = 0x8F if version == V5 else 0x80
    filters = [("ok/+", 1), *((f"{text}/#", 1) for text in CONTROL_CHARACTERS), ("x", 0)]
    expected = [1, *(refused for _ in CONTROL_CHARACTERS), 0]
    assert subscribe(client, *filters) == expected
    unsuback = unsubscribe(client, "ok/+", "bad\x07")
    assert unsuback["reason_codes"] == ([0x00, 0x8F] if version == V5 else [])
    publisher = connected(broker, "cc-filter-pub", version)
    fence(publisher, client, "x")


@VERSIONS
def test_unsubscribe_without_filters_closes(broker: RunningBroker, version: int) -> None:
    # [MQTT-3.10.3-2]
    client = connected(broker, "unsub-empty", version)
    client.send_raw(b"\xa2\x03\x00\x07\x00" if version == V5 else b"\xa2\x02\x00\x07")
    assert closed_with(client) == ([0x82] if version == V5 else [])


@VERSIONS
def test_overlapping_subscriptions_deliver_once_at_the_highest_qos(
    broker: RunningBroker, version: int
) -> None:
    # [MQTT-3.3.4-2]: one copy, at the maximum QoS of the matching subscriptions; v5
    # carries every matching Subscription Identifier [MQTT-3.3.4-3, 3.3.4-5].
    sub = connected(broker, "overlap", version)
    sub_ids = version == V5
    for number, (flt, qos) in enumerate([("ov/#", 1), ("ov/+", 2), ("ov/x", 0)], start=1):
        properties = [("subscription_identifier", number)] if sub_ids else []
        assert subscribe(sub, (flt, qos), properties=properties) == [qos]
    subscribe(sub, "fence/overlap")
    publisher = connected(broker, "overlap-pub", version)
    publish(publisher, "ov/x", b"once", qos=2)
    got = receive(sub)
    assert (got["payload"], got["qos"]) == (b"once", 2)
    if sub_ids:
        assert sorted(props(got, "subscription_identifier")) == [1, 2, 3]
    fence(publisher, sub, "fence/overlap")


@VERSIONS
def test_subscription_is_replaced(broker: RunningBroker, version: int) -> None:
    # [MQTT-3.8.4-3]: same filter again replaces the subscription (its QoS and, in
    # v5, its options and identifier); retained messages are sent again.
    publisher = connected(broker, "replace-pub", version)
    publish(publisher, "rep/t", b"kept", qos=1, retain=True)
    sub = connected(broker, "replace", version)
    first = [("subscription_identifier", 5)] if version == V5 else []
    assert subscribe(sub, ("rep/t", 2), properties=first) == [2]
    assert receive(sub)["payload"] == b"kept"
    second = [("subscription_identifier", 6)] if version == V5 else []
    assert subscribe(sub, ("rep/t", 0), properties=second) == [0]
    again = recv_publish(sub)
    assert (again["payload"], again["qos"], again["retain"]) == (b"kept", 0, True)
    subscribe(sub, "fence/replace")
    publish(publisher, "rep/t", b"live", qos=2)
    got = recv_publish(sub)
    assert (got["payload"], got["qos"]) == (b"live", 0)
    if version == V5:
        assert props(got, "subscription_identifier") == [6]
    fence(publisher, sub, "fence/replace")


def test_v5_no_local(broker: RunningBroker) -> None:
    # [MQTT-3.8.3-3]: not forwarded back to the publishing client id.
    me = connected(broker, "no-local", V5)
    subscribe(me, {"filter": "nl/t", "qos": 1, "no_local": True}, "fence/nl")
    watcher = connected(broker, "no-local-watcher", V5)
    subscribe(watcher, ("nl/t", 1))
    publish(me, "nl/t", b"mine", qos=1)
    assert receive(watcher)["payload"] == b"mine"
    other = connected(broker, "no-local-other", V5)
    fence(other, me, "fence/nl")
    publish(other, "nl/t", b"theirs", qos=1)
    assert receive(me)["payload"] == b"theirs"


def test_v5_retain_as_published(broker: RunningBroker) -> None:
    # §3.8.3.1: with Retain As Published the RETAIN flag is kept on live messages;
    # without it, it is 0 [MQTT-3.3.1-12, 3.3.1-13].
    keeps = connected(broker, "rap-1", V5)
    subscribe(keeps, {"filter": "rap/t", "qos": 0, "retain_as_published": True})
    clears = connected(broker, "rap-0", V5)
    subscribe(clears, {"filter": "rap/t", "qos": 0, "retain_as_published": False})
    publisher = connected(broker, "rap-pub", V5)
    publish(publisher, "rap/t", b"r", retain=True)
    publish(publisher, "rap/t", b"n", retain=False)
    assert [(p["payload"], p["retain"]) for p in (recv_publish(keeps), recv_publish(keeps))] == [
        (b"r", True),
        (b"n", False),
    ]
    assert [(p["payload"], p["retain"]) for p in (recv_publish(clears), recv_publish(clears))] == [
        (b"r", False),
        (b"n", False),
    ]


@VERSIONS
def test_wildcards_at_the_first_level_do_not_match_sys(broker: RunningBroker, version: int) -> None:
    # [MQTT-4.7.2-1]: `#` and `+/...` must not match topics starting with `$`.
    client = connected(broker, "sys-wild", version)
    assert subscribe(client, "$SYS/broker/version") == [0]
    control = recv_publish(client)  # the broker retains $SYS/broker/version
    assert control["topic"] == "$SYS/broker/version" and control["retain"] is True
    assert subscribe(client, "#", "+/broker/version", "+/+/+") == [0, 0, 0]
    ping(client)  # no retained $SYS message came after the SUBACK


@VERSIONS
def test_wildcard_matching(broker: RunningBroker, version: int) -> None:
    # §4.7.1: `#` includes the parent level; `+` is exactly one level, empty included.
    sub = connected(broker, "wild", version)
    subscribe(sub, "w/#", "x/+/z", "y/+", "fence/wild")
    publisher = connected(broker, "wild-pub", version)
    topics = ["w", "w/a/b", "x//z", "x/a/z", "x/a/b/z", "y/", "y", "y/a/b"]
    for topic in topics:
        publish(publisher, topic, topic.encode())
    expected = ["w", "w/a/b", "x//z", "x/a/z", "y/"]
    assert [recv_publish(sub)["topic"] for _ in expected] == expected
    fence(publisher, sub, "fence/wild")


@VERSIONS
def test_shared_subscription_delivers_each_message_to_one_member(
    broker: RunningBroker, version: int
) -> None:
    members = [connected(broker, f"member-{i}", version) for i in range(2)]
    for member in members:
        assert subscribe(member, ("$share/grp/sh/t", 1), "fence/shared") == [1, 0]
    publisher = connected(broker, "shared-pub", version)
    for i in range(6):
        publish(publisher, "sh/t", str(i).encode(), qos=1)
    publish(publisher, "fence/shared", b"end")
    got = []
    for member in members:
        while (packet := receive(member))["topic"] != "fence/shared":
            got.append(packet["payload"])
    assert sorted(got) == [str(i).encode() for i in range(6)]


def test_packet_ids_of_suback_follow_the_request(broker: RunningBroker) -> None:
    client = connected(broker, "sub-ids", V5)
    for _ in range(3):
        packet_id = next_packet_id()
        client.send({"type": "subscribe", "packet_id": packet_id, "filters": [{"filter": "t"}]})
        assert client.recv()["packet_id"] == packet_id
