"""08 Sessions (§3.1.2.4, §3.1.2.11.2, §4.1, §4.4) for 3.1.1 and 5.0: clean session /
clean start with session expiry, messages queued while offline, resending what was
in flight on return, inbound QoS 2 state across connections, expiry, and changing
the expiry at DISCONNECT."""

from __future__ import annotations

import time
from typing import Any

from tests.conftest import RunningBroker
from tests.support.mqtt_raw import RawClient

from .support import (
    V5,
    VERSIONS,
    closed_with,
    connect,
    connected,
    disconnect,
    fence,
    ping,
    prop,
    publish,
    receive,
    recv_publish,
    subscribe,
)


def persistent(version: int, seconds: int = 60) -> dict[str, Any]:
    """CONNECT fields for a session that outlives the connection."""
    if version == V5:
        return {"clean": False, "properties": [("session_expiry_interval", seconds)]}
    return {"clean": False}


def resume(broker: RunningBroker, client_id: str, version: int) -> RawClient:
    client, connack = connect(broker, client_id, version, **persistent(version))
    assert (connack["reason_code"], connack["session_present"]) == (0, True)
    return client


@VERSIONS
def test_clean_session_discards_subscriptions(broker: RunningBroker, version: int) -> None:
    # [MQTT-3.1.2-6 (3.1.1)] / [MQTT-3.1.2-4 (5.0)]: a clean start begins empty.
    sub = connected(broker, "clean", version, **persistent(version))
    subscribe(sub, "clean/t")
    disconnect(sub)
    sub = connected(broker, "clean", version, clean=True)
    subscribe(sub, "fence/clean")
    publisher = connected(broker, "clean-pub", version)
    publish(publisher, "clean/t", b"old subscription")
    fence(publisher, sub, "fence/clean")


@VERSIONS
def test_messages_are_queued_while_offline(broker: RunningBroker, version: int) -> None:
    # [MQTT-3.1.2-5 (3.1.1) / §4.1 (5.0)]: QoS 1 and 2 messages are kept for the
    # session and delivered on return, in order [MQTT-4.6.0-5]; QoS 0 ones are not
    # (the broker's default, which the specification allows).
    sub = connected(broker, "offline", version, **persistent(version))
    subscribe(sub, ("off/#", 2))
    disconnect(sub)
    publisher = connected(broker, "offline-pub", version)
    publish(publisher, "off/t", b"1", qos=1)
    publish(publisher, "off/t", b"dropped", qos=0)
    publish(publisher, "off/t", b"2", qos=2)
    publish(publisher, "off/t", b"3", qos=1)
    sub = resume(broker, "offline", version)
    publish(publisher, "off/t", b"4 live", qos=1)
    got = [receive(sub) for _ in range(4)]
    assert [(p["payload"], p["qos"]) for p in got] == [
        (b"1", 1),
        (b"2", 2),
        (b"3", 1),
        (b"4 live", 1),
    ]
    assert not any(p["dup"] for p in got)  # never sent before
    fence(publisher, sub, "off/fence")


@VERSIONS
def test_in_flight_messages_are_resent_on_return(broker: RunningBroker, version: int) -> None:
    # [MQTT-4.4.0-1]: unacknowledged PUBLISH (DUP=1 [MQTT-3.3.1-1], same packet id)
    # and PUBREL for QoS 2 past PUBREC, in their original order.
    sub = connected(broker, "resend", version, **persistent(version))
    subscribe(sub, ("rs/t", 2))
    publisher = connected(broker, "resend-pub", version)
    publish(publisher, "rs/t", b"qos1", qos=1)
    publish(publisher, "rs/t", b"qos2-released", qos=2)
    publish(publisher, "rs/t", b"qos2-unacked", qos=2)
    first = [recv_publish(sub) for _ in range(3)]
    ids = [p["packet_id"] for p in first]
    sub.send({"type": "pubrec", "packet_id": ids[1]})
    rel = sub.recv()
    assert (rel["type"], rel["packet_id"]) == ("pubrel", ids[1])
    sub.close()  # no PUBACK, no PUBCOMP, no PUBREC for the third

    sub = resume(broker, "resend", version)
    again = [sub.recv() for _ in range(3)]
    assert [(p["type"], p["packet_id"]) for p in again] == [
        ("publish", ids[0]),
        ("pubrel", ids[1]),
        ("publish", ids[2]),
    ]
    assert [again[0]["payload"], again[2]["payload"]] == [b"qos1", b"qos2-unacked"]
    assert again[0]["dup"] is True and again[2]["dup"] is True
    assert (again[0]["qos"], again[2]["qos"]) == (1, 2)
    sub.send({"type": "puback", "packet_id": ids[0]})
    sub.send({"type": "pubcomp", "packet_id": ids[1]})
    sub.send({"type": "pubrec", "packet_id": ids[2]})
    rel = sub.recv()
    assert (rel["type"], rel["packet_id"]) == ("pubrel", ids[2])
    sub.send({"type": "pubcomp", "packet_id": ids[2]})
    subscribe(sub, "rs/fence")
    fence(publisher, sub, "rs/fence")  # nothing else was owed


