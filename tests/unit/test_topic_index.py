"""The topic indexes through Python, against the brute-force reference matcher."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferromq.codec import TopicFilterInvalid, TopicNameInvalid
from ferromq.topic import (
    DELIVERY_RETAIN_AS_PUBLISHED,
    DELIVERY_SHARED,
    RetainedIndex,
    SubscriptionIndex,
    filter_matches,
)

LEVELS = ["a", "b", "", "$s"]
topics = st.lists(st.sampled_from(LEVELS), min_size=1, max_size=4).map(
    lambda levels: "/".join(levels) or "a"
)
plain_filters = st.tuples(st.lists(st.sampled_from([*LEVELS, "+"]), max_size=4), st.booleans()).map(
    lambda t: "/".join([*t[0], "#"] if t[1] or not "/".join(t[0]) else t[0])
)
filters = st.tuples(plain_filters, st.sampled_from(["", "$share/g1/", "$share/g2/"])).map(
    lambda t: t[1] + t[0]
)
Sub = tuple[int, str, int, bool, bool, int | None]
subscriptions = st.lists(
    st.tuples(
        st.integers(0, 4),
        filters,
        st.integers(0, 2),
        st.booleans(),
        st.booleans(),
        st.none() | st.integers(1, 3),
    ),
    max_size=30,
)


def expected(
    subs: dict[tuple[int, str], Sub], topic: str, publisher: int | None
) -> tuple[dict[int, tuple[int, bool, list[int]]], dict[str, list[int]]]:
    """Plain deliveries per client, and per matching shared group its eligible members."""
    plain: dict[int, tuple[int, bool, set[int]]] = {}
    groups: dict[str, list[int]] = {}
    for client, topic_filter, qos, no_local, rap, sub_id in subs.values():
        shared = topic_filter.startswith("$share/")
        inner = topic_filter.split("/", 2)[2] if shared else topic_filter
        if not filter_matches(inner, topic):
            continue
        own = no_local and client == publisher
        if shared:
            groups.setdefault(topic_filter, [])
            if not own:
                groups[topic_filter].append(client)
        elif not own:
            q, r, ids = plain.get(client, (0, False, set()))
            plain[client] = (max(q, qos), r or rap, ids | ({sub_id} if sub_id else set()))
    return {c: (q, r, sorted(ids)) for c, (q, r, ids) in plain.items()}, groups


@settings(max_examples=300, deadline=None)
@given(subscriptions, st.lists(st.tuples(topics, st.none() | st.integers(0, 4)), max_size=10))
def test_match_equals_reference(ops: list[Sub], publishes: list[tuple[str, int | None]]) -> None:
    index = SubscriptionIndex()
    model: dict[tuple[int, str], Sub] = {}
    for sub in ops:
        client, topic_filter, qos, no_local, rap, sub_id = sub
        new = index.subscribe(
            client,
            topic_filter,
            qos,
            no_local=no_local,
            retain_as_published=rap,
            subscription_identifier=sub_id,
        )
        assert new == ((client, topic_filter) not in model)
        model[(client, topic_filter)] = sub
    assert len(index) == len(model)
    for topic, publisher in publishes:
        clients, granted, flags, offsets, sub_ids, unserved = index.match(topic, publisher)
        assert len(clients) == len(granted) == len(flags) == len(offsets) - 1
        plain, groups = expected(model, topic, publisher)
        got = {
            clients[i]: (
                granted[i],
                bool(flags[i] & DELIVERY_RETAIN_AS_PUBLISHED),
                sorted(sub_ids[offsets[i] : offsets[i + 1]]),
            )
            for i in range(len(clients))
            if not flags[i] & DELIVERY_SHARED
        }
        assert got == plain
        shared = [clients[i] for i in range(len(clients)) if flags[i] & DELIVERY_SHARED]
        assert len(shared) + len(unserved) == len(groups)
        assert all(any(c in members for members in groups.values()) for c in shared)
    for client in range(5):
        index.remove_client(client)
    assert index.stats()["trie_nodes"] == 1 and len(index) == 0


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(topics, st.integers(0, 2**64 - 1), st.none() | st.integers(0, 9))),
    plain_filters,
    st.integers(0, 9),
)
def test_retained_match_equals_scan(
    stored: list[tuple[str, int, int | None]], topic_filter: str, now: int
) -> None:
    index = RetainedIndex()
    model: dict[str, tuple[int, int | None]] = {}
    for topic, message_id, deadline in stored:
        old = model.get(topic)
        assert index.set(topic, message_id, deadline) == (old[0] if old else None)
        model[topic] = (message_id, deadline)
    expect = sorted(
        message_id
        for topic, (message_id, deadline) in model.items()
        if filter_matches(topic_filter, topic) and (deadline is None or deadline > now)
    )
    assert sorted(index.match_filter(topic_filter, now)) == expect
    purged = sorted(index.purge_expired(now))
    assert purged == sorted(m for m, d in model.values() if d is not None and d <= now)


def test_shared_groups_strategies_and_unserved() -> None:
    with pytest.raises(ValueError):
        SubscriptionIndex("fastest")
    for name in ["round_robin", "random", "hash_client", "hash_topic", "sticky"]:
        assert SubscriptionIndex(name).strategy == name
    index = SubscriptionIndex("round_robin")
    for client in (1, 2):
        index.subscribe(client, "$share/g/t/#", 1)
    assert [index.match("t/x")[0] for _ in range(3)] == [[1], [2], [1]]
    index.set_client_online(1, False)
    index.set_client_online(2, False)
    assert not index.is_client_online(2)
    clients, _, _, _, _, unserved = index.match("t/x")
    assert clients == []
    assert [index.shared_group_filter(g) for g in unserved] == ["$share/g/t/#"]


def test_errors_carry_reason_codes() -> None:
    index = SubscriptionIndex()
    with pytest.raises(TopicFilterInvalid) as err:
        index.subscribe(1, "a/#/b")
    assert err.value.reason_code == 0x8F
    with pytest.raises(ValueError):
        index.subscribe(1, "a", 3)
    assert index.match("a/+") == ([], [], [], [0], [], [])
    retained = RetainedIndex()
    with pytest.raises(TopicNameInvalid) as name_err:
        retained.set("a/+", 1)
    assert name_err.value.reason_code == 0x90
    with pytest.raises(TopicFilterInvalid):
        retained.match_filter("a#")
    assert retained.clear("a") is None and len(retained) == 0
