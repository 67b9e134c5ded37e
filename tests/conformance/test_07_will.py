"""07 Will messages (§3.1.2.5, §3.1.3.2, §3.14.2.1) for 3.1.1 and 5.0: published on
every end but a normal DISCONNECT (socket close, keep alive, protocol error,
takeover), v5 DISCONNECT 0x04, the will delay and its cancellation, will retain,
QoS and properties."""

from __future__ import annotations

from typing import Any

import pytest

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
    nothing_arrives,
    ping,
    prop,
    receive,
    subscribe,
)


def will(
    topic: str, payload: bytes = b"gone", qos: int = 1, retain: bool = False, **properties: Any
) -> dict[str, Any]:
    return {
        "topic": topic,
        "payload": payload,
        "qos": qos,
        "retain": retain,
        "properties": list(properties.items()),
    }


def watcher(broker: RunningBroker, version: int, qos: int = 2) -> RawClient:
    client = connected(broker, "will-watcher", version)
    assert subscribe(client, ("wills/#", qos), "fence/will") == [qos, 0]
    return client


def expect_will(watch: RawClient, topic: str, payload: bytes = b"gone") -> dict[str, Any]:
    got = receive(watch)
    assert (got["topic"], got["payload"]) == (topic, payload)
    return got


@VERSIONS
def test_will_on_socket_close(broker: RunningBroker, version: int) -> None:
    # [MQTT-3.1.2-8]: an end without DISCONNECT publishes the will.
    watch = watcher(broker, version)
    dying = connected(broker, "dying", version, will=will("wills/close"))
    dying.close()
    got = expect_will(watch, "wills/close")
    assert (got["qos"], got["retain"]) == (1, False)


@VERSIONS
def test_will_on_keepalive_timeout(broker: RunningBroker, version: int) -> None:
    watch = watcher(broker, version)
    silent = connected(broker, "silent", version, keep_alive=1, will=will("wills/ka"))
    expect_will(watch, "wills/ka")
    closed_with(silent)


@VERSIONS
def test_will_on_protocol_error(broker: RunningBroker, version: int) -> None:
    # A second CONNECT [MQTT-3.1.0-2]: the server closes the connection, which is not
    # a normal disconnect, so the will goes out.
    watch = watcher(broker, version)
    bad = connected(broker, "bad", version, will=will("wills/error"))
    bad.send({"type": "connect", "protocol_version": version, "client_id": "bad"})
    closed_with(bad)
    expect_will(watch, "wills/error")


@VERSIONS
def test_will_on_malformed_packet(broker: RunningBroker, version: int) -> None:
    watch = watcher(broker, version)
    bad = connected(broker, "malformed", version, will=will("wills/malformed"))
    bad.send_raw(b"\x36\x05\x00\x01t\x00\x01")  # PUBLISH with QoS 3
    closed_with(bad)
    expect_will(watch, "wills/malformed")


@VERSIONS
def test_will_on_takeover(broker: RunningBroker, version: int) -> None:
    # [MQTT-3.1.4-3]: the taken-over connection ends without DISCONNECT.
    watch = watcher(broker, version)
    old = connected(broker, "taken", version, will=will("wills/takeover"))
    _new, connack = connect(broker, "taken", version)
    assert connack["reason_code"] == 0
    closed_with(old)
    expect_will(watch, "wills/takeover")


@VERSIONS
def test_no_will_on_disconnect(broker: RunningBroker, version: int) -> None:
    # [MQTT-3.1.2-10 (3.1.1) / 3.1.2-10, 3.14.4-3 (5.0, reason 0x00)]: removed, not
    # published.
    watch = watcher(broker, version)
    leaving = connected(broker, "leaving", version, will=will("wills/none"))
    disconnect(leaving, 0x00)
    publisher = connected(broker, "will-fence", version)
    fence(publisher, watch, "fence/will")


def test_v5_disconnect_with_will_message(broker: RunningBroker) -> None:
    # §3.14.2.1 reason 0x04: the client asks for its will.
    watch = watcher(broker, V5)
    leaving = connected(broker, "leaving-with-will", V5, will=will("wills/asked"))
    disconnect(leaving, 0x04)
    expect_will(watch, "wills/asked")


