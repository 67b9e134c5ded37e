"""Writing files whole, low in the package for every part that writes one.

- :func:`replace_text`: files the CLI edits (users file, bans file, pid file) are
  replaced whole, never written in place: the new text goes to a temporary file beside
  the old one, which ``os.replace`` swaps in atomically, so a broker reading the file
  (at start or on SIGHUP) sees the old or the new version, never half of one.
- :func:`write_all` and :func:`fsync_directory`: appending logs (the embedded store,
  the file stream, a shard's link) write every byte, and make a new file's name durable.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["fsync_directory", "replace_text", "write_all"]


def replace_text(path: Path, text: str) -> None:
    """Make ``text`` (UTF-8) the content of ``path``, atomically."""
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd`` (``os.write`` may write fewer)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def fsync_directory(path: Path) -> None:
    """Make the names in directory ``path`` durable (a file created or renamed there)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
