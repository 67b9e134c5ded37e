"""``ferromq ctl``: operate a running broker over its admin API (as ``emqx ctl`` and
``mosquitto_ctrl`` do).

``ferromq ctl [--url URL] [--token T | --token-file F] [--json] GROUP ACTION ...``:

- ``clients list | show ID | kick ID``; ``sessions list | show ID | delete ID``;
- ``subscriptions list ID | add ID FILTER [--qos N] | remove ID FILTER``;
- ``retained list [FILTER] | show TOPIC | delete TOPIC``;
- ``publish TOPIC MESSAGE [--qos N] [--retain] [v5 properties]``;
- ``bans list | add | remove`` (``--client-id`` / ``--username`` / ``--address``);
- ``reload``: what SIGHUP does; ``trace CLIENT on|off``: log every packet of one client;
- ``shards``: each shard of the node (``[server] workers``), ready or not, its clients;
- ``cluster``: the nodes of the cluster (``[cluster]``) and their state, this node's
  cluster traffic (exit status 1 when the node is not clustered).

The URL is ``--url``, else ``FERROMQ_ADMIN_URL``, else the ``[admin]`` address of
``--config FILE`` (the broker's configuration, ``https`` with its ``certfile``), else
:data:`DEFAULT_URL`; the bearer token is ``--token``, ``--token-file`` (its first
line), ``FERROMQ_ADMIN_TOKEN``, or that configuration's ``token`` / ``token_file``.
Answers print as aligned tables (``--json``: the API's JSON as it came). Lists follow
the API's pages (``next``) until ``--limit`` items or the end. A refusal is one line on
stderr with the API's error and exit status 1; a broker that cannot be reached, exit
status 69 (``EX_UNAVAILABLE``). It speaks HTTP with the standard library, so it needs
nothing the broker does not.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_URL", "register"]

DEFAULT_URL = "http://127.0.0.1:8080"  # [admin]'s default host and port
EXIT_REFUSED = 1
EXIT_UNAVAILABLE = 69
_TIMEOUT = 30.0


class CtlError(Exception):
    """A request that did not succeed: the line to print and the exit status."""

    def __init__(self, message: str, status: int = EXIT_REFUSED) -> None:
        super().__init__(message)
        self.status = status


class Client:
    """The admin API at ``url`` (its ``/api/v1`` below it) with a bearer ``token``."""

    def __init__(self, url: str, token: str | None) -> None:
        self.base = url.rstrip("/") + "/api/v1"
        self.token = token

    def call(
        self,
        method: str,
        path: str,
        query: dict[str, object] | None = None,
        body: object = None,
    ) -> Any:
        url = self.base + path
        if query:
            given = {k: _query_value(v) for k, v in query.items() if v is not None}
            url += "?" + urllib.parse.urlencode(given)
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=_TIMEOUT) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raise CtlError(f"{exc.code} {_error_text(exc.read()) or exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise CtlError(f"cannot reach {self.base}: {reason}", EXIT_UNAVAILABLE) from None
        return json.loads(raw) if raw else None

    def pages(self, path: str, query: dict[str, object], limit: int) -> Iterator[dict[str, Any]]:
        """Items of a paginated list, following ``next``, at most ``limit``."""
        cursor: int | None = 0
        count = 0
        while cursor is not None and count < limit:
            page = self.call("GET", path, {**query, "cursor": cursor, "limit": min(limit, 1000)})
            for item in page["items"][: limit - count]:
                count += 1
                yield item
            cursor = page["next"]


def _query_value(value: object) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _error_text(raw: bytes) -> str | None:
    try:
        error = json.loads(raw).get("error")
    except (ValueError, AttributeError):
        return None
    return error if isinstance(error, str) else None


def _quote(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """``rows`` as aligned columns under an upper-case header; None prints as ``-``."""
    cells = [[col.upper() for col in columns]]
    cells += [["-" if row.get(c) is None else str(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in cells
    )


def _fields(item: dict[str, Any]) -> str:
    """One object as ``key: value`` lines; nested lists as indented tables."""
    lines = []
    for key, value in item.items():
        if isinstance(value, list) and value and isinstance(value[0], dict):
            lines.append(f"{key}:")
            lines += ["  " + line for line in table(value, list(value[0])).splitlines()]
        elif isinstance(value, dict):
            lines.append(f"{key}:")
            lines += [f"  {k}: {v}" for k, v in value.items()]
        else:
            lines.append(f"{key}: {'-' if value is None else value}")
    return "\n".join(lines)


Command = Callable[[Client, argparse.Namespace], tuple[object, str]]
"""Runs one command: (the JSON answer, its human-readable text)."""

_CLIENT_COLUMNS = ("client_id", "username", "connected", "peer", "protocol", "subscription_count")
_SESSION_COLUMNS = ("client_id", "connected", "expiry_interval", "expires_in", "queued", "inflight")


def _listing(path: str, columns: Sequence[str]) -> Command:
    def run(client: Client, args: argparse.Namespace) -> tuple[object, str]:
        query: dict[str, object] = {
            "client_id_prefix": args.prefix,
            "client_id_contains": args.contains,
            "username": args.username,
            "connected": args.connected,
        }
        items = list(client.pages(path, query, args.limit))
        return items, table(items, columns)

    return run


def _show(path: str) -> Command:
    def run(client: Client, args: argparse.Namespace) -> tuple[object, str]:
        item = client.call("GET", f"{path}/{_quote(args.id)}")
        return item, _fields(item)

    return run


def _delete(path: str, done: str) -> Command:
    def run(client: Client, args: argparse.Namespace) -> tuple[object, str]:
        client.call("DELETE", f"{path}/{_quote(args.id)}")
        return None, f"{done} {args.id}"

    return run


def _subscriptions_list(client: Client, args: argparse.Namespace) -> tuple[object, str]:
    answer = client.call("GET", f"/clients/{_quote(args.id)}/subscriptions")
    items = answer["items"]
    columns = ("filter", "qos", "no_local", "retain_as_published", "subscription_id")
    return items, table(items, columns)


def _subscriptions_add(client: Client, args: argparse.Namespace) -> tuple[object, str]:
    body = {"filter": args.filter, "qos": args.qos}
    answer = client.call("POST", f"/clients/{_quote(args.id)}/subscriptions", body=body)
    state = "subscribed" if answer["new"] else "replaced the subscription of"
    return answer, f"{state} {args.id} to {args.filter}"


def _subscriptions_remove(client: Client, args: argparse.Namespace) -> tuple[object, str]:
    path = f"/clients/{_quote(args.id)}/subscriptions"
    client.call("DELETE", path, {"filter": args.filter})
    return None, f"unsubscribed {args.id} from {args.filter}"


def _retained_list(client: Client, args: argparse.Namespace) -> tuple[object, str]:
    items = list(client.pages("/retained", {"filter": args.filter}, args.limit))
    return items, table(items, ("topic", "qos", "encoding", "payload"))


def _retained_show(client: Client, args: argparse.Namespace) -> tuple[object, str]:
    item = client.call("GET", f"/retained/{_quote(args.topic)}")
    return item, _fields(item)


def _retained_delete(client: Client, args: argparse.Namespace) -> tuple[object, str]:
    client.call("DELETE", f"/retained/{_quote(args.topic)}")
    return None, f"cleared the retained message of {args.topic}"


def _publish(client: Client, args: argparse.Namespace) -> tuple[object, str]:
    properties: dict[str, object] = {}
    for key in ("content_type", "response_topic", "correlation_data", "message_expiry"):
        if getattr(args, key) is not None:
            properties[key] = getattr(args, key)
    if args.user_property:
        properties["user_properties"] = dict(args.user_property)
    body = {
        "topic": args.topic,
        "payload": args.message,
        "qos": args.qos,
        "retain": args.retain,
        "properties": properties,
    }
    answer = client.call("POST", "/publish", body=body)
    return answer, f"published to {args.topic}: {answer['delivered']} sessions reached"


def _ban_kind(args: argparse.Namespace) -> tuple[str, str]:
    kind = next(k for k in ("client_id", "username", "address") if getattr(args, k) is not None)
    return kind, getattr(args, kind)


def _bans_list(client: Client, args: argparse.Namespace) -> tuple[object, str]:
    answer = client.call("GET", "/bans")
    return answer, table(answer["items"], ("kind", "value", "source"))


def _bans_add(client: Client, args: argparse.Namespace) -> tuple[object, str]:
    kind, value = _ban_kind(args)
    answer = client.call("POST", "/bans", body={"kind": kind, "value": value})
    return answer, f"banned {kind} {value}"


def _bans_remove(client: Client, args: argparse.Namespace) -> tuple[object, str]:
    kind, value = _ban_kind(args)
    client.call("DELETE", "/bans", {"kind": kind, "value": value})
    return None, f"lifted the ban of {kind} {value}"


def _trace(client: Client, args: argparse.Namespace) -> tuple[object, str]:
    body = {"enabled": args.state == "on"}
    answer = client.call("POST", f"/clients/{_quote(args.id)}/trace", body=body)
    return answer, f"trace {args.state} for {args.id}"


_SHARD_STATS = ("clients_connected", "clients_disconnected", "subscriptions", "publish_received")


def _shards(client: Client, args: argparse.Namespace) -> tuple[object, str]:
    items = client.call("GET", "/shards")["items"]
    rows = [
        {
            "shard": item["shard"],
            "ready": item["ready"],
            **{k: (item["stats"] or {}).get(k) for k in _SHARD_STATS},
        }
        for item in items
    ]
    return items, table(rows, ("shard", "ready", *_SHARD_STATS))


def _plugins(client: Client, args: argparse.Namespace) -> tuple[object, str]:
    items = client.call("GET", "/plugins")["items"]
    rows = [
        {
            **{k: item[k] for k in ("name", "intercepts", "running", "messages", "failures")},
            "filters": ",".join(item["filters"]),
            "last_error": item["last_error"],
        }
        for item in items
    ]
    columns = ("name", "filters", "intercepts", "running", "messages", "failures", "last_error")
    return items, table(rows, columns)


def _bridges(client: Client, args: argparse.Namespace) -> tuple[object, str]:
    items = client.call("GET", "/bridges")["items"]
    columns = ("name", "address", "connected", "connects", "failures", "last_error")
    return items, table([{k: item[k] for k in columns} for item in items], columns)


def _cluster(client: Client, args: argparse.Namespace) -> tuple[object, str]:
    answer = client.call("GET", "/cluster")
    rows = [
        {
            "node": node["node_id"],
            "state": node["state"],
            "started": datetime.fromtimestamp(node["started"], timezone.utc).isoformat(
                timespec="seconds"
            ),
            "mqtt": ",".join(node["mqtt"]),
            "admin": node["admin"],
            "adopted_by": node["adopted_by"],
        }
        for node in answer["nodes"]
    ]
    nodes = table(rows, ("node", "state", "started", "mqtt", "admin", "adopted_by"))
    me = f"this node: {answer['node_id']}\n{_fields(answer['figures'])}"
    return answer, f"{nodes}\n\n{me}\n\ncluster (alive nodes):\n{_fields(answer['totals'])}"


def _reload(client: Client, args: argparse.Namespace) -> tuple[object, str]:
    client.call("POST", "/reload")
    return None, "reload requested (the broker's log says what it applied)"


def _token(args: argparse.Namespace) -> str | None:
    if args.token is not None:
        return str(args.token)
    if args.token_file is not None:
        try:
            lines = args.token_file.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise CtlError(f"token file {args.token_file}: {exc.strerror}") from None
        return lines[0].strip() if lines else ""
    return os.environ.get("FERROMQ_ADMIN_TOKEN")


def _from_config(path: Path) -> tuple[str, str | None]:
    """The admin API's URL and token as the broker's configuration at ``path`` gives
    them (a wildcard host is reached on loopback)."""
    from ferromq.admin.auth import load_token  # the admin extra, as the broker's
    from ferromq.config import ConfigError, load_config

    try:
        admin = load_config(path, os.environ).admin
        token = load_token(admin)
    except ConfigError as exc:
        raise CtlError(str(exc)) from None
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(admin.host, admin.host)
    host = f"[{host}]" if ":" in host else host
    return f"{'https' if admin.certfile else 'http'}://{host}:{admin.port}", token


def _client(args: argparse.Namespace) -> Client:
    url, token = args.url or os.environ.get("FERROMQ_ADMIN_URL"), _token(args)
    if args.config is not None:
        configured_url, configured_token = _from_config(args.config)
        url, token = url or configured_url, token if token is not None else configured_token
    return Client(url or DEFAULT_URL, token)


def _run(command: Command) -> Callable[[argparse.Namespace], int]:
    def handler(args: argparse.Namespace) -> int:
        try:
            client = _client(args)
            answer, text = command(client, args)
        except CtlError as exc:
            print(f"ferromq ctl: {exc}", file=sys.stderr)
            return exc.status
        if args.json:
            print(json.dumps(answer, indent=2))
        elif text:
            print(text)
        return 0

    return handler


def _runs(parser: argparse.ArgumentParser, command: Command) -> None:
    """``parser`` runs ``command``; ``--json`` is also taken after the command's words."""
    parser.set_defaults(handler=_run(command))
    # SUPPRESS: absent here, the value ``ferromq ctl --json`` set stays.
    parser.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="JSON")


