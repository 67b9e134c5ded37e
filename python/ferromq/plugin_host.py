"""Runs the ``[[plugins]]`` (:mod:`ferromq.plugins`) of a broker: finds each plugin's class,
registers its filters with the engine, hands it the engine's batches on a thread of its
own, brings its verdicts back and supervises it.

The engine raises ``PluginReady`` once per batch; the host takes the batch on the next
loop turn (:meth:`PluginHost.take`), splits it by plugin and queues each part for that
plugin's thread: one call per batch, never one per message; what arrives while the
plugin is busy with a batch goes as the next one. An intercepting plugin's
verdicts go back to the engine in one call (``Engine.decide``). Client events (which the
engine reports per connection, not per message) are gathered per loop turn the same way.

A plugin has *failed* when it raises, returns anything but one verdict per message, or a
call takes longer than its ``timeout``: the failure is logged and counted, the batch's
intercepted messages get ``on_failure`` (``pass``: routed as they are, or ``drop``), and
the plugin is restarted, a new instance on a new thread, after a backoff (1 s, doubling
to 60 s, back to 1 s after a minute without failure). While it is down its intercepted
messages get ``on_failure`` at once and its observed ones are skipped (counted). A hung
call's thread is abandoned: it is a daemon thread, so it cannot keep the process alive.
A plugin never takes the broker down.

On a node of shards each shard runs its own instance of every plugin and sees the
messages its own clients publish; a plugin keeps per-shard state (docs/plugins.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import queue
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Final, TypeVar

from ferromq._core import (
    ClientConnected,
    ClientDisconnected,
    Engine,
    PluginFilters,
    PluginMessage,
    Subscribed,
    Unsubscribed,
)
from ferromq._protocol import IOHub
from ferromq.config import ConfigError, PluginConfig, require
from ferromq.log import log_event
from ferromq.plugins import (
    ClientEvent,
    Drop,
    EventKind,
    Pass,
    Plugin,
    Reject,
    Rewrite,
    Verdict,
    topic_name_problem,
)

__all__ = ["ENTRY_POINT_GROUP", "PluginHost", "check_plugins", "plugin_class", "plugin_stats"]

logger = logging.getLogger("ferromq.plugins")

ENTRY_POINT_GROUP: Final = "ferromq.plugins"
_BACKOFF_FIRST: Final = 1.0
_BACKOFF_MAX: Final = 60.0
_HEALTHY_SECONDS: Final = 60.0  # a plugin this long without failure starts again at 1 s
_CLOSE_SECONDS: Final = 2.0
_EVENT_KINDS: Final[tuple[EventKind, ...]] = (
    "connected",
    "disconnected",
    "subscribed",
    "unsubscribed",
)

_EngineClientEvent = ClientConnected | ClientDisconnected | Subscribed | Unsubscribed
_Result = TypeVar("_Result")
_VerdictTuple = tuple[int, str, str | None, bytes | None, int]


def plugin_class(config: PluginConfig, where: str) -> type[Plugin]:
    """The class ``config.name`` names: an entry point of the ``ferromq.plugins`` group,
    or ``module:Class``. Raises :class:`ConfigError` naming ``where``."""
    require(config, where, "name")
    name = config.name
    try:
        if ":" in name:
            module, _, attribute = name.partition(":")
            found: object = getattr(importlib.import_module(module), attribute)
        else:
            points = entry_points(group=ENTRY_POINT_GROUP, name=name)
            if not points:
                raise ConfigError(
                    f"{where}.name: no plugin {name!r}: not an entry point of the "
                    f"{ENTRY_POINT_GROUP!r} group (installed?), nor module:Class"
                )
            found = next(iter(points)).load()
    except ConfigError:
        raise
    except Exception as exc:  # an import error, a missing attribute, the plugin's own
        raise ConfigError(f"{where}.name: {name!r} does not load: {exc}") from None
    if not (isinstance(found, type) and issubclass(found, Plugin)):
        raise ConfigError(f"{where}.name: {name!r} is not a ferromq.plugins.Plugin subclass")
    _check_declarations(found, where)
    return found


def _check_declarations(cls: type[Plugin], where: str) -> None:
    unknown = [kind for kind in cls.events if kind not in _EVENT_KINDS]
    if unknown:
        kinds = ", ".join(_EVENT_KINDS)
        raise ConfigError(f"{where}: {cls.__name__}.events: {unknown[0]!r} is not one of {kinds}")
    try:
        PluginFilters(list(cls.filters), cls.intercepts)
    except ValueError as exc:
        raise ConfigError(f"{where}: {cls.__name__}.filters: {exc}") from None


def check_plugins(configs: Sequence[PluginConfig]) -> None:
    """Raise :class:`ConfigError` for the first ``[[plugins]]`` entry whose class does
    not load or declares what the engine cannot match."""
    for index, config in enumerate(configs):
        plugin_class(config, f"plugins[{index}]")


class _Worker:
    """One daemon thread running a plugin's calls in order; each call's result comes
    back as an asyncio future on the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, name: str) -> None:
        self._loop = loop
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], asyncio.Future[Any]] | None] = (
            queue.SimpleQueue()
        )
        threading.Thread(target=self._run, name=f"plugin-{name}", daemon=True).start()

    def call(self, function: Callable[[], _Result]) -> asyncio.Future[_Result]:
        future: asyncio.Future[_Result] = self._loop.create_future()
        self._calls.put((function, future))
        return future

    def stop(self) -> None:
        self._calls.put(None)

    def _run(self) -> None:
        while (item := self._calls.get()) is not None:
            function, future = item
            try:
                result = function()
            except BaseException as exc:  # the plugin's: reported on the loop
                self._settle(future, None, exc)
            else:
                self._settle(future, result, None)

    def _settle(
        self, future: asyncio.Future[Any], result: object, exc: BaseException | None
    ) -> None:
        def settle() -> None:
            if future.done():  # timed out and given up on
                return
            if exc is not None:
                future.set_exception(exc)
            else:
                future.set_result(result)

        with contextlib.suppress(RuntimeError):  # the loop closed while a hung call ran
            self._loop.call_soon_threadsafe(settle)


