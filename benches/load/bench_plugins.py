"""Plugins for ``compare.py --scenarios plugins`` (issue 27: a plugin's cost per
message): each looks at every message of its batch, as a real one would. The broker
loads them as ``bench_plugins:Observer`` / ``bench_plugins:Interceptor`` with this
directory on its ``PYTHONPATH``."""

from __future__ import annotations

from collections.abc import Sequence

from ferromq.plugins import DROP, PASS, Message, Plugin, Verdict


class Observer(Plugin):
    """Sees a copy of every message (``#``) and counts its bytes."""

    filters = ("#",)

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.bytes = 0

    def on_messages(self, messages: Sequence[Message]) -> None:
        self.bytes += sum(len(message.payload) for message in messages)


class Interceptor(Plugin):
    """Decides every message (``#``): passes each with a payload, drops empty ones."""

    filters = ("#",)
    intercepts = True

    def on_messages(self, messages: Sequence[Message]) -> Sequence[Verdict]:
        return [PASS if message.payload else DROP for message in messages]
