"""The SparkSession a job runs in, and the checks before one starts.

Before the JVM starts, :func:`require_spark` turns the usual set-up mistakes into one line
(:class:`~ferromq.pipeline.errors.PipelineError`): pyspark not installed (it is the
``pipeline`` extra), no Java runtime. :func:`spark_session` then builds the session:

- the connector jars (:mod:`ferromq.pipeline.jars`) as ``spark.jars``, unless the JVM is
  already running (the job was started by ``spark-submit``, which set
  ``PYSPARK_GATEWAY_PORT``): then they came with ``spark-submit --jars``, and the
  cluster's master is ``spark-submit --master``'s, unless one is given;
- UTC as the session time zone, so windows and the ``date`` partition do not depend on
  the machine running the driver;
- dynamic partition overwrite, so a back-fill replaces only the dates it wrote;
- the settings of the table formats it writes (``formats``, :mod:`.formats`): Delta
  Lake's extension and catalog, or Iceberg's extension and a Hadoop catalog whose
  warehouse is ``warehouse`` (the job's ``--output``).

A session that is already running (``getOrCreate`` returns it, as in the tests) keeps its
jars, extensions and Iceberg warehouse; only runtime settings change.

The jars are those of the formats asked for only: a Parquet job starts without Delta's
or Iceberg's, and offline if only the Kafka and Avro connectors are cached.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

from ferromq.pipeline.errors import PipelineError
from ferromq.pipeline.formats import (
    PARQUET,
    WAREHOUSE_SETTING,
    TableFormat,
    format_artifacts,
    format_settings,
    require_format,
)
from ferromq.pipeline.jars import connector_jars

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["pipeline_jars", "require_spark", "spark_session"]

INSTALL_HINT: Final = "pip install ferromq[pipeline]"
_GATEWAY_ENV: Final = "PYSPARK_GATEWAY_PORT"  # set by spark-submit for the Python driver


def require_spark() -> None:
    """Raise :class:`PipelineError` when pyspark or a Java runtime is missing."""
    if importlib.util.find_spec("pyspark") is None:
        raise PipelineError(f"pyspark is not installed: {INSTALL_HINT}")
    if os.environ.get(_GATEWAY_ENV):
        return  # spark-submit started the JVM already
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        if not (Path(java_home) / "bin" / "java").is_file():
            raise PipelineError(f"JAVA_HOME={java_home} has no bin/java: point it at a Java 17+")
    elif shutil.which("java") is None:
        raise PipelineError(
            "Java not found: Spark needs a Java 17+ runtime on PATH or in JAVA_HOME "
            "(e.g. apt-get install openjdk-17-jre-headless)"
        )


def pipeline_jars(formats: Sequence[TableFormat] = (PARQUET,)) -> list[Path]:
    """The jars the jobs need beside pyspark's own for ``formats``, fetched on first use."""
    import pyspark

    provided = Path(pyspark.__file__).parent / "jars"
    return connector_jars(
        pyspark.__version__, provided, format_artifacts(formats, pyspark.__version__)
    )


def spark_session(
    app_name: str,
    master: str | None,
    shuffle_partitions: int | None = None,
    conf: dict[str, str] | None = None,
    formats: Sequence[TableFormat] = (PARQUET,),
    warehouse: str | None = None,
) -> SparkSession:
    """The session (``getOrCreate``: an existing one is reused, as in tests, and keeps
    the jars, extensions and catalogs it started with)."""
    require_spark()
    for table_format in formats:
        require_format(table_format)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    settings = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.sources.partitionOverwriteMode": "dynamic",
        "spark.ui.showConsoleProgress": "false",
    }
    if not os.environ.get(_GATEWAY_ENV):
        settings["spark.jars"] = ",".join(str(jar) for jar in pipeline_jars(formats))
    if shuffle_partitions is not None:
        settings["spark.sql.shuffle.partitions"] = str(shuffle_partitions)
    settings.update(format_settings(formats, warehouse, master))
    settings.update(conf or {})
    running = SparkSession.getActiveSession()
    if running is not None and running.conf.get(WAREHOUSE_SETTING, None) is not None:
        # Spark keeps a catalog once loaded: a new warehouse would move table names, not
        # tables. The running one stays; output.table_name refuses an --output outside it.
        settings.pop(WAREHOUSE_SETTING, None)
    if master is not None:
        builder = builder.master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
