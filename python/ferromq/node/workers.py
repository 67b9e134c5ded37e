"""How many shard processes a node runs, and which CPU each one takes.

``[server] workers = "auto"`` means one shard per core the process may use:

- the CPUs of its affinity mask (``os.sched_getaffinity``: ``taskset``, a cpuset
  cgroup, a container's ``--cpuset-cpus``),
- capped by the CPU bandwidth quota of its cgroup (a container's ``--cpus``, systemd's
  ``CPUQuota=``), rounded up: a quota of 1.5 CPUs runs two shards, each busy three
  quarters of the time at worst, rather than one that leaves half a core idle.

The quota is read from the process's cgroup and every ancestor up to the mount (the
tightest one binds), listed in ``/proc/self/cgroup``: cgroup v2 ``cpu.max`` (``"max
100000"`` or ``"<quota> <period>"``), v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``
(quota ``-1``: none) in the hierarchy whose controllers include ``cpu``. In a container
the listed path may be the host's, absent from the container's mount: the directories
that do not exist are skipped, the mount's own root is always looked at.

Shard *k* of *n* pins itself to the *k*-th CPU of the mask when *n* fits the mask
(:func:`shard_cpu`), so shards do not migrate between cores and share their caches only
through the bus; with more shards than CPUs nobody is pinned.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Final

__all__ = [
    "CGROUP_ROOT",
    "available_cores",
    "cpu_quota",
    "pin_shard",
    "shard_cpu",
    "worker_count",
]

CGROUP_ROOT: Final = Path("/sys/fs/cgroup")
_MEMBERSHIP: Final = Path("/proc/self/cgroup")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _upwards(mount: Path, cgroup: str) -> Iterator[Path]:
    """``mount/cgroup`` and each ancestor of it, up to and including ``mount``."""
    parts = [part for part in cgroup.split("/") if part]
    for depth in range(len(parts), -1, -1):
        yield mount.joinpath(*parts[:depth])


def _v2_limit(directory: Path) -> float | None:
    text = _read(directory / "cpu.max")
    if text is None:
        return None
    quota, _, period = text.partition(" ")
    if quota == "max" or not period:
        return None
    return int(quota) / int(period)


def _v1_limit(directory: Path) -> float | None:
    quota, period = _read(directory / "cpu.cfs_quota_us"), _read(directory / "cpu.cfs_period_us")
    if quota is None or period is None or int(quota) < 0 or int(period) <= 0:
        return None
    return int(quota) / int(period)


def _v1_cpu_mount(root: Path, controllers: str) -> Path | None:
    """The v1 hierarchy's mount: ``cpu,cpuacct`` (or a link ``cpu``) under ``root``."""
    for name in (controllers, "cpu", "cpu,cpuacct", "cpuacct,cpu"):
        if (root / name).is_dir():
            return root / name
    return None


def cpu_quota(root: Path = CGROUP_ROOT, membership: str | None = None) -> int | None:
    """Whole CPUs the cgroup quota allows (rounded up, at least 1), or None without a
    quota. ``membership`` is ``/proc/self/cgroup``'s text (read when None)."""
    if membership is None:
        membership = _read(_MEMBERSHIP) or ""
    limits: list[float] = []
    for line in membership.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and not controllers:
            directories, read = _upwards(root, path), _v2_limit
        elif "cpu" in controllers.split(","):
            mount = _v1_cpu_mount(root, controllers)
            if mount is None:
                continue
            directories, read = _upwards(mount, path), _v1_limit
        else:
            continue
        limits += [limit for d in directories if (limit := read(d)) is not None]
    if not limits:
        return None
    return max(1, math.ceil(min(limits)))


def available_cores(root: Path = CGROUP_ROOT, membership: str | None = None) -> int:
    """The CPUs this process may run on, capped by its cgroup's quota; at least 1."""
    cpus = len(os.sched_getaffinity(0))
    quota = cpu_quota(root, membership)
    return max(1, cpus if quota is None else min(cpus, quota))


def worker_count(setting: int | str) -> int:
    """``[server] workers`` as a number of shards: ``"auto"`` is :func:`available_cores`."""
    return available_cores() if setting == "auto" else int(setting)


def shard_cpu(index: int, count: int) -> int | None:
    """The CPU shard ``index`` of ``count`` runs on: the ``index``-th of the affinity
    mask, or None (not pinned) when the shards outnumber the CPUs."""
    cpus = sorted(os.sched_getaffinity(0))
    return cpus[index] if count <= len(cpus) else None


def pin_shard(index: int, count: int) -> None:
    """Run this process (shard ``index`` of ``count``) on its CPU only, if it has one."""
    cpu = shard_cpu(index, count)
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
