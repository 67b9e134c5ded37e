"""Files the CLI edits (users file, bans file) are replaced whole, never written in
place: the new text goes to a temporary file beside the old one, which ``os.replace``
swaps in atomically, so a broker reading the file (at start or on SIGHUP) sees the old
or the new version, never half of one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["replace_text"]


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
