"""Where the bytes of an idle connection go: one ferromq node (``--workers 1`` by
default), N idle MQTT connections from real sockets, and the node's memory before and
after, taken apart.

    python benches/load/conn_memory.py --clients 10000 --mode clean311
    python benches/load/conn_memory.py --clients 10000 --mode persistent5
    python benches/load/conn_memory.py --clients 10000 --mode clean311 --probe tracemalloc
    python benches/load/conn_memory.py --clients 10000 --malloc arena2   # MALLOC_ARENA_MAX=2
    python benches/load/conn_memory.py --clients 10000 --malloc jemalloc # LD_PRELOAD

Modes: ``clean311`` is MQTT 3.1.1 with Clean Session 1 (the ``conn-10k-idle`` row of
``compare.py``); ``persistent5`` is MQTT 5.0, Clean Start 0, Session Expiry Interval
3600 s and one QoS 1 subscription per client (``dev/<client id>/cmd``).

The clients are a second process of plain blocking sockets (``--client``), bound to
127.0.0.2 and up (``--source-addresses``), connecting in batches of 250: CONNECT (and
SUBSCRIBE) sent for the batch, then every CONNACK (SUBACK) read. Once all are up they
stay silent (keep alive 1,200 s) until the measurement is taken.

Figures, each "after - before" over the connections open:

- ``rss``: the node's VmRSS (every process of it), with RssAnon and RssFile apart,
  settled (3 s after the last CONNACK) and the peak sampled every 50 ms while the
  clients connect (what ``compare.py`` reports);
- the kernel's, which is not in any RSS: ``/proc/net/sockstat`` "TCP: mem" pages (both
  ends of each connection are on this machine), the skmem of a sample of the node's
  sockets (``ss -tmn``), and the slab caches a socket takes (``/proc/slabinfo``: TCP,
  sock_inode_cache, filp, dentry, eppoll_entry, epitem; both ends counted, so halved
  per connection as an estimate of one end);
- in the node (``conn_memory.py --serve`` wraps ``ferromq serve`` with a probe thread
  that answers requests on the loop's thread): glibc's ``mallinfo2`` (bytes in use,
  bytes held free), pymalloc's arenas (``sys._debugmallocstats``), live Python objects
  by type (``gc``), and with ``--probe tracemalloc`` a tracemalloc snapshot diff
  grouped by file:line (tracemalloc's own cost inflates that run's RSS; its RSS is not
  the figure).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import os
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from ferromq.bench_memory import kernel_memory, node_memory

BATCH = 250
KEEP_ALIVE = 1200

# ---------------------------------------------------------------------------------
# MQTT packets


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n % 128, n // 128
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _str(s: str) -> bytes:
    b = s.encode()
    return struct.pack("!H", len(b)) + b


def connect_packet(client_id: str, mode: str) -> bytes:
    if mode == "clean311":
        body = _str("MQTT") + bytes([4, 0x02]) + struct.pack("!H", KEEP_ALIVE) + _str(client_id)
    else:
        properties = bytes([0x11]) + struct.pack("!I", 3600)  # Session Expiry Interval
        body = (
            _str("MQTT")
            + bytes([5, 0x00])
            + struct.pack("!H", KEEP_ALIVE)
            + _varint(len(properties))
            + properties
            + _str(client_id)
        )
    return bytes([0x10]) + _varint(len(body)) + body


def subscribe_packet(client_id: str) -> bytes:
    body = struct.pack("!H", 1) + b"\x00" + _str(f"dev/{client_id}/cmd") + b"\x01"
    return bytes([0x82]) + _varint(len(body)) + body


def read_packet(sock: socket.socket) -> tuple[int, bytes]:
    def exact(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed by the broker")
            data += chunk
        return data

    first = exact(1)[0]
    length, shift = 0, 0
    while True:
        byte = exact(1)[0]
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    return first >> 4, exact(length)


# ---------------------------------------------------------------------------------
# the client generator (a process of its own)


def run_clients(args: argparse.Namespace) -> None:
    held: list[socket.socket] = []
    sources = [f"127.0.0.{2 + i}" for i in range(args.source_addresses)]
    started = time.monotonic()
    for first in range(0, args.clients, BATCH):
        batch = []
        for n in range(first, min(first + BATCH, args.clients)):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.bind((sources[n % len(sources)], 0))
            sock.settimeout(30)
            sock.connect((args.host, args.port))
            client_id = f"{args.client_id_prefix}{n:07d}"
            sock.sendall(connect_packet(client_id, args.mode))
            batch.append((sock, client_id))
        for sock, client_id in batch:
            kind, body = read_packet(sock)
            if kind != 2 or body[1] != 0:
                raise SystemExit(f"{client_id}: CONNACK refused ({kind}, {body.hex()})")
            if args.mode == "persistent5":
                sock.sendall(subscribe_packet(client_id))
        if args.mode == "persistent5":
            for sock, client_id in batch:
                kind, body = read_packet(sock)
                if kind != 9:
                    raise SystemExit(f"{client_id}: expected SUBACK, got type {kind}")
        held.extend(sock for sock, _ in batch)
    elapsed = time.monotonic() - started
    print(json.dumps({"ready": len(held), "seconds": elapsed}), flush=True)
    sys.stdin.read()  # hold them until the parent closes our stdin
    for sock in held:
        sock.close()


# ---------------------------------------------------------------------------------
# the probe inside the node (``--serve``)


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _mallinfo() -> dict[str, int]:
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _Mallinfo2
        info = libc.mallinfo2()
    except (OSError, AttributeError):
        return {}
    return {
        # mallinfo2 covers the main arena only plus mmapped chunks; with several
        # arenas (threads) malloc_info's totals are the ones to read.
        "in_use": info.uordblks + info.hblkhd,
        "free_held": info.fordblks,
        "mmapped": info.hblkhd,
    }


def _jemalloc() -> dict[str, int]:
    """jemalloc's stats.allocated (in use) and stats.resident, under the same keys."""
    process = ctypes.CDLL(None)
    epoch = ctypes.c_uint64(1)
    process.mallctl(b"epoch", None, None, ctypes.byref(epoch), ctypes.c_size_t(8))
    out = {}
    for key, name in (("in_use", b"stats.allocated"), ("resident", b"stats.resident")):
        value = ctypes.c_size_t()
        size = ctypes.c_size_t(ctypes.sizeof(value))
        process.mallctl(name, ctypes.byref(value), ctypes.byref(size), None, ctypes.c_size_t(0))
        out[key] = value.value
    return out


