"""The broker: one engine, its listeners, its timers and graceful shutdown.

Python's part is per event: it builds the engine from the config, opens the listeners
(:mod:`ferromq.listener`: each accepted socket gets a Cython ``MqttProtocol`` that
feeds the engine), hands authentication events to the ``AuthGate`` when ``[auth]``
names providers, ticks the engine's clock, publishes $SYS on its interval and stops
cleanly. It never touches a message on the way through (docs/architecture.md).

Start-up order: bind every listener (a port in use fails here, before anything is
created on disk), open the store and read its journal back into the engine (sessions,
subscriptions, queued and in-flight messages, retained messages; damaged records
skipped are logged with their offsets), then start accepting and, under systemd, say
READY=1 (:mod:`ferromq.sd_notify`). While running, a
:class:`~ferromq.storage.persister.Persister` writes the engine's journal batches to
the store and releases the acknowledgements waiting for them. Its health (ok or
failing) is published under ``$SYS/broker/store/`` and decides :meth:`Broker.ready`.
With the Kafka application store, shared groups of application clients are served by
Kafka consumer groups (:mod:`ferromq.storage.kafka_shared`), driven by the engine's
``ApplicationMember`` and ``ApplicationDone`` events.

With ``[stream] enabled`` the engine exports every accepted PUBLISH and lifecycle
event as records (``StreamReady`` once per batch); the broker takes the batch on the
next loop turn (Kafka: after ``linger_ms``) and hands it to the sink
(:mod:`ferromq.stream.sink`), whose ``done`` releases the acknowledgements the engine
held for it.

Client events (connect, disconnect, subscribe, unsubscribe) and per-client packet
traces are logged by :class:`~ferromq.client_log.ClientLog`; :meth:`Broker.trace`
switches a client's trace at run time, ``[log] trace_clients`` at start and on SIGHUP.

ACL rules (:mod:`ferromq.acl`) are compiled at start and handed to the engine
(``Engine.set_acl``); SIGHUP and, with ``[acl] watch``, a change of the rules file
hand it new ones, which apply to connected sessions at once.

With ``[admin] enabled`` the admin listener (:mod:`ferromq.admin`: probes, Prometheus
metrics, and the routes other modules register) is bound with the MQTT listeners,
served once they accept and closed first at shutdown; a shard of a node serves it on
its private socket instead, for the supervisor's listener (:mod:`ferromq.node.admin`).

As one shard of a node (:mod:`ferromq.node.supervisor` started it, ``shard`` is its
:class:`~ferromq.shard.identity.ShardIdentity`): ``Engine.set_shards`` before the
restore, listeners bound with ``SO_REUSEPORT`` beside the other shards, its own
embedded journal (:mod:`ferromq.storage.layout`), no admin listener (the supervisor's),
and the bus pump (:mod:`ferromq.shard.bus_pump`) from the restore to the shutdown; it
accepts only once ``restored`` (the supervisor's ``serve``) returns. A restore first
takes over the journals of the store's previous layout when the number of workers
changed, then compacts its own.

SIGHUP (``ferromq serve``) reloads what can change while running
(:mod:`ferromq.reload`). Shutdown (SIGTERM/SIGINT): stop accepting, tell v5 clients
DISCONNECT 0x8B (Server shutting down), flush, close every connection, write what
the journal still holds and close the store; within ``[server] shutdown_timeout``
(:mod:`ferromq.shutdown`), else the process exits naming the step it waited for
(``Broker.waiting_for``).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from ferromq import sd_notify
from ferromq._core import (
    AclRules,
    ApplicationDone,
    ApplicationMember,
    Auth,
    Authenticate,
    ClientConnected,
    ClientDisconnected,
    Close,
    Engine,
    EngineEvent,
    NodeCounters,
    PacketTrace,
    PayloadInvalid,
    Persist,
    PluginReady,
    Rejected,
    ResumeReading,
    SocketSet,
    StreamReady,
    Subscribed,
    Unsubscribed,
    Wake,
)
from ferromq._protocol import DEFAULT_ARENA_SIZE, IOHub, ReadArena
from ferromq.acl import load_rules
from ferromq.admission import ADMINISTRATIVE_ACTION, Admission, load_bans
from ferromq.auth import AuthGate, ProviderChain, provider_from_config
from ferromq.auth.certificate import OpenProvider
from ferromq.auto_subscribe import auto_subscriptions
from ferromq.bridge import Bridges, bridge_stats
from ferromq.client_log import ClientLog, client_events_wanted
from ferromq.config import AclConfig, Config, ConfigError
from ferromq.engine import decides_connect_in_python, engine_from_config, stream_node
from ferromq.file_watch import FileWatch
from ferromq.listener import Listeners
from ferromq.log import log_event, peer_text
from ferromq.plugin_host import PluginHost, plugin_stats
from ferromq.reload import Reloader, ReloadHook
from ferromq.rewrite import rewrite_rules
from ferromq.shard.identity import ShardIdentity
from ferromq.shutdown import Shutdown
from ferromq.sockets import ListenError
from ferromq.storage import Store, StoreUnavailable, layout
from ferromq.storage.embedded import EmbeddedStore, read_journal
from ferromq.storage.persister import Persister, StoreHealth
from ferromq.stream.choice import make_sink
from ferromq.stream.sink import SinkHealth, StreamSink, gather_seconds
from ferromq.sys_topics import PREFIX, Figures, sys_messages
from ferromq.validation import validation_rules

if TYPE_CHECKING:
    from ferromq._core import RestoreReport
    from ferromq.admin import AdminServer
    from ferromq.cluster.node import ClusterNode
    from ferromq.shard.bus_pump import BusPump
    from ferromq.shard.sys_figures import ShardSys
    from ferromq.storage.kafka_shared import ApplicationGroups
    from ferromq.storage.redis import RedisStore
    from ferromq.storage.split import SplitStore

logger = logging.getLogger("ferromq.broker")

TICK_SECONDS = 0.5
_REVOKED_LOGGED = 100  # revoked subscriptions logged one by one per reload


def store_from_config(config: Config, shard: ShardIdentity | None = None) -> Store | None:
    """The configured store; a shard's embedded journal is its own directory
    (:func:`ferromq.storage.layout.shard_path`)."""
    storage = config.storage
    if storage.backend == "memory":
        return None
    primary: Store
    if storage.backend == "redis":
        from ferromq.storage.redis import RedisStore

        redis = config.redis
        primary = RedisStore(
            redis.url,
            key_prefix=redis.key_prefix,
            max_messages=redis.max_messages_per_client,
            message_ttl=redis.message_ttl,
            connect_timeout=redis.connect_timeout,
            command_timeout=redis.command_timeout,
            cluster=redis.cluster,
        )
    else:
        primary = EmbeddedStore(
            layout.shard_path(
                Path(storage.path).resolve(),
                0 if shard is None else shard.index,
                1 if shard is None else shard.count,
            ),
            fsync=storage.fsync,
            fsync_interval=storage.fsync_interval,
            compact_after=storage.compact_after,
        )
    if storage.application_store == "kafka":
        return application_split(primary, config)
    return primary


def cluster_store(store: Store | None) -> RedisStore | SplitStore:
    """A clustered node's store: Redis, alone or under the application split."""
    from ferromq.storage.redis import RedisStore
    from ferromq.storage.split import SplitStore

    assert isinstance(store, RedisStore | SplitStore), "a clustered node's store is Redis"
    return store


