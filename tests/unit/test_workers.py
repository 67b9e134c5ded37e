"""``[server] workers``: how many shards "auto" means (python/ferromq/node/workers.py)
and how the setting is read and refused (python/ferromq/config.py).

The cgroup files are written under ``tmp_path`` as the kernel lays them out (v2's
unified hierarchy, v1's ``cpu,cpuacct`` mount), with the ``/proc/self/cgroup`` text
that points into them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.support.commands import run_cli

from ferromq.config import Config, ConfigError, load_config, override_workers, render_toml
from ferromq.node.workers import available_cores, cpu_quota, shard_cpu, worker_count
from ferromq.shard.identity import ShardIdentity

V2_MEMBERSHIP = "0::/system.slice/ferromq.service\n"
V1_MEMBERSHIP = (
    "12:pids:/docker/abc\n4:cpu,cpuacct:/docker/abc\n3:memory:/docker/abc\n0::/docker/abc\n"
)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def test_v2_without_a_quota_is_no_limit(tmp_path: Path) -> None:
    write(tmp_path / "cpu.max", "max 100000")
    write(tmp_path / "system.slice/ferromq.service/cpu.max", "max 100000")
    assert cpu_quota(tmp_path, V2_MEMBERSHIP) is None


@pytest.mark.parametrize(
    ("quota", "cores"), [("200000 100000", 2), ("150000 100000", 2), ("50000 100000", 1)]
)
def test_v2_quota_rounds_up_to_whole_cores(tmp_path: Path, quota: str, cores: int) -> None:
    write(tmp_path / "system.slice/ferromq.service/cpu.max", quota)
    assert cpu_quota(tmp_path, V2_MEMBERSHIP) == cores


def test_v2_the_tightest_ancestor_binds(tmp_path: Path) -> None:
    write(tmp_path / "system.slice/cpu.max", "300000 100000")
    write(tmp_path / "system.slice/ferromq.service/cpu.max", "max 100000")
    assert cpu_quota(tmp_path, V2_MEMBERSHIP) == 3


def test_v2_in_a_container_reads_the_mount_root(tmp_path: Path) -> None:
    # The listed path is the host's; inside the container the mount is the cgroup.
    write(tmp_path / "cpu.max", "400000 100000")
    assert cpu_quota(tmp_path, V2_MEMBERSHIP) == 4


def test_v1_quota_and_period(tmp_path: Path) -> None:
    write(tmp_path / "cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "250000")
    write(tmp_path / "cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000")
    assert cpu_quota(tmp_path, V1_MEMBERSHIP) == 3


def test_v1_minus_one_is_no_limit(tmp_path: Path) -> None:
    write(tmp_path / "cpu,cpuacct/cpu.cfs_quota_us", "-1")
    write(tmp_path / "cpu,cpuacct/cpu.cfs_period_us", "100000")
    assert cpu_quota(tmp_path, V1_MEMBERSHIP) is None


def test_no_cgroup_files_is_no_limit(tmp_path: Path) -> None:
    assert cpu_quota(tmp_path, V2_MEMBERSHIP) is None
    assert cpu_quota(tmp_path, "") is None


def test_available_cores_is_the_affinity_mask_capped_by_the_quota(tmp_path: Path) -> None:
    cpus = len(os.sched_getaffinity(0))
    assert available_cores(tmp_path, V2_MEMBERSHIP) == cpus
    write(tmp_path / "cpu.max", "100000 100000")
    assert available_cores(tmp_path, V2_MEMBERSHIP) == 1
    write(tmp_path / "cpu.max", f"{(cpus + 8) * 100000} 100000")
    assert available_cores(tmp_path, V2_MEMBERSHIP) == cpus


def test_auto_is_the_available_cores_and_a_number_is_itself() -> None:
    assert worker_count("auto") == available_cores()
    assert worker_count(3) == 3


def test_a_shard_is_pinned_only_when_the_shards_fit_the_mask() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    assert [shard_cpu(k, len(cpus)) for k in range(len(cpus))] == cpus
    assert shard_cpu(0, len(cpus) + 1) is None


def test_workers_defaults_to_auto_and_reads_every_spelling(tmp_path: Path) -> None:
    assert Config().server.workers == "auto"
    path = tmp_path / "ferromq.toml"
    path.write_text("[server]\nworkers = 4\n")
    assert load_config(path, {}).server.workers == 4
    assert load_config(None, {"FERROMQ_SERVER__WORKERS": "Auto"}).server.workers == "auto"
    assert load_config(None, {"FERROMQ_SERVER__WORKERS": "2"}).server.workers == 2
    assert override_workers(Config(), "3").server.workers == 3
    assert load_config(path, {"FERROMQ_SERVER__WORKERS": "auto"}).server.workers == "auto"


@pytest.mark.parametrize("value", ['"many"', "0", "-2", "true", "1.5", "5000"])
def test_a_bad_workers_value_names_the_key(tmp_path: Path, value: str) -> None:
    path = tmp_path / "ferromq.toml"
    path.write_text(f"[server]\nworkers = {value}\n")
    with pytest.raises(ConfigError, match=r"server\.workers: expected \"auto\" or an integer"):
        load_config(path, {})


def test_a_bad_workers_override_names_the_variable_or_option() -> None:
    with pytest.raises(ConfigError, match=r'FERROMQ_SERVER__WORKERS: .* got "none"'):
        load_config(None, {"FERROMQ_SERVER__WORKERS": "none"})
    with pytest.raises(ConfigError, match=r'--workers: .* got "0"'):
        override_workers(Config(), "0")


def test_check_config_shows_workers(tmp_path: Path) -> None:
    shown = run_cli("check-config", "--workers", "3")
    assert shown.returncode == 0, shown.stderr
    assert "\n[server]\nworkers = 3\n" in shown.stdout
    assert '\n[server]\nworkers = "auto"\n' in render_toml(Config())
    refused = run_cli("check-config", env={"FERROMQ_SERVER__WORKERS": "lots"})
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and "FERROMQ_SERVER__WORKERS" in refused.stderr


def test_the_identity_travels_through_the_environment() -> None:
    identity = ShardIdentity(
        1, 3, 10, (11, 12, 13), 14, (15, 16, 17), 18, 19, supervisor_pid=7, ticket_keys_fd=20
    )
    assert ShardIdentity.from_env({"FERROMQ_SHARD": identity.to_env()}) == identity
    assert identity.inherited_fds() == (10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20)
    assert ShardIdentity.from_env({}) is None
