"""`ferromq ctl` as an operator types it, against a real `ferromq serve` with `[admin]`
and a token, with real paho clients on the other side.

What a user would notice: tables of the connected clients and sessions, a kick that
reaches the client as DISCONNECT 0x98, subscriptions added and removed for a client,
messages published and retained messages listed and cleared, bans that close a client
at once, a reload the broker logs; `--json` prints the API's answer; a refusal is one
line and exit status 1, an unreachable broker exit status 69.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.conftest import Starter, ferromq_command
from tests.support.admin_client import TOKEN, ctl, disconnects, ok, token_config
from tests.support.paho_clients import paho_client, property_of, stop, subscribe
from tests.support.services import free_port
from tests.support.waiting import wait_for


def test_clients_and_sessions_listed_shown_kicked_deleted(started: Starter, loop: str) -> None:
    port = free_port()
    broker = started(loop, token_config(port))
    device, _ = paho_client(broker, "meter-7", 5, configure=lambda c: c.username_pw_set("ops"))
    other, _ = paho_client(broker, "meter-8", 4, clean=False)
    subscribe(other, "meters/#", 1)
    lines = ok(port, "clients", "list").splitlines()
    assert lines[0].split() == [
        "CLIENT_ID",
        "USERNAME",
        "CONNECTED",
        "PEER",
        "PROTOCOL",
        "SUBSCRIPTION_COUNT",
    ]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["meter-7"][1:3] == ["ops", "True"] and rows["meter-7"][4] == "5"
    assert rows["meter-8"][1:3] == ["-", "True"] and rows["meter-8"][5] == "1"
    listed = json.loads(ok(port, "clients", "list", "--username", "ops", "--json"))
    assert [item["client_id"] for item in listed] == ["meter-7"]
    shown = ok(port, "clients", "show", "meter-8")
    assert "client_id: meter-8" in shown and "meters/#" in shown

    reasons = disconnects(device)
    assert ok(port, "clients", "kick", "meter-7").strip() == "kicked meter-7"
    assert reasons.get(timeout=5) == "Administrative action"
    stop(other)
    wait_for(lambda: "meter-8" in ok(port, "sessions", "list", "--offline"), "offline session")
    assert ok(port, "sessions", "delete", "meter-8").strip() == "deleted meter-8"
    result = ctl(port, "sessions", "show", "meter-8")
    assert result.returncode == 1
    assert result.stderr.strip() == "ferromq ctl: 404 no session for client id 'meter-8'"
    stop(device)


def test_subscriptions_publish_and_retained(started: Starter, loop: str) -> None:
    port = free_port()
    broker = started(loop, token_config(port))
    worker, inbox = paho_client(broker, "worker", 5)
    assert ok(port, "subscriptions", "add", "worker", "ops/#", "--qos", "1").strip() == (
        "subscribed worker to ops/#"
    )
    assert "ops/#" in ok(port, "subscriptions", "list", "worker")
    published = ok(
        port, "publish", "ops/restart", "now", "--qos", "1", "--content-type", "text/plain"
    )
    assert published.strip() == "published to ops/restart: 1 sessions reached"
    message = inbox.get(timeout=5)
    assert (message.topic, message.payload, message.qos) == ("ops/restart", b"now", 1)
    assert property_of(message, "ContentType") == "text/plain"

    ok(port, "publish", "site/state", "up", "--retain")
    table = ok(port, "retained", "list", "site/#").splitlines()
    assert table[0].split() == ["TOPIC", "QOS", "ENCODING", "PAYLOAD"]
    assert table[1].split() == ["site/state", "0", "utf-8", "up"]
    assert "payload: up" in ok(port, "retained", "show", "site/state")
    ok(port, "retained", "delete", "site/state")
    assert ok(port, "retained", "list", "site/#").splitlines()[1:] == []

    assert ok(port, "subscriptions", "remove", "worker", "ops/#").strip() == (
        "unsubscribed worker from ops/#"
    )
    assert ok(port, "--json", "subscriptions", "list", "worker").strip() == "[]"
    stop(worker)


def test_bans_close_the_client_and_reload_runs(started: Starter, loop: str, tmp_path: Path) -> None:
    bans = tmp_path / "bans.toml"
    bans.write_text("")
    port = free_port()
    broker = started(loop, token_config(port, f'[bans]\nfile = "{bans}"\n'))
    victim, _ = paho_client(broker, "victim", 5)
    reasons = disconnects(victim)
    assert ok(port, "bans", "add", "--client-id", "victim").strip() == "banned client_id victim"
    assert reasons.get(timeout=5) == "Administrative action"
    assert ok(port, "bans", "list").splitlines()[1].split() == ["client_id", "victim", "file"]
    result = ctl(port, "bans", "add", "--client-id", "victim")
    assert result.returncode == 1
    assert result.stderr.strip() == "ferromq ctl: 409 client_id 'victim' is already banned"
    ok(port, "bans", "remove", "--client-id", "victim")
    assert ok(port, "bans", "list").splitlines()[1:] == []
    ok(port, "reload")
    wait_for(lambda: "configuration reloaded" in broker.log(), "the reload is logged")
    stop(victim)


def test_configuration_refusals_and_an_unreachable_broker(
    started: Starter, loop: str, tmp_path: Path
) -> None:
    port = free_port()
    broker = started(loop, token_config(port))
    # The broker's own configuration names the address and the token.
    result = subprocess.run(
        [*ferromq_command(), "ctl", "--config", str(broker.config_path), "clients", "list"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0 and result.stdout.startswith("CLIENT_ID"), result.stderr
    result = ctl(port, "clients", "list", token="wrong")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "ferromq ctl: 401 a valid bearer token is required (Authorization: Bearer <token>)"
    )
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    result = subprocess.run(
        [
            *ferromq_command(),
            "ctl",
            "--url",
            f"http://127.0.0.1:{port}",
            "--token-file",
            str(token_file),
            "clients",
            "list",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0 and result.stdout.startswith("CLIENT_ID"), result.stderr
    closed = free_port()
    result = ctl(closed, "clients", "list")
    assert result.returncode == 69
    assert result.stderr.startswith(f"ferromq ctl: cannot reach http://127.0.0.1:{closed}/api/v1:")


def test_trace_logs_one_clients_packets(started: Starter, loop: str) -> None:
    port = free_port()
    broker = started(loop, token_config(port))
    traced, _ = paho_client(broker, "traced-1", 5)
    other, _ = paho_client(broker, "other-1", 5)
    assert ok(port, "trace", "traced-1", "on").strip() == "trace on for traced-1"
    traced.publish("t/x", b"hello", qos=1).wait_for_publish(5)
    other.publish("t/y", b"unseen", qos=1).wait_for_publish(5)
    wanted = "ferromq.trace packet in client_id=traced-1 type=publish"
    wait_for(lambda: wanted in broker.log(), "the traced PUBLISH is logged")
    assert ok(port, "trace", "traced-1", "off").strip() == "trace off for traced-1"
    # A node's supervisor writes its shards' lines: they may follow the answer.
    wait_for(lambda: "trace off client_id=traced-1" in broker.log(), "trace off logged")
    assert "client_id=other-1 type=publish" not in broker.log()
    for client in (traced, other):
        stop(client)
