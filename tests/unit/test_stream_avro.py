"""The Rust encoder of stream records matches ``record-v1.avsc``: records the engine
makes from real CONNECT / SUBSCRIBE / PUBLISH bytes (fed through its C read entry, as
the IO layer does) are framed as an Avro object container file with the binding's
header and blocks, and fastavro reads them back against ``ferromq.stream.schema_text()``
field by field, v5 properties included."""

from __future__ import annotations

import ctypes
import io
import json
from dataclasses import replace
from typing import Any, cast

import fastavro
import pytest

from ferromq import codec
from ferromq._core import Engine, StreamBatch, avro_container_header
from ferromq.config import Config, StorageConfig, StreamConfig
from ferromq.engine import engine_from_config
from ferromq.stream import schema_text
from ferromq.stream.files import read_long

SYNC = bytes(range(16))
WALL_MS = 1_763_000_000_000
CAPSULE_NAME = b"ferromq._core.RawFeed"
_FEED = ctypes.CFUNCTYPE(
    ctypes.c_size_t,
    ctypes.c_void_p,
    ctypes.c_uint32,
    ctypes.c_char_p,
    ctypes.c_size_t,
    ctypes.c_uint64,
    ctypes.POINTER(ctypes.c_uint8),
)


class _RawFeed(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint32),
        ("size", ctypes.c_uint32),
        ("engine", ctypes.c_void_p),
        ("feed", _FEED),
    ]


class Wire:
    """One connection fed through the engine's raw read entry."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._capsule = engine.raw_feed()
        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype = ctypes.c_void_p
        get.argtypes = [ctypes.py_object, ctypes.c_char_p]
        self._raw = _RawFeed.from_address(get(self._capsule, CAPSULE_NAME))
        self.conn = engine.open(0)

    def send(self, packet: dict[str, Any]) -> None:
        data = codec.encode(packet, 5)
        held = ctypes.c_uint8(0)
        used = self._raw.feed(self._raw.engine, self.conn, data, len(data), 0, ctypes.byref(held))
        assert used == len(data)
        self.engine.take_output()


@pytest.fixture
def engine() -> Engine:
    stream = replace(StreamConfig(), enabled=True, node="node-a", key="level:1")
    engine = engine_from_config(Config(storage=StorageConfig(backend="memory"), stream=stream))
    engine.set_wall_clock(WALL_MS, 0)
    return engine


def read_file(batch: StreamBatch, kind: str) -> list[dict[str, Any]]:
    data = avro_container_header(SYNC) + batch.avro_block(kind, SYNC)  # type: ignore[arg-type]
    reader = fastavro.reader(io.BytesIO(data))
    assert reader.metadata["avro.codec"] == "null"
    assert json.loads(reader.metadata["avro.schema"]) == json.loads(schema_text())
    records = list(reader)
    assert all(isinstance(record, dict) for record in records)
    return cast(list[dict[str, Any]], records)


def test_a_v5_publish_reads_back_field_by_field(engine: Engine) -> None:
    client = Wire(engine)
    client.send(
        {"type": "connect", "client_id": "dev-7", "username": "alice", "protocol_version": 5}
    )
    properties = [
        ("payload_format_indicator", 1),
        ("content_type", "application/json"),
        ("response_topic", "reply/dev-7"),
        ("correlation_data", b"\x00\xff"),
        ("user_property", ("k", "v1")),
        ("user_property", ("k", "v2")),
    ]
    client.send(
        {
            "type": "publish",
            "topic": "site/dev-7/temp",
            "payload": b'{"t":21.5}',
            "qos": 1,
            "packet_id": 1,
            "retain": True,
            "properties": properties,
        }
    )
    batch = engine.take_stream()
    assert batch is not None
    assert (batch.number, batch.message_count, batch.event_count) == (1, 1, 1)
    (message,) = read_file(batch, "messages")
    assert message == {
        "schema_version": 1,
        "id": message["id"],
        "kind": "message",
        "time": message["time"],
        "node": "node-a",
        "listener": None,
        "client_id": "dev-7",
        "username": "alice",
        "topic": "site/dev-7/temp",
        "payload": b'{"t":21.5}',
        "qos": 1,
        "retain": True,
        "content_type": "application/json",
        "payload_format": 1,
        "response_topic": "reply/dev-7",
        "correlation_data": b"\x00\xff",
        "user_properties": [{"key": "k", "value": "v1"}, {"key": "k", "value": "v2"}],
        "reason": None,
        "reason_code": None,
        "peer": None,
        "protocol_version": None,
        "keep_alive": None,
        "clean_start": None,
        "session_expiry": None,
    }
    assert len(message["id"]) == 16
    assert message["id"][8:] == (1).to_bytes(8, "big")  # after the connected event's 0
    assert int(message["time"].timestamp() * 1000) == WALL_MS
    (connected,) = read_file(batch, "events")
    assert connected["kind"] == "connected"
    assert (connected["client_id"], connected["username"]) == ("dev-7", "alice")
    assert (connected["protocol_version"], connected["clean_start"]) == (5, True)
    assert connected["payload"] is None and connected["user_properties"] == []


def test_each_record_is_a_plain_binary_datum_schemaless_reader_decodes(engine: Engine) -> None:
    client = Wire(engine)
    client.send({"type": "connect", "client_id": "c", "protocol_version": 5})
    for n in range(3):
        client.send({"type": "publish", "topic": f"t/{n}", "payload": bytes([n])})
    batch = engine.take_stream()
    assert batch is not None
    block = batch.avro_block("messages", SYNC)
    schema = fastavro.parse_schema(json.loads(schema_text()))
    count, at = read_long(block, 0)
    size, at = read_long(block, at)
    assert count == 3
    values = io.BytesIO(block[at : at + size])
    records = [fastavro.schemaless_reader(values, schema, None) for _ in range(3)]
    topics = [record["topic"] for record in records if isinstance(record, dict)]
    assert topics == ["t/0", "t/1", "t/2"]
    assert block[at + size :] == SYNC


def test_a_bad_sync_marker_or_kind_is_refused_naming_it(engine: Engine) -> None:
    with pytest.raises(ValueError, match="sync: expected 16 bytes, got 3"):
        avro_container_header(b"abc")
    Wire(engine).send({"type": "connect", "client_id": "c", "protocol_version": 5})
    batch = engine.take_stream()
    assert batch is not None
    with pytest.raises(ValueError, match='kind: expected "messages" or "events", got "mess"'):
        batch.avro_block("mess", SYNC)  # type: ignore[arg-type]
