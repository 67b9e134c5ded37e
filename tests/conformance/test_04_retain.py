"""04 Retained messages (§3.3.1.3, §3.8.3.1, §4.8.2) for 3.1.1 and 5.0: set, replace,
clear, Retain Handling, QoS downgrade, the RETAIN flag on live and retained
deliveries, shared subscriptions and expiry."""

from __future__ import annotations

import time

import pytest

from tests.conftest import RunningBroker

from .support import (
    V5,
    VERSIONS,
    connected,
    ping,
    prop,
    props,
    publish,
    receive,
    recv_publish,
    subscribe,
)


@VERSIONS
def test_retained_message_is_sent_on_subscribe(broker: RunningBroker, version: int) -> None:
    # [MQTT-3.3.1-5, 3.3.1-8 (3.1.1) / 3.3.1-5, 3.3.1-9 (5.0)]: stored, then sent to a
    # new subscriber with RETAIN=1, after the SUBACK.
    publisher = connected(broker, "ret-pub", version)
    publish(publisher, "ret/set", b"stored", qos=1, retain=True)
    sub = connected(broker, "ret-sub", version)
    assert subscribe(sub, ("ret/set", 1)) == [1]
    got = receive(sub)
    assert (got["topic"], got["payload"], got["retain"], got["qos"]) == (
        "ret/set",
        b"stored",
        True,
        1,
    )
    ping(sub)


@VERSIONS
def test_retained_message_is_replaced(broker: RunningBroker, version: int) -> None:
    # [MQTT-3.3.1-5]: one retained message per topic, the latest.
    publisher = connected(broker, "ret-rep-pub", version)
    publish(publisher, "ret/rep", b"old", qos=1, retain=True)
    publish(publisher, "ret/rep", b"new", qos=0, retain=True)
    sub = connected(broker, "ret-rep-sub", version)
    subscribe(sub, ("ret/rep", 2))
    got = recv_publish(sub)
    assert (got["payload"], got["qos"]) == (b"new", 0)
    ping(sub)


@VERSIONS
def test_empty_retained_message_clears(broker: RunningBroker, version: int) -> None:
    # [MQTT-3.3.1-10, 3.3.1-11 (3.1.1) / 3.3.1-6, 3.3.1-7 (5.0)]: a zero-byte retained
    # message removes the stored one, is delivered to current subscribers as
    # usual, and is not stored itself.
    live = connected(broker, "ret-clear-live", version)
    subscribe(live, "ret/clear")
    publisher = connected(broker, "ret-clear-pub", version)
    publish(publisher, "ret/clear", b"stored", qos=1, retain=True)
    assert recv_publish(live)["payload"] == b"stored"
    publish(publisher, "ret/clear", b"", qos=1, retain=True)
    assert recv_publish(live)["payload"] == b""
    sub = connected(broker, "ret-clear-sub", version)
    subscribe(sub, "ret/clear", "ret/#")
    ping(sub)


@VERSIONS
def test_retained_messages_for_a_wildcard_filter(broker: RunningBroker, version: int) -> None:
    publisher = connected(broker, "ret-wild-pub", version)
    topics = ["retw/a", "retw/b/c", "retw", "other/x"]
    for topic in topics:
        publish(publisher, topic, topic.encode(), qos=1, retain=True)
    sub = connected(broker, "ret-wild-sub", version)
    subscribe(sub, "retw/#")
    got = sorted(recv_publish(sub)["topic"] for _ in range(3))
    assert got == ["retw", "retw/a", "retw/b/c"]
    ping(sub)


