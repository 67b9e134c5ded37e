"""``ferromq bench``: drive an MQTT broker with the Rust load generator.

The generator (``ferromq-bench``, exposed as ``ferromq._core.run_bench``) runs the
whole benchmark in its own threads with the GIL released: this module only turns
command-line options into its JSON config, and its JSON report into a summary. Every
option maps to the config key of the same name (``--pub-qos`` → ``pub_qos``); options
left out keep the generator's defaults, so the Rust ``Config`` stays the one schema.

Example: ``ferromq bench p2p --qos 1 --pairs 100 --duration 10s --json out.json``.

With ``--node-pid PID`` (the broker's, on this machine) the report also says what the
node and the kernel hold per connection while the most are open
(:mod:`ferromq.bench_memory`): ``ferromq bench conn --clients 10000
--source-addresses 2 --duration 10s --node-pid PID``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ferromq._core import BenchError, run_bench
from ferromq.bench_memory import Sampler
from ferromq.config import TLS_PROTOCOLS

__all__ = ["SCENARIOS", "format_summary", "parse_duration", "register", "run"]

SCENARIOS = ("p2p", "fanin", "fanout", "sharedsub", "conn")

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}

# Config keys the CLI leaves to the generator unless given; the rest are CLI-only.
_CLI_ONLY = {"command", "command_parser", "handler", "qos", "json", "quiet", "node_pid"}


def parse_duration(text: str) -> float:
    """Seconds in ``text``: ``10``, ``10s``, ``500ms``, ``2m`` or ``1h``."""
    match = _DURATION.match(text)
    if match is None:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (try 10s, 500ms, 2m)")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2) or "s"]


def run(config: Mapping[str, Any]) -> dict[str, Any]:
    """Run one benchmark; ``config`` holds generator config keys, the result is the
    report. Raises ``ValueError`` for an invalid config and ``ferromq._core.BenchError``
    when the run cannot be carried out (the broker refuses connections, ...)."""
    report: dict[str, Any] = json.loads(run_bench(json.dumps(dict(config))))
    return report


def _latency(summary: Mapping[str, float]) -> str:
    if not summary["count"]:
        return "-"
    return (
        f"p50 {summary['p50']:.3f}  p90 {summary['p90']:.3f}  "
        f"p99 {summary['p99']:.3f}  max {summary['max']:.3f} ms"
    )


def format_summary(report: Mapping[str, Any]) -> str:
    """A few human-readable lines about a report."""
    config, clients, delivery = report["config"], report["clients"], report["delivery"]
    tls = config["transport"] in TLS_PROTOCOLS
    lines = [
        f"scenario {report['scenario']}  MQTT {config['protocol']}  "
        f"qos {config['pub_qos']}/{config['sub_qos']}  payload {config['payload']} B  "
        f"publishers {clients['publishers']}  subscribers {clients['subscribers']}",
        f"clients   {clients['connected']}/{clients['planned']} connected "
        f"({clients['connect_per_s']:,.0f}/s), {clients['connect_failures']} failed, "
        f"{clients['connection_errors']} dropped, {clients['reconnects']} reconnects"
        + (f", {clients['tls_resumed']} TLS sessions resumed" if tls else ""),
        f"connect   {_latency(report['connect_latency_ms'])}",
    ]
    if report["scenario"] != "conn":
        lines += [
            f"window    {report['window_s']:.1f} s: sent {report['sent_per_s']:,.0f}/s  "
            f"received {report['received_per_s']:,.0f}/s  "
            f"in+out {report['in_out_per_s']:,.0f}/s",
            f"e2e       {_latency(report['latency_ms'])}",
            f"pub-ack   {_latency(report['ack_latency_ms'])}",
            f"delivery  {delivery['received']:,} of {delivery['expected']:,} expected: "
            f"lost {delivery['lost']:,}  duplicates {delivery['duplicates']:,}  "
            f"reordered {delivery['reordered']:,}  stale {delivery['stale']:,}"
            + ("" if delivery["drain_complete"] else "  (drain timed out)"),
        ]
    generator = report["generator"]
    lines.append(
        f"generator {generator['threads']} threads, {generator['cpu_s']:.2f} s CPU, "
        f"busy {generator['busy']:.0%}"
    )
    lines += [f"error     {e}" for e in clients["first_errors"]]
    memory = report.get("node_memory")
    if memory is not None:
        lines.append(
            f"node      {memory['VmRSS']:,.0f} B RSS per connection (anon "
            f"{memory['RssAnon']:,.0f}, peak {memory['peak_VmRSS']:,.0f}); kernel "
            f"{memory.get('slab_total', float('nan')):,.0f} B of socket slabs per connection "
            f"(both ends when local), buffers {memory['tcp_buffers']:,.0f} B"
        )
    return "\n".join(lines)


def _config_from_args(args: argparse.Namespace) -> dict[str, Any]:
    config = {
        key: value
        for key, value in vars(args).items()
        if key not in _CLI_ONLY and value is not None and value is not False
    }
    if args.qos is not None:
        config.setdefault("pub_qos", args.qos)
        config.setdefault("sub_qos", args.qos)
    config["progress"] = not args.quiet
    return config


def _command(args: argparse.Namespace) -> int:
    sampler = None if args.node_pid is None else Sampler(args.node_pid)
    try:
        if sampler is not None:
            sampler.start()
        report = run(_config_from_args(args))
    except (ValueError, BenchError) as err:
        print(f"ferromq bench: {err}", file=sys.stderr)
        return 2 if isinstance(err, ValueError) else 1
    except FileNotFoundError:
        print(f"ferromq bench: no process {args.node_pid} (--node-pid)", file=sys.stderr)
        return 2
    finally:
        if sampler is not None:
            sampler.stop()
    if sampler is not None:
        report["node_memory"] = sampler.report(report["clients"]["connected"])
    print(format_summary(report))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


def register(subparsers: Any) -> None:
    """Add the ``bench`` subcommand to the ``ferromq`` parser's subparsers."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "bench",
        help="load-test an MQTT broker (p2p, fanin, fanout, sharedsub, conn)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.set_defaults(handler=_command)
    p.add_argument("scenario", choices=SCENARIOS)
    target = p.add_argument_group("broker")
    target.add_argument("--host", help="loopback address of the broker (127.0.0.1)")
    target.add_argument("--port", type=int, help="(1883)")
    target.add_argument("--protocol", type=int, choices=(4, 5), help="MQTT level (4)")
    target.add_argument("--transport", choices=("tcp", "tls", "ws", "wss"), help="(tcp)")
    target.add_argument("--tls-ca-file", metavar="PEM", help="CA of the broker (tls, wss)")
    target.add_argument("--tls-server-name", help="name on the broker's certificate (localhost)")
    target.add_argument("--tls-version", choices=("1.2", "1.3"), help="(1.3)")
    target.add_argument("--ws-path", help="WebSocket upgrade path (/mqtt)")
    load = p.add_argument_group("load")
    load.add_argument("--qos", type=int, choices=(0, 1, 2), help="QoS of both sides (0)")
    load.add_argument("--pub-qos", type=int, choices=(0, 1, 2), help="publish QoS")
    load.add_argument("--sub-qos", type=int, choices=(0, 1, 2), help="subscription QoS")
    load.add_argument("--pairs", type=int, help="p2p publisher/subscriber pairs (10)")
    load.add_argument("--publishers", type=int, help="fanin/fanout/sharedsub (1)")
    load.add_argument("--subscribers", type=int, help="fanin/fanout/sharedsub (1)")
    load.add_argument("--clients", type=int, help="conn: connections to open (100)")
    load.add_argument("--payload", type=int, help="payload bytes, at least 24 (64)")
    load.add_argument("--rate", type=float, help="msgs/s per publisher, 0 = max (0)")
    load.add_argument("--inflight", type=int, help="unacked QoS 1/2 per publisher (16)")
    load.add_argument(
        "--sub-read-rate", type=float, help="bytes/s each subscriber reads, 0 = max (0)"
    )
    load.add_argument("--count", type=int, help="measured msgs per publisher (by time)")
    load.add_argument("--duration", type=parse_duration, help="measured window (10s)")
    load.add_argument("--warmup", type=parse_duration, help="unmeasured lead-in (1s)")
    load.add_argument("--drain-timeout", type=parse_duration, help="wait for stragglers (5s)")
    load.add_argument("--connect-timeout", type=parse_duration, help="(30s)")
    load.add_argument("--connect-rate", type=float, help="connections/s, 0 = unpaced (0)")
    session = p.add_argument_group("sessions")
    session.add_argument("--persistent", action="store_true", help="subscribers keep their session")
    session.add_argument("--session-expiry", type=int, help="MQTT 5 seconds (3600)")
    session.add_argument(
        "--subscriber-reconnect-after",
        type=int,
        metavar="N",
        help="each subscriber drops and reconnects once after N deliveries",
    )
    session.add_argument("--keep-alive", type=int, help="seconds (60)")
    session.add_argument("--topic-prefix", help="(ferromq-bench)")
    session.add_argument("--client-id-prefix", help="(fmqb)")
    gen = p.add_argument_group("generator")
    gen.add_argument("--threads", type=int, help="event-loop threads, 0 = all cores")
    gen.add_argument("--source-addresses", type=int, metavar="N", help="bind 127.0.0.1..N (1)")
    gen.add_argument("--json", type=Path, metavar="PATH", help="write the report here")
    gen.add_argument("--quiet", action="store_true", help="no progress line on stderr")
    gen.add_argument(
        "--node-pid",
        type=int,
        metavar="PID",
        help="the broker's process: report its RSS and the kernel's socket memory",
    )
