"""A JSON web service on a real loopback socket for the provider tests (a JWK set, an
authentication service): ``answer(method, path, body)`` gives the status and the JSON
to send; every request is kept in ``requests`` with its decoded body."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = Callable[[str, str, Any], tuple[int, Any]]


@dataclass
class JsonService:
    url: str
    requests: list[tuple[str, str, Any]] = field(default_factory=list)


@contextmanager
def json_service(answer: Answer) -> Iterator[JsonService]:
    service = JsonService("")
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            with lock:
                service.requests.append((self.command, self.path, body))
            status, reply = answer(self.command, self.path, body)
            data = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _answer

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    service.url = f"http://127.0.0.1:{server.server_port}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield service
    finally:
        server.shutdown()
        server.server_close()