def _malloc_info_totals() -> dict[str, int]:
    """glibc malloc_info's <total type="..."> and <system type="current"> for every
    arena."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.open_memstream.restype = ctypes.c_void_p
        buf = ctypes.c_char_p()
        size = ctypes.c_size_t()
        stream = libc.open_memstream(ctypes.byref(buf), ctypes.byref(size))
        libc.malloc_info(0, ctypes.c_void_p(stream))
        libc.fclose(ctypes.c_void_p(stream))
        text = ctypes.string_at(buf, size.value).decode()
        libc.free(buf)
    except (OSError, AttributeError):
        return {}
    # The last <system type="current"> and the totals are the whole heap's.
    totals = {}
    tail = text[text.rfind("</heap>") :]
    for kind, size_text in re.findall(r'<total type="(\w+)" count="\d+" size="(\d+)"', tail):
        totals[f"free_{kind}"] = int(size_text)
    for kind, size_text in re.findall(r'<system type="(\w+)" size="(\d+)"', tail):
        totals[f"system_{kind}"] = int(size_text)
    totals["heaps"] = text.count("<heap nr=")
    return totals


def _pymalloc() -> dict[str, int]:
    """pymalloc's arenas, from sys._debugmallocstats (written to C stderr)."""
    read, write = os.pipe()
    saved = os.dup(2)
    os.dup2(write, 2)
    try:
        sys._debugmallocstats()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(write)
    chunks = []
    while True:
        chunk = os.read(read, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read)
    text = b"".join(chunks).decode(errors="replace")
    found = {}
    for key, pattern in (
        ("arenas_allocated_current", r"# arenas allocated current\s*=\s*([\d,]+)"),
        ("bytes_in_allocated_blocks", r"# bytes in allocated blocks\s*=\s*([\d,]+)"),
        ("bytes_in_available_blocks", r"# bytes in available blocks\s*=\s*([\d,]+)"),
        ("bytes_lost_to_pool_headers", r"# bytes lost to pool headers\s*=\s*([\d,]+)"),
        ("bytes_lost_to_quantization", r"# bytes lost to quantization\s*=\s*([\d,]+)"),
        ("unused_pools", r"(\d+) unused pools \* \d+ bytes\s*=\s*([\d,]+)"),
        ("total", r"Total\s*=\s*([\d,]+)"),
    ):
        match = re.search(pattern, text)
        if match:
            found[key] = int(match.groups()[-1].replace(",", ""))
    return found