@dataclass
class _Access:
    """What one plugin may do with the broker (:class:`ferromq.plugins.BrokerAccess`)."""

    options: Mapping[str, object]
    logger: logging.Logger
    _publish: Callable[[str, bytes, int, bool], None]

    def publish(self, topic: str, payload: bytes, qos: int = 0, retain: bool = False) -> None:
        problem = topic_name_problem(topic)
        if problem:
            raise ValueError(f"publish topic {topic!r}: {problem}")
        if qos not in (0, 1, 2):
            raise ValueError(f"publish qos {qos} is not 0, 1 or 2")
        self._publish(topic, bytes(payload), qos, retain)


@dataclass
class _Job:
    """A batch for one plugin: messages (with the ids of the intercepted ones) or events."""

    messages: list[PluginMessage] = field(default_factory=list)
    events: list[ClientEvent] = field(default_factory=list)


@dataclass
class _Running:
    """One configured plugin and its supervision state."""

    index: int
    config: PluginConfig
    cls: type[Plugin]
    instance: Plugin | None = None
    worker: _Worker | None = None
    jobs: deque[_Job] = field(default_factory=deque)
    #: Set when ``jobs`` has something for the plugin's serving task.
    waiting: asyncio.Event = field(default_factory=asyncio.Event)
    backoff: float = _BACKOFF_FIRST
    started_at: float = 0.0
    batches: int = 0
    messages: int = 0
    failures: int = 0
    restarts: int = 0
    skipped: int = 0
    last_error: str | None = None

    @property
    def name(self) -> str:
        return self.config.name


