"""The admin listener as tests reach it: its config keys, ``GET`` and the REST API over
HTTP with the test token, ``/metrics`` parsed by prometheus-client, and ``ferromq ctl``."""

from __future__ import annotations

import json
import queue
import ssl
import subprocess
import urllib.error
import urllib.request
from typing import Any

import paho.mqtt.client as paho
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import ferromq_command

TOKEN = "0pen sesame"


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def admin_config(port: int, extra: str = "") -> str:
    return f"[admin]\nenabled = true\nport = {port}\n{extra}"


def get(
    port: int,
    path: str,
    token: str | None = None,
    tls: ssl.SSLContext | None = None,
    host: str = "127.0.0.1",
) -> tuple[int, bytes]:
    """Status and body of ``GET path`` on the admin listener at ``host`` (HTTPS with
    ``tls``)."""
    scheme = "https" if tls else "http"
    request = urllib.request.Request(f"{scheme}://{host}:{port}{path}")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=tls) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def scrape(port: int, token: str | None = None) -> Samples:
    """Every sample of ``/metrics``, by name and labels."""
    status, body = get(port, "/metrics", token)
    assert status == 200, body
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def token_config(port: int, extra: str = "", admin: str = "") -> str:
    """``extra`` tables, then ``[admin]`` with the token and the ``admin`` keys."""
    return extra + admin_config(port, f'token = "{TOKEN}"\n{admin}')


def api(
    port: int, method: str, path: str, body: object = None, token: str | None = TOKEN
) -> tuple[int, Any]:
    """Status and JSON answer (None when empty) of ``method /api/v1<path>``."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/v1{path}", data=data, method=method
    )
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    return status, json.loads(raw) if raw else None


def disconnects(client: paho.Client) -> queue.Queue[str]:
    """The reason of each DISCONNECT the broker sends ``client``, as paho names it."""
    reasons: queue.Queue[str] = queue.Queue()
    client.on_disconnect = lambda _c, _u, _f, reason, _p: reasons.put(str(reason))
    return reasons


def paged_client_ids(port: int, limit: int) -> list[str]:
    """The client ids of ``/clients``, ``limit`` a page, following ``next``."""
    seen: list[str] = []
    cursor: int | None = 0
    while cursor is not None:
        status, page = api(port, "GET", f"/clients?limit={limit}&cursor={cursor}")
        assert status == 200 and len(page["items"]) <= limit
        seen += [item["client_id"] for item in page["items"]]
        cursor = page["next"]
    return seen


def ctl(port: int, *args: str, token: str = TOKEN) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ferromq_command(), "ctl", "--url", f"http://127.0.0.1:{port}", "--token", token, *args],
        capture_output=True,
        text=True,
        timeout=30,
    )


def ok(port: int, *args: str) -> str:
    result = ctl(port, *args)
    assert result.returncode == 0, result.stderr
    return result.stdout
