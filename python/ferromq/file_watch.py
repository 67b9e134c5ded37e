"""Files checked for a change every few seconds, one ``stat`` each, and a callback when
one's modification time, size or inode moved (a file rewritten in place or renamed over):
``[acl] watch`` (the rules file) and a TLS listener's ``watch`` (its certificates, key
and CRL). An interval of 0, or no file, watches nothing; SIGHUP reloads them always.
The paths and the interval are asked on each turn, so a SIGHUP that changes them
changes what is watched; a change of the paths themselves is not a change of a file.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence

__all__ = ["FileWatch"]

_IDLE_SECONDS = 5.0  # how often a disabled watch looks at its settings again

_Signature = tuple[int, int, int] | None


def _signature(path: str) -> _Signature:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


class FileWatch:
    def __init__(
        self,
        paths: Callable[[], Sequence[str]],
        interval: Callable[[], int],
        changed: Callable[[], object],
    ) -> None:
        self._paths = paths
        self._interval = interval
        self._changed = changed
        self._seen: tuple[tuple[str, _Signature], ...] | None = None

    async def run(self) -> None:
        while True:
            paths, seconds = tuple(self._paths()), self._interval()
            if seconds == 0 or not paths:
                self._seen = None
                await asyncio.sleep(_IDLE_SECONDS)
                continue
            seen = tuple((path, _signature(path)) for path in paths)
            before = self._seen
            if before is not None and seen != before and paths == tuple(p for p, _ in before):
                self._changed()
            self._seen = seen
            await asyncio.sleep(seconds)
