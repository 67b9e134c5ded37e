"""The Kafka store for APPLICATION clients (seed 000): a topic per persistent
application client, its consumer group's committed offset the session cursor.

Layout: client ``c`` has the topic :func:`topic_name` (``<prefix><c>`` when ``c`` is
already a valid topic name) and the consumer group ``<prefix>cursor.<c>``. Every delivery
journaled for it is one record, produced to partition 0 (one ordered queue per client;
extra partitions, if configured, stay empty) with key ``c``, a ``packet_id`` header, and as
value the journal's Message and Enqueue records (sequence, packet id, QoS, ...), so
``Engine.restore`` reads the values back as they are.

- ``write(ops, progress)``: the operations the splitter (``ferromq._core.JournalSplitter``)
  took out of one journal batch. All of the batch's records are sent at once (one Kafka
  batch per client, so one future to wait for, not one per record) and awaited
  together (acks=all by default, idempotent producer), then acknowledgements move each
  client's cursor to the offset after the longest acknowledged prefix (acks arrive out of
  order) and the cursors they moved are committed before the batch counts, with the
  acknowledged offsets after the cursor in the commit's metadata (``done:<a>-<b>,...``),
  so no completed delivery is loaded again (a PUBREL waits for the batch). ``progress``
  keeps the offsets of records already stored and whether the batch's acknowledgements
  were counted, so a retried batch does neither twice. A session's end drops its records
  (DeleteRecords) and commits the cursor at the end of the log, so a new session starts
  empty; the topic stays for the next session.
- ``load(clients)``: per application session the primary store knows, the records from its
  committed offset to the end of the log but those the metadata names done, as journal
  bytes.
- Application groups (engine/application_groups.rs): the journal names a group's stream like a
  client, a NUL then its ``$share/`` filter. Its records go to the group's topic
  (:func:`shared_topic_name`, ``kafka.shared_partitions`` partitions, chosen by the
  packet id the engine gives a stream's record as its key: the topic under the
  ``hash_topic`` share strategy, else the group's sequence) and have no cursor here: the
  members' consumers (:mod:`ferromq.storage.kafka_shared`) read and commit them. The group's end
  deletes its records.
- Errors: anything Kafka raises while writing becomes ``ConnectionError`` naming the
  bootstrap servers and the reason (the persister retries with backoff and holds the
  acknowledgements); at start-up an unreachable cluster is ``StoreUnavailable``.

Unlike the device path, this is Python per delivery (aiokafka produces record by record):
application clients are few and each takes a stream (TBMQ's consumer per client).
"""

from __future__ import annotations

import asyncio
import hashlib
import heapq
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Final

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic, RecordsToDelete
from aiokafka.errors import KafkaError

from ferromq._core import ApplicationAck, ApplicationEnd, ApplicationEnqueue, ApplicationOp
from ferromq.log import log_event
from ferromq.storage import StoreUnavailable

__all__ = [
    "AckedPrefix",
    "KafkaStore",
    "Progress",
    "create_topic",
    "done_runs",
    "is_stream",
    "shared_topic_name",
    "topic_name",
]

logger = logging.getLogger("ferromq.storage")

MAX_TOPIC: Final = 249
_NOT_TOPIC_CHAR: Final = re.compile(r"[^a-zA-Z0-9._-]")
_TOPIC_ALREADY_EXISTS: Final = 36
_PACKET_ID: Final = "packet_id"
PARTITION: Final = 0
_DONE: Final = "done:"
# Kafka's default offset.metadata.max.bytes is 4096: done runs past this many characters
# are left out (those deliveries may repeat after a crash: at least once).
MAX_METADATA: Final = 4000
MAX_BATCH: Final = 512 * 1024  # bytes of one client's records per produce request


