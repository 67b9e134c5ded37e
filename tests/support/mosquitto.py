"""A real Mosquitto (Debian's ``mosquitto``) for the bridge tests: its own port and
directory, sessions saved on stop, stopped and started again on the same port."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

from tests.support.services import free_port


class Mosquitto:
    """A Mosquitto on ``port`` (anonymous; sessions saved on stop) that can be stopped
    and started again on the same port; MQTT over WebSocket on ``websocket_port``."""

    def __init__(self, directory: Path) -> None:
        self.host, self.port, self.websocket_port = "127.0.0.1", free_port(), free_port()
        self._config = directory / "mosquitto.conf"
        self._config.write_text(
            f"listener {self.port} 127.0.0.1\n"
            f"listener {self.websocket_port} 127.0.0.1\nprotocol websockets\n"
            "allow_anonymous true\n"
            f"persistence true\npersistence_location {directory}/\n"
            "user root\n"  # as root it would drop to "mosquitto", who cannot write here
            "log_type all\n"  # the bridge tests count connections
        )
        self._log = directory / "mosquitto.log"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self._log.open("ab") as log:
            self._process = subprocess.Popen(
                ["mosquitto", "-c", str(self._config)], stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection((self.host, self.port), timeout=1).close()
                return
            except OSError:
                assert time.monotonic() < deadline, self._log.read_text()
                time.sleep(0.05)

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            self._process.wait(10)

    def log(self) -> str:
        return self._log.read_text(errors="replace")
