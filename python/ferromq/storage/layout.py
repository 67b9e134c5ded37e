"""Where a node keeps each shard's embedded journal, and how a restart with another
number of workers takes over the journals the previous layout wrote.

Layouts of ``<storage.path>`` (docs/shards.md, "Sessions"):

- ``workers = 1``: the journal segments in ``<storage.path>`` itself, as before shards;
- ``workers = N > 1``: ``<storage.path>/workers-N/shard-K/`` for each shard *K*;
- ``layout.json`` (``{"workers": N}``): the layout that holds the node's state. Written
  once a node of another layout has taken the old journals over; absent on a store no
  node of several workers has used.

A restart with another number of workers: each shard reads the journals of the layout
that holds the node's state (:func:`previous_layout`: the manifest's, or without one the
root's own journal), shard by shard, then its own; ``Engine.restore`` keeps the
sessions the shard owns (``Engine.set_shards`` came first) and every retained message.
The shard compacts its own journal at once, so that it holds all it took over, says
so to the supervisor and waits: no shard accepts a client before every shard has
restored and :func:`commit` has recorded the new layout in the manifest (a temporary
file, fsync, rename, fsync of the directory) and then deleted every other layout. Until
the manifest changes the old journals are the authority and are read again, and a
layout that is neither the authority nor the one starting was never served from (a
migration that crashed before its commit): it is ignored and deleted at the commit. A
crash at any step therefore reads back to the same sessions.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Final

from ferromq.fileio import fsync_directory, write_all

__all__ = ["MANIFEST", "commit", "previous_layout", "recorded_workers", "shard_path"]

MANIFEST: Final = "layout.json"
_WORKERS_DIRECTORY: Final = re.compile(r"workers-(\d+)")
_SHARD_DIRECTORY: Final = re.compile(r"shard-(\d+)")
_SEGMENTS: Final = "journal-*.log"


def shard_path(root: Path, index: int, count: int) -> Path:
    """The embedded store of shard ``index`` of ``count`` under ``root``."""
    return root if count == 1 else root / f"workers-{count}" / f"shard-{index}"


def recorded_workers(root: Path) -> int | None:
    """The layout the manifest names; None without a manifest (or an unreadable one,
    which the next :func:`commit` replaces)."""
    try:
        workers = json.loads((root / MANIFEST).read_text())["workers"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return workers if isinstance(workers, int) and workers >= 1 else None


def _present(root: Path) -> list[int]:
    """The layouts with journals under ``root``, 1 (the root's own segments) first."""
    layouts = [1] if any(root.glob(_SEGMENTS)) else []
    if root.is_dir():
        matches = (_WORKERS_DIRECTORY.fullmatch(p.name) for p in root.iterdir() if p.is_dir())
        layouts += sorted(int(match[1]) for match in matches if match and int(match[1]) > 1)
    return layouts


def _journals(root: Path, workers: int) -> list[Path]:
    """The journal directories of one layout, shard by shard."""
    if workers == 1:
        return [root]
    base = root / f"workers-{workers}"
    shards = (p for p in base.iterdir() if _SHARD_DIRECTORY.fullmatch(p.name) and p.is_dir())
    return sorted(shards, key=lambda p: int(p.name.removeprefix("shard-")))


def previous_layout(root: Path, workers: int) -> list[Path]:
    """The journal directories a shard of a ``workers``-shard node reads before its own:
    those of the layout that holds the node's state (the manifest's, or without one
    the root's own journal) when it is another. Empty when nothing is to be taken over.
    """
    present = _present(root)
    recorded = recorded_workers(root)
    authority = recorded if recorded is not None else (1 if 1 in present else None)
    if authority is None or authority == workers or authority not in present:
        return []
    return _journals(root, authority)


def _write_manifest(root: Path, workers: int) -> None:
    temporary = root / f"{MANIFEST}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, (json.dumps({"workers": workers}) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.rename(temporary, root / MANIFEST)
    except OSError:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    fsync_directory(root)


def commit(root: Path, workers: int) -> bool:
    """Every shard of a ``workers``-shard node serves with what it took over: record its
    layout, then delete every other. True when there was something to do."""
    others = [layout for layout in _present(root) if layout != workers]
    recorded = recorded_workers(root)
    if recorded == workers and not others:
        return False
    if recorded is None and workers == 1 and not others:
        return False  # a store of one broker that never had shards: nothing to record
    if recorded != workers:
        _write_manifest(root, workers)
    for layout in others:
        if layout == 1:
            for segment in [*root.glob(_SEGMENTS), *root.glob(f"{_SEGMENTS}.tmp")]:
                segment.unlink()
        else:
            shutil.rmtree(root / f"workers-{layout}")
    if others:
        fsync_directory(root)
    return True
