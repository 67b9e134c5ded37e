"""The connector jars' resolution (:mod:`ferromq.pipeline.jars`) against a Maven
repository laid out on disk (``FERROMQ_MAVEN_REPOSITORY=file://...``): what is fetched
(compile and runtime dependencies, transitively), what is not (test, provided, optional,
excluded, or shipped with pyspark), the cache a second resolution reads offline, and a
missing artifact as one line naming it and its address."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferromq.pipeline.errors import PipelineError
from ferromq.pipeline.jars import Artifact, delta_artifacts, iceberg_artifacts, resolve

POM = """<?xml version="1.0"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <groupId>{group}</groupId><artifactId>{name}</artifactId><version>{version}</version>
  <dependencies>{dependencies}</dependencies>
</project>"""


def dependency(name: str, scope: str = "compile", extra: str = "") -> str:
    return (
        f"<dependency><groupId>g</groupId><artifactId>{name}</artifactId>"
        f"<version>1.0</version><scope>{scope}</scope>{extra}</dependency>"
    )


def publish(repository: Path, name: str, *dependencies: str) -> None:
    artifact = Artifact("g", name, "1.0")
    jar = repository / artifact.path("jar")
    jar.parent.mkdir(parents=True, exist_ok=True)
    jar.write_bytes(b"PK jar of " + name.encode())
    pom = POM.format(group="g", name=name, version="1.0", dependencies="".join(dependencies))
    (repository / artifact.path("pom")).write_text(pom)


@pytest.fixture
def repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    repository = tmp_path / "repository"
    monkeypatch.setenv("FERROMQ_MAVEN_REPOSITORY", repository.as_uri())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return repository


def test_runtime_dependencies_are_fetched_and_cached(repository: Path, tmp_path: Path) -> None:
    exclusion = "<exclusions><exclusion><groupId>g</groupId><artifactId>excluded</artifactId>"
    exclusion += "</exclusion></exclusions>"
    publish(
        repository, "connector",
        dependency("client", extra=exclusion), dependency("pool", "runtime"),
        dependency("tests", "test"), dependency("spark-core", "provided"),
        dependency("extra", extra="<optional>true</optional>"), dependency("shipped"),
    )  # fmt: skip
    publish(repository, "client", dependency("excluded"), dependency("compression"))
    publish(repository, "compression")
    publish(repository, "pool")
    provided = tmp_path / "pyspark-jars"
    provided.mkdir()
    (provided / "shipped-2.3.jar").write_bytes(b"")

    jars = resolve([Artifact("g", "connector", "1.0")], provided)

    assert [jar.name for jar in jars] == [
        "connector-1.0.jar", "client-1.0.jar", "compression-1.0.jar", "pool-1.0.jar",
    ]  # fmt: skip
    assert all(jar.is_relative_to(tmp_path / "cache" / "ferromq" / "maven") for jar in jars)
    assert jars[1].read_bytes() == b"PK jar of client"
    for published in [path for path in repository.rglob("*") if path.is_file()]:
        published.unlink()  # offline now: the cache answers
    assert resolve([Artifact("g", "connector", "1.0")], provided) == jars


def test_a_missing_artifact_is_one_line_naming_it(repository: Path, tmp_path: Path) -> None:
    publish(repository, "connector", dependency("gone"))
    with pytest.raises(PipelineError) as raised:
        resolve([Artifact("g", "connector", "1.0")], tmp_path)
    message = str(raised.value)
    assert message.startswith(
        f"cannot fetch g:gone:1.0 (a connector jar of the pipeline) from "
        f"{repository.as_uri()}/g/gone/1.0/gone-1.0.jar: "
    )
    assert "\n" not in message
    assert not list((tmp_path / "cache").rglob("*gone-1.0.jar*"))  # no half-written file


@pytest.mark.parametrize(
    ("delta", "spark", "jar"),
    [
        ("4.0.1", "4.0.0", "delta-spark_2.13"),
        ("4.4.0", "4.1.1", "delta-spark_4.1_2.13"),
        ("4.3.1", "4.0.1", "delta-spark_4.0_2.13"),
    ],
)
def test_delta_from_4_1_on_is_the_jar_built_for_the_running_spark(
    delta: str, spark: str, jar: str
) -> None:
    # delta-spark_2.13:4.4.0 is built for Spark 4.2 and fails on 4.1.1 at the first
    # write (NoSuchMethodError); delta-spark_4.1_2.13:4.4.0 is the one for 4.1.
    assert delta_artifacts(delta, spark) == [Artifact("io.delta", jar, delta)]


def test_iceberg_is_the_runtime_built_for_the_running_spark() -> None:
    assert iceberg_artifacts("1.12.0", "4.1.1") == [
        Artifact("org.apache.iceberg", "iceberg-spark-runtime-4.1_2.13", "1.12.0")
    ]
