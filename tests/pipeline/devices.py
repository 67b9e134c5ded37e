"""Devices for the end-to-end pipeline tests: real paho publishers over real sockets."""

from __future__ import annotations

import json

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion


class Device:
    """A paho publisher (QoS 1, persistent session ``dev-<number>``) and the packet ids
    acknowledged."""

    def __init__(self, port: int, number: int, host: str = "127.0.0.1") -> None:
        self.number = number
        self.sent: list[int] = []
        self.acked: set[int] = set()
        self.client = paho.Client(
            CallbackAPIVersion.VERSION2, client_id=f"dev-{number}", clean_session=False
        )
        self.client.on_publish = lambda _c, _u, mid, _rc, _p: self.acked.add(mid)
        # paho's annotations say int; its reconnect sleeps take fractions of a second.
        self.client.reconnect_delay_set(min_delay=0.1, max_delay=0.5)  # type: ignore[arg-type]
        self.client.max_inflight_messages_set(20)
        self.client.connect(host, port)
        self.client.loop_start()

    def publish(self, seq: int, topic: str = "", value: float | None = None) -> None:
        """``{"v": value, "seq": seq}`` (``value`` by default ``seq``) on ``topic``, by
        default ``fleet/d<number>/count``."""
        payload = json.dumps({"v": seq if value is None else value, "seq": seq})
        # Queued while the broker is down; paho sends it (again) once reconnected.
        info = self.client.publish(topic or f"fleet/d{self.number}/count", payload, qos=1)
        self.sent.append(info.mid)

    def all_acknowledged(self) -> bool:
        return set(self.sent) <= self.acked

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()
