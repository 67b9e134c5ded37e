"""Shared subscriptions of APPLICATION clients through Kafka consumer groups (seed 000,
TBMQ's application shared subscriptions): the consumer side of application groups.

The engine (engine/application_groups.rs) streams a shared group once an application client joins
it: each QoS 1/2 message for the group is journaled once, and the Kafka store produces it
to the group's topic (:func:`ferromq.storage.kafka.shared_topic_name`,
``kafka.shared_partitions`` partitions), before the publisher's PUBACK. This module
delivers those records:

- one :class:`MemberConsumer` per member online for the group (the engine's
  ``ApplicationMember`` events start and stop them), all in the consumer group
  ``<prefix>share.<group>/<filter>``, so Kafka shares the partitions among the members
  and moves them as members come and go; a group with no member online keeps its
  messages in the topic until one comes;
- each record is handed to the member with ``Engine.deliver_application`` under a token, at
  most ``kafka.shared_prefetch`` of them outstanding per member;
- the engine reports tokens done with (PUBACK, PUBREC, or dropped by expiry or queue
  policy) through ``ApplicationDone``; each partition's cursor is the offset after its
  longest done prefix (:class:`~ferromq.storage.kafka.AckedPrefix`), committed at
  most every ``COMMIT_INTERVAL`` while it delivers, and when it stops or loses the
  partition;
- a member that goes offline commits its done prefix and leaves the group; what it had
  not finished is received again by the member Kafka gives the partition (at least
  once: a message done after a gap in its partition can come again). A partition taken
  away by a rebalance is handled the same way.

This is Python per delivery, like the Kafka store's per-client path (TBMQ's consumer per
application client): application clients are few and each takes a stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable
from typing import Final

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.errors import KafkaError

from ferromq._core import Engine
from ferromq.log import log_event
from ferromq.storage.kafka import AckedPrefix, KafkaStore, shared_topic_name

__all__ = ["ApplicationGroups", "MemberConsumer"]

logger = logging.getLogger("ferromq.storage")

POLL_MS: Final = 200
COMMIT_INTERVAL: Final = 0.1  # seconds between a member's cursor commits
RETRY_SECONDS: Final = 1.0


class ApplicationGroups:
    """The member consumers of every application group with members online here."""

    def __init__(
        self,
        engine: Engine,
        store: KafkaStore,
        flush: Callable[[], None],
        now: Callable[[], int],
        prefetch: int,
    ) -> None:
        self.engine = engine
        self.store = store
        self.flush = flush
        self.now = now
        self.prefetch = prefetch
        self._members: dict[tuple[str, str], MemberConsumer] = {}
        self._owner: dict[int, MemberConsumer] = {}  # token -> consumer that handed it
        self._tokens = itertools.count(1)
        self._stopping: set[asyncio.Task[None]] = set()

    def on_member(self, client: str, share_filter: str, online: bool) -> None:
        key = (client, share_filter)
        if online:
            # A repeated SUBSCRIBE keeps the consumer (and its deliveries) it has.
            if key not in self._members:
                self._members[key] = MemberConsumer(self, client, share_filter)
        elif (consumer := self._members.pop(key, None)) is not None:
            self._stop(consumer)

    def deliver(self, consumer: MemberConsumer, record: bytes) -> int | None:
        """Hand one record to ``consumer``'s member: its token, or None when the
        member is no longer online for the group."""
        token = next(self._tokens)
        if not self.engine.deliver_application(
            consumer.client, consumer.share_filter, record, token, self.now()
        ):
            return None
        self._owner[token] = consumer
        return token

    def on_done(self) -> None:
        for token in self.engine.take_application_done():
            consumer = self._owner.pop(token, None)
            if consumer is not None:
                consumer.done(token)

    def forget(self, tokens: list[int]) -> None:
        """Deliveries a consumer no longer waits for (its partition moved, or it
        stopped): a late report of one is ignored."""
        for token in tokens:
            self._owner.pop(token, None)

    def _stop(self, consumer: MemberConsumer) -> None:
        task = asyncio.create_task(consumer.stop())
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    async def close(self) -> None:
        for consumer in list(self._members.values()):
            self._stop(consumer)
        self._members.clear()
        if self._stopping:
            await asyncio.gather(*self._stopping, return_exceptions=True)


class MemberConsumer(ConsumerRebalanceListener):  # type: ignore[misc]
    """One member's Kafka consumer in its group's consumer group."""

    def __init__(self, groups: ApplicationGroups, client: str, share_filter: str) -> None:
        self._groups = groups
        self.client = client
        self.share_filter = share_filter
        self._topic = shared_topic_name(groups.store.prefix, share_filter)
        self._group_id = f"{groups.store.prefix}share.{share_filter.removeprefix('$share/')}"
        self._consumer: AIOKafkaConsumer | None = None
        self._partitions: dict[TopicPartition, AckedPrefix] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._outstanding: dict[int, TopicPartition] = {}
        self._room = asyncio.Event()
        self._last_commit = 0.0
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        store = self._groups.store
        while True:
            consumer = AIOKafkaConsumer(
                bootstrap_servers=store.bootstrap,
                group_id=self._group_id,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                partition_assignment_strategy=(RoundRobinPartitionAssignor,),
            )
            self._consumer = consumer
            try:
                await store.ensure_topic(self._topic, store.shared_partitions)
                await consumer.start()
                consumer.subscribe([self._topic], listener=self)
                await self._deliver_forever(consumer)
                return
            except (KafkaError, OSError, ConnectionError) as exc:
                log_event(
                    logger,
                    logging.WARNING,
                    "kafka shared group consumer failed; retrying",
                    client=self.client,
                    group=self.share_filter,
                    error=f"kafka at {store.bootstrap}: {exc or type(exc).__name__}",
                )
                self._forget(list(self._partitions))
                await consumer.stop()
                await asyncio.sleep(RETRY_SECONDS)

    async def _deliver_forever(self, consumer: AIOKafkaConsumer) -> None:
        groups = self._groups
        while True:
            room = groups.prefetch - len(self._outstanding)
            if room <= 0:
                self._room.clear()
                await self._room.wait()
                continue
            batches = await consumer.getmany(timeout_ms=POLL_MS, max_records=room)
            for tp, records in batches.items():
                prefix = self._partitions.setdefault(tp, AckedPrefix(records[0].offset))
                for record in records:
                    token = groups.deliver(self, record.value)
                    if token is None:
                        return  # no longer online for the group: stop() follows
                    self._outstanding[token] = tp
                    prefix.stored(record.offset, token)
            if batches:
                groups.flush()
                groups.on_done()  # QoS 0 and dropped deliveries are done at once
            if time.monotonic() - self._last_commit >= COMMIT_INTERVAL:
                self._last_commit = time.monotonic()
                await self._commit(set(self._partitions))

    def done(self, token: int) -> None:
        tp = self._outstanding.pop(token, None)
        prefix = self._partitions.get(tp) if tp is not None else None
        if prefix is not None:
            prefix.acked(token)
        self._room.set()

    async def _commit(self, partitions: set[TopicPartition]) -> None:
        offsets = {}
        for tp in partitions & set(self._partitions):
            cursor = self._partitions[tp].cursor()
            if cursor > self._committed.get(tp, -1):
                offsets[tp] = cursor
        if offsets and self._consumer is not None:
            await self._consumer.commit(offsets)
            self._committed.update(offsets)

    def _forget(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._partitions.pop(tp, None)
            self._committed.pop(tp, None)
        gone = set(partitions)
        forgotten = [t for t, tp in self._outstanding.items() if tp in gone]
        for token in forgotten:
            del self._outstanding[token]
        self._groups.forget(forgotten)
        self._room.set()

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        """Commit the done prefix of partitions going to another member, and forget
        their deliveries: that member starts after the prefix."""
        with contextlib.suppress(KafkaError):
            await self._commit(set(revoked))
        self._forget(list(revoked))

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        """Nothing to do: each partition starts at its committed offset."""

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        try:
            await self._commit(set(self._partitions))
        except KafkaError as exc:
            log_event(
                logger,
                logging.WARNING,
                "kafka shared group cursor not committed; deliveries may repeat",
                client=self.client,
                group=self.share_filter,
                error=str(exc),
            )
        self._groups.forget(list(self._outstanding))
        self._outstanding.clear()
        if self._consumer is not None:
            await self._consumer.stop()  # leaves the group: its partitions move now
