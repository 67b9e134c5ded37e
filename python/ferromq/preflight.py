"""Preflight: what the configuration names must exist before the broker starts.

:func:`check` is the one validation that ``ferromq serve``, ``ferromq check-config`` and
a SIGHUP reload all run after :func:`~ferromq.config.load_config`, so check-config finds
every problem serve would refuse to start with, and a reload refuses what a restart
would. It reads but never writes (check-config may run beside a live broker):

- what the authentication providers name (:func:`ferromq.auth.check_providers`): the
  users file exists and parses, the JWT key file is a key, the ``jwt`` / ``http``
  extras are installed, the hook imports;
- the ACL rules file reads and every rule in it compiles (:func:`ferromq.acl.load_rules`);
- every ``[auto_subscribe]`` filter compiles (:func:`ferromq.auto_subscribe.auto_subscriptions`);
- every ``[[rewrite.rules]]`` rule compiles (:func:`ferromq.rewrite.rewrite_rules`);
- every ``[[bridges]]`` entry has a name, an address and valid topics, and its TLS
  files load (:func:`ferromq.bridge.check_bridges`);
- every ``[[plugins]]`` entry names a plugin class that loads and declares filters and
  events the engine can match (:func:`ferromq.plugin_host.check_plugins`);
- every ``[[validation.rules]]`` schema file reads and compiles
  (:func:`ferromq.validation.validation_rules`);
- the bans file (``[bans] file``) exists and parses (:func:`ferromq.admission.load_bans`);
- each TLS listener's certificate, key and CA files load and the key matches the
  certificate (:func:`ferromq.tls.server_context`);
- the optional extra a setting needs is installed: ``storage.backend = "redis"`` the
  ``redis`` extra, ``storage.application_store = "kafka"`` and ``[cluster]`` the
  ``kafka`` extra — by importing the module that needs it, which is what serve does next;
- the embedded store's directory is, or can be created as, a writable directory;
- with ``[admin] enabled``: the ``admin`` extra is installed, ``token_file`` holds a
  token, ``certfile``/``keyfile`` load (:mod:`ferromq.admin`).

Each failure is a :class:`~ferromq.config.ConfigError` whose one line names the
setting and the file or package. What only starting can tell (a port in use, Redis
unreachable, a data directory locked by another broker) is left to serve.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from ferromq.acl import load_rules
from ferromq.admission import load_bans
from ferromq.auth import check_providers
from ferromq.auto_subscribe import auto_subscriptions
from ferromq.bridge import check_bridges
from ferromq.config import TLS_PROTOCOLS, Config, ConfigError
from ferromq.plugin_host import check_plugins
from ferromq.rewrite import rewrite_rules
from ferromq.tls import server_context
from ferromq.validation import validation_rules

__all__ = ["check"]


def check(config: Config) -> None:
    """Raise :class:`ConfigError` for the first thing ``config`` names that is missing."""
    check_providers(config.auth)
    load_rules(config.acl)
    auto_subscriptions(config.auto_subscribe)
    rewrite_rules(config.rewrite)
    validation_rules(config.validation)
    check_bridges(config.bridges)
    check_plugins(config.plugins)
    load_bans(config.bans)
    for index, listener in enumerate(config.listeners):
        if listener.protocol in TLS_PROTOCOLS:
            server_context(f"listeners[{index}]", listener)
    storage = config.storage
    if storage.backend == "redis":
        _require_extra("storage.backend", "redis", "ferromq.storage.redis", "redis")
    if storage.application_store == "kafka":
        _require_extra("storage.application_store", "kafka", "ferromq.storage.kafka", "kafka")
    if config.cluster.node_id:  # the bus's Kafka clients: aiokafka and confluent-kafka
        _require_extra("cluster.node_id", config.cluster.node_id, "ferromq.cluster.bus", "kafka")
    if storage.backend == "embedded":
        _check_writable_directory(Path(storage.path).resolve())
    if config.admin.enabled:
        _require_extra("admin.enabled", "true", "ferromq.admin.server", "admin")
        from ferromq.admin.auth import load_token
        from ferromq.admin.server import admin_tls_context

        load_token(config.admin)
        admin_tls_context(config.admin)


def _require_extra(key: str, value: str, module: str, extra: str) -> None:
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(
            f'{key}: "{value}" needs the {extra} extra ({exc}); '
            f"install it with pip install 'ferromq[{extra}]'"
        ) from None


def _check_writable_directory(path: Path) -> None:
    """``path`` is a writable directory, or its nearest existing ancestor is one (serve
    creates the rest)."""
    existing = path
    while not os.path.lexists(existing):
        existing = existing.parent
    where = f"storage.path: {path}"
    if not existing.is_dir():
        shown = "is" if existing == path else f"cannot be created: {existing} is"
        raise ConfigError(f"{where}: {shown} not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        shown = "" if existing == path else f"cannot be created: {existing}: "
        raise ConfigError(f"{where}: {shown}not writable")
