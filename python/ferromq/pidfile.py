"""``ferromq serve --pid-file PATH``: the broker's process id for init systems and scripts.

The file is claimed before anything starts: one holding the id of a live process is
refused (a :class:`~ferromq.config.ConfigError`, one line naming the file and the
process), so a second
broker started by mistake stops before it binds a port; a file left by a process that
is gone (a crash, ``kill -9``) is stale and taken over. It is written once every
listener accepts — so its presence means "serving" — through a temporary file and a
rename, and removed when the broker exits, unless another process has written its own
id there since.
"""

from __future__ import annotations

import os
from pathlib import Path

from ferromq.config import ConfigError
from ferromq.fileio import replace_text

__all__ = ["PidFile"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive all the same
        return True
    return True


class PidFile:
    def __init__(self, path: Path) -> None:
        self.path = path

    def _holder(self) -> int | None:
        try:
            text = self.path.read_text(encoding="ascii", errors="replace").strip()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ConfigError(f"pid file {self.path}: cannot be read: {exc.strerror}") from None
        return int(text) if text.isdigit() else None

    def claim(self) -> None:
        """Refuse a file a live process holds, or one that cannot be read. Raises
        :class:`ConfigError`."""
        if not self.path.parent.is_dir():
            raise ConfigError(f"pid file {self.path}: directory {self.path.parent} does not exist")
        holder = self._holder()
        if holder is not None and holder != os.getpid() and _alive(holder):
            raise ConfigError(
                f"pid file {self.path}: held by running process {holder}; "
                "stop it, or choose another --pid-file"
            )

    def write(self) -> None:
        """Write this process's id. Raises :class:`ConfigError` naming the file."""
        try:
            replace_text(self.path, f"{os.getpid()}\n")
        except OSError as exc:
            raise ConfigError(f"pid file {self.path}: cannot be written: {exc.strerror}") from None

    def remove(self) -> None:
        """Remove the file if it still holds this process's id."""
        try:
            if self._holder() == os.getpid():
                self.path.unlink()
        except (OSError, ConfigError):
            pass  # exiting: nothing better to do than leave it, stale
