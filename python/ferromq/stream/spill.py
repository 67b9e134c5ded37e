"""The Kafka sink's spill: a bounded first-in first-out buffer of Kafka record batches on
local disk, for the ``async`` delivery mode while Kafka is slow or away.

Layout: ``<directory>/spill-<n>.seg`` segments, ``n`` increasing (eight digits); the
directory is a shard's own in a node of several
(:func:`ferromq.stream.kafka_sink.spill_directory`). A segment starts with the magic
``FMQS`` and a format version byte (:data:`FORMAT_VERSION`); then frames, each
``length u32 | crc u32 | body`` (big-endian, CRC-32 of the body) with the body
``partition u32 | topic length u16 | topic (UTF-8) | one Kafka record batch`` as
``ferromq._core.kafka_record_batches`` built it. A write is one unit (every frame of one
send) in one ``write`` call.

Order: frames are read back in the order written. The sink sends what it read and calls
:meth:`Spill.sent` once Kafka acknowledged all of it; a segment is deleted when
everything in it was sent (the one being written to as well, once it was read to its end,
so an emptied spill holds no bytes). A crash between a send and :meth:`Spill.sent` sends
those frames again after the restart: at least once, the record ids make repeats
removable downstream.

Bound: :attr:`Spill.bytes` (every segment not yet deleted) never passes ``max_bytes``;
:meth:`Spill.append` refuses a unit that would (the sink counts its records as dropped).
Segments roll at ``max_bytes / 8`` (64 MiB at most), so sent data is freed in steps of
an eighth of the bound.

Restart: :meth:`Spill.open` finds the segments a previous run left and reads them first,
in order; writing always starts a new segment, never appending to an old one whose tail
a crash may have cut. A frame cut short or failing its CRC ends the read of its segment
(logged once with the file and offset): the rest of that segment is skipped. A newer
format version is refused with the file named.

Durability: no fsync (the mode is ``async``: publishers were acknowledged already); a
killed broker loses nothing the OS had, a crashed machine may lose the page cache's tail.
Writes and reads run on the event loop: a unit is at most the sink's memory bound, and
the data read back is recent (in the page cache).
"""

from __future__ import annotations

import logging
import os
import re
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final

from ferromq.log import log_event

__all__ = ["FORMAT_VERSION", "Frame", "Spill", "SpillDamaged"]

logger = logging.getLogger("ferromq.stream")

MAGIC: Final = b"FMQS"
FORMAT_VERSION: Final = 1
_HEADER: Final = MAGIC + bytes([FORMAT_VERSION])
_FRAME: Final = struct.Struct(">II")  # body length, CRC-32 of the body
_BODY: Final = struct.Struct(">IH")  # partition, topic length
_SEGMENT: Final = re.compile(r"spill-(\d{8})\.seg")
MAX_SEGMENT: Final = 64 * 1024 * 1024


class SpillDamaged(OSError):
    """A spill directory this build cannot read (a newer format)."""


@dataclass(frozen=True, slots=True)
class Frame:
    """One Kafka record batch for one topic partition."""

    topic: str
    partition: int
    batch: bytes

    def encode(self) -> bytes:
        topic = self.topic.encode()
        body = _BODY.pack(self.partition, len(topic)) + topic + self.batch
        return _FRAME.pack(len(body), zlib.crc32(body)) + body


def _segment_name(number: int) -> str:
    return f"spill-{number:08d}.seg"