def _status() -> dict[str, int]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
            out[key] = int(value.split()[0]) * 1024
    return out


def _probe(control: Path, name: str) -> dict[str, Any]:
    import tracemalloc

    gc.collect()
    types = Counter(type(o).__qualname__ for o in gc.get_objects())
    jemalloc = "jemalloc" in os.environ.get("LD_PRELOAD", "")
    result: dict[str, Any] = {
        "status": _status(),
        "mallinfo2": _jemalloc() if jemalloc else _mallinfo(),
        "malloc_info": {} if jemalloc else _malloc_info_totals(),
        "pymalloc": _pymalloc(),
        "types": dict(types),
        "gc_objects": sum(types.values()),
    }
    if tracemalloc.is_tracing():
        snapshot = tracemalloc.take_snapshot()
        snapshot.dump(str(control / f"{name}.tracemalloc"))
        result["tracemalloc_traced"] = tracemalloc.get_traced_memory()[0]
    for engine in _engines():
        with contextlib.suppress(Exception):
            stats = engine.stats()
            result["engine"] = {
                "memory_used": stats.memory_used,
                "queued_bytes": stats.queued_bytes,
                "connections_opened": stats.connections_opened,
            }
    return result


def _engines() -> list[Any]:
    from ferromq import _core

    return [o for o in gc.get_objects() if type(o) is _core.Engine]


def serve_with_probe(argv: list[str], control: Path, tracemalloc_frames: int) -> None:
    """``ferromq serve`` in this process, with a thread that answers ``<name>.req``
    files in ``control`` by running the probe on the event loop's thread and writing
    ``<name>.json``."""
    import asyncio
    import runpy

    if tracemalloc_frames:
        import tracemalloc

        tracemalloc.start(tracemalloc_frames)

    def find_loop() -> Any:
        for o in gc.get_objects():
            if isinstance(o, asyncio.AbstractEventLoop) and o.is_running():
                return o
        return None

    def watch() -> None:
        loop = None
        while True:
            time.sleep(0.2)
            for request in sorted(control.glob("*.req")):
                name = request.stem
                request.unlink()
                loop = loop or find_loop()
                done = threading.Event()
                box: dict[str, Any] = {}

                def run(
                    name: str = name, box: dict[str, Any] = box, done: threading.Event = done
                ) -> None:
                    try:
                        box["result"] = _probe(control, name)
                    except Exception as exc:  # reported to the harness
                        box["result"] = {"error": repr(exc)}
                    done.set()

                loop.call_soon_threadsafe(run)
                done.wait(120)
                tmp = control / f"{name}.json.tmp"
                tmp.write_text(json.dumps(box.get("result", {"error": "timeout"})))
                tmp.rename(control / f"{name}.json")

    threading.Thread(target=watch, daemon=True).start()
    sys.argv = ["ferromq", *argv]
    runpy.run_module("ferromq", run_name="__main__")


# ---------------------------------------------------------------------------------
# the harness


