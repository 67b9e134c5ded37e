"""The embedded store of a test's broker as the suite runs it (tests/conftest.py: the
number of workers in FERROMQ_SERVER__WORKERS, one unless the command names more): the
journal directory, process and ``$SYS`` tree of the shard that owns a client id
(``shard_of``; python/ferromq/storage/layout.py), and the restore report of a node, which logs one
"store restored" line per journal each shard reads. Tests that look into a journal
or read the restore counts assert the same through these at one shard and at several.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

from ferromq._core import shard_of
from ferromq.storage.layout import shard_path
from ferromq.sys_topics import PREFIX, shard_prefix
from tests.conftest import RunningBroker, suite_shards
from tests.support.shards import shard_pids

_RESTORED = re.compile(
    r"store restored store=\"?(?P<store>\w+)[^=]*"
    r" sessions=(?P<sessions>\d+) messages=(?P<messages>\d+) retained=(?P<retained>\d+)"
    r"(?: shard=(?P<shard>\d+))?$",
    re.MULTILINE,
)


def journal_of(store: Path, client_id: str) -> Path:
    """The journal directory of the shard that owns ``client_id`` in ``store``."""
    workers = suite_shards()
    return shard_path(store, shard_of(client_id, workers), workers)


def segment_of(store: Path, client_id: str) -> Path:
    """The one segment of the journal that holds ``client_id``'s session (a stopped
    broker leaves one, compacted, per journal)."""
    (segment,) = journal_of(store, client_id).glob("journal-*.log")
    return segment


def store_pid(broker: RunningBroker, client_id: str) -> int:
    """The process that journals ``client_id``'s session: the broker itself, or the
    shard of the node that owns the client id."""
    workers = suite_shards()
    if workers == 1:
        return broker.process.pid
    return shard_pids(broker)[shard_of(client_id, workers)]


def sys_tree_of(client_id: str) -> str:
    """The ``$SYS`` prefix under which the store holding ``client_id``'s session reports
    its health: the broker's tree, or the tree of the shard that owns the client id
    (the node's, published by shard 0, needs that shard to answer on a new
    connection, which a shard out of descriptors cannot accept)."""
    workers = suite_shards()
    return PREFIX if workers == 1 else shard_prefix(shard_of(client_id, workers))


class Restored(NamedTuple):
    """What a node restored: its sessions and their messages (each lives on one
    shard) and its retained messages (every shard holds them all)."""

    sessions: int
    messages: int
    retained: int


def restored(log: str, store: str) -> Restored:
    """The node's restore report from its "store restored" lines of ``store`` (the
    backend's name): sessions and messages summed over every journal read; retained
    as each shard holds it after its last journal, the same on every shard."""
    lines = [match for match in _RESTORED.finditer(log) if match["store"] == store]
    assert lines, f"no 'store restored store={store}' line in the log:\n{log}"
    retained = {match["shard"]: int(match["retained"]) for match in lines}
    assert len(set(retained.values())) == 1, f"the shards restored unlike retained sets: {retained}"
    return Restored(
        sessions=sum(int(match["sessions"]) for match in lines),
        messages=sum(int(match["messages"]) for match in lines),
        retained=retained.popitem()[1],
    )