def application_split(primary: Store, config: Config) -> Store:
    """APPLICATION clients' queues in Kafka, the rest in ``primary``."""
    # Imported here: aiokafka is the optional ``kafka`` extra (ferromq.preflight checks it).
    from ferromq.storage.kafka import KafkaStore
    from ferromq.storage.split import SplitStore

    kafka = config.kafka
    return SplitStore(
        primary,
        KafkaStore(
            kafka.bootstrap_servers,
            topic_prefix=kafka.topic_prefix,
            partitions=kafka.partitions,
            replication_factor=kafka.replication_factor,
            acks=kafka.acks,
            request_timeout=kafka.request_timeout,
            shared_partitions=kafka.shared_partitions,
        ),
    )


def application_groups(
    engine: Engine, store: Store, hub: IOHub, config: Config
) -> ApplicationGroups | None:
    """The consumers of shared groups the engine streams through the Kafka store."""
    if config.storage.application_store != "kafka":
        return None
    from ferromq.storage.kafka_shared import ApplicationGroups
    from ferromq.storage.split import SplitStore

    assert isinstance(store, SplitStore), "application_split made it"
    return ApplicationGroups(
        engine, store.application, hub.flush, hub.now, config.kafka.shared_prefetch
    )


class Broker:
    def __init__(self, config: Config, shard: ShardIdentity | None = None) -> None:
        self.config = config
        self.shard = shard
        self.engine = engine_from_config(config)
        if shard is not None:
            # Before the store restores: restore keeps the sessions this shard owns.
            self.engine.set_shards(shard.index, shard.count)
        self._shard_sys: ShardSys | None = None
        self._bus: BusPump | None = None
        self._listeners: Listeners | None = None
        self.bridges: Bridges | None = None  # with [[bridges]], once serving
        self.plugins: PluginHost | None = None  # with [[plugins]], once serving
        self._tasks: list[asyncio.Task[None]] = []
        self._hub: IOHub | None = None
        self._persister: Persister | None = None
        self._application_groups: ApplicationGroups | None = None
        self._stream_sink: StreamSink | None = None
        self._stream_take_scheduled = False
        self._admin: AdminServer | None = None
        self.admission = Admission(
            config,
            load_bans(config.bans),
            counters=None
            if shard is None or shard.counters_fd < 0
            # reset: a shard started again gives back what its predecessor held.
            else NodeCounters(shard.counters_fd, shard.index, reset=True),
        )
        self._provider = provider_from_config(config.auth)
        if self._provider is None and decides_connect_in_python(config):
            # Certificates (as user names, or for ACL rules) or admission decide; every
            # other CONNECT is accepted as the engine accepts it with authentication off.
            self._provider = ProviderChain([OpenProvider()], allow_anonymous=True)
        self._retiring: set[asyncio.Task[None]] = set()  # providers replaced by a reload
        self.auth: AuthGate | None = None
        self.cluster: ClusterNode | None = None
        """This node in its cluster (``[cluster]``); None when not clustered."""
        self._started_at = time.monotonic()
        self.serving = False
        self.refusal: StoreUnavailable | None = None
        """Why the broker stopped serving on its own: a frame from another shard or node
        that this build does not read (docs/architecture.md, "Frames")."""
        self._refused = asyncio.Event()
        self.waiting_for = "the start to finish"
        """The step of the start or the stop under way, for the line of a stop cut short
        (:mod:`ferromq.shutdown`)."""
        self.reload_hooks: list[ReloadHook] = [self._reload_log]
        self._client_log: ClientLog | None = None
        self.reloader: Reloader | None = None  # SIGHUP's, set by serve()
        self.acl_rules: AclRules | None = None
        self.use_acl(load_rules(config.acl), config.acl)
        self.engine.set_auto_subscribe(auto_subscriptions(config.auto_subscribe))
        self.engine.set_rewrite(rewrite_rules(config.rewrite))
        self.engine.set_validation(validation_rules(config.validation))
        for client_id in config.log.trace_clients:
            self.engine.trace(client_id, True)

    @property
    def store_health(self) -> StoreHealth | None:
        """The store writer's state; None without a store (``backend = "memory"``)."""
        return self._persister.health if self._persister is not None else None

    @property
    def persister(self) -> Persister | None:
        """The store writer; None without a store."""
        return self._persister

    @property
    def stream_sink(self) -> StreamSink | None:
        """The ``[stream]`` sink; None while the stream is off."""
        return self._stream_sink

    @property
    def stream_health(self) -> SinkHealth | None:
        return self._stream_sink.health if self._stream_sink is not None else None

    def ready(self) -> bool:
        """Every listener open, the store writer (if any) running and taking writes, and
        the stream's sink (if any) taking batches: for a readiness probe."""
        persister = self._persister
        store_ok = persister is None or (persister.running and persister.health.ok)
        stream_ok = self._stream_sink is None or self._stream_sink.health.ok
        return self.serving and store_ok and stream_ok and all(self.listeners_open().values())

    def listeners_open(self) -> dict[str, bool]:
        """Each MQTT listener (by name): whether it is open."""
        return {} if self._listeners is None else self._listeners.open_by_name()

    def uptime(self) -> int:
        """Whole seconds since the broker was made."""
        return int(time.monotonic() - self._started_at)

    @property
    def hub(self) -> IOHub:
        assert self._hub is not None, "broker not started"
        return self._hub

    def stats(self) -> dict[str, int]:
        """The engine's counters (``EngineStats.as_dict()``), the accept path's,
        admission's, the bridges' and the plugins', by the keys ``$SYS``, metrics, the
        admin API and a node's sum over its shards read."""
        accepted = {} if self._listeners is None else self._listeners.stats()
        bridges = bridge_stats([] if self.bridges is None else self.bridges.states())
        plugins = plugin_stats() if self.plugins is None else self.plugins.stats()
        return {
            **self.engine.stats().as_dict(),
            **accepted,
            **self.admission.stats(),
            **bridges,
            **plugins,
        }

    def figures(self) -> Figures:
        """What the $SYS tree says now."""
        return Figures(self.stats(), self.uptime(), self.store_health)

    async def start(self, restored: Callable[[], Awaitable[None]] | None = None) -> None:
        """Bind, restore, serve; ``restored`` is awaited between restoring and accepting
        (a shard waits there for its supervisor). Raises
        :class:`~ferromq.sockets.ListenError` (nothing created on disk yet) or
        :class:`StoreUnavailable`."""
        loop = asyncio.get_running_loop()
        config = self.config
        self._listeners = Listeners.bind(
            config.listeners,
            self.admission,
            config.limits.connect_timeout,
            reuse_port=self.shard is not None,
        )
        if config.admin.enabled:
            from ferromq.admin import AdminServer  # the optional ``admin`` extra
            from ferromq.admin.server import bind_shard_admin

            try:
                self._admin = (
                    AdminServer.bind(self, config.admin)
                    if self.shard is None
                    else bind_shard_admin(self, self.shard.index)
                )
            except (ListenError, ConfigError):
                self._listeners.close()
                raise
        self.reload_hooks += [self._listeners.reload_certificates, self._reload_admission]
        high_water = self.config.limits.write_buffer_high_water
        self._hub = IOHub(
            self.engine,
            loop,
            ReadArena(),
            self._on_event,
            high_water,
            SocketSet(self.engine, DEFAULT_ARENA_SIZE, high_water),
        )
        hub = self._hub
        self._client_log = ClientLog(hub.peer, self._listeners.listener_of)
        # Wall clock for stored expiry times, stream record times and the expiry of a
        # message crossing the bus: the system's offset between the wall clock and the
        # monotonic clock the loop reads, to the millisecond, not two readings of a
        # moment (the loop's time is the iteration's): every shard of a node maps engine
        # time to the same wall time, so a forwarded remaining expiry does not grow.
        now = hub.now()
        self.engine.set_wall_clock(now + round((time.time_ns() - time.monotonic_ns()) / 1e6), now)
        store = store_from_config(self.config, self.shard)
        if config.cluster.node_id:
            from ferromq.cluster.names import cluster_member  # a clustered node has the extras
            from ferromq.cluster.node import ClusterNode

            self.waiting_for = "the cluster to start"
            self.cluster = ClusterNode(
                config,
                self.engine,
                hub,
                cluster_store(store),
                member=cluster_member(config, self.shard),
                refuse=self.refuse,
            )
            await self.cluster.prepare()
        if store is not None:
            self.waiting_for = f"the store ({store.name}) to be read back"
            try:
                await self._restore(store)
            except BaseException:
                if self.cluster is not None:
                    await self.cluster.close()
                raise
            flush_interval_ms = self.config.storage.flush_interval_ms
            if self.config.storage.backend == "redis":
                flush_interval_ms = self.config.redis.flush_interval_ms
                self.engine.set_journal_flush_records(self.config.redis.batch_size)
                self.engine.set_store_per_client(True)
            self._persister = Persister(self.engine, store, hub.flush, flush_interval_ms / 1000)
            self._persister.start()
            self._application_groups = application_groups(self.engine, store, hub, self.config)
        if config.stream.enabled:
            self._stream_sink = make_sink(
                config, stream_node(config), self._stream_done, self.shard
            )
            self.waiting_for = "the stream's sink to start"
            await self._stream_sink.start()
        if self._provider is not None:
            self.auth = AuthGate(
                self.engine, hub, self._provider, self.admission, self._listeners.certificate
            )
        if self.cluster is not None:
            assert self.auth is not None, "a clustered node decides CONNECTs in Python"
            self.waiting_for = "the cluster to start"
            await self.cluster.start()
            self.auth.claim = self.cluster.claim
        if self.shard is not None:
            from ferromq.shard.bus_pump import BusPump  # the shard's side of the bus

            self._bus = BusPump(self.shard, self.engine, hub, loop, refuse=self.refuse)
            self._bus.start()
        if restored is not None:
            self.waiting_for = "the supervisor's serve"
            await restored()
        if self._bus is not None:
            self.waiting_for = "the other shards' subscriptions"
            await self._bus.synced()
        if config.plugins:
            self.waiting_for = "the plugins to start"
            self.plugins = PluginHost(config.plugins, self.engine, hub)
            await self.plugins.start()
            self.engine.set_client_events(self._client_events_wanted(config))
        hub.start()
        # In a node of several shards: route each connection to its client id's owner.
        self._listeners.serve(loop, hub, self.shard, config.limits.max_packet_size)
        if config.bridges:
            self.bridges = Bridges(
                config.bridges, hub, self.shard, self.cluster, config.cluster.lease
            )
            self._tasks.extend(self.bridges.start())
        self.serving = True
        if self._admin is not None:
            await self._admin.start()
        self._tasks.append(asyncio.create_task(self._tick_forever()))
        if self.config.sys.interval > 0:
            if self.shard is not None:
                from ferromq.shard.sys_figures import ShardSys  # a node's $SYS

                self._shard_sys = ShardSys(self.shard, self.figures)
                await self._shard_sys.start()
            self._tasks.append(asyncio.create_task(self._publish_sys_forever()))
        acl = FileWatch(
            lambda: [self.config.acl.file] if self.config.acl.file else [],
            lambda: self.config.acl.watch,
            self.reload_acl,
        )
        self._tasks.append(asyncio.create_task(acl.run()))

    def refuse(self, error: StoreUnavailable) -> None:
        """Stop serving: another shard or node sent a frame this build does not read
        (a newer build's). :func:`serve` raises ``error`` once stopped: exit 3, one line."""
        if self.refusal is None:
            self.refusal = error
            self._refused.set()

    async def until_refused(self) -> None:
        await self._refused.wait()

    async def _restore(self, store: Store) -> None:
        now = self.hub.now()
        previous = self._previous_layout()
        for journal in previous:
            data = await asyncio.to_thread(read_journal, journal)
            self._restored(f"{store.name} {journal}", self.engine.restore(data, now), len(data))
        data = await store.load()
        report = self.engine.restore(data, now)
        store.loaded(report.valid_len)
        self._restored(store.name, report, len(data))
        if previous:
            # Our own journal holds everything taken over before the old one goes.
            await store.compact(self.engine.snapshot())
            if self.shard is None:  # the node's only shard: nobody else to wait for
                layout.commit(Path(self.config.storage.path).resolve(), 1)

    def _previous_layout(self) -> list[Path]:
        """The journals of the store's previous layout this process takes over
        (:mod:`ferromq.storage.layout`): only with the embedded store."""
        if self.config.storage.backend != "embedded":
            return []
        count = 1 if self.shard is None else self.shard.count
        return layout.previous_layout(Path(self.config.storage.path).resolve(), count)

    def _restored(self, store: str, report: RestoreReport, size: int) -> None:
        for damaged in report.damaged:
            log_event(
                logger,
                logging.ERROR,
                "store records damaged, skipped; intact records after them kept",
                store=store,
                offset=damaged.offset,
                bytes=damaged.length,
                error=damaged.error,
            )
        if report.error is not None:
            log_event(
                logger,
                logging.WARNING,
                "store tail unreadable, cut off",
                store=store,
                error=report.error,
                kept_bytes=report.valid_len,
                dropped_bytes=size - report.valid_len,
            )
        log_event(
            logger,
            logging.INFO,
            "store restored",
            store=store,
            sessions=report.sessions,
            messages=report.messages,
            retained=report.retained,
        )

    async def stop(self) -> None:
        """Stop gracefully; ``waiting_for`` names each step that waits."""
        self.waiting_for = "the admin listener to close"
        if self._admin is not None:
            await self._admin.close()
        if self._listeners is not None:
            self._listeners.close()
        for task in self._tasks:
            task.cancel()
        if self._shard_sys is not None:
            self.waiting_for = "the shard's $SYS socket to close"
            await self._shard_sys.close()
        hub = self.hub
        self.engine.shutdown(hub.now())
        hub.flush()
        hub.close_all()
        if self.plugins is not None:
            self.waiting_for = "the plugins to close"
            await self.plugins.close()
        if self._bus is not None:
            self._bus.close()
        if self._application_groups is not None:
            self.waiting_for = "the Kafka consumers of shared groups to close"
            await self._application_groups.close()
        if self._stream_sink is not None:
            self._take_stream()
            self.waiting_for = "the stream's sink to take the last records"
            await self._stream_sink.stop()
        if self._persister is not None:
            self.waiting_for = f"the store ({self._persister.store.name}) to take the last writes"
            await self._persister.stop()
        if self.cluster is not None:
            self.waiting_for = "the cluster to close"
            await self.cluster.close()
        self.waiting_for = "the authentication providers to close"
        await asyncio.gather(*self._retiring)
        if self._provider is not None:
            await self._provider.aclose()
        log_event(logger, logging.INFO, "stopped", **self.stats())
        self.waiting_for = "the process to exit (tasks and threads still running)"

    def use_provider(self, provider: ProviderChain) -> None:
        """Decide every later CONNECT with ``provider`` (a SIGHUP reload); the chain it
        replaces is closed (its HTTP sessions) once the answers it was giving are out."""
        assert self.auth is not None and self._provider is not None
        retired, self._provider = self._provider, provider
        self.auth.use_provider(provider)
        task = asyncio.ensure_future(self._retire(retired, self.auth))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    def use_acl(self, rules: AclRules | None, config: AclConfig) -> None:
        """Check every later message against ``rules`` and ``config.default``; the
        subscriptions they deny stop at once (removed from the index, each logged:
        MQTT has no server-side UNSUBSCRIBE to tell the client)."""
        revoked = self.engine.set_acl(
            rules, config.default == "allow", config.wildcards == "withhold"
        )
        self.acl_rules = rules
        for client_id, subscription in revoked[:_REVOKED_LOGGED]:
            log_event(
                logger,
                logging.INFO,
                "subscription revoked by the ACL",
                client_id=client_id,
                filter=subscription,
            )
        if rules is not None or config.default != "allow":
            log_event(
                logger,
                logging.INFO,
                "acl applied",
                file=config.file,
                rules=len(rules) if rules is not None else 0,
                default=config.default,
                revoked=len(revoked),
            )

    def reload_acl(self) -> str | None:
        """Read the running configuration's rules file again (it changed, or the admin
        API asks); a file that does not parse is logged, the rules in force stay, and
        its error is returned."""
        try:
            rules = load_rules(self.config.acl)
        except ConfigError as exc:
            log_event(logger, logging.ERROR, "acl reload refused, rules kept", error=str(exc))
            return str(exc)
        self.use_acl(rules, self.config.acl)
        self.hub.flush()
        return None

    def apply_bans(self) -> None:
        """Read the bans file again now (the admin API changed it), as SIGHUP does."""
        self._reload_admission(self.config, self.config)

    def trace(self, client_id: str, enabled: bool) -> None:
        """Log every packet of ``client_id`` (at info, logger ``ferromq.trace``) from now
        on, on its live connection and its later ones, or stop. For the admin API and
        ``[log] trace_clients``; other clients' packets are not touched."""
        self.engine.trace(client_id, enabled)
        log_event(logger, logging.INFO, "trace on" if enabled else "trace off", client_id=client_id)

    def traced(self) -> list[str]:
        """The client ids traced now, sorted."""
        return self.engine.traced()

    def _reload_log(self, running: Config, applied: Config) -> None:
        """A reload hook: client events follow the new log level; clients added to
        ``[log] trace_clients`` are traced, those removed from it no longer."""
        self.engine.set_client_events(self._client_events_wanted(applied))
        before, after = set(running.log.trace_clients), set(applied.log.trace_clients)
        for client_id in sorted(before - after):
            self.trace(client_id, False)
        for client_id in sorted(after - before):
            self.trace(client_id, True)

    def _client_events_wanted(self, config: Config) -> bool:
        """The engine reports client events while the log shows them or a plugin sees them."""
        plugins_want = self.plugins is not None and self.plugins.wants_events
        return client_events_wanted(config.log.level) or plugins_want

    def _reload_admission(self, running: Config, applied: Config) -> None:
        """A reload hook: the applied limits and bans (the bans file read again) decide
        the next connections; connected clients a ban now matches are closed."""
        try:
            bans = load_bans(applied.bans)
        except ConfigError as exc:  # the file changed since the reload's preflight
            log_event(logger, logging.ERROR, "bans not reloaded, old ones kept", error=str(exc))
            return
        banned = self.admission.use(applied, bans)
        if banned and self.auth is not None:
            self.auth.disconnect(banned, ADMINISTRATIVE_ACTION, "banned")

    @staticmethod
    async def _retire(provider: ProviderChain, gate: AuthGate) -> None:
        await gate.settled()
        await provider.aclose()

    def _on_event(self, event: EngineEvent) -> None:
        match event:
            case Persist():
                if self._persister is not None:
                    self._persister.kick()
            case ApplicationMember(client=client, share_filter=share_filter, online=online):
                # Only with the Kafka application store, whose groups the engine streams.
                assert self._application_groups is not None
                self._application_groups.on_member(client, share_filter, online)
            case ApplicationDone():
                assert self._application_groups is not None
                self._application_groups.on_done()
            case StreamReady():
                # Once per batch: taken on the next loop turn (Kafka: after its
                # linger), so the batch gathers what the reads until then add.
                if not self._stream_take_scheduled:
                    self._stream_take_scheduled = True
                    gather = gather_seconds(self.config.stream)
                    loop = asyncio.get_running_loop()
                    if gather:
                        loop.call_later(gather, self._take_stream)
                    else:
                        loop.call_soon(self._take_stream)
            case PluginReady():
                assert self.plugins is not None  # only with [[plugins]]
                self.plugins.ready()
            case PayloadInvalid():
                # At most once a second per rule (engine/validation.rs).
                log_event(
                    logger,
                    logging.WARNING,
                    "payload failed validation",
                    client=event.client_id,
                    topic=event.topic,
                    rule=f"validation.rules[{event.rule}]",
                    filter=event.filter,
                    problem=event.problem,
                    action=event.action,
                    unlogged=event.unlogged or None,
                )
            case Rejected():
                # Once per refused or aborted connection, never per message.
                peer = self.hub.peer(event.conn)
                log_event(
                    logger,
                    logging.WARNING,
                    "connection rejected",
                    conn=event.conn,
                    peer=peer_text(peer) if peer else None,
                    reason=f"0x{event.reason_code:02X} {event.reason_name}",
                    detail=event.detail,
                )
            case Authenticate() | Auth():
                # Only with [auth] providers; without them the engine accepts every
                # CONNECT itself.
                if self.auth is not None:
                    self.auth.on_event(event)
            case (
                ClientConnected()
                | ClientDisconnected()
                | Subscribed()
                | Unsubscribed()
                | PacketTrace()
            ):
                # Only while logging at info, for traced clients, or for plugins.
                assert self._client_log is not None
                self._client_log.on_event(event)
                if self.plugins is not None and not isinstance(event, PacketTrace):
                    self.plugins.on_client_event(event)
            case Close() | ResumeReading() | Wake():
                pass  # IOHub acts on these itself
            case _:
                # mypy: an event class added to the binding but not handled here.
                _unhandled(event)

    def _take_stream(self) -> None:
        """Hand the stream's records since the last batch to the sink."""
        self._stream_take_scheduled = False
        batch = self.engine.take_stream()
        if batch is not None and self._stream_sink is not None:
            self._stream_sink.submit(batch)

    def _stream_done(self, number: int) -> None:
        """The sink has batch ``number``: acknowledgements waiting for it go out."""
        self.engine.stream_done(number)
        self.hub.flush()

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(TICK_SECONDS)
            self.engine.tick(self.hub.now())
            self.hub.flush()

    async def _publish_sys_forever(self) -> None:
        while True:
            shard_sys = self._shard_sys
            messages = (
                sys_messages(self.figures()) if shard_sys is None else await shard_sys.messages()
            )
            if self.cluster is not None:
                from ferromq.cluster import report  # a clustered node has redis

                messages += report.sys_messages(await report.cluster_report(self.cluster), PREFIX)
            now = self.hub.now()
            for topic, payload in messages:
                self.engine.publish(topic, payload, 0, True, now)
            self.hub.flush()
            await asyncio.sleep(self.config.sys.interval)


