"""The Kafka store's session cursor: after the longest acknowledged prefix of stored
deliveries, whatever order the acknowledgements come in (ferromq.storage.kafka)."""

from __future__ import annotations

from ferromq.storage.kafka import AckedPrefix, done_runs


def test_the_cursor_waits_for_the_oldest_unacknowledged_delivery() -> None:
    prefix = AckedPrefix(end=10)
    assert prefix.cursor() == 10, "nothing stored: the log end"
    for offset, packet_id in ((10, 1), (11, 2), (12, 3)):
        prefix.stored(offset, packet_id)
    prefix.acked(2)
    prefix.acked(3)
    assert prefix.cursor() == 10, "delivery 1 is not acknowledged yet"
    prefix.acked(1)
    assert prefix.cursor() == 13


def test_a_delivery_stored_twice_needs_one_ack() -> None:
    prefix = AckedPrefix()
    prefix.stored(0, 7)
    prefix.stored(1, 7)  # the same delivery again (a retried produce)
    prefix.stored(1, 7)  # a retried batch replays what it already stored
    prefix.acked(7)
    assert prefix.cursor() == 2


def test_acks_for_unknown_packets_and_clear() -> None:
    prefix = AckedPrefix(end=5)
    prefix.acked(99)
    prefix.stored(5, 1)
    prefix.clear()
    assert prefix.cursor() == 6, "a cleared queue starts after the last stored record"


def test_acknowledged_offsets_after_the_cursor_are_named_done() -> None:
    prefix = AckedPrefix(end=20)
    for offset, packet_id in ((20, 1), (21, 2), (22, 3), (23, 4), (24, 5)):
        prefix.stored(offset, packet_id)
    assert prefix.done() == "done:"
    prefix.acked(2)
    prefix.acked(3)
    prefix.acked(5)
    assert (prefix.cursor(), prefix.done()) == (20, "done:21-22,24-24")
    assert done_runs(prefix.done()) == [(21, 22), (24, 24)]
    prefix.acked(1)
    assert (prefix.cursor(), prefix.done()) == (23, "done:24-24"), "the prefix swallows runs"


def test_records_read_back_as_done_are_not_waited_for() -> None:
    prefix = AckedPrefix(end=3)
    prefix.stored(0, 1)
    prefix.skipped(1)
    prefix.stored(2, 3)
    prefix.acked(1)
    assert prefix.cursor() == 2
    prefix.acked(3)
    assert prefix.cursor() == 3
    assert done_runs("another application's metadata") == []
