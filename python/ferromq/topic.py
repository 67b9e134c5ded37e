"""Topic matching: the subscription and retained indexes, re-exported from ``_core``.

``SubscriptionIndex.match`` answers one PUBLISH with flat parallel lists (clients,
qos, flags, subscription-id offsets, subscription ids, unserved shared groups);
``flags`` holds the ``DELIVERY_*`` bits. ``filter_matches`` is the reference
matcher, one filter against one topic level by level (the brute-force algorithm the
indexes are tested against); it is for tools and checks, never for routing.
"""

from ferromq._core import (
    DELIVERY_RETAIN_AS_PUBLISHED,
    DELIVERY_SHARED,
    RetainedIndex,
    SubscriptionIndex,
)

__all__ = [
    "DELIVERY_RETAIN_AS_PUBLISHED",
    "DELIVERY_SHARED",
    "RetainedIndex",
    "SubscriptionIndex",
    "filter_matches",
]


def filter_matches(topic_filter: str, topic: str) -> bool:
    """Whether a plain (non-shared, valid) topic filter matches a topic name."""
    levels = topic_filter.split("/")
    # [MQTT-4.7.2-1] no first-level wildcard matches a '$' topic.
    if topic.startswith("$") and levels[0] in ("+", "#"):
        return False
    names = topic.split("/")
    for i, level in enumerate(levels):
        if level == "#":
            return True  # the levels before matched: the parent and everything below
        if i >= len(names) or level not in ("+", names[i]):
            return False
    return len(levels) == len(names)