@VERSIONS
@pytest.mark.parametrize("stored_qos", [0, 1, 2])
def test_retained_qos_is_downgraded(broker: RunningBroker, version: int, stored_qos: int) -> None:
    # [MQTT-3.8.4-6 (3.1.1)] / §3.8.4 (5.0): the lower of the two QoS.
    publisher = connected(broker, "ret-qos-pub", version)
    publish(publisher, "ret/qos", b"q", qos=stored_qos, retain=True)
    for sub_qos in (0, 1, 2):
        sub = connected(broker, f"ret-qos-sub-{sub_qos}", version)
        subscribe(sub, ("ret/qos", sub_qos))
        assert receive(sub)["qos"] == min(stored_qos, sub_qos)


@VERSIONS
def test_live_forwarding_clears_the_retain_flag(broker: RunningBroker, version: int) -> None:
    # [MQTT-3.3.1-9 (3.1.1)]: RETAIN=0 on messages sent for an established
    # subscription; 5.0 does the same unless Retain As Published [MQTT-3.3.1-12].
    sub = connected(broker, "ret-live-sub", version)
    subscribe(sub, ("ret/live", 1))
    publisher = connected(broker, "ret-live-pub", version)
    publish(publisher, "ret/live", b"x", qos=1, retain=True)
    assert receive(sub)["retain"] is False


def test_v5_retain_handling(broker: RunningBroker) -> None:
    # [MQTT-3.3.1-9, 3.3.1-10, 3.3.1-11]: 0 sends on every SUBSCRIBE, 1 only when the
    # subscription is new, 2 never.
    publisher = connected(broker, "rh-pub", V5)
    publish(publisher, "rh/t", b"kept", qos=1, retain=True)
    sub = connected(broker, "rh-sub", V5)
    for handling, first, again in [(0, True, True), (1, True, False), (2, False, False)]:
        option = {"filter": "rh/t", "qos": 0, "retain_handling": handling}
        for expected in (first, again):
            subscribe(sub, option)
            if expected:
                got = recv_publish(sub)
                assert (got["payload"], got["retain"]) == (b"kept", True)
            ping(sub)
        assert subscribe(sub, "rh/fence") == [0]
        sub.send({"type": "unsubscribe", "packet_id": 77, "filters": ["rh/t"]})
        assert sub.recv()["type"] == "unsuback"


def test_v5_retained_message_carries_the_subscription_identifier(broker: RunningBroker) -> None:
    publisher = connected(broker, "ret-sid-pub", V5)
    publish(publisher, "ret/sid", b"x", retain=True)
    sub = connected(broker, "ret-sid-sub", V5)
    subscribe(sub, "ret/sid", properties=[("subscription_identifier", 77)])
    assert props(recv_publish(sub), "subscription_identifier") == [77]


@VERSIONS
def test_shared_subscription_gets_no_retained_messages(broker: RunningBroker, version: int) -> None:
    # 5.0 §4.8.2: retained messages are not sent for a shared subscription.
    publisher = connected(broker, "ret-share-pub", version)
    publish(publisher, "ret/share", b"x", qos=1, retain=True)
    sub = connected(broker, "ret-share-sub", version)
    assert subscribe(sub, ("$share/g/ret/share", 1)) == [1]
    ping(sub)
    publish(publisher, "ret/share", b"live", qos=1, retain=True)
    got = receive(sub)
    assert (got["payload"], got["retain"]) == (b"live", False)


def test_v5_retained_message_expires(broker: RunningBroker) -> None:
    # [MQTT-3.3.2-5]: an expired retained message is no longer sent; one still alive
    # carries its remaining lifetime [MQTT-3.3.2-6].
    publisher = connected(broker, "ret-exp-pub", V5)
    publish(publisher, "rexp/a", b"a", retain=True, properties=[("message_expiry_interval", 1)])
    publish(publisher, "rexp/b", b"b", retain=True, properties=[("message_expiry_interval", 60)])
    time.sleep(1.3)
    sub = connected(broker, "ret-exp-sub", V5)
    subscribe(sub, "rexp/#")
    got = recv_publish(sub)
    assert got["payload"] == b"b"
    assert prop(got, "message_expiry_interval") <= 59
    ping(sub)
