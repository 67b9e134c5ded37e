"""SIGHUP: apply what can change without dropping a connection, keep the rest.

A reload reads the configuration again exactly as start-up did (file, ``FERROMQ_*``
environment, :func:`ferromq.preflight.check`) and builds everything it will swap in
before swapping anything, so it applies whole or not at all:

- invalid (a bad key, a users file that does not parse, ...): one ERROR line naming the
  key, and the running configuration stays;
- ``[log]``: the log handler is replaced (level, format, destination — a file or
  syslog socket that cannot be opened refuses the reload), client events follow the
  level, and ``trace_clients`` added are traced, removed ones no longer
  (``Broker._reload_log``);
- ``[auth]`` (while providers are configured): the provider chain is built again —
  users file and JWT key file read again, JWK set and HTTP answers no longer cached,
  a changed ``providers`` list applied — and decides every later CONNECT; connected
  clients stay, exchanges under way finish with the chain that began them, which is
  then closed;
- ``[acl]``: the rules file is read again and its rules, with ``default``, apply at
  once (:meth:`ferromq.broker.Broker.use_acl`): subscriptions they deny stop
  delivering, the next PUBLISH is checked against them;
- ``[auto_subscribe]``: the filters apply from the next CONNECT
  (:mod:`ferromq.auto_subscribe`);
- ``[rewrite]``: the rules apply to the next packet (:mod:`ferromq.rewrite`);
- ``[validation]``: the rules and their schema files, read again, apply to the next
  PUBLISH (:mod:`ferromq.validation`);
- ``[bans]`` (the bans file read again) and the ``[limits]`` admission decides with
  (:data:`ADMISSION_LIMITS`): the next connections are decided with them, and connected
  clients a new ban matches are closed (``Broker._reload_admission``) — unless they
  need CONNECTs decided in Python while the engine, started without, accepts them
  itself; then they need a restart;
- a TLS listener's certificate files and TLS settings (:func:`ferromq.tls.reloaded_listeners`,
  when nothing else about the listener changed);
- ``Broker.reload_hooks``: each called with the old and the new configuration once the
  above is applied; the TLS listeners re-read their certificate files there
  (:meth:`ferromq.listener.Listeners.reload_certificates`);
- anything else that changed (listeners, limits, storage, turning authentication on or
  off — from no provider to some or back, which the engine fixes at start) is logged
  as needing a restart, with its keys, and keeps its running value.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ferromq.acl import load_rules
from ferromq.admission import checks_connect
from ferromq.auth import provider_from_config
from ferromq.auto_subscribe import auto_subscriptions
from ferromq.config import Config, ConfigError, LimitsConfig, config_as_dict
from ferromq.log import install_handler, log_event, log_handler
from ferromq.rewrite import rewrite_rules
from ferromq.tls import reloaded_listeners
from ferromq.validation import validation_rules

if TYPE_CHECKING:
    from ferromq.broker import Broker

__all__ = ["ReloadHook", "Reloader"]

logger = logging.getLogger("ferromq.reload")

ReloadHook = Callable[[Config, Config], None]
"""Called on reload with the running configuration and the one being applied."""

ADMISSION_LIMITS = (
    "max_connections",
    "max_connections_per_address",
    "max_connections_per_user",
    "max_connect_rate",
    "flapping_max_connects",
    "flapping_window",
    "flapping_ban",
)
"""The ``[limits]`` keys only :mod:`ferromq.admission` reads, so a reload applies them."""


def _admission_limits(running: LimitsConfig, new: LimitsConfig) -> LimitsConfig:
    return replace(running, **{key: getattr(new, key) for key in ADMISSION_LIMITS})


def _flat(table: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, object]]:
    for key, value in table.items():
        if isinstance(value, Mapping):
            yield from _flat(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def changed_keys(old: Config, new: Config) -> list[str]:
    """Setting paths (``limits.max_inflight``, ``listeners``) whose values differ."""
    before, after = dict(_flat(config_as_dict(old))), dict(_flat(config_as_dict(new)))
    return sorted(key for key in before if before[key] != after[key])


class Reloader:
    """Reloads ``broker``'s configuration from ``load`` (what start-up ran) on demand."""

    def __init__(self, broker: Broker, load: Callable[[], Config]) -> None:
        self._broker = broker
        self._load = load

    def reload(self) -> None:
        broker = self._broker
        if not broker.serving:
            log_event(logger, logging.WARNING, "reload ignored: the broker is still starting")
            return
        running = broker.config
        try:
            new = self._load()
            # With authentication on, the provider files are read again even when unchanged.
            provider = provider_from_config(new.auth) if broker.auth is not None else None
            rules = load_rules(new.acl)  # the rules file is read again even when unchanged
            subscriptions = auto_subscriptions(new.auto_subscribe)
            rewrites = rewrite_rules(new.rewrite)
            validations = validation_rules(new.validation)  # schema files read again
            handler = log_handler(new.log)
        except ConfigError as exc:
            log_event(
                logger,
                logging.ERROR,
                "reload refused, running configuration kept",
                error=str(exc),
            )
            return
        changed = changed_keys(running, new)
        auth_switched = bool(running.auth.chain()) != bool(new.auth.chain())
        admission = broker.auth is not None or not checks_connect(new)
        applied = replace(
            running,
            log=new.log,
            auth=running.auth if auth_switched else new.auth,
            acl=new.acl,
            auto_subscribe=new.auto_subscribe,
            rewrite=new.rewrite,
            validation=new.validation,
            listeners=reloaded_listeners(running.listeners, new.listeners),
            bans=new.bans if admission else running.bans,
            limits=_admission_limits(running.limits, new.limits) if admission else running.limits,
        )
        install_handler(handler, applied.log.level)
        if broker.auth is not None and provider is not None and not auth_switched:
            broker.use_provider(provider)
        broker.use_acl(rules, applied.acl)
        broker.engine.set_auto_subscribe(subscriptions)
        broker.engine.set_rewrite(rewrites)
        broker.engine.set_validation(validations)
        broker.hub.flush()
        for hook in broker.reload_hooks:
            hook(running, applied)
        broker.config = applied
        restart = changed_keys(applied, new)
        log_event(
            logger,
            logging.INFO,
            "configuration reloaded",
            applied=",".join(key for key in changed if key not in restart),
            users_file=applied.auth.users_file,
        )
        if restart:
            log_event(
                logger,
                logging.WARNING,
                "changed settings need a restart; running values kept",
                keys=",".join(restart),
            )