def _user_property(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _listing_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prefix", help="client ids starting with this")
    parser.add_argument("--contains", help="client ids holding this")
    parser.add_argument("--username", help="this user name only")
    state = parser.add_mutually_exclusive_group()
    state.add_argument("--connected", action="store_const", const=True, help="connected only")
    state.add_argument(
        "--offline", dest="connected", action="store_const", const=False, help="offline only"
    )
    _limit(parser)


def _limit(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--limit", type=int, default=1000, help="at most this many (1000)")


def _ban_options(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--client-id", dest="client_id", help="a client id")
    which.add_argument("--username", help="a user name (as authenticated)")
    which.add_argument("--address", help="an IPv4 / IPv6 address or CIDR network")


def register(commands: Any) -> None:
    """Add ``ctl`` to the CLI's subcommands."""
    ctl = commands.add_parser(
        "ctl",
        help="operate a running broker over its admin API",
        description="Query and act on a running broker through its admin API: clients, "
        "sessions, subscriptions, retained messages, publish, bans, reload. Exit status "
        "1: the broker refused the request; 69: the broker could not be reached.",
    )
    ctl.add_argument(
        "--url", help=f"admin API address (FERROMQ_ADMIN_URL, else --config's, else {DEFAULT_URL})"
    )
    ctl.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="the broker's configuration: its [admin] address and token",
    )
    token = ctl.add_mutually_exclusive_group()
    token.add_argument("--token", help="bearer token (else FERROMQ_ADMIN_TOKEN)")
    token.add_argument("--token-file", type=Path, metavar="FILE", help="file holding the token")
    ctl.add_argument("--json", action="store_true", help="print the API's JSON answer")
    groups = ctl.add_subparsers(dest="group", metavar="GROUP", required=True)

    def group(name: str, help_text: str) -> Any:
        return groups.add_parser(name, help=help_text, description=help_text).add_subparsers(
            dest="action", metavar="ACTION", required=True
        )

    def action(
        actions: Any, name: str, help_text: str, command: Command
    ) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = actions.add_parser(
            name, help=help_text, description=help_text
        )
        _runs(parser, command)
        return parser

    for noun, path, columns, delete in (
        ("clients", "/clients", _CLIENT_COLUMNS, ("kick", "kicked", "Disconnect a client")),
        (
            "sessions",
            "/sessions",
            _SESSION_COLUMNS,
            ("delete", "deleted", "End an offline session"),
        ),
    ):
        actions = group(noun, f"{noun}: list, show, {delete[0]}")
        _listing_options(action(actions, "list", f"List {noun}.", _listing(path, columns)))
        action(actions, "show", f"Show one of the {noun}.", _show(path)).add_argument("id")
        verb, done, text = delete
        action(actions, verb, f"{text}.", _delete(path, done)).add_argument("id")

    subs = group("subscriptions", "a client's subscriptions: list, add, remove")
    action(subs, "list", "List a client's subscriptions.", _subscriptions_list).add_argument("id")
    add = action(subs, "add", "Subscribe a client to a filter.", _subscriptions_add)
    add.add_argument("id")
    add.add_argument("filter")
    add.add_argument("--qos", type=int, choices=(0, 1, 2), default=0)
    remove = action(subs, "remove", "Unsubscribe a client.", _subscriptions_remove)
    remove.add_argument("id")
    remove.add_argument("filter")

    retained = group("retained", "retained messages: list, show, delete")
    listing = action(retained, "list", "List retained messages matching a filter.", _retained_list)
    listing.add_argument("filter", nargs="?", default="#", help="topic filter (default #)")
    _limit(listing)
    action(retained, "show", "Show a topic's retained message.", _retained_show).add_argument(
        "topic"
    )
    action(retained, "delete", "Clear a topic's retained message.", _retained_delete).add_argument(
        "topic"
    )

    pub = groups.add_parser("publish", help="publish a message as the broker")
    _runs(pub, _publish)
    pub.add_argument("topic")
    pub.add_argument("message")
    pub.add_argument("--qos", type=int, choices=(0, 1, 2), default=0)
    pub.add_argument("--retain", action="store_true")
    pub.add_argument("--content-type", dest="content_type")
    pub.add_argument("--response-topic", dest="response_topic")
    pub.add_argument("--correlation-data", dest="correlation_data")
    pub.add_argument("--message-expiry", dest="message_expiry", type=int, metavar="SECONDS")
    pub.add_argument(
        "--user-property",
        dest="user_property",
        type=_user_property,
        action="append",
        metavar="KEY=VALUE",
    )

    bans = group("bans", "bans file: list, add, remove; applied at once")
    action(bans, "list", "List the bans.", _bans_list)
    _ban_options(action(bans, "add", "Ban; matching clients are closed.", _bans_add))
    _ban_options(action(bans, "remove", "Lift a ban.", _bans_remove))

    _runs(groups.add_parser("shards", help="each shard of the node: ready, clients"), _shards)
    _runs(groups.add_parser("cluster", help="the nodes of the cluster: state, addresses"), _cluster)
    _runs(groups.add_parser("plugins", help="the plugins: running, messages, failures"), _plugins)
    _runs(groups.add_parser("bridges", help="the bridges: connected, connects, failures"), _bridges)
    _runs(groups.add_parser("reload", help="reload the configuration (as SIGHUP)"), _reload)
    trace = groups.add_parser("trace", help="log every packet of one client (on) or stop (off)")
    _runs(trace, _trace)
    trace.add_argument("id", metavar="CLIENT")
    trace.add_argument("state", choices=("on", "off"))
