"""A real Spark standalone cluster for the tests: a master and ``workers`` workers (one
core, 1 GiB each) started from the pyspark package on loopback, and ``spark-submit`` of
``ferromq/pipeline/submit.py`` unchanged with the jars of ``ferromq pipeline jars``.

Each worker has a work directory of its own, where it launches its executors
(``<work_dir>/<app id>/<executor id>/``): which worker ran which executor is read there.
Only the master and workers started here are stopped, the workers first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyspark

import ferromq.pipeline.submit
from ferromq.pipeline.session import pipeline_jars
from tests.support.services import free_ports

SPARK_HOME = Path(pyspark.__file__).parent
READY_TIMEOUT = 60.0
SUBMIT_TIMEOUT = 300


@dataclass
class SparkCluster:
    master_url: str
    work_dirs: list[Path]  # one per worker
    processes: list[subprocess.Popen[bytes]]
    logs: list[Path]  # the master's, then each worker's


def _spawn(argv: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)


def _wait_for(log: Path, text: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        if process.poll() is not None:
            break
        time.sleep(0.2)
    raise AssertionError(f"no {text!r} in {log}:\n{log.read_text(errors='replace')[-3000:]}")


def _environment() -> dict[str, str]:
    return {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": "256m",
        "PYSPARK_PYTHON": sys.executable,  # the driver: this environment, ferromq on its path
    }


@contextmanager
def standalone(directory: Path, workers: int = 1) -> Iterator[SparkCluster]:
    """A master and ``workers`` workers registered with it, logs and work directories
    under ``directory``; all stopped on leaving."""
    directory.mkdir(parents=True, exist_ok=True)
    port, ui, *worker_uis = free_ports(2 + workers)
    env = _environment()
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    master_url = f"spark://127.0.0.1:{port}"
    logs = [directory / "master.log"]
    processes = [
        _spawn(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(port), "--webui-port", str(ui)],
            logs[0], env,
        )
    ]  # fmt: skip
    work_dirs = [directory / f"worker-{n}" for n in range(workers)]
    try:
        _wait_for(logs[0], "I have been elected leader", processes[0])
        for n, worker_ui in enumerate(worker_uis):
            logs.append(directory / f"worker-{n}.log")
            processes.append(
                _spawn(
                    [spark_class, "org.apache.spark.deploy.worker.Worker", master_url,
                     "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                     "--webui-port", str(worker_ui), "--work-dir", str(work_dirs[n])],
                    logs[-1], env,
                )
            )  # fmt: skip
        for log, process in zip(logs[1:], processes[1:], strict=True):
            _wait_for(log, "Successfully registered with master", process)
        yield SparkCluster(master_url, work_dirs, processes, logs)
    finally:
        for process in reversed(processes):
            process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def submit_command(
    master_url: str, job: list[str], conf: dict[str, str] | None = None
) -> list[str]:
    """spark-submit of ferromq's ``submit.py`` running ``job`` (``ferromq pipeline run``'s
    arguments) on ``master_url``: its jars, the driver on loopback, no UI."""
    settings = {
        "spark.driver.host": "127.0.0.1",
        "spark.executor.memory": "512m",
        "spark.ui.enabled": "false",
        **(conf or {}),
    }
    jars = ",".join(str(jar) for jar in pipeline_jars())
    return [
        str(SPARK_HOME / "bin" / "spark-submit"), "--master", master_url, "--jars", jars,
        *(word for key, value in settings.items() for word in ("--conf", f"{key}={value}")),
        ferromq.pipeline.submit.__file__, *job,
    ]  # fmt: skip


def spark_submit(
    cluster: SparkCluster, job: list[str], conf: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run :func:`submit_command` on ``cluster`` to its end, its output kept in
    ``spark-submit.log`` beside the master's; fails with its tail unless it exits 0."""
    done = subprocess.run(
        submit_command(cluster.master_url, job, conf),
        capture_output=True,
        text=True,
        timeout=SUBMIT_TIMEOUT,
        env=_environment(),
    )
    log = cluster.logs[0].with_name("spark-submit.log")
    log.write_text(done.stdout + done.stderr)
    assert done.returncode == 0, f"{log}:\n{done.stderr[-5000:]}"
    return done


def tasks_per_executor(event_log_dir: Path) -> Counter[str]:
    """The tasks each executor (by id) ended, read from the event logs of the
    applications that wrote into ``event_log_dir`` (``spark.eventLog.dir``), written
    uncompressed (``spark.eventLog.compress=false``; rolled or not)."""
    tasks: Counter[str] = Counter()
    for log in event_log_dir.rglob("*"):
        if not log.is_file() or log.name.startswith(".") or not log.stat().st_size:
            continue
        for line in log.read_text().splitlines():
            event = json.loads(line)
            if event["Event"] == "SparkListenerTaskEnd":
                tasks[event["Task Info"]["Executor ID"]] += 1
    return tasks


def executors_of(work_dir: Path) -> set[str]:
    """The executor ids a worker launched (``<work_dir>/<app id>/<executor id>/``)."""
    return {path.name for path in work_dir.glob("app-*/*") if path.is_dir()}