def topic_name(prefix: str, client: str) -> str:
    """``prefix + client`` in Kafka's topic alphabet ([a-zA-Z0-9._-], at most 249
    characters); when that changed or cut the name, a hash of the client id ends it so
    two clients never share a topic."""
    name = prefix + _NOT_TOPIC_CHAR.sub("_", client)
    if name == prefix + client and len(name) <= MAX_TOPIC:
        return name
    digest = hashlib.sha256(client.encode()).hexdigest()[:16]
    return f"{name[: MAX_TOPIC - len(digest) - 1]}.{digest}"


def shared_topic_name(prefix: str, share_filter: str) -> str:
    """The topic of an application group: ``<prefix>share.`` and its
    ``{group}/{filter}`` in Kafka's alphabet."""
    return topic_name(prefix + "share.", share_filter.removeprefix("$share/"))


async def create_topic(
    admin: AIOKafkaAdminClient,
    name: str,
    partitions: int,
    replication_factor: int,
    configs: dict[str, str] | None = None,
) -> None:
    """Create topic ``name`` (with topic ``configs``) unless it exists (the existing one
    is left as it is)."""
    topic = NewTopic(name, partitions, replication_factor, topic_configs=configs or {})
    response = await admin.create_topics([topic])
    for _topic, code, *rest in response.topic_errors:
        if code not in (0, _TOPIC_ALREADY_EXISTS):
            raise ConnectionError(f"creating topic {name}: error {code} {rest}")


def is_stream(client: str) -> bool:
    """A application group's journal name (a NUL, never in a client id), not a
    client."""
    return client.startswith("\0")


class AckedPrefix:
    """A client's stored deliveries not yet acknowledged, by offset; the cursor is the
    first of them (or the log end when there is none). Offsets acknowledged after the
    cursor are ``done``: what the commit's metadata names."""

    def __init__(self, end: int = 0) -> None:
        self.end = end
        self._unacked: list[int] = []  # heap of offsets, lazily cleaned
        self._packet_of: dict[int, int] = {}  # offset -> packet id
        self._offset_of: dict[int, int] = {}  # packet id -> offset
        self._done: set[int] = set()  # acknowledged, after the cursor (lazily cleaned)

    def stored(self, offset: int, packet_id: int) -> None:
        if offset in self._packet_of or offset in self._done:
            return  # a retried batch: already known
        superseded = self._offset_of.get(packet_id)
        if superseded is not None:
            # The same delivery stored twice (a produce retried after a lost reply), or
            # a packet id reused before the cursor caught up: the older needs no ack.
            self._packet_of.pop(superseded, None)
            self._done.add(superseded)
        self._packet_of[offset] = packet_id
        self._offset_of[packet_id] = offset
        heapq.heappush(self._unacked, offset)
        self.end = max(self.end, offset + 1)

    def skipped(self, offset: int) -> None:
        """A record read back that a commit named done."""
        self._done.add(offset)
        self.end = max(self.end, offset + 1)

    def acked(self, packet_id: int) -> None:
        offset = self._offset_of.pop(packet_id, None)
        if offset is not None:
            del self._packet_of[offset]
            self._done.add(offset)

    def clear(self) -> None:
        self._unacked.clear()
        self._packet_of.clear()
        self._offset_of.clear()
        self._done.clear()

    def cursor(self) -> int:
        """The offset after the longest acknowledged prefix."""
        while self._unacked and self._unacked[0] not in self._packet_of:
            heapq.heappop(self._unacked)
        return self._unacked[0] if self._unacked else self.end

    def done(self) -> str:
        """The commit's metadata: the acknowledged offsets after the cursor, as
        inclusive runs ``done:<a>-<b>,...`` (cut at ``MAX_METADATA`` characters)."""
        cursor = self.cursor()
        self._done = {offset for offset in self._done if offset >= cursor}
        runs: list[str] = []
        size = len(_DONE)
        for first, last in _runs(sorted(self._done)):
            run = f"{first}-{last}"
            size += len(run) + 1
            if size > MAX_METADATA:
                break
            runs.append(run)
        return _DONE + ",".join(runs)


def _runs(offsets: list[int]) -> list[tuple[int, int]]:
    """Sorted offsets as inclusive runs of consecutive ones."""
    runs: list[tuple[int, int]] = []
    for offset in offsets:
        if runs and runs[-1][1] == offset - 1:
            runs[-1] = (runs[-1][0], offset)
        else:
            runs.append((offset, offset))
    return runs


