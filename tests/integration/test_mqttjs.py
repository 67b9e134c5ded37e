"""MQTT.js (the Node client, pinned in tests/node/package-lock.json) over WebSocket and
WSS against `ferromq serve`, MQTT 3.1.1 and 5.0, under uvloop and asyncio: 20 QoS 1
messages from one MQTT.js client to another through the broker.

``scripts/test.sh`` installs Node and npm (apt-get) and runs ``npm ci`` in tests/node;
without them this test fails naming what is missing, it never skips."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import Starter
from tests.integration.test_websocket import ws_config
from tests.support.tls_certs import Pki, tls_keys

NODE_DIR = Path(__file__).resolve().parents[1] / "node"


def run_mqttjs(url: str, version: int, cafile: Path | None = None) -> list[list[str]]:
    node = shutil.which("node")
    assert node is not None, "node is not installed (scripts/test.sh installs nodejs and npm)"
    assert (NODE_DIR / "node_modules" / "mqtt").is_dir(), (
        f"MQTT.js is not installed: run `npm ci` in {NODE_DIR}"
    )
    command = [node, "round_trip.mjs", url, str(version)]
    if cafile is not None:
        command.append(str(cafile))
    done = subprocess.run(command, cwd=NODE_DIR, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    got: list[list[str]] = json.loads(done.stdout)
    return got


EXPECTED = [[f"js/{i % 2}", f"m{i}"] for i in range(20)]


@pytest.mark.parametrize("version", [4, 5])
def test_mqttjs_over_websocket(started: Starter, loop: str, version: int) -> None:
    broker = started(loop, ws_config())
    assert run_mqttjs(f"ws://{broker.host}:{broker.port}/mqtt", version) == EXPECTED


@pytest.mark.parametrize("version", [4, 5])
def test_mqttjs_over_wss(started: Starter, loop: str, pki: Pki, version: int) -> None:
    broker = started(loop, ws_config(tls_keys(pki).replace('"tls"', '"wss"')))
    url = f"wss://localhost:{broker.port}/mqtt"
    assert run_mqttjs(url, version, pki.ca.cafile) == EXPECTED
