"""The ``sparkplug`` job's decode rate, in metrics per second per core (issue 28, item 2).

``--edge-nodes`` edge nodes, each an NBIRTH then NDATA messages of ``--metrics`` metrics by
alias (payloads built with Eclipse Tahu's Python client, ``tahutils``, the test extra),
``--messages`` messages in all. Two figures:

- ``python``: the state machine alone (:class:`~ferromq.pipeline.sparkplug.decode.EdgeNode`:
  protobuf parse, alias resolution, seq check, typed values), one process, no Spark;
- ``spark``: the records as a Parquet table, then :func:`sparkplug_rows` as a batch
  (``applyInPandas`` per edge node: Arrow to pandas, the state machine, pandas back to
  Arrow) into a no-op sink in ``local[1]``, so one core: the job's rate per core.

Best of ``--rounds`` after one warm-up round each.

    python benches/pipeline/sparkplug.py --messages 20000 --metrics 10

Run it alone on the machine: the figures are timings.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import tahutils.tahu.sparkplug_b as tahu
from tahutils.tahu.sparkplug_b import MetricDataType

from ferromq.pipeline.session import spark_session
from ferromq.pipeline.sparkplug.decode import EdgeNode, Rows
from ferromq.pipeline.sparkplug.frames import sparkplug_rows

T0 = datetime(2026, 11, 24, tzinfo=timezone.utc)


def plant(edge_nodes: int, messages: int, metrics: int) -> list[tuple[str, str, bytes]]:
    """(edge node, topic, payload) in send order: each edge node's NBIRTH first, then
    NDATA round robin over the edge nodes."""
    sent = []
    for node in range(edge_nodes):
        tahu.getNodeDeathPayload()
        birth = tahu.getNodeBirthPayload()
        for alias in range(metrics):
            tahu.addMetric(birth, f"m{alias}", alias, MetricDataType.Double, 0.0)
        sent.append((f"e{node}", f"spBv1.0/bench/NBIRTH/e{node}", birth.SerializeToString()))
    seqs = dict.fromkeys(range(edge_nodes), 0)
    for n in range(messages - edge_nodes):
        node = n % edge_nodes
        seqs[node] = (seqs[node] + 1) % 256
        data = tahu.getDdataPayload()
        data.seq = seqs[node]
        data.timestamp += n  # distinct payloads, as a clock's would be
        for alias in range(metrics):
            tahu.addMetric(data, None, alias, MetricDataType.Double, n * 0.5 + alias)
        sent.append((f"e{node}", f"spBv1.0/bench/NDATA/e{node}", data.SerializeToString()))
    return sent


def python_rate(sent: list[tuple[str, str, bytes]], rounds: int) -> tuple[float, int]:
    seconds, rows = [], Rows()
    for _ in range(rounds + 1):
        states: dict[str, EdgeNode] = {}
        rows = Rows()
        started = time.perf_counter()
        for node, topic, payload in sent:
            edge_node = states.get(node) or states.setdefault(node, EdgeNode())
            edge_node.receive(rows, None, None, None, None, topic, payload)
        seconds.append(time.perf_counter() - started)
    return len(rows.metrics) / min(seconds[1:]), len(rows.metrics)


def spark_rate(sent: list[tuple[str, str, bytes]], rounds: int, work: Path) -> float:
    spark = spark_session("ferromq-bench-sparkplug", "local[1]", shuffle_partitions=1)
    records: list[tuple[Any, ...]] = [
        ((n).to_bytes(16, "big"), T0 + timedelta(milliseconds=n), "n1", node, topic,
         payload, "message")
        for n, (node, topic, payload) in enumerate(sent)
    ]  # fmt: skip
    schema = (
        "id binary, time timestamp, node string, client_id string, topic string, "
        "payload binary, kind string"
    )
    spark.createDataFrame(records, schema).write.parquet(str(work / "records"))
    frame = sparkplug_rows(spark.read.parquet(str(work / "records")))
    metrics = frame.where("output = 'metric'").count()
    seconds = []
    for _ in range(rounds + 1):
        started = time.perf_counter()
        frame.write.format("noop").mode("overwrite").save()
        seconds.append(time.perf_counter() - started)
    return metrics / min(seconds[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edge-nodes", type=int, default=100)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--metrics", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sent = plant(args.edge_nodes, args.messages, args.metrics)
    size = sum(len(payload) for _, _, payload in sent) / len(sent)
    rate, metrics = python_rate(sent, args.rounds)
    print(
        f"python: {rate:,.0f} metrics/s ({metrics} metrics in {len(sent)} messages of "
        f"{size:.0f} bytes, one core)"
    )
    work = Path(tempfile.mkdtemp(prefix="ferromq-bench-sparkplug-"))
    try:
        print(f"spark: {spark_rate(sent, args.rounds, work):,.0f} metrics/s (local[1])")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
