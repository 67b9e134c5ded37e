"""The embedded store: the engine's journal as a write-ahead log on local disk.

Layout: ``<path>/journal-<n>.log`` segments of journal records, appended in order. A
restart reads every segment in order and hands the bytes to ``Engine.restore``; a tail
cut short by a crash ends the read and is truncated away, so the log is whole again.
When the live segment passes ``compact_after`` bytes, the engine's snapshot is written
to the next segment (``.tmp``, fsync, rename, fsync of the directory) and older segments
are deleted: a crash at any step leaves a log that reads back to the same state,
because records replay idempotently after a snapshot that covers them.

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
import os
import re
import time
from pathlib import Path
from typing import Final

from ferromq.storage import StoreUnavailable

__all__ = ["EmbeddedStore"]

_SEGMENT: Final = re.compile(r"journal-(\d{8})\.log")


def _segment_name(number: int) -> str:
    return f"journal-{number:08d}.log"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _fsync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
        self._file: int | None = None
        self._size = 0
        self._last_sync = time.monotonic()

    async def load(self) -> bytes:
        return await asyncio.to_thread(self._load)

    def _load(self) -> bytes:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self._segments = sorted(
                (p for p in self.path.iterdir() if _SEGMENT.fullmatch(p.name)),
                key=lambda p: p.name,
            )
            for leftover in self.path.glob("journal-*.log.tmp"):
                leftover.unlink()  # a compaction that never reached its rename
        except OSError as exc:
            raise StoreUnavailable(f"embedded store at {self.path}: {exc.strerror}") from None
        return b"".join(p.read_bytes() for p in self._segments)

    def loaded(self, valid_len: int) -> None:
        """Open the last segment for appending, cut at the end of its last whole record."""
        if not self._segments:
            self._segments = [self.path / _segment_name(1)]
        offset = valid_len
        for segment in self._segments[:-1]:
            offset -= segment.stat().st_size
        last = self._segments[-1]
        self._file = os.open(last, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        if os.fstat(self._file).st_size > offset:
            os.ftruncate(self._file, offset)
            os.fsync(self._file)
        self._size = os.fstat(self._file).st_size

    async def write(self, batch: bytes) -> None:
        await asyncio.to_thread(self._write, batch)

    def _write(self, batch: bytes) -> None:
        assert self._file is not None, "load() and loaded() come first"
        _write_all(self._file, batch)
        self._size += len(batch)
        now = time.monotonic()
        if self.fsync == "batch" or (
            self.fsync == "interval" and now - self._last_sync >= self.fsync_interval
        ):
            os.fdatasync(self._file)
            self._last_sync = now

    def wants_compaction(self) -> bool:
        return self.compact_after > 0 and self._size > self.compact_after

    async def compact(self, snapshot: bytes) -> None:
        await asyncio.to_thread(self._compact, snapshot)

    def _compact(self, snapshot: bytes) -> None:
        number = int(_SEGMENT.fullmatch(self._segments[-1].name)[1]) + 1  # type: ignore[index]
        target = self.path / _segment_name(number)
        temporary = target.with_name(target.name + ".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            _write_all(fd, snapshot)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(temporary, target)
        _fsync_directory(self.path)
        old, self._segments = self._segments, [target]
        if self._file is not None:
            os.close(self._file)
        self._file = os.open(target, os.O_WRONLY | os.O_APPEND)
        self._size = len(snapshot)
        for segment in old:
            segment.unlink()

    async def close(self) -> None:
        if self._file is not None:
            fd, self._file = self._file, None
            await asyncio.to_thread(os.fsync, fd)
            os.close(fd)
