"""The table formats a job writes (``--format``): what each needs before the JVM starts,
and the session settings it needs once it does. The writes themselves are
:mod:`.output`'s; this module imports no pyspark.

- ``parquet`` (default): plain files, nothing beyond pyspark.
- ``delta``: Delta Lake. The ``delta-spark`` Python package (``pip install
  'ferromq[pipeline]'``) names the release; its jar built for the running Spark
  (:func:`~ferromq.pipeline.jars.delta_artifacts`) comes from Maven Central. Its SQL
  extension and its catalog as ``spark_catalog``; on a local master one partition for
  the snapshot's state (the default, 50, makes every commit a 50-task job).
- ``iceberg``: Apache Iceberg, its Spark runtime (one shaded jar, :data:`ICEBERG_VERSION`)
  from Maven Central; no Python package. Its SQL extension and a Hadoop catalog named
  :data:`CATALOG` whose warehouse is the ``--output`` directory: the table of output
  ``name`` is ``ferromq.<name>`` in ``<output>/<name>``, as with the other formats
  (:func:`iceberg_table`). Iceberg writes go through the catalog, never a path.

A session can hold several formats (the tests run Delta and Iceberg in one): their
extensions are listed together in ``spark.sql.extensions``. The catalog, its warehouse
included, is fixed when the session starts.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Iterable
from typing import Final, Literal, TypeAlias

from ferromq.pipeline.errors import PipelineError
from ferromq.pipeline.jars import Artifact, delta_artifacts, iceberg_artifacts

__all__ = [
    "CATALOG",
    "DELTA",
    "ICEBERG",
    "ICEBERG_VERSION",
    "PARQUET",
    "TABLE_FORMATS",
    "WAREHOUSE_SETTING",
    "TableFormat",
    "delta_version",
    "format_artifacts",
    "format_settings",
    "iceberg_table",
    "require_format",
]

TableFormat: TypeAlias = Literal["parquet", "delta", "iceberg"]
PARQUET: Final = "parquet"
DELTA: Final = "delta"
ICEBERG: Final = "iceberg"
TABLE_FORMATS: Final[tuple[TableFormat, ...]] = (PARQUET, DELTA, ICEBERG)

ICEBERG_VERSION: Final = "1.12.0"
CATALOG: Final = "ferromq"
"""The Iceberg catalog's name in the session: tables are ``ferromq.<output name>``."""
WAREHOUSE_SETTING: Final = f"spark.sql.catalog.{CATALOG}.warehouse"
DELTA_HINT: Final = "pip install 'ferromq[pipeline]' (delta-spark==4.4.0 for PySpark 4.1)"
_DELTA_PACKAGE: Final = "delta-spark"
_EXTENSIONS: Final = {
    DELTA: "io.delta.sql.DeltaSparkSessionExtension",
    ICEBERG: "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
}


def delta_version() -> str | None:
    """The installed ``delta-spark`` release, or None."""
    if importlib.util.find_spec("delta") is None:
        return None
    try:
        return importlib.metadata.version(_DELTA_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return None


def require_format(table_format: TableFormat) -> None:
    """Raise :class:`PipelineError` when ``table_format`` lacks its Python package."""
    if table_format == DELTA and delta_version() is None:
        raise PipelineError(f"--format delta needs the delta-spark package: {DELTA_HINT}")


def format_artifacts(formats: Iterable[TableFormat], spark_version: str) -> list[Artifact]:
    """The Maven artifacts ``formats`` add to Spark's (Delta only when installed)."""
    artifacts: list[Artifact] = []
    for table_format in dict.fromkeys(formats):
        if table_format == DELTA:
            version = delta_version()
            if version is not None:
                artifacts += delta_artifacts(version, spark_version)
        elif table_format == ICEBERG:
            artifacts += iceberg_artifacts(ICEBERG_VERSION, spark_version)
    return artifacts


def format_settings(
    formats: Iterable[TableFormat], warehouse: str | None, master: str | None
) -> dict[str, str]:
    """The session settings of ``formats``; ``warehouse`` is Iceberg's (``--output``)."""
    chosen = list(dict.fromkeys(formats))
    settings: dict[str, str] = {}
    extensions = [_EXTENSIONS[name] for name in chosen if name in _EXTENSIONS]
    if extensions:
        settings["spark.sql.extensions"] = ",".join(extensions)
    if DELTA in chosen:
        settings["spark.sql.catalog.spark_catalog"] = (
            "org.apache.spark.sql.delta.catalog.DeltaCatalog"
        )
        if master is not None and master.startswith("local"):
            settings["spark.databricks.delta.snapshotPartitions"] = "1"
    if ICEBERG in chosen:
        if warehouse is None:
            raise PipelineError("--format iceberg needs a warehouse directory (--output)")
        settings[f"spark.sql.catalog.{CATALOG}"] = "org.apache.iceberg.spark.SparkCatalog"
        settings[f"spark.sql.catalog.{CATALOG}.type"] = "hadoop"
        settings[WAREHOUSE_SETTING] = warehouse.rstrip("/")
    return settings


def iceberg_table(warehouse: str | None, output: str, name: str) -> str:
    """The catalog name of output ``name`` under ``output``: ``ferromq.<name>`` when
    ``output`` is the catalog's ``warehouse``, ``ferromq.<a>.<b>.<name>`` when it is
    ``<warehouse>/a/b`` (a namespace per directory level, as Hadoop catalogs lay them
    out). Raises :class:`PipelineError` when ``output`` is outside the warehouse."""
    if warehouse is None:
        raise PipelineError(
            f"--format iceberg: the session has no Iceberg catalog '{CATALOG}' "
            "(start it with spark_session(..., formats=('iceberg',), warehouse=OUTPUT))"
        )
    root, target = warehouse.rstrip("/"), output.rstrip("/")
    if target != root and not target.startswith(f"{root}/"):
        raise PipelineError(
            f"--format iceberg: --output {output} is not in the session's Iceberg "
            f"warehouse {warehouse} (one warehouse per session)"
        )
    levels = [level for level in target[len(root) :].split("/") if level]
    return ".".join(f"`{part}`" for part in (CATALOG, *levels, name))