class PluginHost:
    """The broker's plugins: started before the broker serves, stopped after it."""

    def __init__(self, configs: Sequence[PluginConfig], engine: Engine, hub: IOHub) -> None:
        self._engine = engine
        self._hub = hub
        self._plugins = [
            _Running(index, config, plugin_class(config, f"plugins[{index}]"))
            for index, config in enumerate(configs)
        ]
        self._events: dict[int, list[ClientEvent]] = {}
        self._take_scheduled = False
        self._events_scheduled = False
        self._publishes: list[tuple[str, bytes, int, bool]] = []
        self._publishes_lock = threading.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._loop = asyncio.get_running_loop()

    @property
    def wants_events(self) -> bool:
        """Whether some plugin sees client events (the engine then reports them)."""
        return any(p.cls.events for p in self._plugins)

    async def start(self) -> None:
        """Start every plugin (an instance that fails to start is retried as any
        failure) and register their filters with the engine."""
        self._engine.set_plugins(
            [PluginFilters(list(p.cls.filters), p.cls.intercepts) for p in self._plugins],
            self._hub.now(),
        )
        for plugin in self._plugins:
            await self._start_instance(plugin)
            self._tasks.append(asyncio.create_task(self._serve(plugin)))

    async def close(self) -> None:
        """Stop serving and close each instance (each ``close`` given a moment)."""
        for task in self._tasks:
            task.cancel()
        for plugin in self._plugins:
            await self._stop_instance(plugin)

    def stats(self) -> dict[str, int]:
        """The plugins' figures for the metrics (summed over plugins)."""
        return plugin_stats(self._plugins)

    def describe(self) -> list[dict[str, object]]:
        """Each plugin as the admin API shows it (``GET /plugins``)."""
        return [
            {
                "name": p.name,
                "filters": list(p.cls.filters),
                "events": list(p.cls.events),
                "intercepts": p.cls.intercepts,
                "running": p.instance is not None,
                "batches": p.batches,
                "messages": p.messages,
                "failures": p.failures,
                "restarts": p.restarts,
                "skipped": p.skipped,
                "last_error": p.last_error,
            }
            for p in self._plugins
        ]

    def ready(self) -> None:
        """The engine's ``PluginReady``: take its batch on the next loop turn, so the
        batch gathers what this turn's reads add."""
        if not self._take_scheduled:
            self._take_scheduled = True
            self._loop.call_soon(self.take)

    def take(self) -> None:
        """Split the engine's batch by plugin and queue each part."""
        self._take_scheduled = False
        parts: dict[int, list[PluginMessage]] = {}
        for message in self._engine.take_plugin_batch():
            parts.setdefault(message.plugin, []).append(message)
        for index, messages in parts.items():
            self._queue(self._plugins[index], _Job(messages=messages))

    def on_client_event(self, event: _EngineClientEvent) -> None:
        """A client event from the engine: gathered for the plugins that want its kind."""
        client_event = _client_event(event)
        wanted = [p.index for p in self._plugins if client_event.kind in p.cls.events]
        for index in wanted:
            self._events.setdefault(index, []).append(client_event)
        if wanted and not self._events_scheduled:
            self._events_scheduled = True
            self._loop.call_soon(self._queue_events)

    def _queue_events(self) -> None:
        self._events_scheduled = False
        events, self._events = self._events, {}
        for index, batch in events.items():
            self._queue(self._plugins[index], _Job(events=batch))

    def _queue(self, plugin: _Running, job: _Job) -> None:
        if plugin.instance is None:
            self._skip(plugin, job)
        else:
            plugin.jobs.append(job)
            plugin.waiting.set()

    def _skip(self, plugin: _Running, job: _Job) -> None:
        """A job for a plugin that is down: intercepted messages get ``on_failure``."""
        plugin.skipped += len(job.messages) + len(job.events)
        self._decide(plugin, job, None)

    async def _serve(self, plugin: _Running) -> None:
        while True:
            await plugin.waiting.wait()
            plugin.waiting.clear()
            while plugin.jobs:
                await self._serve_one(plugin, _next_job(plugin.jobs))

    async def _serve_one(self, plugin: _Running, job: _Job) -> None:
        if plugin.instance is None or plugin.worker is None:
            self._skip(plugin, job)
            return
        verdicts = await self._run(plugin, job)
        self._decide(plugin, job, verdicts)

    async def _run(self, plugin: _Running, job: _Job) -> list[Verdict | None] | None:
        """The plugin's verdicts on ``job`` (None: it failed; it is restarting)."""
        instance, worker = plugin.instance, plugin.worker
        assert instance is not None and worker is not None
        if job.events:
            call: Callable[[], object] = lambda: instance.on_events(job.events)  # noqa: E731
        else:
            call = lambda: instance.on_messages(job.messages)  # noqa: E731
        try:
            result = await asyncio.wait_for(worker.call(call), plugin.config.timeout)
        except TimeoutError:
            self._failed(plugin, f"a batch took longer than {plugin.config.timeout} s")
            return None
        except Exception as exc:
            self._failed(plugin, f"{type(exc).__name__}: {exc}", exc)
            return None
        plugin.batches += 1
        plugin.messages += len(job.messages)
        if not (job.messages and plugin.cls.intercepts) or result is None:
            return [None] * len(job.messages)
        if not isinstance(result, Sequence) or len(result) != len(job.messages):
            self._failed(plugin, f"on_messages returned {_shown(result)}, not one verdict each")
            return None
        if not all(v is None or isinstance(v, Pass | Drop | Reject | Rewrite) for v in result):
            self._failed(plugin, "on_messages returned something that is not a verdict")
            return None
        return list(result)

    def _decide(
        self, plugin: _Running, job: _Job, verdicts: Sequence[Verdict | None] | None
    ) -> None:
        """Bring the verdicts on ``job``'s intercepted messages to the engine (None:
        the plugin failed, each gets ``on_failure``)."""
        if verdicts is None:
            failed: Verdict = Drop() if plugin.config.on_failure == "drop" else Pass()
            verdicts = [failed] * len(job.messages)
        decided = [
            _verdict_tuple(message.id, verdict)
            for message, verdict in zip(job.messages, verdicts, strict=True)
            if message.intercepted
        ]
        if decided:
            self._engine.decide(decided, self._hub.now())
            self._hub.schedule_flush()

    def _failed(self, plugin: _Running, why: str, exc: BaseException | None = None) -> None:
        plugin.failures += 1
        plugin.last_error = why
        log_event(
            logger,
            logging.ERROR,
            "plugin failed, restarting",
            plugin=plugin.name,
            error=why,
            at=_raised_at(exc),
            retry_in=f"{plugin.backoff:g}s",
        )
        if plugin.worker is not None:
            plugin.worker.stop()  # a hung call keeps its thread; the next call gets a new one
        instance, plugin.instance, plugin.worker = plugin.instance, None, None
        self._tasks.append(asyncio.create_task(self._restart(plugin, instance)))

    async def _restart(self, plugin: _Running, failed: Plugin | None) -> None:
        if failed is not None:
            closing = threading.Thread(target=_close_quietly, args=(failed,), daemon=True)
            closing.start()
        await asyncio.sleep(plugin.backoff)
        plugin.backoff = min(plugin.backoff * 2, _BACKOFF_MAX)
        plugin.restarts += 1
        await self._start_instance(plugin)

    async def _start_instance(self, plugin: _Running) -> None:
        if time.monotonic() - plugin.started_at >= _HEALTHY_SECONDS:
            plugin.backoff = _BACKOFF_FIRST
        worker = _Worker(self._loop, plugin.name)
        access = _Access(
            dict(plugin.config.options),
            logging.getLogger(f"ferromq.plugins.{plugin.name}"),
            self._publish,
        )
        plugin.worker = worker
        try:
            instance = await asyncio.wait_for(
                worker.call(lambda: plugin.cls(access)), plugin.config.timeout
            )
        except Exception as exc:
            why = "it did not start in time" if isinstance(exc, TimeoutError) else str(exc)
            self._failed(plugin, f"{type(exc).__name__}: {why}", exc)
            return
        plugin.instance = instance
        plugin.started_at = time.monotonic()
        log_event(logger, logging.INFO, "plugin started", plugin=plugin.name)

    async def _stop_instance(self, plugin: _Running) -> None:
        instance, worker = plugin.instance, plugin.worker
        plugin.instance = plugin.worker = None
        if instance is None or worker is None:
            return
        try:
            await asyncio.wait_for(worker.call(instance.close), _CLOSE_SECONDS)
        except Exception as exc:
            log_event(
                logger, logging.WARNING, "plugin did not close", plugin=plugin.name, error=exc
            )
        worker.stop()

    def _publish(self, topic: str, payload: bytes, qos: int, retain: bool) -> None:
        """From any thread: routed on the loop, in the order the plugin published."""
        with self._publishes_lock:
            first = not self._publishes
            self._publishes.append((topic, payload, qos, retain))
        if first:
            self._loop.call_soon_threadsafe(self._route_publishes)

    def _route_publishes(self) -> None:
        with self._publishes_lock:
            publishes, self._publishes = self._publishes, []
        now = self._hub.now()
        for topic, payload, qos, retain in publishes:
            self._engine.publish(topic, payload, qos, retain, now)
        self._hub.schedule_flush()


