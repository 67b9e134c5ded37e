"""paho-mqtt clients as the tests drive them: connected with their network loop running,
subscribed once the SUBACK is in, and a 20-message round trip at a QoS."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, Literal, Protocol

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from tests.conftest import RunningBroker


class Endpoint(Protocol):
    """Where a broker listens: a :class:`RunningBroker`, or another broker's address."""

    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...


def new_properties(packet_type: int) -> Any:
    """paho's MQTT 5.0 properties for a packet of ``packet_type`` (``PacketTypes``). Any:
    paho sets and reads each property as an attribute its type stubs do not list, and
    its constructor is not annotated."""
    return Properties(packet_type)  # type: ignore[no-untyped-call]


def property_of(message: paho.MQTTMessage, name: str) -> Any:
    """Property ``name`` (paho's spelling: ``ContentType``) of a message received over
    MQTT 5.0. paho sets each as an attribute its type stubs do not list; AttributeError
    when the message does not carry it."""
    assert message.properties is not None, "no properties: not an MQTT 5.0 message"
    return getattr(message.properties, name)


def paho_client(
    broker: Endpoint,
    client_id: str,
    version: int,
    clean: bool = True,
    on_message: Callable[[paho.MQTTMessage], None] | None = None,
    configure: Callable[[paho.Client], None] | None = None,
    transport: Literal["tcp", "websockets"] = "tcp",
) -> tuple[paho.Client, queue.Queue[paho.MQTTMessage]]:
    """A connected paho client running its network loop; messages go to the returned
    inbox, or to `on_message` (set before CONNECT, so queued messages are seen);
    `configure` runs before CONNECT (e.g. ``tls_set``); ``transport`` "websockets" is
    MQTT over WebSocket at paho's default path, /mqtt."""
    protocol = paho.MQTTv5 if version == 5 else paho.MQTTv311
    kwargs = {} if version == 5 else {"clean_session": clean}
    client = paho.Client(
        CallbackAPIVersion.VERSION2,
        client_id=client_id,
        protocol=protocol,
        transport=transport,
        **kwargs,
    )
    inbox: queue.Queue[paho.MQTTMessage] = queue.Queue()
    deliver = on_message or inbox.put
    client.on_message = lambda _c, _u, message: deliver(message)
    connected = threading.Event()
    client.on_connect = lambda *_: connected.set()
    if configure is not None:
        configure(client)
    if version == 5:
        props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
        props.SessionExpiryInterval = 0 if clean else 300
        client.connect(broker.host, broker.port, clean_start=clean, properties=props)
    else:
        client.connect(broker.host, broker.port)
    client.loop_start()
    assert connected.wait(5), "no CONNACK"
    return client, inbox


def subscribe(client: paho.Client, topic: str, qos: int) -> None:
    done = threading.Event()
    client.on_subscribe = lambda *_: done.set()
    client.subscribe(topic, qos)
    assert done.wait(5), "no SUBACK"


def round_trip(
    sub: paho.Client, inbox: queue.Queue[paho.MQTTMessage], pub: paho.Client, qos: int
) -> None:
    """20 messages from ``pub`` reach ``sub`` in order at ``qos``; both disconnect."""
    subscribe(sub, "plant/+/temp", qos)
    for i in range(20):
        pub.publish(f"plant/{i % 3}/temp", f"{i}".encode(), qos=qos).wait_for_publish(5)
    got = [inbox.get(timeout=5) for _ in range(20)]
    assert [m.payload for m in got] == [f"{i}".encode() for i in range(20)]
    assert {m.qos for m in got} == {qos}
    for client in (sub, pub):
        client.disconnect()
        client.loop_stop()


def paho_connect(
    broker: RunningBroker, client_id: str, version: int, username: str, password: str
) -> tuple[paho.Client, Any, queue.Queue[paho.MQTTMessage]]:
    """Connect and wait for the CONNACK; returns the client, its reason code and inbox."""
    protocol = paho.MQTTv5 if version == 5 else paho.MQTTv311
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=protocol)
    client.username_pw_set(username, password)
    inbox: queue.Queue[paho.MQTTMessage] = queue.Queue()
    client.on_message = lambda _c, _u, message: inbox.put(message)
    answered: queue.Queue[Any] = queue.Queue()
    client.on_connect = lambda _c, _u, _f, reason_code, _p: answered.put(reason_code)
    client.connect(broker.host, broker.port)
    client.loop_start()
    reason_code = answered.get(timeout=5)
    return client, reason_code, inbox


def stop(client: paho.Client) -> None:
    client.disconnect()
    client.loop_stop()


def connack(broker: RunningBroker, username: str, password: str, version: int) -> str:
    """The reason paho reports for a CONNECT of ``username`` (client id
    ``<username>-<version>``); the client is disconnected again."""
    client, code, _ = paho_connect(broker, f"{username}-{version}", version, username, password)
    stop(client)
    return str(code)
