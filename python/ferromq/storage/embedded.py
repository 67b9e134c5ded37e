"""The embedded store: the engine's journal as a write-ahead log on local disk.

Layout: ``<path>/LOCK`` and ``<path>/journal-<n>.log`` segments of journal records,
appended in order. A restart reads every segment in order and hands the bytes to
``Engine.restore``; damaged records are skipped and reported (the broker logs each
range), a tail cut short by a crash ends the read and is truncated away, so the log is
whole again; intact records after damage are kept.

Format (``durability/log.rs``, "Stored log format", version ``JOURNAL_FORMAT_VERSION``):
each segment starts with a header (magic ``FMQJ`` and the format version) and each
record carries a CRC32C, added in Rust once per batch (``journal_log_records``). A
segment without a header is format 0 (the release before headers) and is read as it
is; it is never appended to: the first start on it begins a new segment. A segment of
a newer format than this build reads is refused (``StoreUnavailable``, exit 3) with
the file and both versions.

Lock: ``load`` takes an exclusive ``flock`` on ``<path>/LOCK`` (which holds the
holder's pid) for the life of the store; a second broker on the same directory gets
``StoreUnavailable`` naming the directory and the holder. A node of several shards
(:mod:`ferromq.storage.layout`) keeps one store per shard below ``storage.path``; its
supervisor holds ``storage.path``'s own lock (:func:`lock_directory`), so a second
node, whatever its number of workers, is refused as a second broker is. The kernel releases the
lock when the holder dies, ``kill -9`` included, so a stale ``LOCK`` never blocks.

Compaction: the engine's snapshot is written to the next segment (``.tmp``, fsync,
rename, fsync of the directory) and older segments are deleted: a crash at any step
leaves a log that reads back to the same state, because records replay idempotently
after a snapshot that covers them. Every descriptor it needs is opened before the
rename, so a failure (descriptors exhausted) leaves the log as it was. It runs once
the log has grown since the last snapshot by more than ``compact_after`` or by
``GROWTH_FACTOR - 1`` times that snapshot, whichever is larger: each rewrite is paid
for by at least as many bytes written, and while the state grows the number of
rewrites is logarithmic in the bytes written (tests/unit/test_embedded_compaction.py).

Why a log and not an embedded database: the engine already produces its changes as one
ordered byte stream per batch, so appending that buffer is the whole write path — one
``write`` and one ``fsync`` per batch, group-committed while the previous fsync runs.
``benches/micro/test_embedded_store.py`` measures it beside SQLite (WAL mode,
synchronous=FULL), the obvious embedded database, on the same batches.

fsync policy (``storage.fsync``): ``batch`` syncs every batch before the engine sends
the acknowledgements that wait for it, so ``kill -9`` loses no acknowledged message;
``interval`` syncs every ``fsync_interval`` seconds (a crash of the machine, not of the
process, can lose up to that much); ``off`` leaves it to the OS.

File IO runs in a worker thread so the event loop keeps serving while a batch syncs.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import time
from pathlib import Path
from typing import Final

from ferromq._core import (
    JOURNAL_FORMAT_VERSION,
    journal_format_version,
    journal_header,
    journal_log_records,
)
from ferromq.fileio import fsync_directory, write_all
from ferromq.storage import StoreUnavailable

__all__ = [
    "GROWTH_FACTOR",
    "EmbeddedStore",
    "fsync_directory",
    "lock_directory",
    "read_journal",
    "write_all",
]

_SEGMENT: Final = re.compile(r"journal-(\d{8})\.log")
_HEADER: Final = journal_header()
_LOCK: Final = "LOCK"
# Compact once the log has grown by this factor of the last snapshot (or by
# compact_after, whichever is more).
GROWTH_FACTOR: Final = 2.0


def _segment_name(number: int) -> str:
    return f"journal-{number:08d}.log"


def _segment_number(segment: Path) -> int:
    return int(_SEGMENT.fullmatch(segment.name)[1])  # type: ignore[index]


def _lock_directory(path: Path) -> int:
    """An exclusive lock on ``path``'s LOCK file holding our pid; its descriptor."""
    fd = os.open(path / _LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise StoreUnavailable(
            f"embedded store at {path} is in use by another ferromq (pid {holder})"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _read_segments(path: Path) -> tuple[list[Path], list[bytes]]:
    """The journal segments in ``path``, in order, and their bytes. Raises
    :class:`StoreUnavailable` for a segment of a newer format than this build reads."""
    try:
        segments = sorted(
            (p for p in path.iterdir() if _SEGMENT.fullmatch(p.name)), key=lambda p: p.name
        )
        contents = [p.read_bytes() for p in segments]
    except OSError as exc:
        raise StoreUnavailable(f"embedded store at {path}: {exc.strerror}") from None
    for segment, data in zip(segments, contents, strict=True):
        version = journal_format_version(data[: len(_HEADER)])
        if version > JOURNAL_FORMAT_VERSION:
            raise StoreUnavailable(
                f"embedded store: {segment} is journal format version {version};"
                f" this ferromq reads versions 0 to {JOURNAL_FORMAT_VERSION}"
            )
    return segments, contents


def read_journal(path: Path) -> bytes:
    """Every record of the log in ``path``, read without locking or changing it: the
    journal of a previous layout of a node's store (:mod:`ferromq.storage.layout`), which
    the node's own lock covers. Raises :class:`StoreUnavailable`."""
    return b"".join(_read_segments(path)[1])


def lock_directory(path: Path) -> int:
    """An exclusive lock on ``path``'s LOCK file (created with ``path``) holding this
    process's pid, as a store holds it; its descriptor. Raises :class:`StoreUnavailable`
    naming the holder."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        return _lock_directory(path)
    except OSError as exc:
        raise StoreUnavailable(f"embedded store at {path}: {exc.strerror}") from None


class EmbeddedStore:
    name = "embedded"

    def __init__(
        self, path: Path, fsync: str = "batch", fsync_interval: float = 1.0, compact_after: int = 0
    ) -> None:
        self.path = path
        self.fsync = fsync
        self.fsync_interval = fsync_interval
        self.compact_after = compact_after
        self._segments: list[Path] = []
        self._sizes: list[int] = []
        self._last_version = JOURNAL_FORMAT_VERSION
        self._lock: int | None = None
        self._file: int | None = None
        # Bytes in the log, and in the snapshot (or the log as loaded) it grew from.
        self._size = 0
        self._snapshot_size = 0
        self._last_sync = time.monotonic()

    async def load(self) -> bytes:
        return await asyncio.to_thread(self._load)

    def _load(self) -> bytes:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            if self._lock is None:
                self._lock = _lock_directory(self.path)
            for leftover in self.path.glob("journal-*.log.tmp"):
                leftover.unlink()  # a compaction that never reached its rename
        except OSError as exc:
            raise StoreUnavailable(f"embedded store at {self.path}: {exc.strerror}") from None
        self._segments, contents = _read_segments(self.path)
        if contents:
            self._last_version = journal_format_version(contents[-1][: len(_HEADER)])
        self._sizes = [len(data) for data in contents]
        return b"".join(contents)

    def loaded(self, valid_len: int) -> None:
        """Open the log for appending, cut at the end of its last whole record; a log of
        an older format (or none) gets a new segment that starts with the header."""
        try:
            self._open_for_append(valid_len)
        except OSError as exc:
            raise StoreUnavailable(f"embedded store at {self.path}: {exc.strerror}") from None
        self._size = self._snapshot_size = sum(self._sizes)

    def _open_for_append(self, valid_len: int) -> None:
        if self._segments:
            kept = max(valid_len - sum(self._sizes[:-1]), 0)
            fd = os.open(self._segments[-1], os.O_WRONLY | os.O_APPEND)
            if self._sizes[-1] > kept:
                os.ftruncate(fd, kept)
                os.fsync(fd)
                self._sizes[-1] = kept
            if self._last_version == JOURNAL_FORMAT_VERSION and kept >= len(_HEADER):
                self._file = fd
                return
            os.close(fd)
        self._start_segment()

    def _start_segment(self) -> None:
        number = _segment_number(self._segments[-1]) + 1 if self._segments else 1
        target = self.path / _segment_name(number)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
        write_all(fd, _HEADER)
        os.fsync(fd)
        fsync_directory(self.path)
        self._segments.append(target)
        self._sizes.append(len(_HEADER))
        self._file = fd

    async def write(self, batch: bytes) -> None:
        await asyncio.to_thread(self._write, batch)

    def _write(self, batch: bytes) -> None:
        assert self._file is not None, "load() and loaded() come first"
        records = journal_log_records(batch)
        write_all(self._file, records)
        self._size += len(records)
        now = time.monotonic()
        if self.fsync == "batch" or (
            self.fsync == "interval" and now - self._last_sync >= self.fsync_interval
        ):
            os.fdatasync(self._file)
            self._last_sync = now

    def wants_compaction(self) -> bool:
        grown = self._size - self._snapshot_size
        threshold = max(self.compact_after, (GROWTH_FACTOR - 1) * self._snapshot_size)
        return self.compact_after > 0 and grown > threshold

    async def compact(self, snapshot: bytes) -> None:
        await asyncio.to_thread(self._compact, snapshot)

    def _compact(self, snapshot: bytes) -> None:
        records = journal_log_records(snapshot)
        target = self.path / _segment_name(_segment_number(self._segments[-1]) + 1)
        temporary = target.with_name(target.name + ".tmp")
        directory = os.open(self.path, os.O_RDONLY)
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
            try:
                write_all(fd, _HEADER)
                write_all(fd, records)
                os.fsync(fd)
                os.rename(temporary, target)
            except BaseException:
                os.close(fd)
                with contextlib.suppress(OSError):
                    temporary.unlink()
                raise
            # From the rename on the new segment is the log: append there, whatever
            # happens next.
            old, self._segments, self._sizes = (
                self._segments,
                [target],
                [len(_HEADER) + len(records)],
            )
            if self._file is not None:
                os.close(self._file)
            self._file = fd
            self._size = self._snapshot_size = self._sizes[0]
            os.fsync(directory)
        finally:
            os.close(directory)
        for segment in old:
            segment.unlink()

    async def close(self) -> None:
        if self._file is not None:
            fd, self._file = self._file, None
            await asyncio.to_thread(os.fsync, fd)
            os.close(fd)
        if self._lock is not None:
            os.close(self._lock)  # releases the flock
            self._lock = None