def ss_sample(port: int, count: int = 2000) -> dict[str, float]:
    """The node's side of its connections (source port ``port``): mean skmem fields
    over up to ``count`` sockets."""
    text = subprocess.run(
        ["ss", "-tmnH", "state", "established", f"( sport = :{port} )"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    fields: Counter[str] = Counter()
    maxima: Counter[str] = Counter()
    n = 0
    for match in re.finditer(r"skmem:\(([^)]*)\)", text):
        n += 1
        for item in match.group(1).split(","):
            key = item.rstrip("0123456789")
            value = int(item[len(key) :])
            fields[key] += value
            maxima[key] = max(maxima[key], value)
        if n >= count:
            break
    return {
        "sockets": n,
        **({f"mean_{k}": v / n for k, v in fields.items()} if n else {}),
        **{f"max_{k}": v for k, v in maxima.items()},
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Node:
    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.port = free_port()
        self.control = work / "control"
        self.control.mkdir()
        conf = work / "ferromq.toml"
        conf.write_text(
            "[server]\n"
            f"workers = {args.workers}\n"
            "[[listeners]]\n"
            'host = "127.0.0.1"\n'
            f"port = {self.port}\n"
            "[limits]\n"
            "max_connections = 0\n"
            "[storage]\n"
            f'backend = "{args.storage}"\n'
            + (f'path = "{work / "store"}"\n' if args.storage != "memory" else "")
            + '[log]\nlevel = "warning"\n'
        )
        env = dict(os.environ)
        if args.malloc == "arena2":
            env["MALLOC_ARENA_MAX"] = "2"
        elif args.malloc == "arena1":
            env["MALLOC_ARENA_MAX"] = "1"
        elif args.malloc == "jemalloc":
            env["LD_PRELOAD"] = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
        frames = 1 if args.probe == "tracemalloc" else 0
        self.log = open(work / "node.log", "wb")  # noqa: SIM115 - the node's life
        self.process = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--serve",
                str(self.control),
                str(frames),
                "--",
                "serve",
                "--config",
                str(conf),
            ],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while True:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=1),
            ):
                break
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the node did not start: {(work / 'node.log').read_text()}")
            time.sleep(0.1)

    def probe(self, name: str) -> dict[str, Any]:
        (self.control / f"{name}.req").touch()
        answer = self.control / f"{name}.json"
        deadline = time.monotonic() + 180
        while not answer.exists():
            if time.monotonic() > deadline:
                raise SystemExit("the probe did not answer")
            time.sleep(0.1)
        return json.loads(answer.read_text())

    def stop(self) -> None:
        self.log.close()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def tracemalloc_diff(control: Path, limit: int = 40) -> list[dict[str, Any]]:
    import tracemalloc

    before = tracemalloc.Snapshot.load(str(control / "before.tracemalloc"))
    after = tracemalloc.Snapshot.load(str(control / "after.tracemalloc"))
    stats = after.compare_to(before, "lineno")
    return [
        {
            "where": f"{s.traceback[0].filename}:{s.traceback[0].lineno}",
            "size_diff": s.size_diff,
            "count_diff": s.count_diff,
        }
        for s in stats[:limit]
    ]


