"""The stream's Kafka sink (``[stream] sink = "kafka"``): every ``StreamBatch`` the broker
takes goes to ``messages_topic`` and ``events_topic`` as Kafka record batches built in
Rust (``ferromq._core.kafka_record_batches``), keyed as the engine keyed each record and
partitioned as the Java client would (murmur2), so one device's records stay in order in
one partition. Python runs per send, never per record.

Sending: one task sends one *unit* at a time: every batch taken since the last send,
encoded together into one Kafka batch per partition (a produce request carries one batch
per partition, so gathering is what lets throughput follow the load rather than the loop
tick rate), handed to aiokafka's producer (acks=all) through its batch API with
:class:`_Prebuilt` in place of its ``BatchBuilder``. The next unit starts when Kafka has
acknowledged every batch of this one, so a partition's batches reach Kafka in order;
a batch that failed is sent again (only it), after a backoff. The producer is not
idempotent (a batch built in Rust carries no producer id), so a resend after a lost
acknowledgement can store a record twice: its record id makes it removable downstream,
as Spark's Kafka sink needs anyway. A batch Kafka refuses for good (too large, not
authorised) is dropped and counted (``rejected``).

Delivery (``delivery``):

- ``after_kafka``: ``done(number)`` (the engine's ``stream_done``) is called once Kafka
  acknowledged every batch of the unit holding batch ``number``, so the PUBACK/PUBREC of
  a streamed QoS 1/2 PUBLISH waits for Kafka, as TBMQ's does. While Kafka is away the
  batches wait in memory (the ``queue_bytes`` gauge). A QoS 1/2 publisher stops at its
  in-flight window because its acks are held; for QoS 0 the bound is
  ``session.memory_budget``, which counts the batches an acked sink has not confirmed
  (engine/export.rs) and holds publishers past it (none with the default budget 0).
- ``async``: ``done(number)`` at once, publishers never wait. Batches queue in memory
  up to :data:`MEMORY_BYTES`; past that the queue is written to the spill
  (:mod:`ferromq.stream.spill`, ``spill_directory``, a ``shard-K`` in it per shard of a
  node of several, at most ``spill_max_bytes``), and the sender sends what the spill
  holds (oldest first) before the memory queue, so order holds. What the spill cannot
  take is dropped and counted (``spill_full``, ``spill_error``) with one warning per
  episode. A restart sends what a previous run spilled first; at shutdown the sender
  gets :data:`STOP_GRACE` seconds, then the unsent rest goes to the spill (the unit that
  was in flight after what the spill held: the one place where a restart may reorder).

Schema registry (``registry``): at start, before Kafka, ``record-v1`` is registered
under each topic's subject (:mod:`ferromq.stream.registry`) and the ids go to the Rust
encoder with every send, which writes each value in the Confluent wire format (magic
byte 0, the id, the Avro body). A registry that cannot be reached or refuses the schema
is :class:`~ferromq.storage.StoreUnavailable` in both delivery modes (no id, no framing).
Spilled batches keep the framing they were built with.

Errors: Kafka unreachable at start-up is :class:`~ferromq.storage.StoreUnavailable`
naming the bootstrap servers in ``after_kafka`` (the broker exits 3, as with the Kafka
store); in ``async`` it is one warning line naming them, and the broker serves while
the sink keeps trying. At run time, failing sends are logged once per episode (servers,
error, effect), then once on recovery; aiokafka's own line per failed attempt is
silenced (its logger at CRITICAL, for the Kafka store too).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import BrokerResponseError, KafkaError

from ferromq._core import StreamBatch, kafka_record_batches
from ferromq.config import Config
from ferromq.log import log_event
from ferromq.shard.identity import ShardIdentity
from ferromq.storage import StoreUnavailable
from ferromq.storage.kafka import create_topic
from ferromq.stream import schema_text
from ferromq.stream.registry import Registry, RegistryError, subject_for
from ferromq.stream.sink import SinkHealth
from ferromq.stream.spill import Frame, Spill

__all__ = ["KafkaStreamSink", "record_count"]

logger = logging.getLogger("ferromq.stream")

KINDS: Final = ("messages", "events")
DROP_REASONS: Final = ("spill_full", "spill_error", "rejected")
"""Why records were dropped: the spill was full, the spill could not be written, Kafka
refused a batch for good."""
MEMORY_BYTES: Final = 32 * 1024 * 1024
"""Record bytes the ``async`` memory queue holds before it goes to the spill: the Java
producer's default ``buffer.memory``, enough to ride out a new topic's first seconds
without a spill write stalling the loop."""
UNIT_BYTES: Final = 8 * 1024 * 1024
"""Record bytes of one send at most (a spill read, or the memory queue's oldest)."""
MAX_BATCH_BYTES: Final = 1_000_000
"""A Kafka batch's bytes at most: under a broker's default ``message.max.bytes``."""
RETRY_FIRST: Final = 0.05
RETRY_MAX: Final = 5.0
STOP_GRACE: Final = 5.0
"""Seconds :meth:`KafkaStreamSink.stop` lets the sender finish before it spills."""
PRODUCER_STOP: Final = 1.0
_COUNT_AT: Final = slice(57, 61)  # a v2 record batch's record count (kafka.rs)


def spill_directory(config: Config, shard: ShardIdentity | None = None) -> Path:
    """``[stream.kafka] spill_directory``, by default ``<storage.path>/stream-spill``;
    a shard of a node of several spills to its own ``shard-K`` in it."""
    base = Path(config.stream.kafka.spill_directory or Path(config.storage.path) / "stream-spill")
    return base if shard is None or shard.count == 1 else base / f"shard-{shard.index}"


def _failure(future: asyncio.Future[object]) -> BaseException | None:
    """Why a done future failed; None when it did not."""
    return asyncio.CancelledError() if future.cancelled() else future.exception()


def record_count(batch: bytes) -> int:
    """Records in a Kafka record batch (v2), read from its header."""
    return int.from_bytes(batch[_COUNT_AT], "big")


class _Prebuilt:
    """A record batch built in Rust, with the part of aiokafka's ``BatchBuilder`` its
    accumulator and sender use on a batch given to ``send_batch``: closed to appends,
    its bytes final. (``_set_producer_state`` is absent: the producer is not
    idempotent, and an idempotent one would fail loudly here rather than send a batch
    without its producer id.)"""

    __slots__ = ("_buffer", "_records")

    def __init__(self, buffer: bytes) -> None:
        self._buffer = buffer
        self._records = record_count(buffer)

    def append(self, **_record: object) -> None:
        """Full: aiokafka's ``send()`` opens a batch of its own."""

    def close(self) -> None:
        """Closed from the start."""

    def closed(self) -> bool:
        return True

    def size(self) -> int:
        return len(self._buffer)

    def record_count(self) -> int:
        return self._records

    def _build(self) -> bytes:
        return self._buffer


@dataclass
class _Unit:
    """One send: its batches not yet acknowledged, and what finishing it releases."""

    frames: list[Frame]
    last_number: int | None = None  # after_kafka: the engine batch it completes
    from_spill: bool = False


@dataclass
class SinkCounters:
    """Totals since start, for ``/metrics``."""

    records_sent: int = 0
    bytes_sent: int = 0
    batches_sent: int = 0
    send_errors: int = 0
    spilled_records: int = 0
    spilled_bytes: int = 0
    dropped: Counter[str] = field(default_factory=Counter)


class KafkaStreamSink:
    """The ``kafka`` sink of :func:`ferromq.stream.choice.make_sink`."""

    name = "kafka"

    def __init__(
        self,
        config: Config,
        node: str,
        done: Callable[[int], None],
        shard: ShardIdentity | None = None,
    ) -> None:
        del node  # in every record already
        kafka = config.stream.kafka
        self.bootstrap = kafka.bootstrap_servers or config.kafka.bootstrap_servers
        self.delivery = kafka.delivery
        self.topics = {"messages": kafka.messages_topic, "events": kafka.events_topic}
        self._configured_partitions = kafka.partitions
        self._replication_factor = config.kafka.replication_factor
        self._timeout = float(config.kafka.request_timeout)
        self._done = done
        self._spill = (
            Spill(spill_directory(config, shard), kafka.spill_max_bytes)
            if self.delivery == "async"
            else None
        )
        self._registry = (
            Registry(kafka.registry, kafka.registry_username, kafka.registry_password)
            if kafka.registry
            else None
        )
        self._registry_subject = kafka.registry_subject
        self.schema_ids: dict[str, int] = {}
        """By kind: the registry's id of ``record-v1`` under that topic's subject."""
        self._partitions: dict[str, int] = {}
        self._producer: AIOKafkaProducer | None = None
        self._pending: deque[StreamBatch] = deque()
        self._pending_bytes = 0
        self._unit: _Unit | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.totals = SinkCounters()
        self.health = SinkHealth()
        self._failing_since: float | None = None
        self._dropping: set[str] = set()

    # -- StreamSink -------------------------------------------------------------------

    async def start(self) -> None:
        # aiokafka logs every failed connection attempt and metadata refresh (ERROR,
        # several a second while Kafka is away); the sink's episode lines say it once.
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
        if self._spill is not None:
            try:
                self._spill.open()
            except OSError as exc:
                raise StoreUnavailable(
                    f"stream.kafka.spill_directory {self._spill.directory}: {exc.strerror or exc}"
                ) from None
        if self._registry is not None:
            await self._register(self._registry)
        try:
            await asyncio.wait_for(self._connect(), self._timeout)
        except (KafkaError, OSError, asyncio.TimeoutError) as exc:
            reason = self._reason(exc)
            if self.delivery == "after_kafka":
                raise StoreUnavailable(
                    f"stream to kafka at {self.bootstrap}: unreachable: {reason}"
                ) from None
            self._failed(reason)
        self._task = asyncio.create_task(self._send_forever())

    def submit(self, batch: StreamBatch) -> None:
        """Queue ``batch`` for Kafka; in ``async`` it counts as done at once."""
        self._pending.append(batch)
        self._pending_bytes += batch.value_bytes
        if self.delivery == "async":
            self._done(batch.number)
            if self._pending_bytes > MEMORY_BYTES:
                self._spill_pending()
        self._wake.set()

    async def stop(self) -> None:
        """Send what is queued within :data:`STOP_GRACE`; in ``async`` the rest goes
        to the spill."""
        if self._task is not None:
            if self._producer is not None:  # never connected: nothing to wait for
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._drained(), STOP_GRACE)
            # The flag too: a wait_for on 3.11 can swallow a cancellation that meets
            # its inner task's end, and the sender would go on.
            self._stopping = True
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=PRODUCER_STOP)
        if self._spill is not None:
            if self._unit is not None and not self._unit.from_spill:
                self._write_spill(self._unit.frames)
            self._spill_pending()
            self._spill.close()
        elif self._unit is not None or self._pending:
            log_event(
                logger,
                logging.WARNING,
                "stream to kafka stopped with records unsent; their publishers were not "
                "acknowledged",
                servers=self.bootstrap,
                records=self.queue_records,
            )
        if self._producer is not None:
            # aiokafka's stop waits for what it holds; Kafka may be away.
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._producer.stop(), PRODUCER_STOP)

    # -- state for /readyz and /metrics ------------------------------------------------

    @property
    def queue_records(self) -> int:
        unit = sum(record_count(f.batch) for f in self._unit.frames) if self._unit else 0
        return unit + sum(b.message_count + b.event_count for b in self._pending)

    def counters(self) -> dict[str, int]:
        """Totals for ``/metrics`` (``ferromq_stream_<name>_total``)."""
        totals = self.totals
        return {
            "records": totals.records_sent,
            "bytes": totals.bytes_sent,
            "batches": totals.batches_sent,
            "errors": totals.send_errors,
            "spilled_records": totals.spilled_records,
            "spilled_bytes": totals.spilled_bytes,
            **{f"dropped_{reason}": totals.dropped[reason] for reason in DROP_REASONS},
        }

    def gauges(self) -> dict[str, int]:
        """Levels now for ``/metrics`` (``ferromq_stream_<name>``)."""
        return {
            "queue_records": self.queue_records,
            "queue_bytes": self._pending_bytes,
            "spill_bytes": self._spill.bytes if self._spill is not None else 0,
        }

    # -- sending -------------------------------------------------------------------------

    async def _connect(self) -> None:
        """A started producer, the topics created if missing, their partition counts."""
        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            acks="all",
            enable_idempotence=False,
            request_timeout_ms=int(self._timeout * 1000),
            linger_ms=0,
        )
        admin = AIOKafkaAdminClient(
            bootstrap_servers=self.bootstrap, request_timeout_ms=int(self._timeout * 1000)
        )
        try:
            await producer.start()
            await admin.start()
            for topic in self.topics.values():
                await create_topic(
                    admin, topic, self._configured_partitions, self._replication_factor
                )
                self._partitions[topic] = len(await producer.partitions_for(topic))
        except BaseException:
            await producer.stop()
            raise
        finally:
            await admin.close()
        self._producer = producer
        self._recovered()

    async def _register(self, registry: Registry) -> None:
        """``record-v1``'s id under each topic's subject, once, before any send."""
        for kind, topic in self.topics.items():
            subject = subject_for(self._registry_subject, topic)
            try:
                self.schema_ids[kind] = await registry.register(subject, schema_text())
            except RegistryError as exc:
                raise StoreUnavailable(str(exc)) from None
            log_event(
                logger,
                logging.INFO,
                "stream schema registered",
                registry=registry.url,
                subject=subject,
                id=self.schema_ids[kind],
            )

    async def _drained(self) -> None:
        while self._unit is not None or self._pending or not self._spill_empty():
            await asyncio.sleep(0.01)

    def _spill_empty(self) -> bool:
        return self._spill is None or self._spill.empty

    async def _send_forever(self) -> None:
        delay = RETRY_FIRST
        while not self._stopping:
            if self._producer is None:
                try:
                    await asyncio.wait_for(self._connect(), self._timeout)
                except (KafkaError, OSError, asyncio.TimeoutError) as exc:
                    self._failed(self._reason(exc))
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, RETRY_MAX)
                    continue
            if self._unit is None:
                self._unit = self._next_unit()
            if self._unit is None:
                if self._stopping:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            await self._send(self._unit)
            if self._unit.frames:
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)
                continue
            delay = RETRY_FIRST
            self._finish(self._unit)
            self._unit = None

    def _next_unit(self) -> _Unit | None:
        if self._spill is not None and not self._spill.empty:
            return _Unit(self._spill.read(UNIT_BYTES), from_spill=True)
        if not self._pending:
            return None
        taken: list[StreamBatch] = []
        size = 0
        while self._pending and (not taken or size < UNIT_BYTES):
            batch = self._pending.popleft()
            taken.append(batch)
            size += batch.value_bytes
        self._pending_bytes -= size
        last = taken[-1].number if self.delivery == "after_kafka" else None
        return _Unit(self._encode(taken), last_number=last)

    def _encode(self, batches: list[StreamBatch]) -> list[Frame]:
        frames: list[Frame] = []
        for kind in KINDS:
            topic = self.topics[kind]
            partitions = self._partitions.get(topic, self._configured_partitions)
            batched = kafka_record_batches(
                batches, kind, partitions, MAX_BATCH_BYTES, self.schema_ids.get(kind)
            )
            frames += [Frame(topic, partition, data) for partition, data in batched]
        return frames

    async def _send(self, unit: _Unit) -> None:
        """Send the unit's batches and wait for Kafka; those to send again stay in it,
        in order. After a batch that could not be queued, the later batches of its
        partition wait for the next attempt, so a partition's order holds."""
        producer = self._producer
        assert producer is not None
        outcomes: list[tuple[Frame, asyncio.Future[object] | BaseException | None]] = []
        blocked: set[tuple[str, int]] = set()
        for frame in unit.frames:
            if (frame.topic, frame.partition) in blocked:
                outcomes.append((frame, None))
                continue
            try:
                # A spilled batch keeps the partition it was built for; a topic found
                # with fewer partitions (made before, differently) takes it modulo.
                count = self._partitions.get(frame.topic)
                if count is None:  # spilled for a topic no longer configured
                    count = len(await producer.partitions_for(frame.topic))
                partition = frame.partition % count
                future = await producer.send_batch(
                    _Prebuilt(frame.batch), frame.topic, partition=partition
                )
            except (KafkaError, OSError) as exc:
                blocked.add((frame.topic, frame.partition))
                outcomes.append((frame, exc))
                continue
            outcomes.append((frame, future))
        futures = [outcome for _, outcome in outcomes if isinstance(outcome, asyncio.Future)]
        if futures:
            await asyncio.wait(futures)
        retry: list[Frame] = []
        error: BaseException | None = None
        for frame, outcome in outcomes:
            failure = _failure(outcome) if isinstance(outcome, asyncio.Future) else outcome
            if failure is None and outcome is not None:
                self.totals.records_sent += record_count(frame.batch)
                self.totals.bytes_sent += len(frame.batch)
                self.totals.batches_sent += 1
            elif isinstance(failure, BrokerResponseError) and not failure.retriable:
                self._drop("rejected", record_count(frame.batch), f"{frame.topic}: {failure}")
            else:
                retry.append(frame)
                if failure is not None:
                    self.totals.send_errors += 1
                    error = error or failure
        unit.frames = retry
        if error is not None:
            self._failed(self._reason(error))
        else:
            self._recovered()

    def _finish(self, unit: _Unit) -> None:
        if unit.from_spill:
            assert self._spill is not None
            self._spill.sent()
        elif unit.last_number is not None:
            self._done(unit.last_number)

    # -- spill ---------------------------------------------------------------------------

    def _spill_pending(self) -> None:
        if not self._pending:
            return
        batches = list(self._pending)
        self._pending.clear()
        self._pending_bytes = 0
        self._write_spill(self._encode(batches))

    def _write_spill(self, frames: list[Frame]) -> None:
        assert self._spill is not None
        records = sum(record_count(f.batch) for f in frames)
        try:
            written = self._spill.append(frames)
        except OSError as exc:
            self._drop("spill_error", records, f"{self._spill.directory}: {exc.strerror}")
            return
        if not written:
            spill = self._spill
            detail = f"{spill.directory} holds {spill.bytes} of {spill.max_bytes} bytes"
            self._drop("spill_full", records, detail)
            return
        self._dropping.discard("spill_full")
        self._dropping.discard("spill_error")
        self.totals.spilled_records += records
        self.totals.spilled_bytes += sum(len(f.batch) for f in frames)
        self._wake.set()

    # -- health --------------------------------------------------------------------------

    def _drop(self, reason: str, records: int, detail: str) -> None:
        self.totals.dropped[reason] += records
        if reason not in self._dropping:
            self._dropping.add(reason)
            log_event(
                logger,
                logging.WARNING,
                "stream records dropped",
                reason=reason,
                records=records,
                detail=detail,
                servers=self.bootstrap,
            )

    def _failed(self, reason: str) -> None:
        self.health = SinkHealth(False, self.health.errors + 1, reason)
        if self._failing_since is None:
            self._failing_since = time.monotonic()
            if self.delivery == "after_kafka":
                effect = "acknowledgements wait"
            else:
                effect = "records queue, then spill to disk"
            log_event(
                logger,
                logging.WARNING,
                "stream to kafka failing",
                servers=self.bootstrap,
                error=reason,
                effect=effect,
            )

    def _recovered(self) -> None:
        if not self.health.ok:
            self.health = SinkHealth(True, self.health.errors, self.health.last_error)
        self._dropping.discard("rejected")
        if self._failing_since is not None:
            log_event(
                logger,
                logging.WARNING,
                "stream to kafka recovered",
                servers=self.bootstrap,
                failing_for=f"{time.monotonic() - self._failing_since:.1f}s",
            )
            self._failing_since = None

    def _reason(self, exc: BaseException) -> str:
        if isinstance(exc, asyncio.TimeoutError):
            return f"no answer within {self._timeout:g}s"
        return str(exc) or type(exc).__name__