def plugin_stats(plugins: Sequence[_Running] = ()) -> dict[str, int]:
    """The figures of ``plugins`` for the metrics and ``$SYS`` (zeros without plugins)."""
    return {
        "plugins_running": sum(p.instance is not None for p in plugins),
        "plugin_batches": sum(p.batches for p in plugins),
        "plugin_messages": sum(p.messages for p in plugins),
        "plugin_failures": sum(p.failures for p in plugins),
        "plugin_restarts": sum(p.restarts for p in plugins),
        "plugin_skipped": sum(p.skipped for p in plugins),
    }


def _raised_at(exc: BaseException | None) -> str | None:
    """``file:line`` where ``exc`` was raised (the plugin's code), for the log line."""
    frames = traceback.extract_tb(exc.__traceback__) if exc is not None else []
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else None


def _close_quietly(instance: Plugin) -> None:
    try:
        instance.close()
    except Exception:  # the instance failed already; its close is best effort
        logger.debug("a failed plugin's close raised", exc_info=True)


def _next_job(jobs: deque[_Job]) -> _Job:
    """The first job, with the jobs of the same kind right behind it merged in: what
    arrived while the plugin was busy goes as one batch (order kept)."""
    job = jobs.popleft()
    while jobs and bool(jobs[0].messages) == bool(job.messages):
        following = jobs.popleft()
        job.messages += following.messages
        job.events += following.events
    return job


def _verdict_tuple(message_id: int, verdict: Verdict | None) -> _VerdictTuple:
    match verdict:
        case None | Pass():
            return (message_id, "pass", None, None, 0)
        case Drop():
            return (message_id, "drop", None, None, 0)
        case Reject(reason_code=code):
            return (message_id, "reject", None, None, code)
        case Rewrite(topic=topic, payload=payload):
            return (message_id, "rewrite", topic, payload, 0)


def _client_event(event: _EngineClientEvent) -> ClientEvent:
    match event:
        case ClientConnected():
            return ClientEvent("connected", event.client_id, username=event.username)
        case ClientDisconnected():
            return ClientEvent("disconnected", event.client_id, reason=event.reason)
        case Subscribed():
            filters = tuple(f for f, _, _ in event.filters)
            granted = tuple(code for _, _, code in event.filters)
            return ClientEvent("subscribed", event.client_id, filters=filters, granted=granted)
        case Unsubscribed():
            return ClientEvent("unsubscribed", event.client_id, filters=tuple(event.filters))


def _shown(result: object) -> str:
    if isinstance(result, Sequence):
        return f"{len(result)} items"
    return type(result).__name__
