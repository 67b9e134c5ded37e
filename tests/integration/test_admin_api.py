"""The admin REST API end to end: a real `ferromq serve` with `[admin]` and a token,
real paho clients, requests over HTTP.

What a user would notice: the clients and sessions the API lists are the ones
connected (peer, protocol, user name, subscriptions, queue depth); a kick reaches a v5
client as DISCONNECT 0x98; a subscription added for a client delivers to it and one
removed stops; retained messages are listed page by page, read and cleared; a message
published through the API reaches paho subscribers with its v5 properties; users, ACL
and bans changed through the API apply to the next CONNECTs (a banned client is
closed at once); errors are JSON with the right status; and schemathesis finds nothing
in the served OpenAPI document the API does not honour.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.core.result import Err

from tests.conftest import Starter
from tests.support.admin_client import TOKEN, api, disconnects, paged_client_ids, token_config
from tests.support.commands import users_add
from tests.support.paho_clients import paho_client, paho_connect, property_of, stop, subscribe
from tests.support.services import free_port
from tests.support.waiting import wait_for


def quoted(text: str) -> str:
    return urllib.parse.quote(text, safe="")


def test_clients_are_listed_shown_and_kicked(started: Starter, loop: str) -> None:
    port = free_port()
    broker = started(loop, token_config(port))
    v5, _ = paho_client(broker, "api-v5", 5, configure=lambda c: c.username_pw_set("ops"))
    subscribe(v5, "plant/+/temp", 1)
    v3, _ = paho_client(broker, "api-v311", 4)
    status, page = api(port, "GET", "/clients")
    assert status == 200 and page["next"] is None
    clients = {item["client_id"]: item for item in page["items"]}
    assert set(clients) == {"api-v5", "api-v311"}
    assert clients["api-v5"]["protocol"] == 5 and clients["api-v311"]["protocol"] == 4
    assert clients["api-v5"]["username"] == "ops" and clients["api-v311"]["username"] is None
    assert clients["api-v5"]["peer"].startswith("127.0.0.1:")
    assert clients["api-v5"]["keep_alive"] == 60 and clients["api-v5"]["connected"]

    status, page = api(port, "GET", "/clients?client_id_contains=v3")
    assert [item["client_id"] for item in page["items"]] == ["api-v311"]
    status, page = api(port, "GET", "/clients?username=ops&connected=true")
    assert [item["client_id"] for item in page["items"]] == ["api-v5"]

    status, detail = api(port, "GET", "/clients/api-v5")
    assert status == 200 and detail["subscription_count"] == 1
    assert detail["subscriptions"] == [
        {
            "filter": "plant/+/temp",
            "qos": 1,
            "no_local": False,
            "retain_as_published": False,
            "retain_handling": 0,
            "subscription_id": None,
        }
    ]

    reasons = disconnects(v5)
    assert api(port, "DELETE", "/clients/api-v5") == (204, None)
    assert reasons.get(timeout=5) == "Administrative action"
    # Its session (expiry 0) ended with the connection.
    wait_for(lambda: api(port, "GET", "/clients/api-v5")[0] == 404, "kicked")
    assert api(port, "DELETE", "/clients/api-v5") == (
        404,
        {"error": "no session for client id 'api-v5'"},
    )
    status, error = api(port, "GET", "/clients/nobody")
    assert status == 404 and error == {"error": "no session for client id 'nobody'"}
    for client in (v5, v3):
        stop(client)


def test_client_pages_follow_next(started: Starter, loop: str) -> None:
    port = free_port()
    broker = started(loop, token_config(port))
    clients = [paho_client(broker, f"page-{n}", 4)[0] for n in range(5)]
    assert sorted(paged_client_ids(port, 2)) == [f"page-{n}" for n in range(5)]
    status, error = api(port, "GET", "/clients?limit=1001")
    assert status == 400 and error == {"error": "limit: expected 1 to 1000, got 1001"}
    for client in clients:
        stop(client)


def test_sessions_show_queue_depth_and_are_deleted_offline(started: Starter, loop: str) -> None:
    port = free_port()
    broker = started(loop, token_config(port))
    keeper, _ = paho_client(broker, "keeper", 4, clean=False)
    subscribe(keeper, "kept/#", 1)
    status, error = api(port, "DELETE", "/sessions/keeper")
    assert status == 409 and error == {"error": "client 'keeper' is connected; kick it first"}
    stop(keeper)
    wait_for(lambda: not api(port, "GET", "/sessions/keeper")[1]["connected"], "offline")
    for n in range(3):
        status, answer = api(
            port, "POST", "/publish", {"topic": "kept/a", "payload": f"m{n}", "qos": 1}
        )
        assert status == 200 and answer == {"delivered": 1}
    status, session = api(port, "GET", "/sessions/keeper")
    assert status == 200
    assert session["queued"] == 3 and session["inflight"] == 0 and not session["connected"]
    assert session["expiry_interval"] > 0 and session["subscriptions"][0]["filter"] == "kept/#"
    assert api(port, "DELETE", "/clients/keeper") == (
        404,
        {"error": "client 'keeper' is not connected"},
    )
    status, page = api(port, "GET", "/sessions?connected=false")
    assert [item["client_id"] for item in page["items"]] == ["keeper"]

    assert api(port, "DELETE", "/sessions/keeper") == (204, None)
    assert api(port, "GET", "/sessions/keeper")[0] == 404
    back, inbox = paho_client(broker, "keeper", 4, clean=False)
    assert api(port, "GET", "/clients/keeper")[1]["subscription_count"] == 0
    subscribe(back, "marker", 0)
    api(port, "POST", "/publish", {"topic": "marker", "payload": "first"})
    # A queue left over would have been sent at CONNACK, before the marker.
    assert inbox.get(timeout=5).payload == b"first"
    stop(back)


def test_subscriptions_made_and_removed_for_a_client(started: Starter, loop: str) -> None:
    port = free_port()
    broker = started(loop, token_config(port))
    worker, inbox = paho_client(broker, "worker", 5)
    subscribe(worker, "ctrl", 0)
    body = {"filter": "ops/#", "qos": 1, "subscription_id": 7}
    status, answer = api(port, "POST", "/clients/worker/subscriptions", body)
    assert status == 201 and answer == {"filter": "ops/#", "new": True}
    pub, _ = paho_client(broker, "ops-pub", 5)
    pub.publish("ops/restart", b"now", qos=1).wait_for_publish(5)
    message = inbox.get(timeout=5)
    assert (message.topic, message.payload, message.qos) == ("ops/restart", b"now", 1)
    assert property_of(message, "SubscriptionIdentifier") == [7]
    status, answer = api(port, "GET", "/clients/worker/subscriptions")
    assert sorted(s["filter"] for s in answer["items"]) == ["ctrl", "ops/#"]
    status, page = api(port, "GET", "/subscriptions")
    assert status == 200 and page["next"] is None
    assert sorted((s["client_id"], s["filter"], s["qos"]) for s in page["items"]) == [
        ("worker", "ctrl", 0),
        ("worker", "ops/#", 1),
    ]
    status, page = api(port, "GET", f"/subscriptions?filter_contains={quoted('ops/')}")
    assert [(s["client_id"], s["subscription_id"]) for s in page["items"]] == [("worker", 7)]
    assert api(port, "GET", "/subscriptions?client_id_prefix=ops-")[1]["items"] == []

    assert api(port, "DELETE", f"/clients/worker/subscriptions?filter={quoted('ops/#')}") == (
        204,
        None,
    )
    pub.publish("ops/restart", b"again", qos=1).wait_for_publish(5)
    pub.publish("ctrl", b"marker", qos=1).wait_for_publish(5)
    assert inbox.get(timeout=5).payload == b"marker"  # ops/restart no longer reached it
    status, error = api(port, "DELETE", f"/clients/worker/subscriptions?filter={quoted('ops/#')}")
    assert status == 404 and "no subscription" in error["error"]
    status, error = api(port, "POST", "/clients/worker/subscriptions", {"filter": "a/#/b"})
    assert status == 400 and "error" in error
    status, error = api(port, "POST", "/clients/ghost/subscriptions", {"filter": "a"})
    assert status == 404
    for client in (worker, pub):
        stop(client)


def test_retained_messages_listed_read_and_cleared(started: Starter, loop: str) -> None:
    port = free_port()
    broker = started(loop, token_config(port))
    pub, _ = paho_client(broker, "retainer", 4)
    for topic in ("site/1/state", "site/2/state", "other/state"):
        pub.publish(topic, topic.encode(), qos=1, retain=True).wait_for_publish(5)
    pub.publish("site/bin", b"\xff\x00", qos=0, retain=True).wait_for_publish(5)
    status, page = api(port, "GET", f"/retained?filter={quoted('site/+/state')}&limit=1")
    assert status == 200 and page["items"][0]["topic"] == "site/1/state" and page["next"]
    status, second = api(
        port, "GET", f"/retained?filter={quoted('site/+/state')}&cursor={page['next']}"
    )
    assert [m["topic"] for m in second["items"]] == ["site/2/state"] and second["next"] is None
    status, message = api(port, "GET", "/retained/site/1/state")
    assert status == 200
    assert message == {
        "topic": "site/1/state",
        "payload": "site/1/state",
        "encoding": "utf-8",
        "qos": 1,
        "properties": {},
    }
    assert api(port, "GET", "/retained/site/bin")[1]["payload"] == "/wA="  # base64
    assert api(port, "DELETE", "/retained/site/1/state") == (204, None)
    assert api(port, "GET", "/retained/site/1/state")[0] == 404
    status, page = api(port, "GET", "/retained")
    assert sorted(m["topic"] for m in page["items"]) == ["other/state", "site/2/state", "site/bin"]
    sub, inbox = paho_client(broker, "late", 4)
    subscribe(sub, "site/1/state", 0)
    subscribe(sub, "other/state", 0)
    assert inbox.get(timeout=5).topic == "other/state"  # nothing was left on site/1/state
    for client in (pub, sub):
        stop(client)


def test_publish_carries_qos_retain_and_v5_properties(started: Starter, loop: str) -> None:
    port = free_port()
    broker = started(loop, token_config(port))
    v5, inbox5 = paho_client(broker, "props-v5", 5)
    subscribe(v5, "cmd/#", 2)
    v3, inbox3 = paho_client(broker, "props-v311", 4)
    subscribe(v3, "cmd/#", 2)
    body = {
        "topic": "cmd/light",
        "payload": "on",
        "qos": 2,
        "retain": True,
        "properties": {
            "content_type": "text/plain",
            "response_topic": "reply/light",
            "correlation_data": "req-42",
            "user_properties": {"origin": "admin"},
            "message_expiry": 300,
        },
    }
    assert api(port, "POST", "/publish", body) == (200, {"delivered": 2})
    got = inbox5.get(timeout=5)
    assert (got.topic, got.payload, got.qos) == ("cmd/light", b"on", 2)
    props: Any = got.properties  # paho's attributes, not in its stubs
    assert props is not None
    assert props.ContentType == "text/plain" and props.ResponseTopic == "reply/light"
    assert props.CorrelationData == b"req-42" and props.UserProperty == [("origin", "admin")]
    assert 0 < props.MessageExpiryInterval <= 300
    assert inbox3.get(timeout=5).payload == b"on"
    status, kept = api(port, "GET", "/retained/cmd/light")
    assert kept["properties"]["content_type"] == "text/plain"
    assert kept["properties"]["correlation_data"] == "cmVxLTQy"  # base64 of req-42
    status, error = api(port, "POST", "/publish", {"topic": "cmd/#", "payload": "x"})
    assert status == 400 and "topic" in error["error"]
    status, error = api(port, "POST", "/publish", {"topic": "t", "payload": "x", "qos": 3})
    assert status == 400 and error == {"error": "body.qos: at most 2"}
    for client in (v5, v3):
        stop(client)


def test_users_acl_and_bans_apply_to_the_next_connects(
    started: Starter, loop: str, tmp_path: Path
) -> None:
    users = tmp_path / "users.toml"
    assert users_add(users, "first", "pw-1").returncode == 0
    acl = tmp_path / "acl.toml"
    acl.write_text('[[rules]]\npermission = "allow"\naction = "all"\ntopic = "#"\n')
    bans = tmp_path / "bans.toml"
    bans.write_text("")
    extra = f'[auth]\nusers_file = "{users}"\n[acl]\nfile = "{acl}"\n[bans]\nfile = "{bans}"\n'
    port = free_port()
    broker = started(loop, token_config(port, extra))

    assert api(port, "POST", "/users", {"name": "second", "password": "pw-2"})[0] == 201
    client, code, _ = paho_connect(broker, "second-1", 5, "second", "pw-2")
    assert str(code) == "Success"
    stop(client)
    status, listed = api(port, "GET", "/users")
    assert [u["name"] for u in listed["items"]] == ["first", "second"]
    assert api(port, "POST", "/users", {"name": "second", "password": "x"})[0] == 409
    assert api(port, "DELETE", "/users/second") == (204, None)
    client, code, _ = paho_connect(broker, "second-2", 5, "second", "pw-2")
    assert str(code) == "Bad user name or password"
    stop(client)

    assert api(port, "GET", "/acl")[1]["rules"] == 1
    acl.write_text(acl.read_text() * 2)
    status, summary = api(port, "POST", "/acl/reload")
    assert status == 200 and summary["rules"] == 2
    acl.write_text("[[rules]]\npermission = 'maybe'\n")
    status, error = api(port, "POST", "/acl/reload")
    assert status == 400 and str(acl) in error["error"]

    victim, code, _ = paho_connect(broker, "victim", 5, "first", "pw-1")
    reasons = disconnects(victim)
    assert api(port, "POST", "/bans", {"kind": "client_id", "value": "victim"})[0] == 201
    assert reasons.get(timeout=5) == "Administrative action"
    stop(victim)
    status, listed = api(port, "GET", "/bans")
    assert listed["items"] == [{"kind": "client_id", "value": "victim", "source": "file"}]
    client, code, _ = paho_connect(broker, "victim", 5, "first", "pw-1")
    assert str(code) == "Banned"
    stop(client)
    assert api(port, "DELETE", "/bans?kind=client_id&value=victim") == (204, None)
    client, code, _ = paho_connect(broker, "victim", 5, "first", "pw-1")
    assert str(code) == "Success"
    stop(client)


def test_a_subscription_the_acl_denies_is_refused(
    started: Starter, loop: str, tmp_path: Path
) -> None:
    acl = tmp_path / "acl.toml"
    acl.write_text(
        '[[rules]]\npermission = "deny"\naction = "subscribe"\ntopic = "secret/#"\n'
        '[[rules]]\npermission = "allow"\naction = "all"\ntopic = "#"\n'
    )
    port = free_port()
    broker = started(loop, token_config(port, f'[acl]\nfile = "{acl}"\n'))
    client, _ = paho_client(broker, "curious", 5)
    status, error = api(port, "POST", "/clients/curious/subscriptions", {"filter": "secret/x"})
    assert (status, error) == (
        403,
        {"error": "the ACL denies client 'curious' the filter 'secret/x'"},
    )
    assert api(port, "GET", "/clients/curious/subscriptions")[1] == {"items": []}
    stop(client)


def test_listeners_stats_and_errors(started: Starter, loop: str) -> None:
    port = free_port()
    broker = started(loop, token_config(port))
    client, _ = paho_client(broker, "counted", 4)
    status, listeners = api(port, "GET", "/listeners")
    assert listeners["items"] == [
        {
            "name": "default",
            "protocol": "tcp",
            "host": "127.0.0.1",
            "port": broker.port,
            "path": None,
            "connections": 1,
        }
    ]
    status, stats = api(port, "GET", "/stats")
    assert status == 200 and stats["clients_connected"] == 1
    assert api(port, "GET", "/stats", token=None)[0] == 401
    status, shards = api(port, "GET", "/shards")
    shard_count = len(shards["items"])  # [server] workers: one, or the test command's
    assert [item["shard"] for item in shards["items"]] == list(range(shard_count))
    assert all(item["ready"] for item in shards["items"])
    assert sum(item["stats"]["clients_connected"] for item in shards["items"]) == 1
    status, error = api(port, "POST", "/bans", {"kind": "client_id", "value": "x"})
    assert status == 409 and error == {"error": "no bans file: set [bans] file"}
    status, error = api(port, "POST", "/publish", {"payload": "x"})
    assert status == 400 and error == {"error": "body: topic is required"}
    stop(client)


def test_openapi_document_names_every_route(started: Starter, loop: str) -> None:
    port = free_port()
    started(loop, token_config(port))
    status, document = api(port, "GET", "/openapi.json")
    assert status == 200 and document["openapi"] == "3.1.0"
    operations = {
        (method.upper(), path) for path, item in document["paths"].items() for method in item
    }
    assert {("GET", "/clients"), ("DELETE", "/clients/{client_id}"), ("POST", "/publish")} <= (
        operations
    )
    for method, path in operations:  # each is routed: no aiohttp 404/405 for any of them
        concrete = path.replace("{client_id}", "nobody").replace("{topic}", "no/topic")
        concrete = concrete.replace("{name}", "nobody")
        status, answer = api(port, method, concrete, {} if method == "POST" else None)
        assert status not in (405, 500) and isinstance(answer, (dict, type(None))), (method, path)


def test_schemathesis_finds_the_api_true_to_its_document(started: Starter, loop: str) -> None:
    """Every operation, a few generated requests each (bounded for CI): no 5xx, and
    every answer has the status, content type and schema the document gives."""

    port = free_port()
    broker = started(loop, token_config(port))
    client, _ = paho_client(broker, "fuzzed", 5)
    base = f"http://127.0.0.1:{port}/api/v1"
    schema = schemathesis.openapi.from_dict(api(port, "GET", "/openapi.json")[1])
    checked = threading.Event()
    for result in schema.get_all_operations():
        if isinstance(result, Err):  # the document does not load: say why
            raise result.err()
        operation = result.ok()

        @given(case=operation.as_strategy())
        @settings(
            max_examples=8,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def run(case: Any) -> None:
            case.call_and_validate(base_url=base, headers={"Authorization": f"Bearer {TOKEN}"})
            checked.set()

        run()
    assert checked.is_set()
    stop(client)
