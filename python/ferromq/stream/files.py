"""The embedded stream sink: rolling Avro object container files that Spark reads.

Layout under ``[stream.files] directory`` (default ``<storage.path>/stream``)::

    messages/<opened>-<node>-s<shard>-<seq>.avro     kind "message" records
    events/<opened>-<node>-s<shard>-<seq>.avro       every other kind
    messages/.<opened>-<node>-s<shard>-<seq>.avro.part   the file being written

``<opened>`` is the wall clock (microseconds, 16 digits) when the file was begun, so
names sort by time; ``<node>`` (``[stream] node``), ``<shard>`` (the writing shard of
the node, 0 for a node of one: :mod:`ferromq.shard`) and the per-process sequence make
them unique per node, so every shard of a node writes its own files into the same two
directories and a reader of a directory (Spark) reads all shards' files as one. The
file being written is a dotfile, which Spark's file source (and
``spark.read.format("avro")``) skips; it is closed, fsynced and renamed into place
when it rolls (``roll_bytes`` or ``roll_seconds``, whichever first) or at shutdown,
and the directory is fsynced after the rename.

Each file is an Avro object container file (codec null, the schema
``record-v1.avsc`` in its header, ``_core.avro_container_header``); each engine batch
adds one data block per kind (``StreamBatch.avro_block``: built in Rust in one pass,
no Python per record).

Durability: a batch is handed to ``write(2)`` before ``done`` is called, so the
PUBACK/PUBREC of the messages in it (held by the engine, see
:func:`~ferromq.stream.sink.holds_acks`) go out only once the records are in the
file; ``kill -9`` of the broker then loses nothing acknowledged (the page cache
survives the process). The fsync of each batch follows the embedded store's policy
(``storage.fsync``: ``batch`` before ``done``, ``interval``, ``off``); with another
store only rolling fsyncs.

Recovery: at start a ``.part`` file left by a crash is cut after its last whole data
block (a block is whole when its byte count is there and the file's sync marker
follows it) and renamed into place, so every batch written before the crash is kept;
a file with no whole block is removed. A shard recovers only its own ``.part`` files
(the other shards' may be open for writing); shard 0 also takes those of shards the
node no longer has and those named before shards were (no ``s<shard>``).

Retention, after each roll and once a minute: files in place for longer than
``retention_seconds`` (their mtime is set when they are closed) are deleted, then the
oldest while a kind's files hold more than ``retention_bytes`` (0: no bound). It is
node-wide: each shard applies it to every file in place in the directory (all shards
see the same files in the same order and delete the same oldest ones; a file another
shard deleted first is skipped), so ``retention_bytes`` bounds the node's files, not
each shard's. Files being written are never touched.

File work runs in a worker thread (as the embedded store's does): batches submitted
while a write is running are written together next (group commit).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from ferromq._core import StreamBatch, avro_container_header
from ferromq.config import Config
from ferromq.fileio import fsync_directory, write_all
from ferromq.log import log_error, log_event
from ferromq.shard.identity import ShardIdentity
from ferromq.storage import StoreUnavailable
from ferromq.storage.persister import IO_ERRORS, RETRY_FIRST, RETRY_MAX
from ferromq.stream.sink import SinkHealth, stream_directory

__all__ = [
    "KINDS",
    "FileSink",
    "last_whole_block",
    "owned_part",
    "read_long",
    "recover_directory",
]

logger = logging.getLogger("ferromq.stream")

Kind = Literal["messages", "events"]
KINDS: Final[tuple[Kind, ...]] = ("messages", "events")
SYNC_LEN: Final = 16
MAGIC: Final = b"Obj\x01"
PART: Final = ".part"
CHECK_SECONDS: Final = 1.0
RETENTION_CHECK_SECONDS: Final = 60.0
_NAME: Final = re.compile(r"\d{16}-.+-\d{6}\.avro")
_SHARD: Final = re.compile(r"\.\d{16}-.+-s(\d+)-\d{6}\.avro\.part")
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9._-]")


def read_long(data: bytes, at: int) -> tuple[int, int]:
    """An Avro zig-zag varint at ``at``: (value, offset after it). Raises
    ``ValueError`` when ``data`` ends inside it."""
    shift = value = 0
    while at < len(data) and shift < 64:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (value >> 1) ^ -(value & 1), at
        shift += 7
    raise ValueError("cut inside a varint")


def _header_end(data: bytes) -> tuple[int, bytes] | None:
    """Where an object container file's header ends, and its sync marker; None when
    ``data`` does not hold a whole header."""
    if not data.startswith(MAGIC):
        return None
    try:
        at = len(MAGIC)
        while True:  # the metadata map: blocks of (key, value) pairs, ended by 0
            count, at = read_long(data, at)
            if count == 0:
                break
            if count < 0:  # a block with its byte size after the count
                count, at = -count, read_long(data, at)[1]
            for _ in range(2 * count):
                length, at = read_long(data, at)
                at += length
    except ValueError:
        return None
    if at + SYNC_LEN > len(data):
        return None
    return at + SYNC_LEN, data[at : at + SYNC_LEN]


def last_whole_block(data: bytes) -> int:
    """The length of ``data`` up to the end of its last whole data block (0 when not
    even the header is whole; the header's end when no block is)."""
    header = _header_end(data)
    if header is None:
        return 0
    end, sync = header
    while True:
        try:
            at = read_long(data, end)[1]
            size, at = read_long(data, at)
        except ValueError:
            return end
        block_end = at + size + SYNC_LEN
        if size < 0 or block_end > len(data) or data[at + size : block_end] != sync:
            return end
        end = block_end


def _placed_name(part: Path) -> Path:
    """``.name.avro.part`` → ``name.avro``."""
    return part.with_name(part.name[1 : -len(PART)])


def owned_part(name: str, shard: int, count: int) -> bool:
    """Whether the ``.part`` file ``name`` is shard ``shard``'s (of ``count``) to
    recover: its own, or for shard 0 one of no shard the node has."""
    match = _SHARD.fullmatch(name)
    writer = int(match[1]) if match is not None else -1
    return writer == shard or (shard == 0 and not 0 <= writer < count)


def recover_directory(
    directory: Path, shard: int = 0, count: int = 1
) -> list[tuple[Path, int, int]]:
    """Cut every ``.part`` file of shard ``shard`` (:func:`owned_part`) in
    ``directory`` after its last whole block and put it in place (or remove one with
    no whole block); (file, kept, dropped bytes) each."""
    recovered = []
    for part in sorted(directory.glob(f".*{PART}")):
        if not owned_part(part.name, shard, count):
            continue
        data = part.read_bytes()
        kept = last_whole_block(data)
        header = _header_end(data)
        if header is None or kept <= header[0]:
            part.unlink()
            recovered.append((part, 0, len(data)))
            continue
        with open(part, "r+b") as file:
            file.truncate(kept)
            os.fsync(file.fileno())
        os.rename(part, _placed_name(part))
        recovered.append((_placed_name(part), kept, len(data) - kept))
    if recovered:
        fsync_directory(directory)
    return recovered


@dataclass
class _OpenFile:
    part: Path
    fd: int
    sync: bytes
    opened: float  # monotonic
    size: int
    dirty: bool = False  # written since the last fsync


@dataclass
class _KindWriter:
    """One kind's directory and the file it is writing."""

    directory: Path
    file: _OpenFile | None = None
    # The newest batch whose block is in the file: a retried write skips it.
    written_through: int = 0


class FileSink:
    """The ``files`` sink (see the module header)."""

    def __init__(
        self,
        config: Config,
        node: str,
        done: Callable[[int], None],
        shard: ShardIdentity | None = None,
    ) -> None:
        files = config.stream.files
        self.directory = stream_directory(config)
        self._node = _UNSAFE.sub("_", node).lstrip("._") or "node"
        self._shard, self._shards = (0, 1) if shard is None else (shard.index, shard.count)
        self._done = done
        self._roll_bytes = files.roll_bytes
        self._roll_seconds = files.roll_seconds
        self._retention_seconds = files.retention_seconds
        self._retention_bytes = files.retention_bytes
        storage = config.storage
        self._fsync = storage.fsync if storage.backend == "embedded" else "off"
        self._fsync_interval = storage.fsync_interval
        self._last_sync = time.monotonic()
        self._writers = {kind: _KindWriter(self.directory / kind) for kind in KINDS}
        self._sequence = 0
        self._pending: list[StreamBatch] = []
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._last_retention = 0.0
        self.health = SinkHealth()
        self._counters = {"records": 0, "bytes": 0, "batches": 0, "files": 0, "errors": 0}

    def counters(self) -> Mapping[str, int]:
        return dict(self._counters)

    def gauges(self) -> Mapping[str, int]:
        return {}

    async def start(self) -> None:
        """Create the directories, recover files a crash left half-written. Raises
        :class:`~ferromq.storage.StoreUnavailable` naming the directory."""
        try:
            recovered = await asyncio.to_thread(self._recover)
        except OSError as exc:
            raise StoreUnavailable(
                f"stream.files.directory {self.directory}: {exc.strerror or exc}"
            ) from None
        for path, kept, dropped in recovered:
            log_event(
                logger,
                logging.WARNING,
                "stream file recovered after a crash" if kept else "stream file empty, removed",
                file=str(path),
                kept_bytes=kept,
                dropped_bytes=dropped,
            )
        self._task = asyncio.create_task(self._run())

    def _recover(self) -> list[tuple[Path, int, int]]:
        recovered = []
        for writer in self._writers.values():
            writer.directory.mkdir(parents=True, exist_ok=True)
            recovered += recover_directory(writer.directory, self._shard, self._shards)
        return recovered

    def submit(self, batch: StreamBatch) -> None:
        self._pending.append(batch)
        self._wakeup.set()

    async def _run(self) -> None:
        """Write what is submitted until ``stop``, which this loop answers with one
        last write that closes every file. Not cancelled: a stop waits for the write
        in progress (a cancelled ``wait_for`` can swallow its cancellation on 3.11)."""
        delay = RETRY_FIRST
        while True:
            stopping = self._stopping
            try:
                await self._write_pending(stopping)
                delay = RETRY_FIRST
            except Exception as exc:
                self._failed(exc, delay)
                if stopping:
                    return
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)
                continue
            if stopping:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), CHECK_SECONDS)
            self._wakeup.clear()

    async def _write_pending(self, closing: bool) -> None:
        """Write what was submitted (all of it in one thread call), report it done,
        then roll and expire files that are due (every file when ``closing``)."""
        batches = list(self._pending)
        if batches:
            await asyncio.to_thread(self._write, batches)
            del self._pending[: len(batches)]
            self._done(batches[-1].number)
            self._counters["batches"] += len(batches)
            for batch in batches:
                self._counters["records"] += batch.message_count + batch.event_count
                self._counters["bytes"] += batch.value_bytes
        await asyncio.to_thread(self._roll_due, closing)
        self._succeeded()

    def _write(self, batches: list[StreamBatch]) -> None:
        for kind, writer in self._writers.items():
            for batch in batches:
                count = batch.message_count if kind == "messages" else batch.event_count
                if count == 0 or batch.number <= writer.written_through:
                    continue
                file = writer.file or self._open(writer)
                block = batch.avro_block(kind, file.sync)
                try:
                    write_all(file.fd, block)
                except OSError:
                    # No torn block in the middle of a file: cut back, retry later.
                    with contextlib.suppress(OSError):
                        os.ftruncate(file.fd, file.size)
                    raise
                file.size += len(block)
                file.dirty = True
                writer.written_through = batch.number
        now = time.monotonic()
        if self._fsync == "batch" or (
            self._fsync == "interval" and now - self._last_sync >= self._fsync_interval
        ):
            for writer in self._writers.values():
                if writer.file is not None and writer.file.dirty:
                    os.fdatasync(writer.file.fd)
                    writer.file.dirty = False
            self._last_sync = now

    def _open(self, writer: _KindWriter) -> _OpenFile:
        opened_us = time.time_ns() // 1000
        self._sequence += 1
        sequence = self._sequence % 1_000_000
        name = f"{opened_us:016d}-{self._node}-s{self._shard}-{sequence:06d}.avro"
        part = writer.directory / f".{name}{PART}"
        sync = os.urandom(SYNC_LEN)
        header = avro_container_header(sync)
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        try:
            write_all(fd, header)
        except BaseException:
            os.close(fd)
            raise
        writer.file = _OpenFile(part, fd, sync, time.monotonic(), len(header))
        return writer.file

    def _roll_due(self, everything: bool) -> None:
        """Close the files that are full or old enough (all of them when
        ``everything``), then apply retention if one was closed or a minute passed."""
        now = time.monotonic()
        rolled = False
        for writer in self._writers.values():
            file = writer.file
            if file is None:
                continue
            due = file.size >= self._roll_bytes or now - file.opened >= self._roll_seconds
            if everything or due:
                self._close(writer, file)
                rolled = True
        if rolled or now - self._last_retention >= RETENTION_CHECK_SECONDS:
            self._last_retention = now
            for writer in self._writers.values():
                self._expire(writer)

    def _close(self, writer: _KindWriter, file: _OpenFile) -> None:
        os.utime(file.fd)  # its age for retention counts from when it is in place
        os.fsync(file.fd)
        os.close(file.fd)
        writer.file = None
        os.rename(file.part, _placed_name(file.part))
        fsync_directory(writer.directory)
        self._counters["files"] += 1

    def _expire(self, writer: _KindWriter) -> None:
        """Node-wide retention (see the module header): another shard may delete a
        file between the listing and here, which is then skipped."""
        stats = {}
        for path in sorted(_closed_files(writer.directory)):
            with contextlib.suppress(FileNotFoundError):
                stats[path] = path.stat()
        cutoff = time.time() - self._retention_seconds
        total = sum(stat.st_size for stat in stats.values())
        for path, stat in stats.items():
            too_old = self._retention_seconds > 0 and stat.st_mtime < cutoff
            too_big = self._retention_bytes > 0 and total > self._retention_bytes
            if not (too_old or too_big):
                break
            total -= stat.st_size
            try:
                path.unlink()
            except FileNotFoundError:
                continue  # another shard's retention was first
            log_event(logger, logging.INFO, "stream file expired", file=str(path))

    def _failed(self, exc: Exception, retry_in: float) -> None:
        error = f"write: {exc or type(exc).__name__}"
        self._counters["errors"] += 1
        self.health = SinkHealth(False, self.health.errors + 1, error)
        bug = None if isinstance(exc, IO_ERRORS) else exc
        log_error(
            logger,
            "stream files write failed; acknowledgements wait",
            bug,
            directory=str(self.directory),
            error=error,
            retry_in=f"{retry_in:.2f}s",
        )

    def _succeeded(self) -> None:
        if not self.health.ok:
            self.health = SinkHealth(True, self.health.errors, self.health.last_error)
            log_event(
                logger, logging.WARNING, "stream files recovered", directory=str(self.directory)
            )

    async def stop(self) -> None:
        """Write what is pending, close every file into place (one last attempt when
        writes are failing)."""
        self._stopping = True
        self._wakeup.set()
        if self._task is not None:
            await self._task


def _closed_files(directory: Path) -> Iterator[Path]:
    """The files in place (not being written), in name (= time) order by sorting."""
    for path in directory.iterdir():
        if _NAME.fullmatch(path.name):
            yield path