def measure(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="conn-memory-") as tmp:
        work = Path(tmp)
        node = Node(args, work)
        try:
            time.sleep(2)
            before_probe = node.probe("before")
            before = {"node": node_memory(node.process.pid), "kernel": kernel_memory()}
            peak = before["node"]["VmRSS"]
            clients = subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--client",
                    "--port",
                    str(node.port),
                    "--clients",
                    str(args.clients),
                    "--mode",
                    args.mode,
                    "--source-addresses",
                    str(args.source_addresses),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            ready = None
            assert clients.stdout is not None
            while ready is None:
                readable, _, _ = select.select([clients.stdout], [], [], 0.05)
                peak = max(peak, node_memory(node.process.pid)["VmRSS"])
                if readable:
                    line = clients.stdout.readline()
                    if not line:
                        raise SystemExit("the client generator failed")
                    ready = json.loads(line)
            settle_until = time.monotonic() + args.settle
            while time.monotonic() < settle_until:
                peak = max(peak, node_memory(node.process.pid)["VmRSS"])
                time.sleep(0.05)
            after = {"node": node_memory(node.process.pid), "kernel": kernel_memory()}
            after_probe = node.probe("after")
            sample = ss_sample(node.port)
            diff = tracemalloc_diff(node.control) if args.probe == "tracemalloc" else None
            if args.keep:
                for snapshot in node.control.glob("*.tracemalloc"):
                    snapshot.rename(args.keep / snapshot.name)
            assert clients.stdin is not None
            clients.stdin.close()
            clients.wait(60)
        finally:
            node.stop()
    n = ready["ready"]

    def per(a: dict[str, Any], b: dict[str, Any]) -> dict[str, float]:
        return {
            k: round((b[k] - a[k]) / n, 1)
            for k in b
            if isinstance(b.get(k), (int, float)) and isinstance(a.get(k), (int, float))
        }

    types_before = Counter(before_probe["types"])
    types_after = Counter(after_probe["types"])
    grown = {
        t: round((types_after[t] - types_before[t]) / n, 3)
        for t in types_after
        if types_after[t] - types_before[t] >= n // 2
    }
    return {
        "mode": args.mode,
        "clients": n,
        "connect_seconds": ready["seconds"],
        "malloc": args.malloc,
        "probe": args.probe,
        "per_connection": {
            "rss_settled": round((after["node"]["VmRSS"] - before["node"]["VmRSS"]) / n, 1),
            "rss_peak": round((peak - before["node"]["VmRSS"]) / n, 1),
            "node": per(before["node"], after["node"]),
            "kernel": per(before["kernel"], after["kernel"]),
            "mallinfo2": per(before_probe["mallinfo2"], after_probe["mallinfo2"]),
            "malloc_info": per(before_probe["malloc_info"], after_probe["malloc_info"]),
            "pymalloc": per(before_probe["pymalloc"], after_probe["pymalloc"]),
            "gc_objects": round((after_probe["gc_objects"] - before_probe["gc_objects"]) / n, 2),
            "objects_by_type": grown,
            **(
                {
                    "tracemalloc_traced": round(
                        (after_probe["tracemalloc_traced"] - before_probe["tracemalloc_traced"])
                        / n,
                        1,
                    )
                }
                if "tracemalloc_traced" in after_probe
                else {}
            ),
        },
        "ss_sample": sample,
        "tracemalloc_top": [
            {**row, "per_conn": round(row["size_diff"] / n, 1)} for row in (diff or [])
        ],
        "absolute": {
            "before": before,
            "after": after,
            "probe_before": {k: v for k, v in before_probe.items() if k != "types"},
            "probe_after": {k: v for k, v in after_probe.items() if k != "types"},
        },
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        control, frames = Path(sys.argv[2]), int(sys.argv[3])
        serve_with_probe(sys.argv[5:], control, frames)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=10_000)
    parser.add_argument("--mode", choices=("clean311", "persistent5"), default="clean311")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--storage", default="memory")
    parser.add_argument(
        "--malloc", choices=("glibc", "arena1", "arena2", "jemalloc"), default="glibc"
    )
    parser.add_argument("--probe", choices=("none", "tracemalloc"), default="none")
    parser.add_argument("--settle", type=float, default=3.0)
    parser.add_argument("--source-addresses", type=int, default=4)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep", type=Path, help="keep the tracemalloc snapshots there")
    # the client generator's own
    parser.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--host", default="127.0.0.1", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--client-id-prefix", default="idle-", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        run_clients(args)
        return
    result = measure(args)
    text = json.dumps(result, indent=1)
    if args.json:
        args.json.write_text(text)
    summary = {k: v for k, v in result.items() if k not in ("absolute", "tracemalloc_top")}
    print(json.dumps(summary, indent=1))
    for row in result["tracemalloc_top"][:25]:
        print(
            f"{row['per_conn']:>9.1f} B/conn {row['count_diff'] / result['clients']:>6.2f} "
            f"blocks/conn  {row['where']}"
        )


if __name__ == "__main__":
    main()
