"""The same job on a real Spark standalone cluster: a master and a worker (one core, 1 GiB)
started from the pyspark package on loopback, and ``spark-submit`` of
``ferromq/pipeline/submit.py`` unchanged (``backfill`` of the stream files, jars from
``ferromq pipeline jars``). The job runs in an executor the worker launched, and writes
exactly the expected tables. Only the master and worker started here are stopped."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyspark
import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

import ferromq.pipeline.submit
from ferromq.pipeline.session import pipeline_jars
from tests.pipeline.fleet import JOB_OPTIONS, expected_windows, fleet_records
from tests.pipeline.stream_records import T0, write_container
from tests.support.services import free_ports

SPARK_HOME = Path(pyspark.__file__).parent
READY_TIMEOUT = 60.0
SUBMIT_TIMEOUT = 300


@dataclass
class Cluster:
    master_url: str
    work_dir: Path
    processes: list[subprocess.Popen[bytes]]
    logs: list[Path]


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


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    port, ui, worker_ui = free_ports(3)
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": "256m",
    }
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    master_url = f"spark://127.0.0.1:{port}"
    work_dir = tmp_path / "worker"
    logs = [tmp_path / "master.log", tmp_path / "worker.log"]
    processes = [
        _spawn(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(port), "--webui-port", str(ui)],
            logs[0], env,
        )
    ]  # fmt: skip
    try:
        _wait_for(logs[0], "I have been elected leader", processes[0])
        processes.append(
            _spawn(
                [spark_class, "org.apache.spark.deploy.worker.Worker", master_url,
                 "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                 "--webui-port", str(worker_ui), "--work-dir", str(work_dir)],
                logs[1], env,
            )
        )  # fmt: skip
        _wait_for(logs[1], "Successfully registered with master", processes[1])
        yield Cluster(master_url, work_dir, processes, logs)
    finally:
        for process in reversed(processes):
            process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def test_the_job_runs_unchanged_on_a_standalone_cluster(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    first, second = fleet_records()
    stream = tmp_path / "stream"
    write_container(stream, "messages", "00000001", first)
    write_container(stream, "messages", "00000002", second)
    output = tmp_path / "tables"
    jars = ",".join(str(jar) for jar in pipeline_jars())
    submit = [
        str(SPARK_HOME / "bin" / "spark-submit"), "--master", cluster.master_url,
        "--jars", jars, "--conf", "spark.driver.host=127.0.0.1",
        "--conf", "spark.executor.memory=512m", "--conf", "spark.ui.enabled=false",
        ferromq.pipeline.submit.__file__,
        "backfill", "--job", "telemetry", "--source", "files", "--directory", str(stream),
        "--output", str(output), "--start", T0.isoformat(), *JOB_OPTIONS,
    ]  # fmt: skip
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,  # the driver: this environment, ferromq on its path
    }
    done = subprocess.run(submit, capture_output=True, text=True, timeout=SUBMIT_TIMEOUT, env=env)
    assert done.returncode == 0, done.stderr[-5000:]
    # The worker launched an executor for the application: the job ran on the cluster.
    assert list(cluster.work_dir.glob("app-*/*/stderr")), cluster.logs[1].read_text()
    # As a batch, every window is final: the tick's own window is there too.
    tick = spark.read.parquet(str(output / "tumbling")).where("device = 'd9'").count()
    assert tick == 1
    assertDataFrameEqual(
        spark.read.parquet(str(output / "tumbling")).where("device != 'd9'"), expected_windows()
    )