class Spill:
    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.segment_bytes = max(1, min(MAX_SEGMENT, max_bytes // 8))
        self.bytes = 0
        self._segments: list[int] = []  # numbers, oldest first; the last is written to
        self._sizes: dict[int, int] = {}
        self._next_number = 0
        self._writer: BinaryIO | None = None
        self._reader: BinaryIO | None = None
        self._read_segment = 0  # index into _segments
        self._read_at = len(_HEADER)

    def open(self) -> None:
        """Find what a previous run left (it is read first) and start a new segment."""
        self.directory.mkdir(parents=True, exist_ok=True)
        found = sorted(
            int(match[1])
            for path in self.directory.iterdir()
            if (match := _SEGMENT.fullmatch(path.name)) is not None
        )
        for number in found:
            path = self.directory / _segment_name(number)
            with path.open("rb") as segment:
                header = segment.read(len(_HEADER))
            if header[:4] == MAGIC and header[4:5] > bytes([FORMAT_VERSION]):
                raise SpillDamaged(
                    f"stream spill {path}: format {header[4]}, this build reads "
                    f"{FORMAT_VERSION} and older"
                )
            self._sizes[number] = path.stat().st_size
            self._segments.append(number)
            self._next_number = number + 1
        self.bytes = sum(self._sizes.values())
        self._new_segment()

    @property
    def empty(self) -> bool:
        """Nothing left to read."""
        last = self._segments[-1]
        return self._read_segment == len(self._segments) - 1 and self._read_at >= self._sizes[last]

    def append(self, frames: list[Frame]) -> bool:
        """Write ``frames`` (one unit, in order) unless they would pass the bound."""
        data = b"".join(frame.encode() for frame in frames)
        roll = self._sizes[self._segments[-1]] >= self.segment_bytes
        if self.bytes + len(data) + (len(_HEADER) if roll else 0) > self.max_bytes:
            return False
        if roll:
            self._new_segment()
        number = self._segments[-1]
        assert self._writer is not None
        try:
            self._writer.write(data)
        except OSError:
            # Part of it may be on disk: the reader stops at the cut; write anew.
            self._sizes[number] = os.fstat(self._writer.fileno()).st_size
            self._new_segment()
            raise
        self._sizes[number] += len(data)
        self.bytes += len(data)
        return True

    def read(self, max_bytes: int) -> list[Frame]:
        """The next frames in order, about ``max_bytes`` of them (at least one unless
        the spill is empty); they count as unread until :meth:`sent`."""
        frames: list[Frame] = []
        taken = 0
        while taken < max_bytes and not self.empty:
            frame = self._next_frame()
            if frame is None:
                continue
            frames.append(frame)
            taken += len(frame.batch)
        return frames

    def sent(self) -> None:
        """Everything read so far is in Kafka: delete the segments it emptied."""
        while self._read_segment > 0:
            self._delete(self._segments.pop(0))
            self._read_segment -= 1
        if self.empty and self._sizes[self._segments[-1]] > len(_HEADER):
            # The written segment was read to its end: free it too.
            self._delete(self._segments.pop())
            self._read_segment = 0
            self._read_at = len(_HEADER)
            self._new_segment()

    def close(self) -> None:
        for file in (self._writer, self._reader):
            if file is not None:
                file.close()
        self._writer = self._reader = None

    def _new_segment(self) -> None:
        if self._writer is not None:
            self._writer.close()
        number = self._next_number
        self._next_number += 1
        path = self.directory / _segment_name(number)
        self._writer = path.open("xb", buffering=0)
        self._writer.write(_HEADER)
        self._segments.append(number)
        self._sizes[number] = len(_HEADER)
        self.bytes += len(_HEADER)

    def _delete(self, number: int) -> None:
        if self._reader is not None and self._reader.name == str(
            self.directory / _segment_name(number)
        ):
            self._reader.close()
            self._reader = None
        (self.directory / _segment_name(number)).unlink(missing_ok=True)
        self.bytes -= self._sizes.pop(number)

    def _next_frame(self) -> Frame | None:
        """The frame at the read position; None when the segment ended there (the
        position moved to the next segment)."""
        number = self._segments[self._read_segment]
        size = self._sizes[number]
        path = self.directory / _segment_name(number)
        if self._read_at + _FRAME.size <= size:
            if self._reader is None or self._reader.name != str(path):
                if self._reader is not None:
                    self._reader.close()
                self._reader = path.open("rb")
            self._reader.seek(self._read_at)
            length, crc = _FRAME.unpack(self._reader.read(_FRAME.size))
            body = self._reader.read(length)
            if len(body) == length and zlib.crc32(body) == crc:
                self._read_at += _FRAME.size + length
                partition, topic_len = _BODY.unpack_from(body)
                topic = body[_BODY.size : _BODY.size + topic_len].decode()
                return Frame(topic, partition, body[_BODY.size + topic_len :])
            log_event(
                logger,
                logging.WARNING,
                "stream spill damaged; the rest of the segment is skipped",
                file=str(path),
                offset=self._read_at,
                skipped_bytes=size - self._read_at,
            )
        elif self._read_at < size and self._read_segment < len(self._segments) - 1:
            log_event(
                logger,
                logging.WARNING,
                "stream spill segment ends in a cut frame; skipped",
                file=str(path),
                offset=self._read_at,
            )
        if self._read_segment < len(self._segments) - 1:
            self._read_segment += 1
            self._read_at = len(_HEADER)
        else:
            self._read_at = size  # the written segment: nothing more yet
        return None
