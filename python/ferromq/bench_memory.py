"""What a node holds under load, from ``/proc``: its processes' resident memory and the
kernel's memory for sockets, which is in no process's RSS.

``ferromq bench --node-pid PID`` samples both while the generator runs (a thread: the
generator releases the GIL) and reports them per connection; ``benches/load`` reads
the same figures. Linux only; every figure is bytes.

- **The node**: VmRSS, RssAnon, RssFile and RssShmem summed over ``PID`` and its
  descendants (a node of shards is a supervisor and one process per shard).
- **The kernel**: ``/proc/net/sockstat``'s TCP sockets in use and pages of socket
  buffers, and the slab caches a TCP socket takes (``/proc/slabinfo``, readable by
  root: the socket, its inode, its file, its dentry, epoll's entries). On one machine
  both ends of each connection are counted there.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "SOCKET_SLABS",
    "Sampler",
    "kernel_memory",
    "node_memory",
    "process_tree",
    "stat_fields",
]

SOCKET_SLABS = (
    "TCP",
    "TCPv6",
    "sock_inode_cache",
    "filp",
    "dentry",
    "eppoll_entry",
    "epitem",
    "skbuff_head_cache",
)
"""The slab caches whose growth a TCP socket causes."""

_NODE_KEYS = ("VmRSS", "RssAnon", "RssFile", "RssShmem")
_PAGE = 4096


def stat_fields(pid: int) -> list[str]:
    """Fields of ``/proc/<pid>/stat`` from the state on (field 3), after the
    parenthesised command name (which may hold spaces)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def process_tree(pid: int) -> list[int]:
    """``pid`` and its live descendants (from every process's parent in /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int(stat_fields(int(entry.name))[1])
                children.setdefault(parent, []).append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue  # exited while /proc was read
    tree, pending = [], [pid]
    while pending:
        current = pending.pop()
        tree.append(current)
        pending.extend(children.get(current, ()))
    return tree


def node_memory(pid: int) -> dict[str, int]:
    """VmRSS, RssAnon, RssFile and RssShmem of ``pid`` and its descendants, summed."""
    total: Counter[str] = Counter(dict.fromkeys(_NODE_KEYS, 0))
    for member in process_tree(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{member}/status").read_text().splitlines():
                key, _, value = line.partition(":")
                if key in _NODE_KEYS:
                    total[key] += int(value.split()[0]) * 1024
    return dict(total)


def kernel_memory() -> dict[str, int]:
    """TCP sockets in use, their buffers (``tcp_buffers``) and the socket slab caches
    (``slab_<name>``, and ``slab_total``; absent when /proc/slabinfo is not readable)."""
    out: dict[str, int] = {}
    for line in Path("/proc/net/sockstat").read_text().splitlines():
        if line.startswith("TCP:"):
            fields = line.split()[1:]
            tcp = dict(zip(fields[::2], map(int, fields[1::2]), strict=True))
            out["tcp_inuse"] = tcp["inuse"]
            out["tcp_buffers"] = tcp["mem"] * _PAGE
    with contextlib.suppress(OSError):
        slabs = 0
        for line in Path("/proc/slabinfo").read_text().splitlines()[2:]:
            name, active, _count, size = line.split()[:4]
            if name in SOCKET_SLABS:
                out[f"slab_{name}"] = int(active) * int(size)
                slabs += int(active) * int(size)
        out["slab_total"] = slabs
    return out


@dataclass
class Sampler:
    """Samples the node (``pid``) and the kernel every ``interval`` seconds from
    :meth:`start` to :meth:`stop`: the figures before, the last ones while running,
    and the node's peak RSS."""

    pid: int
    interval: float = 0.5
    before: dict[str, int] = field(default_factory=dict)
    last: dict[str, int] = field(default_factory=dict)
    peak_rss: int = 0
    _stopping: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _sample(self) -> dict[str, int]:
        sample = {**node_memory(self.pid), **kernel_memory()}
        self.peak_rss = max(self.peak_rss, sample["VmRSS"])
        return sample

    def start(self) -> None:
        self.before = self._sample()
        self._thread = threading.Thread(target=self._run, name="bench-memory", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping.wait(self.interval):
            sample = self._sample()
            # The figures while the most connections were open: the kernel's TCP
            # sockets in use is the count both ends see.
            if sample.get("tcp_inuse", 0) >= self.last.get("tcp_inuse", 0):
                self.last = sample

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()

    def report(self, connections: int) -> dict[str, float]:
        """Each figure's growth while the most connections were open, per connection
        (``connections``: open then), and the node's peak RSS growth per connection."""
        per = max(connections, 1)
        grown = {
            key: (self.last.get(key, value) - value) / per
            for key, value in self.before.items()
            if key != "tcp_inuse"
        }
        grown["peak_VmRSS"] = (self.peak_rss - self.before.get("VmRSS", 0)) / per
        return grown
