"""``[[validation.rules]]`` (ferromq.validation) on a running ``ferromq serve`` with raw
MQTT 3.1.1 and 5.0 clients over real sockets: a JSON payload a JSON Schema refuses is
not routed and, per ``on_failure``, rejected (v5 PUBACK/PUBREC 0x99), dropped
(acknowledged as usual) or its connection closed (DISCONNECT 0x99, the will
published); Avro payloads written by fastavro are checked against their ``.avsc``;
failures are logged with what failed and where, and counted in ``$SYS``; a SIGHUP reads
the schema files again; a bad schema is one line from ``check-config`` naming its key.
In the suite's two-shard pass the publisher and the subscriber may be on different
shards."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import fastavro
import pytest

from tests.conftest import RunningBroker, Starter, hang_up
from tests.support.commands import one_line_error, run_cli
from tests.support.mqtt_raw import RawClient, sys_value_reaches

PAYLOAD_FORMAT_INVALID = 0x99
NO_MATCHING_SUBSCRIBERS = 0x10

READING: dict[str, Any] = {
    "type": "object",
    "required": ["device", "value"],
    "properties": {
        "device": {"type": "string"},
        "value": {"type": "number", "minimum": -40, "maximum": 125},
    },
    "additionalProperties": False,
}
AVRO_READING = {
    "type": "record",
    "name": "Reading",
    "fields": [
        {"name": "device", "type": "string"},
        {"name": "value", "type": "double"},
        {"name": "unit", "type": {"type": "enum", "name": "Unit", "symbols": ["C", "F"]}},
    ],
}


def _config(tmp_path: Path, on_failure: str, schema: dict[str, Any] | None = None) -> str:
    schema_file = tmp_path / "reading.schema.json"
    schema_file.write_text(json.dumps(schema or READING))
    avsc = tmp_path / "reading.avsc"
    avsc.write_text(json.dumps(AVRO_READING))
    return f"""[[validation.rules]]
filter = "sensors/+/reading"
schema = "{schema_file}"
on_failure = "{on_failure}"

[[validation.rules]]
filter = "avro/#"
schema = "{avsc}"
format = "avro"
on_failure = "{on_failure}"

