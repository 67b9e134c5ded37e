"""The cluster bus's Kafka producer: librdkafka (``confluent-kafka``), compiled, behind an
asyncio face.

Why not aiokafka, which the consumers use: producing the bus's records (a tick's
messages for one node, about 20 KB) cost aiokafka 370 µs of node CPU per record and
librdkafka 97 µs, and Kafka 178 µs against 62 µs per record, since librdkafka puts
several records in one request (``benches/cluster/kafka_clients.py``, RESULTS "Issue 26
item 2"). On the producing node that was the largest part of a crossing's cost.

What the bus relies on:

- **Order, once.** Each topic has one partition and the producer is idempotent, so the
  records of one topic are written in the order :meth:`Producer.send` was called, each
  once, however many requests are in flight and however often librdkafka retries.
- **Nothing given up while Kafka is away.** ``message.timeout.ms`` is 0: a record is
  retried until Kafka has it, so its future stays pending and the acknowledgements
  waiting for it stay held. A future fails only for a record Kafka refuses for good
  (too large, not authorised, a fatal producer error): :class:`ProduceFailed`.
- **Bounded.** librdkafka holds at most twice the largest record (``max_record``) of
  records not yet confirmed; past that :meth:`Producer.send` raises :class:`QueueFull`
  and the caller waits for :meth:`Producer.room` (a member whose Kafka is away holds
  that much here, the rest in the bus's own queue).
- **Health.** librdkafka's errors about reaching Kafka (``on_unreachable``) are told to
  the caller from the loop, at most once per second.

librdkafka's delivery reports are served by one thread that polls it and hands each
result to the loop (``call_soon_threadsafe``): Python runs per record, never per
message.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Final

from confluent_kafka import KafkaError, KafkaException, Message
from confluent_kafka import Producer as _Librdkafka

__all__ = ["ProduceFailed", "Producer", "QueueFull"]

#: How long the polling thread waits for a delivery report before it checks for stop.
POLL_SECONDS: Final = 0.1
#: The least time between two ``on_unreachable`` calls.
UNREACHABLE_EVERY: Final = 1.0
#: librdkafka's errors that say Kafka cannot be reached (it keeps trying).
_UNREACHABLE: Final = frozenset({KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT})


class ProduceFailed(Exception):
    """Kafka refused a record for good (librdkafka's error text)."""


class QueueFull(Exception):
    """librdkafka holds as much as it may: wait for :meth:`Producer.room`, then send."""


class Producer:
    def __init__(
        self,
        bootstrap: str,
        *,
        request_timeout_ms: int,
        max_record: int,
        on_unreachable: Callable[[str], None],
    ) -> None:
        self._bootstrap = bootstrap
        self._on_unreachable = on_unreachable
        self._last_unreachable = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._room = asyncio.Event()  # set when a record is confirmed or fails
        self._kafka = _Librdkafka(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 0,
                "message.timeout.ms": 0,  # never give a record up
                "request.timeout.ms": request_timeout_ms,
                "message.max.bytes": max_record,
                "queue.buffering.max.kbytes": max(1, 2 * max_record // 1024),
                "error_cb": self._error,
                # Its own log lines (one per failed connection attempt, on stderr) are
                # silenced: an outage is logged once, through ``on_unreachable``.
                "log_level": 0,
            }
        )

    def start(self) -> None:
        """Serve delivery reports from now on (call on the loop that awaits them)."""
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._poll, name="kafka-deliveries", daemon=True)
        self._thread.start()

    def send(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> asyncio.Future[int]:
        """Hand a record to librdkafka; the future is its offset once Kafka has it.
        Raises :class:`QueueFull` when librdkafka holds as much as it may, and
        :class:`ProduceFailed` after a fatal producer error."""
        assert self._loop is not None, "Producer.start() first"
        future: asyncio.Future[int] = self._loop.create_future()
        try:
            self._kafka.produce(
                topic,
                value,
                key,
                headers=[(name, data) for name, data in headers] if headers else None,
                on_delivery=lambda error, message: self._delivered(future, error, message),
            )
        except BufferError:
            raise QueueFull from None
        except KafkaException as exc:  # a fatal producer error
            raise ProduceFailed(str(exc)) from None
        return future

    async def send_and_wait(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> int:
        while True:
            try:
                return await self.send(topic, value, key=key, headers=headers)
            except QueueFull:
                await self.room()

    async def room(self) -> None:
        """Until a record handed over before is confirmed or fails (freeing its place)."""
        self._room.clear()
        await self._room.wait()

    async def stop(self, timeout: float = 5.0) -> None:
        """Wait (up to ``timeout``) for what was sent, then stop: what Kafka has not
        taken by then is dropped unreported (the bus is stopping; nobody waits) and
        librdkafka's threads end, rather than go on dialling an absent Kafka."""
        if self._thread is None:
            return
        await asyncio.to_thread(self._kafka.flush, timeout)
        self._stopping.set()
        await asyncio.to_thread(self._thread.join)
        self._thread = None
        self._kafka.purge()
        await asyncio.to_thread(self._kafka.close)

    # -- librdkafka's thread ------------------------------------------------------------

    def _poll(self) -> None:
        while not self._stopping.is_set():
            self._kafka.poll(POLL_SECONDS)

    def _delivered(
        self, future: asyncio.Future[int], error: KafkaError | None, message: Message
    ) -> None:
        if self._stopping.is_set():
            return  # purged by stop
        if error is not None:
            self._to_loop(self._settle, future, ProduceFailed(error.str()))
        else:
            self._to_loop(self._settle, future, message.offset())

    def _error(self, error: KafkaError) -> None:
        if error.code() not in _UNREACHABLE or self._loop is None:
            return
        now = time.monotonic()
        if now - self._last_unreachable >= UNREACHABLE_EVERY:
            self._last_unreachable = now
            self._to_loop(self._on_unreachable, error.str())

    def _settle(self, future: asyncio.Future[int], outcome: int | ProduceFailed) -> None:
        """On the loop: a record's outcome, and its place in librdkafka's queue free."""
        self._room.set()
        if future.done():
            return
        if isinstance(outcome, ProduceFailed):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)

    def _to_loop(self, callback: Callable[..., None], *args: object) -> None:
        assert self._loop is not None
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
            self._loop.call_soon_threadsafe(callback, *args)
