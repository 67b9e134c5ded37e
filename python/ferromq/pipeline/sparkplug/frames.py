"""The ``sparkplug`` job's Spark side: each edge node's records, in order, through one
:class:`~ferromq.pipeline.sparkplug.decode.EdgeNode`, as a stream or as a batch.

The JVM keeps the records of the Sparkplug namespace (``spBv1.0/...``, less the host
applications' ``STATE`` and the ``NCMD``/``DCMD`` commands, which carry no device data)
and the Kafka values that did not decode, and groups them by edge node (the topic's
group and edge node levels). Per group, Python sorts the records by broker time (then
record id) and feeds them to the edge node's state machine:

- a batch (``backfill``): ``groupBy(...).applyInPandas``, every record of the edge node
  in the range at once, from an empty state;
- a stream: ``applyInPandasWithState``, the state (:meth:`EdgeNode.to_json`) kept by
  Spark between micro-batches in the query's checkpoint, no timeout: it is a few
  hundred bytes per edge node and alias map, kept as long as the edge node may send.

Each call returns one pandas frame of every row kind (``output``: metric, gap, stale,
quarantine); the job's outputs select their kind. A back-fill persists it so the four
tables cost one pass; a stream runs it once per output query, as each query reads the
source on its own (:mod:`ferromq.pipeline.runner`).

Unlike the other jobs' transforms this runs Python per record (protobuf has no JVM
decoder in the pyspark wheel, and the alias state is per edge node and ordered): the
Python workers (``$PYSPARK_PYTHON``, ``python3`` on PATH by default) need ferromq with
its ``sparkplug`` extra (pandas, pyarrow, protobuf).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupStateTimeout

from ferromq.pipeline.errors import PipelineError
from ferromq.pipeline.records import MESSAGE
from ferromq.pipeline.sparkplug.decode import (
    NAMESPACE,
    EdgeNode,
    Quarantined,
    Rows,
)
from ferromq.pipeline.transforms.quarantine import QUARANTINE_COLUMNS, UNDECODABLE

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql.streaming.state import GroupState

__all__ = ["ROW_TYPE", "require_sparkplug", "sparkplug_outputs", "sparkplug_rows"]

INSTALL_HINT: Final = "pip install ferromq[sparkplug]"
OUTPUT: Final = "output"
METRIC: Final = "metric"
GAP: Final = "gap"
STALE: Final = "stale"
QUARANTINE: Final = "quarantine"
_MESSAGE_COLUMNS: Final = (
    "time", "id", "group_id", "edge_node_id", "device_id", "message_type", "seq",
    "payload_time",
)  # fmt: skip
_VALUE_COLUMNS: Final = (
    "int_value", "float_value", "boolean_value", "string_value", "bytes_value",
    "datetime_value",
)  # fmt: skip
ROW_TYPE: Final = (
    "output string, id binary, time timestamp, node string, client_id string, topic string, "
    "payload binary, reason string, group_id string, edge_node_id string, device_id string, "
    "message_type string, seq long, payload_time timestamp, name string, alias long, "
    "datatype string, metric_time timestamp, is_null boolean, int_value long, "
    "float_value double, boolean_value boolean, string_value string, bytes_value binary, "
    "datetime_value timestamp, previous_seq long, missing long"
)
_COLUMNS: Final = tuple(part.strip().split(" ")[0] for part in ROW_TYPE.split(","))
_TIMES: Final = ("time", "payload_time", "metric_time", "datetime_value")
STATE_TYPE: Final = "edge_node string"
METRIC_COLUMNS: Final = (
    *_MESSAGE_COLUMNS, "name", "alias", "datatype", "metric_time", "is_null", *_VALUE_COLUMNS,
)  # fmt: skip
GAP_COLUMNS: Final = (*_MESSAGE_COLUMNS, "previous_seq", "missing")
STALE_COLUMNS: Final = (*_MESSAGE_COLUMNS, "reason", "alias")
_GROUP: Final = "sparkplug_group"
_EDGE_NODE: Final = "sparkplug_edge_node"
_INPUT: Final = ("id", "time", "node", "client_id", "topic", "payload", "kind")


def require_sparkplug() -> None:
    """Raise :class:`PipelineError` when a package the job runs in Python is missing."""
    missing = [name for name in ("pandas", "pyarrow", "google.protobuf") if not _found(name)]
    if missing:
        raise PipelineError(f"the sparkplug job needs {', '.join(missing)}: {INSTALL_HINT}")


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # google is absent altogether
        return False


def _receive_all(edge_node: EdgeNode, records: pd.DataFrame, rows: Rows) -> None:
    ordered = records.sort_values(["time", "id"], kind="stable", na_position="first")
    for record_id, time, node, client_id, topic, payload, kind in ordered[list(_INPUT)].itertuples(
        index=False, name=None
    ):
        if kind is None:  # a Kafka value that is not a record
            rows.quarantine.append(
                Quarantined(record_id, time, node, client_id, topic, payload, UNDECODABLE)
            )
        else:
            edge_node.receive(rows, record_id, time, node, client_id, topic, payload)


def rows_frame(rows: Rows) -> pd.DataFrame:
    """``rows`` as one pandas frame of :data:`ROW_TYPE`."""
    import pandas as pd

    columns: dict[str, list[Any]] = {name: [] for name in _COLUMNS}

    def add(output: str, values: dict[str, Any]) -> None:
        for name, column in columns.items():
            column.append(values.get(name))
        columns[OUTPUT][-1] = output

    for metric in rows.metrics:
        add(
            METRIC,
            {
                **metric.message._asdict(),
                "id": metric.message.record_id,
                "name": metric.name,
                "alias": metric.alias,
                "datatype": metric.datatype,
                "metric_time": metric.metric_time,
                "is_null": metric.is_null,
                **metric.value._asdict(),
            },
        )
    for gap in rows.gaps:
        add(
            GAP,
            {
                **gap.message._asdict(),
                "id": gap.message.record_id,
                "previous_seq": gap.previous_seq,
                "missing": gap.missing,
            },
        )
    for stale in rows.stale:
        add(
            STALE,
            {
                **stale.message._asdict(),
                "id": stale.message.record_id,
                "reason": stale.reason,
                "alias": stale.alias,
            },
        )
    for bad in rows.quarantine:
        add(QUARANTINE, {**bad._asdict(), "id": bad.record_id})
    frame = pd.DataFrame(
        {name: pd.Series(values, dtype=object) for name, values in columns.items()}
    )
    for name in _TIMES:
        frame[name] = pd.to_datetime(frame[name], utc=True)
    return frame


def _batch(records: pd.DataFrame) -> pd.DataFrame:
    rows = Rows()
    _receive_all(EdgeNode(), records, rows)
    return rows_frame(rows)


def _stream(
    key: tuple[Any, ...], batches: Iterable[pd.DataFrame], state: GroupState
) -> Iterator[pd.DataFrame]:
    import pandas as pd

    edge_node = EdgeNode.from_json(state.get[0]) if state.exists else EdgeNode()
    rows = Rows()
    _receive_all(edge_node, pd.concat(list(batches), ignore_index=True), rows)
    state.update((edge_node.to_json(),))
    yield rows_frame(rows)


def sparkplug_rows(records: DataFrame) -> DataFrame:
    """Every row kind of the Sparkplug records in ``records`` (columns :data:`ROW_TYPE`)."""
    require_sparkplug()
    levels = F.split(F.col("topic"), "/")
    level = {number: F.try_element_at(levels, F.lit(number)) for number in (1, 2, 3, 4)}
    sparkplug = (
        (F.col("kind") == MESSAGE)
        & (level[1] == NAMESPACE)
        & (F.coalesce(level[2], F.lit("")) != "STATE")  # a host application's state
        & ~F.coalesce(level[3], F.lit("")).isin("NCMD", "DCMD")  # commands to the node
    )
    keyed = records.where(F.col("kind").isNull() | sparkplug).select(
        *_INPUT, level[2].alias(_GROUP), level[4].alias(_EDGE_NODE)
    )
    grouped = keyed.groupBy(_GROUP, _EDGE_NODE)
    if keyed.isStreaming:
        return grouped.applyInPandasWithState(
            _stream, ROW_TYPE, STATE_TYPE, "append", GroupStateTimeout.NoTimeout
        )
    return grouped.applyInPandas(_batch, ROW_TYPE)


def sparkplug_outputs(records: DataFrame) -> dict[str, DataFrame]:
    """``metrics``, ``seq_gaps``, ``stale`` and ``quarantine`` of ``records``, each
    partitioned by the UTC ``date`` of the broker time."""
    rows = sparkplug_rows(records)
    if not rows.isStreaming:
        rows = rows.persist()  # four tables, one pass through Python

    def of(output: str, columns: tuple[str, ...]) -> DataFrame:
        chosen = rows.where(F.col(OUTPUT) == output)
        return chosen.select(*columns, F.to_date(F.col("time")).alias("date"))

    return {
        "metrics": of(METRIC, METRIC_COLUMNS),
        "seq_gaps": of(GAP, GAP_COLUMNS),
        "stale": of(STALE, STALE_COLUMNS),
        "quarantine": of(QUARANTINE, QUARANTINE_COLUMNS),
    }
