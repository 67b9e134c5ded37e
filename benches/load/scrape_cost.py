"""What a Prometheus scrape costs with 10,000 clients connected (issue 14, "Numbers").

On the set-up of ``admin_load.py`` (one ferromq broker holding ``--clients`` idle
connections):

1. ``/metrics`` is fetched ``--scrapes`` times back to back: milliseconds per scrape
   (wall time at the client: the collector walking the engine's sessions, the text
   exposition and the HTTP round trip), and the body's size;
2. p2p throughput with a scrape every second over throughput without
   (:func:`admin_load.throughput_ratio`). The goal is at least 98 %.

    python benches/load/scrape_cost.py --out benches/load/results-scrape

Run it alone on the machine: the figures are timings.
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from admin_load import add_arguments, get, idle_broker, throughput_ratio, timings_ms, write_result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser, "benches/load/results-scrape")
    parser.add_argument("--scrapes", type=int, default=50)
    args = parser.parse_args()
    with idle_broker(args) as (broker_port, admin_port):
        scrape = partial(get, admin_port, "/metrics")
        timings = timings_ms(scrape, args.scrapes)
        result: dict[str, Any] = {
            "clients": args.clients,
            "scrapes": args.scrapes,
            **{f"scrape_{key}": value for key, value in timings.items()},
            "body_bytes": len(scrape()),
            **throughput_ratio(args, broker_port, scrape, "scrapes"),
        }
    write_result(args.out, "scrape_cost.json", result)


if __name__ == "__main__":
    main()