def _unhandled(event: NoReturn) -> NoReturn:
    raise AssertionError(f"unhandled engine event {event!r}")


async def serve(
    config: Config,
    shutdown: Shutdown,
    reload_config: Callable[[], Config] | None = None,
    serving: Callable[[], None] | None = None,
    shard: ShardIdentity | None = None,
    restored: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Run a broker (or, with ``shard``, one shard of a node) until ``shutdown`` is
    requested (it names ``Broker.waiting_for`` if the stop is cut short); on SIGHUP,
    reload from ``reload_config``; ``restored`` is awaited before accepting and ``serving`` called
    once every listener accepts (the pid file is written then). Under systemd
    (``NOTIFY_SOCKET``), says READY=1 after that and STOPPING=1 when the stop is
    requested (:mod:`ferromq.sd_notify`)."""
    broker = Broker(config, shard)
    shutdown.waiting_for = lambda: broker.waiting_for
    if reload_config is not None:
        broker.reloader = Reloader(broker, reload_config)
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, broker.reloader.reload)
    await broker.start(restored)
    try:
        if serving is not None:
            serving()
        sd_notify.notify(sd_notify.READY)  # listening, store open: ready for systemd
        stopped = asyncio.ensure_future(shutdown.requested.wait())
        refused = asyncio.ensure_future(broker.until_refused())
        await asyncio.wait((stopped, refused), return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        refused.cancel()
    finally:
        sd_notify.notify(sd_notify.STOPPING)
        await broker.stop()
    if broker.refusal is not None:
        raise broker.refusal