[sys]
interval = 1
[storage]
backend = "memory"
"""


def _client(broker: RunningBroker, client_id: str, version: int, **fields: Any) -> RawClient:
    client = RawClient(broker.host, broker.port, version)
    assert client.connect(client_id, **fields)["reason_code"] == 0
    return client


def _subscriber(broker: RunningBroker, topic_filter: str) -> RawClient:
    client = _client(broker, "subscriber", 5)
    filters = [{"filter": topic_filter, "qos": 1}]
    client.send({"type": "subscribe", "packet_id": 1, "filters": filters})
    assert client.recv()["type"] == "suback"
    return client


def _publish(client: RawClient, topic: str, payload: bytes, qos: int, packet_id: int) -> None:
    publish = {"type": "publish", "topic": topic, "payload": payload, "qos": qos}
    client.send({**publish, "packet_id": packet_id} if qos else publish)


def _received(subscriber: RawClient) -> list[bytes]:
    """Payloads delivered to ``subscriber`` up to the marker a good reading carries."""
    payloads: list[bytes] = []
    while True:
        packet = subscriber.recv()
        if packet.get("qos"):
            subscriber.send({"type": "puback", "packet_id": packet["packet_id"]})
        if bytes(packet["payload"]) == b"marker":
            return payloads
        payloads.append(bytes(packet["payload"]))


GOOD = json.dumps({"device": "d1", "value": 21.5}).encode()
BAD = [
    (json.dumps({"device": "d1", "value": 400}).encode(), "at /value: greater than 125"),
    (b"21.5", "at /: expected object, got number"),
    (b'{"device": "d1"', "not JSON"),
]


@pytest.mark.parametrize("version", [4, 5])
@pytest.mark.parametrize("qos", [1, 2])
def test_reject_answers_0x99_in_v5_and_routes_only_valid_payloads(
    started: Starter, loop: str, tmp_path: Path, version: int, qos: int
) -> None:
    broker = started(loop, _config(tmp_path, "reject"))
    subscriber = _subscriber(broker, "sensors/#")
    device = _client(broker, "device", version)
    answers = []
    for packet_id, payload in enumerate([GOOD, *(bad for bad, _ in BAD)], start=1):
        _publish(device, "sensors/d1/reading", payload, qos, packet_id)
        ack = device.recv()
        assert ack["type"] == ("puback" if qos == 1 else "pubrec")
        answers.append(ack.get("reason_code", 0))
        if qos == 2:
            device.send({"type": "pubrel", "packet_id": packet_id})
            assert device.recv()["type"] == "pubcomp"
    expected = PAYLOAD_FORMAT_INVALID if version == 5 else 0  # 3.1.1 cannot refuse
    assert answers == [0, expected, expected, expected]
    _publish(device, "sensors/d1/other", b"marker", 0, 0)  # no rule for this topic
    assert _received(subscriber) == [GOOD]
    log = broker.wait_for_log("payload failed validation")
    assert "rule=validation.rules[0]" in log and "at /value: greater than 125" in log
    sys_value_reaches(subscriber, "$SYS/broker/messages/invalid", len(BAD))


def test_drop_acknowledges_as_usual_and_routes_nothing(
    started: Starter, loop: str, tmp_path: Path
) -> None:
    broker = started(loop, _config(tmp_path, "drop"))
    subscriber = _subscriber(broker, "sensors/#")
    device = _client(broker, "device", 5)
    _publish(device, "sensors/d1/reading", BAD[0][0], 1, 1)
    ack = device.recv()
    assert (ack["type"], ack.get("reason_code", 0)) == ("puback", 0)
    _publish(device, "sensors/d1/reading", GOOD, 1, 2)
    assert device.recv()["type"] == "puback"
    _publish(device, "sensors/d1/other", b"marker", 0, 0)
    assert _received(subscriber) == [GOOD]


@pytest.mark.parametrize("version", [4, 5])
def test_disconnect_closes_the_connection_and_publishes_its_will(
    started: Starter, loop: str, tmp_path: Path, version: int
) -> None:
    broker = started(loop, _config(tmp_path, "disconnect"))
    subscriber = _subscriber(broker, "#")
    will = {"topic": "wills/device", "payload": b"gone", "qos": 1, "retain": False}
    device = _client(broker, "device", version, will=will)
    _publish(device, "sensors/d1/reading", BAD[1][0], 1, 1)
    got = device.expect_closed()
    if version == 5:
        assert [p["reason_code"] for p in got if p["type"] == "disconnect"] == [0x99]
    else:
        assert got == []
    will_message = subscriber.recv()
    assert (will_message["topic"], bytes(will_message["payload"])) == ("wills/device", b"gone")


def _avro(record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(AVRO_READING), record)
    return out.getvalue()


def test_avro_payloads_are_checked_against_their_schema(
    started: Starter, loop: str, tmp_path: Path
) -> None:
    broker = started(loop, _config(tmp_path, "reject"))
    subscriber = _subscriber(broker, "avro/#")
    device = _client(broker, "device", 5)
    good = _avro({"device": "d1", "value": 21.5, "unit": "C"})
    other = _avro({"device": "d2", "value": -3.0, "unit": "F"})
    truncated, trailing = good[:-1], good + b"\x00"
    answers = []
    for packet_id, payload in enumerate([good, truncated, trailing, GOOD, other], start=1):
        _publish(device, "avro/readings", payload, 1, packet_id)
        answers.append(device.recv().get("reason_code", 0))
    assert answers == [0, PAYLOAD_FORMAT_INVALID, PAYLOAD_FORMAT_INVALID, PAYLOAD_FORMAT_INVALID, 0]
    _publish(device, "avro/marker", b"marker", 0, 0)
    # "marker" is no Avro datum of the schema: it is refused too, so end on a good one.
    _publish(device, "other", b"x", 0, 0)
    device.send({"type": "publish", "topic": "avro/end", "payload": good, "qos": 1, "packet_id": 9})
    assert device.recv().get("reason_code", 0) == 0
    received: list[tuple[str, bytes]] = []
    while len(received) < 3:
        packet = subscriber.recv()
        subscriber.send({"type": "puback", "packet_id": packet["packet_id"]})
        received.append((packet["topic"], bytes(packet["payload"])))
    assert received == [("avro/readings", good), ("avro/readings", other), ("avro/end", good)]
    assert "the payload ends inside a datum" in broker.wait_for_log("payload failed validation")


def test_sighup_reads_the_schema_files_again(started: Starter, loop: str, tmp_path: Path) -> None:
    broker = started(loop, _config(tmp_path, "reject"))
    device = _client(broker, "device", 5)
    hot = json.dumps({"device": "d1", "value": 400}).encode()
    _publish(device, "sensors/d1/reading", hot, 1, 1)
    assert device.recv()["reason_code"] == PAYLOAD_FORMAT_INVALID
    wider = {**READING, "properties": {**READING["properties"], "value": {"type": "number"}}}
    broker.config_path.write_text(_config(tmp_path, "reject", wider))
    hang_up(broker, "configuration reloaded")
    _publish(device, "sensors/d1/reading", hot, 1, 2)
    assert device.recv()["reason_code"] == NO_MATCHING_SUBSCRIBERS  # routed, to nobody


@pytest.mark.parametrize(
    ("schema", "error"),
    [
        ({"type": "object", "unevaluatedProperties": False}, 'the keyword "unevaluatedProperties"'),
        ({"type": "decimal"}, 'unknown type "decimal"'),
    ],
)
def test_a_bad_schema_is_one_line_naming_its_key(
    tmp_path: Path, schema: dict[str, Any], error: str
) -> None:
    config = tmp_path / "ferromq.toml"
    config.write_text(_config(tmp_path, "reject", schema))
    checked = run_cli("check-config", "-c", str(config))
    one_line_error(checked, 2, error)
    assert checked.stderr.startswith("ferromq: error: validation.rules[0].schema: ")


def test_a_missing_schema_file_is_named(tmp_path: Path) -> None:
    config = tmp_path / "ferromq.toml"
    config.write_text('[[validation.rules]]\nfilter = "a/#"\nschema = "/nowhere/s.json"\n')
    checked = run_cli("check-config", "-c", str(config))
    assert checked.returncode == 2
    assert checked.stderr.strip() == (
        "ferromq: error: validation.rules[0].schema: /nowhere/s.json not found"
    )
