"""``[acl] watch``: the rules file checked for a change every ``watch`` seconds, one
``stat`` each, and read again (:meth:`ferromq.broker.Broker.reload_acl`) when its
modification time, size or inode moved. 0 watches nothing; SIGHUP reloads it
always. The settings are read on each turn, so a SIGHUP that changes ``[acl]``
changes what is watched.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

from ferromq.config import AclConfig

__all__ = ["AclFileWatch"]

_IDLE_SECONDS = 5.0  # how often a disabled watch looks at its settings again


class AclFileWatch:
    def __init__(self, config: Callable[[], AclConfig], changed: Callable[[], object]) -> None:
        self._config = config
        self._changed = changed
        self._seen: tuple[str, tuple[int, int, int] | None] | None = None

    def _signature(self, path: str) -> tuple[str, tuple[int, int, int] | None]:
        try:
            st = os.stat(path)
        except OSError:
            return path, None
        return path, (st.st_mtime_ns, st.st_size, st.st_ino)

    async def run(self) -> None:
        while True:
            config = self._config()
            if config.watch == 0 or config.file is None:
                self._seen = None
                await asyncio.sleep(_IDLE_SECONDS)
                continue
            seen = self._signature(config.file)
            if self._seen is not None and seen != self._seen and seen[0] == self._seen[0]:
                self._changed()
            self._seen = seen
            await asyncio.sleep(config.watch)