def done_runs(metadata: str) -> list[tuple[int, int]]:
    """The inclusive runs of offsets a commit's metadata names done (none for metadata
    of another form)."""
    if not metadata.startswith(_DONE) or metadata == _DONE:
        return []
    runs: list[tuple[int, int]] = []
    for run in metadata.removeprefix(_DONE).split(","):
        first, _, last = run.partition("-")
        runs.append((int(first), int(last)))
    return runs


@dataclass
class Progress:
    """How far one batch's write got, kept across its retries."""

    produced: dict[int, int] = field(default_factory=dict)  # op index -> offset
    counted: bool = False  # the acknowledgements moved the cursors


@dataclass
class _Cursor:
    """One application client's topic, consumer (for reads and commits) and
    acknowledgement state."""

    topic: TopicPartition
    consumer: AIOKafkaConsumer
    committed: tuple[int, str]  # offset, metadata
    pending: AckedPrefix
    dropped: bool = False  # the session ended: drop what the log holds


class KafkaStore:
    name = "kafka"

    def __init__(
        self,
        bootstrap_servers: str,
        topic_prefix: str = "ferromq.app.",
        partitions: int = 1,
        replication_factor: int = 1,
        acks: str = "all",
        request_timeout: float = 10.0,
        shared_partitions: int = 4,
    ) -> None:
        self.bootstrap = bootstrap_servers
        self.prefix = topic_prefix
        self.partitions = partitions
        self.shared_partitions = shared_partitions
        self.replication_factor = replication_factor
        self._timeout_ms = int(request_timeout * 1000)
        acks_value: int | str = acks if acks == "all" else int(acks)
        self._producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap_servers,
            acks=acks_value,
            enable_idempotence=acks == "all",
            request_timeout_ms=self._timeout_ms,
            linger_ms=0,
            max_batch_size=MAX_BATCH,
        )
        self._admin = AIOKafkaAdminClient(
            bootstrap_servers=bootstrap_servers, request_timeout_ms=self._timeout_ms
        )
        self._cursors: dict[str, _Cursor] = {}
        self._topics: set[str] = set()  # known to exist
        self._stream_partitions: dict[str, list[TopicPartition]] = {}
        # aiokafka logs group-coordinator chatter at INFO for every client's consumer.
        logging.getLogger("aiokafka").setLevel(logging.WARNING)

    def _failed(self, doing: str, exc: BaseException) -> ConnectionError:
        if isinstance(exc, asyncio.TimeoutError):
            reason = f"no answer within {self._timeout_ms / 1000:g}s"
        else:
            reason = str(exc) or type(exc).__name__
        return ConnectionError(f"kafka at {self.bootstrap}: {doing}: {reason}")

    async def start(self) -> None:
        try:
            await self._admin.start()
            await self._producer.start()
        except (KafkaError, OSError) as exc:
            await self.close()
            raise StoreUnavailable(
                f"kafka store at {self.bootstrap}: unreachable: {exc or type(exc).__name__}"
            ) from None

    async def load(self, clients: list[str]) -> bytes:
        """The stored deliveries after each client's cursor, as journal bytes."""
        try:
            existing = set(await self._admin.list_topics())
            parts: list[bytes] = []
            for client in clients:
                if is_stream(client):
                    continue  # its members' consumers read it
                if topic_name(self.prefix, client) in existing:
                    parts += await self._read_after_cursor(client)
            return b"".join(parts)
        except KafkaError as exc:
            raise StoreUnavailable(str(self._failed("load", exc))) from None

    async def _read_after_cursor(self, client: str) -> list[bytes]:
        cursor = await self._cursor(client)
        tp, consumer = cursor.topic, cursor.consumer
        start = max(cursor.committed[0], (await consumer.beginning_offsets([tp]))[tp])
        consumer.seek(tp, start)
        done = done_runs(cursor.committed[1])
        values: list[bytes] = []
        while await consumer.position(tp) < cursor.pending.end:
            records = (await consumer.getmany(tp, timeout_ms=self._timeout_ms)).get(tp)
            if not records:
                position = await consumer.position(tp)
                raise StoreUnavailable(
                    f"kafka store at {self.bootstrap}: load: {tp.topic} gave no records "
                    f"at offset {position} of {cursor.pending.end} within "
                    f"{self._timeout_ms / 1000:g}s"
                )
            for record in records:
                while done and done[0][1] < record.offset:
                    done.pop(0)
                if done and done[0][0] <= record.offset:
                    cursor.pending.skipped(record.offset)
                    continue
                if record.value is None:
                    continue
                headers = dict(record.headers)
                cursor.pending.stored(record.offset, int.from_bytes(headers[_PACKET_ID], "big"))
                values.append(record.value)
        return values

    async def _cursor(self, client: str) -> _Cursor:
        """The client's cursor, creating its topic and consumer on first need."""
        cursor = self._cursors.get(client)
        if cursor is not None:
            return cursor
        name = topic_name(self.prefix, client)
        await self.ensure_topic(name, self.partitions)
        tp = TopicPartition(name, PARTITION)
        group = f"{self.prefix}cursor.{client}"
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=group,
            enable_auto_commit=False,
            request_timeout_ms=self._timeout_ms,
        )
        await consumer.start()
        try:
            consumer.assign([tp])
            end = (await consumer.end_offsets([tp]))[tp]
            offsets = await self._admin.list_consumer_group_offsets(group, partitions=[tp])
        except BaseException:
            await consumer.stop()
            raise
        stored = offsets.get(tp)
        committed = (stored.offset, stored.metadata or "") if stored else (0, "")
        if committed[0] > end or committed[0] < 0:
            committed = (0, "")  # past the log end: an older topic of the same name
        cursor = _Cursor(tp, consumer, committed, AckedPrefix(end))
        self._cursors[client] = cursor
        return cursor

    async def ensure_topic(self, name: str, partitions: int) -> None:
        """Create topic ``name`` unless it exists."""
        if name in self._topics:
            return
        await create_topic(self._admin, name, partitions, self.replication_factor)
        self._topics.add(name)

    async def write(self, ops: list[ApplicationOp], progress: Progress) -> None:
        """Store one batch's operations; ``progress`` keeps what is done across
        retries of the same batch."""
        try:
            # aiokafka retries some requests (metadata, commits) without end while the
            # cluster is away; the store gives up after the request timeout.
            await asyncio.wait_for(self._write(ops, progress), self._timeout_ms / 1000)
        except (KafkaError, asyncio.TimeoutError) as exc:
            raise self._failed("write", exc) from None

    async def _write(self, ops: list[ApplicationOp], progress: Progress) -> None:
        await self._produce(ops, progress.produced)
        for op in ops:
            if isinstance(op, ApplicationEnd) and is_stream(op.client):
                await self._drop_stream(op.client)
        if not progress.counted:
            self._account(ops, progress.produced)
            progress.counted = True
        # Stored before the batch counts: a restart must not load what a client
        # completed, nor bring an ended session's records back.
        await self._commit({op.client for op in ops if not isinstance(op, ApplicationEnqueue)})

    async def _produce(self, ops: list[ApplicationOp], produced: dict[int, int]) -> None:
        """Send the batch's deliveries not yet stored, as one Kafka batch per topic
        partition (a record each, one future per batch), and wait for them all."""
        by_partition: dict[TopicPartition, list[tuple[int, ApplicationEnqueue]]] = {}
        for index, op in enumerate(ops):
            if isinstance(op, ApplicationEnqueue) and index not in produced:
                tp = await self._partition_for(op.client, op.packet_id)
                by_partition.setdefault(tp, []).append((index, op))
        sent: list[tuple[list[int], asyncio.Future[Any]]] = []
        for tp, enqueues in by_partition.items():
            batch = self._producer.create_batch()
            members: list[int] = []
            for index, enqueue in enqueues:
                key, value = enqueue.client.encode(), enqueue.record
                headers = [(_PACKET_ID, enqueue.packet_id.to_bytes(2, "big"))]
                if batch.append(key=key, value=value, timestamp=None, headers=headers) is None:
                    sent.append((members, await self._send(batch, tp)))
                    batch, members = self._producer.create_batch(), []
                    batch.append(key=key, value=value, timestamp=None, headers=headers)
                members.append(index)
            sent.append((members, await self._send(batch, tp)))
        results = await asyncio.gather(*(f for _, f in sent), return_exceptions=True)
        failure: BaseException | None = None
        for (members, _), result in zip(sent, results, strict=True):
            if isinstance(result, BaseException):
                failure = failure or result
            else:
                # A batch's records take consecutive offsets from its base offset.
                for position, index in enumerate(members):
                    produced[index] = result.offset + position
        if failure is not None:
            raise failure

    async def _partition_for(self, client: str, sequence_id: int) -> TopicPartition:
        """Where a delivery goes: the client's partition 0, or the application group's
        partition its key (the packet id engine/application_groups.rs gave it) picks."""
        if not is_stream(client):
            return (await self._cursor(client)).topic
        partitions = self._stream_partitions.get(client)
        if partitions is None:
            name = shared_topic_name(self.prefix, client[1:])
            await self.ensure_topic(name, self.shared_partitions)
            partitions = [TopicPartition(name, p) for p in range(self.shared_partitions)]
            self._stream_partitions[client] = partitions
        return partitions[sequence_id % len(partitions)]

    async def _send(self, batch: Any, tp: TopicPartition) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = await self._producer.send_batch(
            batch, tp.topic, partition=tp.partition
        )
        return future

    async def _drop_stream(self, stream: str) -> None:
        """A application group ended: its records go, as the engine drops a group's
        queue; a later group of the same name starts empty."""
        name = shared_topic_name(self.prefix, stream[1:])
        if name not in self._topics:
            return
        partitions = self._producer.client.cluster.partitions_for_topic(name) or set()
        await self._admin.delete_records(
            {TopicPartition(name, p): RecordsToDelete(-1) for p in partitions},
            timeout_ms=self._timeout_ms,
        )

    def _account(self, ops: list[ApplicationOp], produced: dict[int, int]) -> None:
        """Apply the batch to the cursors in journal order."""
        for index, op in enumerate(ops):
            cursor = self._cursors.get(op.client)
            if cursor is None:
                continue  # an ack or end for a client with nothing stored here
            match op:
                case ApplicationEnqueue(packet_id=packet_id):
                    cursor.pending.stored(produced[index], packet_id)
                case ApplicationAck(packet_id=packet_id):
                    cursor.pending.acked(packet_id)
                case ApplicationEnd():
                    cursor.pending.clear()
                    cursor.dropped = True

    async def _commit(self, clients: set[str]) -> None:
        """Commit the cursors of ``clients`` that moved, together."""
        commits = []
        for client in clients:
            cursor = self._cursors.get(client)
            if cursor is None:
                continue
            target = (cursor.pending.cursor(), cursor.pending.done())
            if cursor.dropped and target[0] > 0:
                await self._admin.delete_records(
                    {cursor.topic: RecordsToDelete(target[0])}, timeout_ms=self._timeout_ms
                )
                cursor.dropped = False
            if target != cursor.committed:
                commits.append(self._commit_one(cursor, target))
        await asyncio.gather(*commits)

    @staticmethod
    async def _commit_one(cursor: _Cursor, target: tuple[int, str]) -> None:
        await cursor.consumer.commit({cursor.topic: target})
        cursor.committed = target

    async def close(self) -> None:
        for cursor in self._cursors.values():
            try:
                await cursor.consumer.stop()
            except KafkaError as exc:
                log_event(logger, logging.WARNING, "kafka consumer stop failed", error=str(exc))
        self._cursors.clear()
        await self._producer.stop()
        await self._admin.close()
