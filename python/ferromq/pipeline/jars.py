"""Spark's Kafka source and Avro support, and the table formats' Spark integrations
(Delta Lake, Apache Iceberg): Maven artifacts fetched once, then cached.

pyspark's wheel carries Spark's own jars but not ``spark-sql-kafka-0-10_2.13`` (the Kafka
source) nor ``spark-avro_2.13`` (``format("avro")``, ``from_avro``); they are separate
Maven Central artifacts of the same Spark version. Delta's and Iceberg's jars are built
per Spark minor release (:func:`delta_artifacts`, :func:`iceberg_artifacts`; which ones a
job needs is :mod:`.formats`'). :func:`connector_jars` returns the jars and those of
their dependencies, each fetched on first use into
``~/.cache/ferromq/maven/`` (``$XDG_CACHE_HOME``), laid out as a Maven repository, from
``$FERROMQ_MAVEN_REPOSITORY`` (default Maven Central). The jobs pass the list as
``spark.jars``; ``spark-submit --jars "$(ferromq pipeline jars)"`` passes the same list.

Why not ``spark.jars.packages`` (Ivy): Ivy resolves again at every session start, needs the
network (or a complete Ivy cache) each time, and a failed resolution is a JVM that never
starts, its cause buried in Ivy's report. Here a cached jar costs a ``stat``, a start is
offline once the cache holds the jars, and a download that fails is one line naming the
artifact and the address (:class:`~ferromq.pipeline.errors.PipelineError`).

Resolution: Spark publishes flattened POMs (every dependency's version written out). Each
artifact's dependencies of scope compile or runtime, not optional and not excluded on the
way, are fetched in turn, except those pyspark's own ``jars/`` directory already holds
(Kafka's compression libraries, Hadoop's client, Scala's collections): the copy Spark was
built with wins. Each file is written under a temporary name and renamed into place, so a
half-finished download is never taken for a cached one and concurrent first runs agree.
"""

from __future__ import annotations

import os
import re
import urllib.error
import urllib.request
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ferromq.pipeline.errors import PipelineError

__all__ = [
    "Artifact",
    "cache_directory",
    "connector_jars",
    "delta_artifacts",
    "iceberg_artifacts",
    "resolve",
]

SCALA_BINARY: Final = "2.13"  # Spark 4 is built for Scala 2.13 only
CENTRAL: Final = "https://repo1.maven.org/maven2"
REPOSITORY_ENV: Final = "FERROMQ_MAVEN_REPOSITORY"
FETCH_TIMEOUT: Final = 120.0
_POM: Final = "{http://maven.apache.org/POM/4.0.0}"
_FETCHED_SCOPES: Final = frozenset({"compile", "runtime"})
_ANY: Final = "*"


@dataclass(frozen=True)
class Artifact:
    """A Maven artifact: ``group:name:version``."""

    group: str
    name: str
    version: str

    def __str__(self) -> str:
        return f"{self.group}:{self.name}:{self.version}"

    def path(self, extension: str) -> str:
        """Its file's path in a Maven repository (``org/apache/x/name/1.0/name-1.0.jar``)."""
        folder = f"{self.group.replace('.', '/')}/{self.name}/{self.version}"
        return f"{folder}/{self.name}-{self.version}.{extension}"


@dataclass(frozen=True)
class _Dependency:
    group: str
    name: str
    version: str | None  # None: not written out (managed by a parent POM)
    exclusions: frozenset[tuple[str, str]]


def cache_directory() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "ferromq" / "maven"


def spark_connectors(spark_version: str) -> list[Artifact]:
    """Spark's Kafka source and Avro support for ``spark_version``."""
    return [
        Artifact("org.apache.spark", f"spark-sql-kafka-0-10_{SCALA_BINARY}", spark_version),
        Artifact("org.apache.spark", f"spark-avro_{SCALA_BINARY}", spark_version),
    ]


def delta_artifacts(delta_version: str, spark_version: str) -> list[Artifact]:
    """Delta Lake's Spark integration, the version of the ``delta-spark`` Python package.
    From Delta 4.1 the jar is built per Spark release and named after it
    (``delta-spark_4.1_2.13``); the unsuffixed name is built for the newest Spark that
    Delta release supports and fails on an older one (``NoSuchMethodError`` at the
    first write)."""
    major, minor = (int(part) for part in delta_version.split(".")[:2])
    if (major, minor) < (4, 1):
        return [Artifact("io.delta", f"delta-spark_{SCALA_BINARY}", delta_version)]
    spark = ".".join(spark_version.split(".")[:2])
    return [Artifact("io.delta", f"delta-spark_{spark}_{SCALA_BINARY}", delta_version)]


