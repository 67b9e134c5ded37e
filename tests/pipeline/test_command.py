"""``ferromq pipeline`` as a user meets it before any JVM starts: ``list``, and each
set-up mistake as one line on stderr with exit status 2 — pyspark not installed (naming
the extra), no Java, ``--format delta`` without delta-spark (naming the package) or
without its jar (naming the artifact and the address), a bad topic pattern (naming the
level), Kafka unreachable (naming the servers), a bad option value."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

from ferromq.cli import main
from ferromq.pipeline.formats import delta_version
from ferromq.pipeline.jars import cache_directory, delta_artifacts
from ferromq.pipeline.session import pipeline_jars
from tests.conftest import ferromq_command
from tests.support.services import free_port

RUN = ["pipeline", "run", "telemetry", "--output", "/nonexistent/out"]


def _error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """The one line ``ferromq argv`` prints on stderr, exiting with status 2."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.strip()


def test_list_names_every_job(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pipeline", "list"]) == 0
    jobs = [line.split("\t")[0] for line in capsys.readouterr().out.splitlines()]
    assert jobs == ["telemetry", "sessions", "sparkplug", "backfill"]


def test_pyspark_missing_names_the_extra(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pyspark", None)  # import and find_spec see none
    assert _error(capsys, RUN) == (
        "ferromq: error: pyspark is not installed: pip install ferromq[pipeline]"
    )


def test_java_missing(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", "")
    assert _error(capsys, RUN).startswith("ferromq: error: Java not found: Spark needs")


def test_delta_without_delta_spark_names_the_package(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "delta", None)  # import and find_spec see none
    assert _error(capsys, [*RUN, "--format", "delta"]) == (
        "ferromq: error: --format delta needs the delta-spark package: "
        "pip install 'ferromq[pipeline]' (delta-spark==4.4.0 for PySpark 4.1)"
    )


def test_a_format_jar_not_fetched_names_it(tmp_path: Path) -> None:
    """A Maven mirror with Spark's connectors (this machine's cache) but not Delta's,
    and an empty cache: the job stops before the JVM, naming the jar it lacks."""
    pipeline_jars()  # Spark's connectors in this machine's cache (fetched if missing)
    repository = tmp_path / "repository"
    repository.mkdir()
    (repository / "org").symlink_to(cache_directory() / "org")
    version = delta_version()
    assert version is not None
    [delta] = delta_artifacts(version, pyspark.__version__)
    env = {
        **os.environ,
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "FERROMQ_MAVEN_REPOSITORY": repository.as_uri(),
    }
    done = subprocess.run(
        [*ferromq_command(), "pipeline", "run", "telemetry", "--directory", str(tmp_path),
         "--output", str(tmp_path / "tables"), "--format", "delta"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(
        f"ferromq: error: cannot fetch {delta} (a connector jar of the pipeline) from "
        f"{repository.as_uri()}/{delta.path('jar')}: "
    )


def test_a_bad_pattern_names_its_level(capsys: pytest.CaptureFixture[str]) -> None:
    assert _error(capsys, [*RUN, "--pattern", "dev/{device}/#/x"]) == (
        "ferromq: error: topic pattern 'dev/{device}/#/x': level 3 '#': '#' must be the last level"
    )


def test_kafka_unreachable_names_the_servers(capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    err = _error(capsys, [*RUN, "--source", "kafka", "--bootstrap", f"127.0.0.1:{port}"])
    assert err.startswith(f"ferromq: error: Kafka unreachable at 127.0.0.1:{port} (")
    assert "refused" in err


def test_a_bad_duration_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*RUN, "--window", "5"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("ferromq pipeline run: error: argument --window: '5' is not a duration")