@VERSIONS
def test_inbound_qos2_state_survives_a_reconnect(broker: RunningBroker, version: int) -> None:
    # §4.3.3 / [MQTT-4.4.0-1]: a client that lost the connection after PUBREC resends
    # the PUBLISH (DUP) or the PUBREL; the broker still knows the packet id, so the
    # message is delivered once and the PUBREL completes normally.
    sub = connected(broker, "q2-watch", version)
    subscribe(sub, ("q2s/t", 2), "q2s/fence")
    publisher = connected(broker, "q2-sender", version, **persistent(version))
    message = {"type": "publish", "topic": "q2s/t", "payload": b"one", "qos": 2, "packet_id": 5}
    publisher.send(message)
    assert publisher.recv()["type"] == "pubrec"
    publisher.close()

    publisher = resume(broker, "q2-sender", version)
    publisher.send({**message, "dup": True})
    assert publisher.recv()["type"] == "pubrec"
    publisher.close()

    publisher = resume(broker, "q2-sender", version)
    publisher.send({"type": "pubrel", "packet_id": 5})
    comp = publisher.recv()
    assert (comp["type"], comp["packet_id"], comp["reason_code"]) == ("pubcomp", 5, 0)
    assert receive(sub)["payload"] == b"one"
    fence(publisher, sub, "q2s/fence")


@VERSIONS
def test_session_expiry_removes_the_session(limited_broker: RunningBroker, version: int) -> None:
    # [MQTT-3.1.2-23 (5.0)]: the session is discarded once the interval has passed;
    # 3.1.1 sessions expire after `[session] default_session_expiry_v311` (1 s here).
    sub = connected(limited_broker, "expiring", version, **persistent(version, seconds=1))
    subscribe(sub, "expiring/t")
    disconnect(sub)
    time.sleep(1.7)
    sub, connack = connect(limited_broker, "expiring", version, **persistent(version))
    assert connack["session_present"] is False
    subscribe(sub, "expiring/fence")
    publisher = connected(limited_broker, "expiring-pub", version)
    publish(publisher, "expiring/t", b"old subscription")
    fence(publisher, sub, "expiring/fence")


def test_v5_session_survives_within_its_expiry(broker: RunningBroker) -> None:
    sub = connected(broker, "lasting", V5, **persistent(V5, seconds=30))
    subscribe(sub, "lasting/t")
    sub.close()
    sub = resume(broker, "lasting", V5)
    publisher = connected(broker, "lasting-pub", V5)
    publish(publisher, "lasting/t", b"still here")
    assert recv_publish(sub)["payload"] == b"still here"


def test_v5_disconnect_cannot_set_an_expiry_after_0(broker: RunningBroker) -> None:
    # [MQTT-3.14.2-2]: Session Expiry 0 in CONNECT, non-zero in DISCONNECT is a
    # Protocol Error: the server answers DISCONNECT 0x82 and the will is published.
    watch = connected(broker, "expiry-watch", V5)
    subscribe(watch, ("expiry-will", 1))
    client = connected(
        broker,
        "zero-expiry",
        V5,
        will={"topic": "expiry-will", "payload": b"w", "qos": 1, "retain": False},
    )
    client.send(
        {"type": "disconnect", "reason_code": 0, "properties": [("session_expiry_interval", 60)]}
    )
    assert closed_with(client) == [0x82]
    assert receive(watch)["payload"] == b"w"
    _client, connack = connect(broker, "zero-expiry", V5, clean=False)
    assert connack["session_present"] is False


def test_v5_disconnect_can_end_the_session(broker: RunningBroker) -> None:
    # §3.14.2.2.2: a non-zero interval may be changed at DISCONNECT, here to 0.
    client = connected(broker, "ending", V5, **persistent(V5))
    subscribe(client, "ending/t")
    client.send(
        {"type": "disconnect", "reason_code": 0, "properties": [("session_expiry_interval", 0)]}
    )
    assert client.expect_closed() == []
    _client, connack = connect(broker, "ending", V5, **persistent(V5))
    assert connack["session_present"] is False


def test_v5_session_expiry_is_taken_from_the_latest_connect(broker: RunningBroker) -> None:
    # §3.1.2.11.2: the interval of the resuming CONNECT replaces the stored one.
    client = connected(broker, "renewed", V5, **persistent(V5, seconds=60))
    disconnect(client)
    client = resume(broker, "renewed", V5)
    client.send(
        {"type": "disconnect", "reason_code": 0, "properties": [("session_expiry_interval", 0)]}
    )
    assert client.expect_closed() == []
    client, connack = connect(broker, "renewed", V5, clean=False)
    assert connack["session_present"] is False
    ping(client)


def test_v5_connack_returns_a_capped_session_expiry(limited_broker: RunningBroker) -> None:
    # §3.2.2.3.2: `[session] max_session_expiry = 30` lowers a longer request, and
    # CONNACK says so; a request within the cap is granted silently.
    _client, connack = connect(limited_broker, "capped", V5, **persistent(V5, seconds=3600))
    assert prop(connack, "session_expiry_interval") == 30
    _client, connack = connect(limited_broker, "uncapped", V5, **persistent(V5, seconds=30))
    assert prop(connack, "session_expiry_interval") is None
