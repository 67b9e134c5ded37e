"""PNG plots of a comparison run: throughput and latency per scenario per broker.

``throughput.png``: messages received per second (grouped bars, one group per
scenario, one bar per broker). ``latency.png``: end-to-end p50 (solid) and p99
(hatched) in milliseconds on a log scale. Skipped runs and the ``conn`` scenarios
(which deliver no messages) are left out. Needs matplotlib (the ``bench`` extra).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol


class _Row(Protocol):
    scenario: str
    broker: str
    skipped: str | None
    received_per_s: float
    p50_ms: float
    p99_ms: float
    report: dict[str, Any]


def draw(rows: Sequence[_Row], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = [r for r in rows if r.skipped is None and r.report["scenario"] != "conn"]
    scenarios = list(dict.fromkeys(r.scenario for r in measured))
    brokers = list(dict.fromkeys(r.broker for r in measured))
    if not measured:
        return
    value = {(r.scenario, r.broker): r for r in measured}
    width = 0.8 / len(brokers)

    def bars(ax: Any, metric: str, **style: Any) -> None:
        for b, broker in enumerate(brokers):
            xs = [s + b * width for s in range(len(scenarios))]
            ys = [
                getattr(value[(sc, broker)], metric, 0.0) if (sc, broker) in value else 0.0
                for sc in scenarios
            ]
            ax.bar(
                xs,
                ys,
                width,
                label=f"{broker} {style.pop('suffix', '')}".strip(),
                color=f"C{b}",
                **style,
            )

    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(scenarios)), 4.5))
    bars(ax, "received_per_s")
    ax.set_ylabel("messages received / s")
    ax.set_title("Throughput (generator core 0, broker core 1)")
    ax.set_xticks(
        [s + 0.4 - width / 2 for s in range(len(scenarios))], scenarios, rotation=30, ha="right"
    )
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "throughput.png", dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(scenarios)), 4.5))
    bars(ax, "p99_ms", suffix="p99", alpha=0.45, hatch="//")
    bars(ax, "p50_ms", suffix="p50")
    ax.set_yscale("log")
    ax.set_ylabel("end-to-end latency, ms (log)")
    ax.set_title("Latency p50 (solid) and p99 (hatched)")
    ax.set_xticks(
        [s + 0.4 - width / 2 for s in range(len(scenarios))], scenarios, rotation=30, ha="right"
    )
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(out / "latency.png", dpi=110)
    plt.close(fig)
