"""A second host on this machine for the partition tests: a network namespace joined to
the root namespace by a veth pair, with the machine's loopback services (the session's
Redis and Kafka) reachable from it at their usual addresses, and a switch that drops the
traffic between the namespace and those services while clients still reach it.

Addresses (``10.231.<n>.0/24``; ``n`` per namespace):

- ``.1`` the root side of the link: where clients connect from;
- ``.2`` the namespace's side: a node there listens on it;
- ``.5`` a second root-side address: the services' relay (tests/cluster/relay.py)
  listens on it and forwards to 127.0.0.1;
- ``.3`` a second namespace-side address: the namespace's relay, on its own
  127.0.0.1 at the services' ports, connects from it to ``.5``.

:meth:`Namespace.cut` adds a blackhole route for ``.5`` inside the namespace and one for
``.3`` in the root: packets between the node and Redis or Kafka are dropped both ways at
the IP layer (nothing is refused: a TCP connection simply hears nothing), and client
traffic between ``.1`` and ``.2`` flows as before. :meth:`Namespace.heal` removes them.
With ``delay_ms`` the namespace's relay holds each chunk that long each way, so the node
is that far from Redis and Kafka (this kernel has no ``netem`` to add it on the link).
Each namespace takes the first ``n`` no address of the root namespace uses, under a lock
(pytest workers make theirs at once). Needs root and ``ip`` (iproute2);
:func:`available` says whether this machine has them.
"""

from __future__ import annotations

import fcntl
import functools
import os
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

RELAY = Path(__file__).with_name("relay.py")
LOCK = Path("/tmp/ferromq-netns.lock")


@functools.cache
def available() -> str | None:
    """None when namespaces can be made here, else why not (found out once: it makes
    and removes a namespace)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "no ip command (iproute2)"
    probe = f"fmqprobe{uuid.uuid4().hex[:6]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns add: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], check=False)
    return None


def _ip(*args: str, ns: str | None = None) -> None:
    command = ["ip", *(["-n", ns] if ns else []), *args]
    subprocess.run(command, check=True, capture_output=True)


@dataclass
class Namespace:
    """A namespace with the services' ``ports`` relayed into it."""

    ports: list[int]
    delay_ms: float = 0.0
    net: int = 0  # chosen at start
    name: str = field(default_factory=lambda: f"fmq{uuid.uuid4().hex[:8]}")
    relays: list[subprocess.Popen[bytes]] = field(default_factory=list)
    cut_now: bool = False

    def address(self, host: int) -> str:
        return f"10.231.{self.net}.{host}"

    @property
    def node_address(self) -> str:
        return self.address(2)

    @property
    def exec_prefix(self) -> list[str]:
        """Put before a command to run it inside the namespace."""
        return ["ip", "netns", "exec", self.name]

    def start(self) -> None:
        with LOCK.open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            used = subprocess.run(
                ["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=True
            ).stdout
            self.net = next(n for n in range(1, 255) if f" 10.231.{n}." not in used)
            self._make()

    def _make(self) -> None:
        outside, inside = f"{self.name}o", f"{self.name}i"
        _ip("netns", "add", self.name)
        try:
            _ip("link", "set", "lo", "up", ns=self.name)
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            _ip("link", "set", inside, "netns", self.name)
            _ip("addr", "add", f"{self.address(1)}/24", "dev", outside)
            _ip("addr", "add", f"{self.address(5)}/32", "dev", outside)
            _ip("link", "set", outside, "up")
            _ip("addr", "add", f"{self.address(2)}/24", "dev", inside, ns=self.name)
            _ip("addr", "add", f"{self.address(3)}/32", "dev", inside, ns=self.name)
            _ip("link", "set", inside, "up", ns=self.name)
            _ip("route", "add", f"{self.address(5)}/32", "dev", inside, ns=self.name)
            _ip("route", "add", f"{self.address(3)}/32", "dev", outside)
            ports = ",".join(map(str, self.ports))
            python = sys.executable
            self._relay([python, str(RELAY), f"{self.address(5)}:{ports}", "127.0.0.1"])
            self._relay(
                [*self.exec_prefix, python, str(RELAY), f"127.0.0.1:{ports}",
                 self.address(5), "--source", self.address(3),
                 "--delay-ms", str(self.delay_ms)]
            )  # fmt: skip
        except BaseException:
            self.stop()
            raise

    def _relay(self, command: list[str]) -> None:
        relay = subprocess.Popen(command, stdout=subprocess.PIPE)
        self.relays.append(relay)
        assert relay.stdout is not None
        line = relay.stdout.readline()
        assert line == b"relaying\n", f"relay {command} did not start: {line!r}"

    def cut(self) -> None:
        """Drop the traffic between the namespace and the services, both ways."""
        _ip("route", "replace", "blackhole", f"{self.address(5)}/32", ns=self.name)
        _ip("route", "replace", "blackhole", f"{self.address(3)}/32")
        self.cut_now = True

    def heal(self) -> None:
        _ip("route", "replace", f"{self.address(5)}/32", "dev", f"{self.name}i", ns=self.name)
        _ip("route", "replace", f"{self.address(3)}/32", "dev", f"{self.name}o")
        self.cut_now = False

    def stop(self) -> None:
        for relay in self.relays:
            relay.kill()
            relay.wait()
        subprocess.run(["ip", "route", "del", f"{self.address(3)}/32"], capture_output=True)
        subprocess.run(["ip", "link", "del", f"{self.name}o"], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
