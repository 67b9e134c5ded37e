"""Kafka as the bus between the nodes of a cluster (docs/cluster.md, "The bus"): what the
shards' rings carry inside a node, carried between nodes, with no link between them.

- **Sending**, once per loop tick (:mod:`ferromq.after_flush`): the engine's records for each
  other node (``ClusterPort.take``, compiled: one Kafka record value per node per tick,
  cut at ``RECORD_BYTES``) and this node's subscription changes go on a queue that one
  task hands in order to librdkafka (:mod:`.producer`: one partition per topic, the
  idempotent producer: order holds; the member's lease is checked before each record,
  :mod:`.lease`). When Kafka
  has a node's record (acks=all) its round is confirmed
  (``ClusterPort.confirmed``): the PUBACK/PUBREC of the QoS 1/2 messages it carries go
  out. While Kafka is away librdkafka keeps retrying, so cross-node acknowledgements
  wait and local traffic goes on. A record Kafka refuses for good is sent again after a
  backoff, its acknowledgements held (records handed over after it may land first).
- **Receiving**: this node's topic (``<prefix>node.<id>``, consumer group of the same
  name) is applied to the engine record by record (``ClusterPort.receive``: one Kafka
  record is a batch, named by its topic's node and offset). Each session stores, with
  the deliveries a record brought it, that record's offset, and skips a record it holds
  already: reading a topic again (after ``kill -9``, or by an adopter) delivers nothing
  twice. The consumer group's offset is committed past records whose effects the store
  has confirmed (``Engine.journal_mark``), at most once per ``COMMIT_EVERY``: it only
  saves reading them again. A dead
  node's topic is read the same way by the survivor that adopted it
  (:meth:`KafkaBus.drain`), after :meth:`KafkaBus.adoption_marker`.
- **Crossings.** A journaled publisher's QoS 2 message goes to Kafka once the store
  has its packet id and its route (engine/cluster.rs, "Crossing QoS 2"); a record
  carrying such routes lists them, ``(publisher, route)``, in its ``kept_routes``
  header. Whoever restores a publisher whose store still keeps routes looks for each
  in its destination's topic (:meth:`KafkaBus.settle_crossings`) and sends again the
  ones it does not find.
- **The subscription topic** (compacted, key ``<node>\\0<filter>``, value
  ``SUBSCRIPTION_VALUE`` or a tombstone) is read from the beginning by every node: the
  keys of other nodes are applied to the index as their pseudo-sessions
  (``ClusterPort.apply_subscriptions``), this node's own are remembered so that joining
  tombstones the ones its restored sessions no longer have. Joining waits until the
  topic is read to its end.

Every value is a frame that starts with its format version (``durability/frame.rs``); a
value of a version this build does not read (a newer build's) stops the node through
``refuse``: ``ferromq serve`` exits 3 with one line naming it.

Python runs per tick, per Kafka record and per subscription key, never per message.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from ferromq._core import (
    SUBSCRIPTION_VALUE,
    ClusterPort,
    Engine,
    FrameVersionError,
    crossing_entries,
    subscription_present,
)
from ferromq._protocol import IOHub
from ferromq.after_flush import after_flush
from ferromq.cluster.figures import ClusterFigures
from ferromq.cluster.names import (
    NODE_KEY_SEPARATOR,
    node_of,
    node_topic,
    subscription_key,
    subscriptions_topic,
)
from ferromq.cluster.producer import ProduceFailed, Producer, QueueFull
from ferromq.log import log_event
from ferromq.storage import StoreUnavailable
from ferromq.storage.kafka import create_topic

__all__ = ["KafkaBus"]

logger = logging.getLogger("ferromq.cluster")

#: Bytes of one Kafka record value a tick's records for one node are cut into.
RECORD_BYTES: Final = 1024 * 1024
#: The largest record the topics take: one MQTT message of up to this size crosses whole.
MAX_RECORD: Final = 64 * 1024 * 1024
#: Copies of each cluster topic: three, or every Kafka broker when there are fewer.
MAX_REPLICAS: Final = 3
#: The header listing the kept QoS 2 routes a node record carries (engine/cluster.rs).
KEPT_ROUTES_HEADER: Final = "kept_routes"
#: The least time between two commits of a reader's consumer group offset: a commit only
#: saves reading records again, and one per fetch was a Kafka request per fetch.
COMMIT_EVERY: Final = 1.0
RETRY_FIRST: Final = 0.1
RETRY_MAX: Final = 5.0


@dataclass
class _Send:
    topic: str
    key: bytes
    value: bytes | None
    slot: int
    round: int  # confirmed once Kafka has this record (0: nothing waits)
    seen: int = 0  # how far this node had read the subscription topic when it matched
    # told the record's offset once Kafka has it
    stored: asyncio.Future[int] | None = None
    # the kept QoS 2 routes it carries (ClusterPort.take), as its "kept_routes" header
    crossings: bytes | None = None


@dataclass
class _Counters:
    batches_sent: int = 0
    batches_received: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    subscriptions_sent: int = 0


@dataclass
class _Reader:
    """One node topic being applied: this node's own, or an adopted node's."""

    node_id: str
    slot: int
    consumer: AIOKafkaConsumer
    task: asyncio.Task[None] | None = None
    # (offset after the record, journal batch holding its effects), oldest first
    pending: deque[tuple[int, int]] = field(default_factory=deque)
    at_end: asyncio.Event = field(default_factory=asyncio.Event)
    # cleared while an adoption sets its marker: records wait
    running: asyncio.Event = field(default_factory=asyncio.Event)
    records_applied: int = 0
    committed_at: float = 0.0  # loop time of the last commit

    def __post_init__(self) -> None:
        self.running.set()


class KafkaBus:
    def __init__(
        self,
        engine: Engine,
        hub: IOHub,
        node_id: str,
        bootstrap: str,
        topic_prefix: str,
        *,
        refuse: Callable[[StoreUnavailable], None],
        before_send: Callable[[], None],
        request_timeout: float = 10.0,
    ) -> None:
        self._engine = engine
        self._refuse = refuse
        self._before_send = before_send
        self._hub = hub
        self._port = ClusterPort(engine)
        self.node_id = node_id
        self._node = node_of(node_id)
        self._bootstrap = bootstrap
        self._prefix = topic_prefix
        self._timeout_ms = int(request_timeout * 1000)
        self._subscriptions = subscriptions_topic(topic_prefix)
        self._slots: dict[str, int] = {}
        self._nodes_at: dict[int, str] = {}  # the reverse of _slots
        self._own_keys: set[str] = set()  # filters this node's keys say it has
        self._seen = 0  # the subscription topic's records applied (the next offset)
        self._node_filters: dict[str, set[str]] = {}  # other nodes' filters, by node
        self._queue: deque[_Send] = deque()
        self._queued = asyncio.Event()
        self._counters = _Counters()
        self._healthy = True
        self._readers: dict[str, _Reader] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._flush_scheduled = False
        self._serving = False  # sending each tick's records (from serve() to close())
        self._rounds_in_flight = 0  # produced records whose round Kafka has not confirmed
        self._settling = asyncio.Lock()
        self._producer = Producer(
            bootstrap,
            request_timeout_ms=self._timeout_ms,
            max_record=MAX_RECORD,
            on_unreachable=lambda error: self._unhealthy(
                "cluster: Kafka unreachable; cross-node acks held", error
            ),
        )
        self._admin = AIOKafkaAdminClient(
            bootstrap_servers=bootstrap, request_timeout_ms=self._timeout_ms
        )
        self._index_consumer = self._consumer()

    def _consumer(self, **group: str) -> AIOKafkaConsumer:
        """A consumer of this cluster's Kafka that commits only when told and takes a
        record of any size the topics take; ``group`` adds a consumer group's keys."""
        return AIOKafkaConsumer(
            bootstrap_servers=self._bootstrap,
            enable_auto_commit=False,
            request_timeout_ms=self._timeout_ms,
            fetch_max_bytes=MAX_RECORD,
            max_partition_fetch_bytes=MAX_RECORD,
            # Kafka checked each batch's CRC when it took it; checking again cost 2 % of
            # a node's CPU under crossing load (librdkafka does not check by default).
            check_crcs=False,
            **group,
        )

    # -- start and stop -------------------------------------------------------------

    async def start(self) -> None:
        """Create the topics, start producing, read the subscription topic to its end.
        Raises :class:`StoreUnavailable` naming Kafka when it cannot be reached."""
        try:
            await self._admin.start()
            await self._create_topic(self._subscriptions, compacted=True)
            await self._create_topic(node_topic(self._prefix, self.node_id), compacted=False)
            self._producer.start()
            await self._index_consumer.start()
        except (KafkaError, OSError, ConnectionError) as exc:
            await self._close_clients()
            raise StoreUnavailable(
                f"cluster: Kafka at {self._bootstrap} unreachable: {exc}"
            ) from None
        partition = TopicPartition(self._subscriptions, 0)
        self._index_consumer.assign([partition])
        await self._index_consumer.seek_to_beginning(partition)
        end = (await self._index_consumer.end_offsets([partition]))[partition]
        try:
            while await self._index_consumer.position(partition) < end:
                await self._read_index(timeout_ms=1000)
        except StoreUnavailable:
            await self._close_clients()
            raise
        self._tasks.append(asyncio.create_task(self._index_forever()))
        self._tasks.append(asyncio.create_task(self._send_forever()))

    async def serve(self) -> None:
        """Once the store is restored: correct this node's keys, start sending and
        reading this node's topic."""
        stale = self._own_keys - set(self._port.filters(self._engine))
        for filter_ in sorted(stale):
            self._enqueue_key(filter_, present=False, round_=0)
        self._serving = True
        after_flush(self._hub).join(self.send)
        await self.drain(self.node_id)
        self.send()

    async def close(self) -> None:
        self._serving = False
        after_flush(self._hub).leave(self.send)
        for reader in list(self._readers.values()):
            await self._stop_reader(reader)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._close_clients()

    async def _close_clients(self) -> None:
        with contextlib.suppress(Exception):
            await self._index_consumer.stop()
        with contextlib.suppress(Exception):
            await self._producer.stop()
        with contextlib.suppress(Exception):
            await self._admin.close()

    async def _create_topic(self, name: str, *, compacted: bool) -> None:
        configs = {"max.message.bytes": str(MAX_RECORD)}
        if compacted:
            configs["cleanup.policy"] = "compact"
        cluster = await self._admin.describe_cluster()
        replicas = min(MAX_REPLICAS, len(cluster["brokers"]))
        await create_topic(self._admin, name, 1, replicas, configs)

    # -- nodes --------------------------------------------------------------------------

    def slot_of(self, node_id: str) -> int:
        """The engine slot standing for ``node_id`` (made the first time it is seen)."""
        slot = self._slots.get(node_id)
        if slot is None:
            slot = self._slots[node_id] = self._port.add_node(self._engine, node_id)
            self._nodes_at[slot] = node_id
        return slot

    def node_filters(self, node_id: str) -> set[str]:
        """The filters ``node_id``'s keys in the subscription topic say it has."""
        return set(self._node_filters.get(node_id, ()))

    def pause(self) -> None:
        """Records of this node's own topic wait (an adoption is setting its marker)."""
        self._readers[self.node_id].running.clear()

    def resume(self) -> None:
        self._readers[self.node_id].running.set()

    def drop_node(self, node_id: str) -> None:
        """Forget ``node_id``'s filters here at once (an adopter, before it restores the
        dead node's sessions: what this node publishes from now on reaches them
        directly, never also through the dead node's topic)."""
        changes = [(filter_, False, 0) for filter_ in sorted(self._node_filters.get(node_id, ()))]
        if changes:
            self._port.apply_subscriptions(self._engine, self.slot_of(node_id), changes)

    async def adoption_marker(self, dead: str) -> int:
        """Send the restored sessions' filters, then a tombstone for every key of the
        dead node ``dead`` (the adopter's keys stand for its sessions now); once Kafka
        has them, return the subscription topic position after them: a sender that
        had read that far routes the sessions' messages here, one that had not
        routed them to the dead node's topic (docs/cluster.md, "Adoption")."""
        self.send()
        for filter_ in sorted(self._node_filters.get(dead, ())):
            key = subscription_key(dead, filter_)
            self._queue.append(_Send(self._subscriptions, key, None, 0, 0))
        last = next(
            (item for item in reversed(self._queue) if item.topic == self._subscriptions), None
        )
        if last is None:
            return 0
        last.stored = asyncio.get_running_loop().create_future()
        self._queued.set()
        return await last.stored + 1

    async def settle_crossings(self, since_ms: int) -> tuple[int, int]:
        """The kept QoS 2 routes to other nodes that the sessions just restored here
        still have in their store (engine/cluster.rs, "Crossing QoS 2"): each one its
        destination's topic holds (a ``kept_routes`` header naming it, in a record
        written from ``since_ms`` on) is dropped, each other one is sent to that
        topic again and dropped once Kafka has it. Returns (found, sent again)."""
        async with self._settling:  # one at a time: a route is sent again once
            return await self._settle_crossings(since_ms)

    async def _settle_crossings(self, since_ms: int) -> tuple[int, int]:
        restored = self._port.restored(self._engine)
        if not restored:
            return 0, 0
        held = await self._crossings_in({node for _, _, node in restored}, since_ms)
        found = sent = 0
        for publisher, route, node in restored:
            if (publisher, route) not in held.get(node, set()):
                records = self._port.records(self._engine, route)
                if records is None:
                    continue
                value, header = records
                await self._producer.send_and_wait(
                    node_topic(self._prefix, node),
                    value,
                    key=self.node_id.encode(),
                    headers=[("seen", str(self._seen).encode()), (KEPT_ROUTES_HEADER, header)],
                )
                sent += 1
            else:
                found += 1
            self._port.settled(self._engine, route)
        return found, sent

    async def _crossings_in(
        self, nodes: set[str], since_ms: int
    ) -> dict[str, set[tuple[str, int]]]:
        """The kept routes the ``kept_routes`` headers of ``nodes``' topics list, in
        records written from ``since_ms`` to now, whoever wrote them."""
        consumer = self._consumer()
        await consumer.start()
        try:
            existing = await consumer.topics()
            by_topic = {node_topic(self._prefix, node): node for node in nodes}
            partitions = [TopicPartition(t, 0) for t in sorted(by_topic) if t in existing]
            held: dict[str, set[tuple[str, int]]] = {node: set() for node in nodes}
            if not partitions:
                return held
            consumer.assign(partitions)
            ends = await consumer.end_offsets(partitions)
            starts = await consumer.offsets_for_times({tp: since_ms for tp in partitions})
            for tp in partitions:
                start = starts.get(tp)
                consumer.seek(tp, ends[tp] if start is None else start.offset)
            reading = [tp for tp in partitions if await consumer.position(tp) < ends[tp]]
            while reading:
                batches = await consumer.getmany(*reading, timeout_ms=1000)
                for tp, records in batches.items():
                    listed = held[by_topic[tp.topic]]
                    for record in records:
                        if record.offset < ends[tp]:
                            for k, v in record.headers:
                                if k == KEPT_ROUTES_HEADER:
                                    listed.update(crossing_entries(v))
                reading = [tp for tp in reading if await consumer.position(tp) < ends[tp]]
            return held
        finally:
            await consumer.stop()

    def crossings_pending(self, publisher: str) -> bool:
        """Whether ``publisher`` has QoS 2 routes to other nodes that Kafka has not
        confirmed (a session handed over alive waits for them)."""
        return self._port.pending(self._engine, publisher)

    def records_applied(self, node_id: str) -> int:
        """Records of ``node_id``'s topic applied so far by its reader here (0 when
        none reads it)."""
        reader = self._readers.get(node_id)
        return reader.records_applied if reader is not None else 0

    def adoption_done(self, dead: str) -> None:
        """The dead node's topic is read: its sessions are like any other here."""
        self._port.adoption_done(self._engine, dead)

    def adopt_sessions(self, clients: list[str], dead: str, marker: int) -> None:
        self._port.adopt_sessions(self._engine, clients, dead, marker)

    def figures(self) -> ClusterFigures:
        c = self._counters
        return ClusterFigures(
            batches_sent=c.batches_sent,
            batches_received=c.batches_received,
            bytes_sent=c.bytes_sent,
            bytes_received=c.bytes_received,
            remote_filters=sum(len(f) for f in self._node_filters.values()),
            subscriptions_sent=c.subscriptions_sent,
            kafka_healthy=self._healthy,
            held_acks=self._rounds_in_flight + sum(1 for s in self._queue if s.round),
        )

    # -- sending --------------------------------------------------------------------

    def send(self) -> None:
        """Queue what this tick produced for other nodes (at the end of each flush)."""
        port, engine = self._port, self._engine
        for slot, records, round_, crossings in port.take(engine, RECORD_BYTES):
            node = self._nodes_at[slot]
            topic = node_topic(self._prefix, node)
            self._queue.append(
                _Send(
                    topic,
                    self.node_id.encode(),
                    records,
                    slot,
                    round_,
                    self._seen,
                    crossings=crossings,
                )
            )
        taken = port.take_subscriptions(engine)
        if taken is not None:
            changes, round_ = taken
            for filter_, present in changes:
                self._enqueue_key(filter_, present, 0)
            slot = port.subscription_slot(engine)
            if changes:
                self._queue[-1].slot, self._queue[-1].round = slot, round_
            else:
                port.confirmed(engine, slot, round_)
        if self._queue:
            self._queued.set()

    def _enqueue_key(self, filter_: str, present: bool, round_: int) -> None:
        key = subscription_key(self.node_id, filter_)
        value = SUBSCRIPTION_VALUE if present else None
        self._queue.append(_Send(self._subscriptions, key, value, 0, round_))
        if present:
            self._own_keys.add(filter_)
        else:
            self._own_keys.discard(filter_)
        self._counters.subscriptions_sent += 1

    async def _send_forever(self) -> None:
        delay = RETRY_FIRST
        while True:
            await self._queued.wait()
            self._queued.clear()
            while self._queue:
                item = self._queue[0]
                self._before_send()
                try:
                    future = self._producer.send(
                        item.topic, item.value, key=item.key, headers=self._headers(item)
                    )
                except QueueFull:  # Kafka is slow or away: librdkafka holds enough
                    await self._producer.room()
                    continue
                except ProduceFailed as exc:
                    await self._failed(exc, delay)
                    delay = min(delay * 2, RETRY_MAX)
                    continue
                self._queue.popleft()
                if item.round:
                    self._rounds_in_flight += 1
                future.add_done_callback(functools.partial(self._produced, item=item))
            delay = RETRY_FIRST

    def _headers(self, item: _Send) -> list[tuple[str, bytes]] | None:
        """A node record says how far its sender had read the subscription topic when
        it matched what it carries (a moved session's stub needs it: engine/cluster.rs)."""
        if item.topic == self._subscriptions:
            return None
        headers = [("seen", str(item.seen).encode())]
        if item.crossings:
            headers.append((KEPT_ROUTES_HEADER, item.crossings))
        return headers

    def _produced(self, future: asyncio.Future[int], item: _Send) -> None:
        if item.round:
            self._rounds_in_flight -= 1
        error = future.exception() if not future.cancelled() else None
        if future.cancelled() or error is not None:
            # Sent again, at the front: its acknowledgements are still held.
            self._queue.appendleft(item)
            self._queued.set()
            self._unhealthy(
                "cluster: Kafka refused a record; cross-node acknowledgements held", error
            )
            return
        if not self._healthy:
            self._healthy = True
            log_event(logger, logging.INFO, "cluster: Kafka takes records again")
        if item.value is not None and item.topic != self._subscriptions:
            self._counters.batches_sent += 1
            self._counters.bytes_sent += len(item.value)
        if item.stored is not None and not item.stored.done():
            item.stored.set_result(future.result())
        if item.round:
            self._port.confirmed(self._engine, item.slot, item.round)
            self._schedule_flush()

    async def _failed(self, exc: BaseException, delay: float) -> None:
        self._unhealthy("cluster: Kafka unreachable; cross-node acks held", exc)
        await asyncio.sleep(delay)

    def _unhealthy(self, what: str, error: BaseException | str | None) -> None:
        """Kafka failed: said once per outage (``_produced`` says when it is over)."""
        if self._healthy:
            self._healthy = False
            log_event(logger, logging.WARNING, what, kafka=self._bootstrap, error=str(error))

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        self._hub.flush()

    # -- the subscription topic ---------------------------------------------------

    async def _index_forever(self) -> None:
        try:
            while True:
                await self._read_index(timeout_ms=1000)
        except StoreUnavailable as exc:
            self._refuse(exc)

    async def _read_index(self, timeout_ms: int) -> None:
        """Apply what the subscription topic has next. Raises :class:`StoreUnavailable`
        for a value of a frame version this build does not read."""
        try:
            batches = await self._index_consumer.getmany(timeout_ms=timeout_ms)
        except KafkaError as exc:
            log_event(logger, logging.WARNING, "cluster: reading subscriptions", error=str(exc))
            await asyncio.sleep(RETRY_FIRST)
            return
        changes: dict[str, list[tuple[str, bool, int]]] = {}
        seen = self._seen
        for records in batches.values():
            for record in records:
                seen = record.offset + 1
                if record.key is None:
                    continue
                node, _, filter_ = record.key.decode().partition(NODE_KEY_SEPARATOR)
                try:
                    present = subscription_present(record.value)
                except FrameVersionError as exc:
                    raise StoreUnavailable(
                        f"cluster: {self._subscriptions} offset {record.offset}: {exc}"
                    ) from None
                if node == self.node_id:
                    (self._own_keys.add if present else self._own_keys.discard)(filter_)
                    continue
                if node_of(node) == self._node:
                    continue  # another shard of this node: the node's rings carry its filters
                known = self._node_filters.setdefault(node, set())
                (known.add if present else known.discard)(filter_)
                changes.setdefault(node, []).append((filter_, present, record.offset))
        if self._serving:
            # What was matched on the index so far (its flush may come after this
            # read in the loop's turn) leaves stamped with the position it was
            # matched at: an adopter tells by it which way a message went.
            self.send()
        self._seen = seen
        for node, node_changes in changes.items():
            self._port.apply_subscriptions(self._engine, self.slot_of(node), node_changes)
        self._port.set_seen(self._engine, self._seen)

    # -- node topics ----------------------------------------------------------------

    async def drain(self, node_id: str) -> None:
        """Apply ``node_id``'s topic from its committed offset on (this node's own, or
        an adopted dead node's), committing as the store confirms; returns once it is
        read to its end at least once."""
        consumer = self._consumer(
            group_id=node_topic(self._prefix, node_id), auto_offset_reset="earliest"
        )
        await consumer.start()
        partition = TopicPartition(node_topic(self._prefix, node_id), 0)
        consumer.assign([partition])
        reader = _Reader(node_id, self.slot_of(node_id), consumer)
        self._readers[node_id] = reader
        reader.task = asyncio.create_task(self._read_forever(reader, partition))
        await reader.at_end.wait()

    async def stop_draining(self, node_id: str) -> None:
        reader = self._readers.pop(node_id, None)
        if reader is not None:
            await self._stop_reader(reader)

    async def _stop_reader(self, reader: _Reader) -> None:
        if reader.task is not None:
            reader.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader.task
        with contextlib.suppress(Exception):
            await self._commit(reader)
            await reader.consumer.stop()

    async def _read_forever(self, reader: _Reader, partition: TopicPartition) -> None:
        consumer = reader.consumer
        while True:
            try:
                batches = await consumer.getmany(partition, timeout_ms=200)
                if not batches and not reader.at_end.is_set():
                    end = (await consumer.end_offsets([partition]))[partition]
                    if await consumer.position(partition) >= end:
                        reader.at_end.set()
                for records in batches.values():
                    for record in records:
                        await reader.running.wait()
                        self._apply(reader, record)
                if asyncio.get_running_loop().time() - reader.committed_at >= COMMIT_EVERY:
                    await self._commit(reader)
            except FrameVersionError as exc:
                topic = node_topic(self._prefix, reader.node_id)
                self._refuse(StoreUnavailable(f"cluster: {topic}: {exc}"))
                reader.at_end.set()  # a start waiting for it goes on, to stop
                return
            except KafkaError as exc:
                log_event(
                    logger,
                    logging.WARNING,
                    "cluster: reading a node topic",
                    node=reader.node_id,
                    error=str(exc),
                )
                await asyncio.sleep(RETRY_FIRST)

    def _apply(self, reader: _Reader, record: ConsumerRecord[bytes, bytes]) -> None:
        key, value, offset = record.key, record.value, record.offset
        if value is not None and key is not None:
            sender = key.decode()
            slot = self.slot_of(sender) if sender != self.node_id else reader.slot
            seen = next((int(v) for k, v in record.headers if k == "seen"), 0)
            try:
                self._port.receive(
                    self._engine, slot, value, reader.node_id, offset, seen, self._hub.now()
                )
            except FrameVersionError:
                raise  # not applied, not committed: the node stops (``_read_forever``)
            except ValueError as exc:
                log_event(logger, logging.ERROR, "cluster: node records refused", error=str(exc))
            self._counters.batches_received += 1
            self._counters.bytes_received += len(value)
            reader.records_applied += 1
            self._hub.flush()
        reader.pending.append((offset + 1, self._engine.journal_mark()))

    async def _commit(self, reader: _Reader) -> None:
        """Commit past the records whose effects the store has."""
        reader.committed_at = asyncio.get_running_loop().time()
        upto = None
        while reader.pending and self._engine.journal_confirmed(reader.pending[0][1]):
            upto = reader.pending.popleft()[0]
        if upto is not None:
            partition = TopicPartition(node_topic(self._prefix, reader.node_id), 0)
            await reader.consumer.commit({partition: upto})
