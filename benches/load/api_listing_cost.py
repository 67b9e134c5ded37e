"""What an admin API listing costs with 10,000 clients connected (issue 14, "Numbers").

On the set-up of ``admin_load.py`` (one ferromq broker holding ``--clients`` idle
connections, ids ``idle-c<n>``), each listing made ``--requests`` times back to back,
in milliseconds at the client (the engine's page, its JSON and the HTTP round trip):

- ``first_page``: ``GET /api/v1/clients?limit=<--limit>``;
- ``middle_page``: the same from the cursor half-way through the sessions' slots;
- ``search``: ``client_id_contains`` matching one client half-way, following ``next``
  to the end as a client of the API must (one call examines at most 10,000 sessions);

then p2p throughput with a listing of ``--background-limit`` clients (a whole page:
the most JSON one request makes) every second over throughput without
(:func:`admin_load.throughput_ratio`). The goal is at least 98 %.

    python benches/load/api_listing_cost.py --out benches/load/results-api

Run it alone on the machine: the figures are timings.
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from admin_load import (
    IDLE_PREFIX,
    add_arguments,
    get,
    idle_broker,
    throughput_ratio,
    timings_ms,
    write_result,
)


def follow(admin_port: int, query: str) -> tuple[int, int]:
    """Every page of ``/api/v1/clients?<query>``: the calls it took, the clients found."""
    calls, found, cursor = 0, 0, 0
    while cursor is not None:
        page = json.loads(get(admin_port, f"/api/v1/clients?{query}&cursor={cursor}"))
        calls, found, cursor = calls + 1, found + len(page["items"]), page["next"]
    return calls, found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser, "benches/load/results-api")
    parser.add_argument("--requests", type=int, default=50, help="of each listing")
    parser.add_argument("--limit", type=int, default=100, help="clients per page")
    parser.add_argument("--background-limit", type=int, default=1000)
    args = parser.parse_args()
    half = args.clients // 2
    search = f"client_id_contains={IDLE_PREFIX}-c{half}&limit={args.limit}"
    with idle_broker(args) as (broker_port, admin_port):
        listings = {
            "first_page": partial(get, admin_port, f"/api/v1/clients?limit={args.limit}"),
            "middle_page": partial(
                get, admin_port, f"/api/v1/clients?limit={args.limit}&cursor={half}"
            ),
            "search": partial(follow, admin_port, search),
        }
        calls, found = follow(admin_port, search)
        result: dict[str, Any] = {
            "clients": args.clients,
            "requests": args.requests,
            "limit": args.limit,
            "search_calls": calls,
            "search_found": found,
        }
        for name, listing in listings.items():
            timings = timings_ms(listing, args.requests)
            result.update({f"{name}_{key}": value for key, value in timings.items()})
        background = partial(get, admin_port, f"/api/v1/clients?limit={args.background_limit}")
        result["background_limit"] = args.background_limit
        result.update(throughput_ratio(args, broker_port, background, "listings"))
    write_result(args.out, "api_listing_cost.json", result)


if __name__ == "__main__":
    main()
