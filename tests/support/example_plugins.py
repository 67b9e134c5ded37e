"""Plugins (:mod:`ferromq.plugins`) that the tests load into real brokers by
``module:Class`` (the broker's ``PYTHONPATH`` holds the repository)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from ferromq.plugins import (
    DROP,
    PASS,
    BrokerAccess,
    ClientEvent,
    Message,
    Plugin,
    Reject,
    Rewrite,
    Verdict,
)


class Moderator(Plugin):
    """Intercepts ``chat/#``: drops spam, rejects ``chat/secret`` with 0x87 (or the
    ``reject_code`` option), upper-cases ``chat/shout/...`` onto ``chat/loud/...``."""

    filters = ("chat/#",)
    intercepts = True

    def __init__(self, broker: BrokerAccess) -> None:
        super().__init__(broker)
        self.reject_code = int(str(broker.options.get("reject_code", 0x87)))

    def on_messages(self, messages: Sequence[Message]) -> Sequence[Verdict]:
        return [self._verdict(message) for message in messages]

    def _verdict(self, message: Message) -> Verdict:
        if b"spam" in message.payload:
            return DROP
        if message.topic == "chat/secret":
            return Reject(self.reject_code)
        if message.topic.startswith("chat/shout/"):
            topic = "chat/loud/" + message.topic.removeprefix("chat/shout/")
            return Rewrite(topic=topic, payload=message.payload.upper())
        return PASS


class Tally(Plugin):
    """Observes ``sensors/#`` and client events; after each batch publishes the running
    count of messages (``tally/messages``) and each event (``tally/events``)."""

    filters = ("sensors/#",)
    events = ("connected", "disconnected", "subscribed")

    def __init__(self, broker: BrokerAccess) -> None:
        super().__init__(broker)
        self.count = 0

    def on_messages(self, messages: Sequence[Message]) -> None:
        self.count += len(messages)
        self.broker.publish("tally/messages", str(self.count).encode(), qos=1, retain=True)

    def on_events(self, events: Sequence[ClientEvent]) -> None:
        for event in events:
            record = {"kind": event.kind, "client_id": event.client_id, "filters": event.filters}
            self.broker.publish("tally/events", json.dumps(record).encode(), qos=1)


class Fragile(Plugin):
    """Intercepts ``fragile/#``: raises on ``boom``, sleeps past its timeout on
    ``hang``, tags every other payload with its instance number (``n:payload``), so a
    test sees restarts."""

    filters = ("fragile/#",)
    intercepts = True
    started = 0

    def __init__(self, broker: BrokerAccess) -> None:
        super().__init__(broker)
        Fragile.started += 1
        self.instance = Fragile.started

    def on_messages(self, messages: Sequence[Message]) -> Sequence[Verdict]:
        verdicts: list[Verdict] = []
        for message in messages:
            if message.payload == b"boom":
                raise RuntimeError("boom")
            if message.payload == b"hang":
                time.sleep(30)
            verdicts.append(Rewrite(payload=b"%d:%s" % (self.instance, message.payload)))
        return verdicts


class PassThrough(Plugin):
    """Intercepts ``crash/#`` and ``exactly/#`` and passes everything: the crash
    matrix's and the cluster's crash trials' messages all wait for a plugin's verdict."""

    filters = ("crash/#", "exactly/#")
    intercepts = True

    def on_messages(self, messages: Sequence[Message]) -> None:
        return None