def iceberg_artifacts(iceberg_version: str, spark_version: str) -> list[Artifact]:
    """Apache Iceberg's Spark runtime: one shaded jar per Spark minor release
    (``iceberg-spark-runtime-4.1_2.13``), no dependencies to fetch."""
    spark = ".".join(spark_version.split(".")[:2])
    name = f"iceberg-spark-runtime-{spark}_{SCALA_BINARY}"
    return [Artifact("org.apache.iceberg", name, iceberg_version)]


def connector_jars(
    spark_version: str, provided: Path, formats: Sequence[Artifact] = ()
) -> list[Path]:
    """The jars the jobs add to pyspark's (``provided``, its ``jars/`` directory):
    the Kafka and Avro connectors, then ``formats`` (the table formats' artifacts)."""
    return resolve([*spark_connectors(spark_version), *formats], provided)


def resolve(roots: Sequence[Artifact], provided: Path) -> list[Path]:
    """The jars of ``roots`` and of their dependencies that ``provided`` lacks, fetched
    into :func:`cache_directory` on first use. Raises :class:`PipelineError`."""
    shipped = {jar.name for jar in provided.glob("*.jar")}
    jars: list[Path] = []
    seen: set[tuple[str, str]] = set()

    def visit(artifact: Artifact, excluded: frozenset[tuple[str, str]]) -> None:
        seen.add((artifact.group, artifact.name))
        jars.append(_fetch(artifact, "jar"))
        for dependency in _dependencies(_fetch(artifact, "pom")):
            if (
                (dependency.group, dependency.name) in seen
                or _excluded(dependency, excluded)
                or _shipped(dependency.name, shipped)
            ):
                continue
            if dependency.version is None:
                raise PipelineError(
                    f"{artifact}: dependency {dependency.group}:{dependency.name} has no "
                    "version in its POM; add its jar to spark.jars by hand"
                )
            found = Artifact(dependency.group, dependency.name, dependency.version)
            visit(found, excluded | dependency.exclusions)

    for root in roots:
        visit(root, frozenset())
    return jars


def _shipped(name: str, jar_names: Iterable[str]) -> bool:
    """Whether pyspark ships a jar of artifact ``name`` (``name-<version>.jar``)."""
    version_follows = re.compile(rf"{re.escape(name)}-\d")
    return any(version_follows.match(jar) for jar in jar_names)


def _excluded(dependency: _Dependency, excluded: frozenset[tuple[str, str]]) -> bool:
    return any(
        group in (_ANY, dependency.group) and name in (_ANY, dependency.name)
        for group, name in excluded
    )


def _text(element: ElementTree.Element, tag: str) -> str | None:
    found = element.find(f"{_POM}{tag}")
    return None if found is None or found.text is None else found.text.strip()


def _dependencies(pom: Path) -> list[_Dependency]:
    """The dependencies ``pom`` declares that a user of the artifact needs at run time."""
    try:
        project = ElementTree.parse(pom).getroot()
    except ElementTree.ParseError as exc:
        raise PipelineError(f"{pom}: not a POM ({exc}); delete it to fetch it again") from None
    found: list[_Dependency] = []
    for element in project.iterfind(f"{_POM}dependencies/{_POM}dependency"):
        scope = _text(element, "scope") or "compile"
        if scope not in _FETCHED_SCOPES or _text(element, "optional") == "true":
            continue
        version = _text(element, "version")
        exclusions = frozenset(
            (_text(exclusion, "groupId") or _ANY, _text(exclusion, "artifactId") or _ANY)
            for exclusion in element.iterfind(f"{_POM}exclusions/{_POM}exclusion")
        )
        found.append(
            _Dependency(
                _text(element, "groupId") or "",
                _text(element, "artifactId") or "",
                None if version is None or "${" in version else version,
                exclusions,
            )
        )
    return found


def _fetch(artifact: Artifact, extension: str) -> Path:
    """The cached file of ``artifact``, downloaded first if missing."""
    target = cache_directory() / artifact.path(extension)
    if target.is_file():
        return target
    repository = os.environ.get(REPOSITORY_ENV) or CENTRAL
    url = f"{repository.rstrip('/')}/{artifact.path(extension)}"
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT) as answer:
            partial.write_bytes(answer.read())
        os.replace(partial, target)
    except (urllib.error.URLError, OSError) as exc:
        partial.unlink(missing_ok=True)
        reason = getattr(exc, "reason", None) or exc
        raise PipelineError(
            f"cannot fetch {artifact} (a connector jar of the pipeline) from {url}: {reason}; "
            f"set {REPOSITORY_ENV} to a Maven mirror when offline"
        ) from None
    return target
