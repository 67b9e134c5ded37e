"""``[auto_subscribe]``: subscriptions every client is given when its CONNECT is
accepted, filters with the ACL's placeholders (``devices/%c/cmd``, ``users/%u/#``),
compiled here into :class:`ferromq._core.AutoSubscription` and made by the engine per
connection (``rust/ferromq-core/src/engine/auto_subscribe.rs``: rendered with the
connection's identity, checked against the ACL and the subscription quota, journaled).
Read at start and on SIGHUP; the preflight refuses a bad filter with one line."""

from __future__ import annotations

from ferromq._core import AutoSubscription
from ferromq.config import AutoSubscribeConfig, ConfigError

__all__ = ["auto_subscriptions"]


def auto_subscriptions(config: AutoSubscribeConfig) -> list[AutoSubscription]:
    """The compiled ``topics``; raises :class:`ConfigError` naming a bad one."""
    made = []
    for index, topic in enumerate(config.topics):
        try:
            made.append(AutoSubscription(topic, config.qos))
        except ValueError as exc:
            raise ConfigError(f"auto_subscribe.topics[{index}]: {exc}") from None
    return made