@VERSIONS
@pytest.mark.parametrize("will_qos", [0, 1, 2])
def test_will_qos(broker: RunningBroker, version: int, will_qos: int) -> None:
    # [MQTT-3.1.2-14]: published at the Will QoS, lowered per subscription.
    watchers = []
    for sub_qos in (0, 1, 2):
        watch = connected(broker, f"will-watcher-{sub_qos}", version)
        subscribe(watch, ("wills/qos", sub_qos))
        watchers.append(watch)
    dying = connected(broker, "dying-qos", version, will=will("wills/qos", qos=will_qos))
    dying.close()
    for sub_qos, watch in enumerate(watchers):
        assert expect_will(watch, "wills/qos")["qos"] == min(will_qos, sub_qos)


@VERSIONS
def test_will_retain(broker: RunningBroker, version: int) -> None:
    # [MQTT-3.1.2-17]: Will Retain 1 publishes it as a retained message.
    watch = watcher(broker, version)
    dying = connected(broker, "dying-retain", version, will=will("wills/ret", retain=True))
    dying.close()
    assert expect_will(watch, "wills/ret")["retain"] is False  # live delivery
    late = connected(broker, "late", version)
    subscribe(late, ("wills/ret", 1))
    got = receive(late)
    assert (got["payload"], got["retain"]) == (b"gone", True)


def test_v5_will_properties_are_forwarded(broker: RunningBroker) -> None:
    # [MQTT-3.1.3-?] §3.1.3.2: the will's properties travel with it; Will Delay
    # Interval is for the broker only.
    watch = watcher(broker, V5)
    properties: dict[str, Any] = {
        "content_type": "text/plain",
        "user_property": ("why", "lost"),
        "will_delay_interval": 0,
    }
    dying = connected(broker, "dying-props", V5, will=will("wills/props", **properties))
    dying.close()
    got = expect_will(watch, "wills/props")
    assert prop(got, "content_type") == "text/plain"
    assert prop(got, "user_property") == ("why", "lost")
    assert prop(got, "will_delay_interval") is None


def test_v5_will_delay_is_cancelled_by_a_return(broker: RunningBroker) -> None:
    # [MQTT-3.1.3-9]: a new connection for the session before the delay ends means
    # the will is not published.
    watch = watcher(broker, V5)
    expiry = [("session_expiry_interval", 60)]
    dying = connected(
        broker,
        "delayed",
        V5,
        clean=False,
        properties=expiry,
        will=will("wills/delayed", will_delay_interval=1),
    )
    dying.close()
    back = connected(broker, "delayed", V5, clean=False, properties=expiry)
    ping(back)
    nothing_arrives(watch, timeout=1.7)


def test_v5_will_delay_runs_out(broker: RunningBroker) -> None:
    watch = watcher(broker, V5)
    dying = connected(
        broker,
        "delayed-out",
        V5,
        clean=False,
        properties=[("session_expiry_interval", 60)],
        will=will("wills/delayed-out", will_delay_interval=1),
    )
    dying.close()
    expect_will(watch, "wills/delayed-out")


def test_v5_will_is_published_when_the_session_ends_first(broker: RunningBroker) -> None:
    # §3.1.3.2.2: published when the Will Delay Interval passes or the session ends,
    # whichever comes first; a session expiry of 0 ends it with the connection.
    watch = watcher(broker, V5)
    dying = connected(
        broker, "short-session", V5, will=will("wills/session-end", will_delay_interval=600)
    )
    dying.close()
    expect_will(watch, "wills/session-end")


def test_v5_clean_start_return_ends_the_session_and_publishes_the_delayed_will(
    broker: RunningBroker,
) -> None:
    watch = watcher(broker, V5)
    expiry = [("session_expiry_interval", 60)]
    dying = connected(
        broker,
        "restart",
        V5,
        clean=False,
        properties=expiry,
        will=will("wills/restart", will_delay_interval=600),
    )
    dying.close()
    ping(connected(broker, "will-sync", V5))
    connected(broker, "restart", V5, clean=True)
    expect_will(watch, "wills/restart")
