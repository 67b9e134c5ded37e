"""``[stream]`` in the config schema: its sub-tables ``[stream.files]`` and
``[stream.kafka]`` from TOML and the environment, errors naming the key, and the
embedded file sink's crash recovery cut (``last_whole_block``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.unit.test_config import error_of, load_text

from ferromq._core import avro_container_header
from ferromq.config import Config, render_toml
from ferromq.stream.files import last_whole_block, recover_directory
from ferromq.stream.registry import subject_for
from ferromq.stream.sink import holds_acks


def test_the_stream_is_off_by_default_with_the_contract_s_defaults() -> None:
    stream = Config().stream
    assert (stream.enabled, stream.sink, stream.topics, stream.events) == (
        False, "files", ("#",), True,
    )  # fmt: skip
    assert (stream.key, stream.files.roll_bytes, stream.files.roll_seconds) == (
        "topic", 64 * 1024 * 1024, 60,
    )  # fmt: skip
    assert (stream.kafka.messages_topic, stream.kafka.delivery) == ("ferromq.messages", "async")


def test_sub_tables_load_from_toml_and_the_environment(tmp_path: Path) -> None:
    text = """
[stream]
enabled = true
key = "level:3"
topics = ["tenant/#"]

[stream.files]
roll_bytes = "1MiB"

[stream.kafka]
delivery = "after_kafka"
"""
    environ = {"FERROMQ_STREAM__FILES__RETENTION_SECONDS": "2h"}
    stream = load_text(tmp_path, text, environ).stream
    assert (stream.enabled, stream.key, stream.topics) == (True, "level:3", ("tenant/#",))
    assert (stream.files.roll_bytes, stream.files.retention_seconds) == (1024 * 1024, 7200)
    assert stream.kafka.delivery == "after_kafka"
    assert holds_acks(stream)


def test_the_registry_is_off_by_default_and_names_subjects_by_topic(tmp_path: Path) -> None:
    kafka = Config().stream.kafka
    assert (kafka.registry, kafka.registry_subject) == (None, "{topic}-value")
    environ = {"FERROMQ_STREAM__KAFKA__REGISTRY": "http://registry:8081/apis/ccompat/v7"}
    kafka = load_text(tmp_path, "", environ).stream.kafka
    assert kafka.registry == "http://registry:8081/apis/ccompat/v7"
    assert subject_for(kafka.registry_subject, "ferromq.messages") == "ferromq.messages-value"
    assert subject_for("ferromq-records", "ferromq.events") == "ferromq-records"


def test_the_rendered_config_reads_back_with_its_sub_tables(tmp_path: Path) -> None:
    config = load_text(tmp_path, '[stream.files]\ndirectory = "/srv/stream"\n')
    text = render_toml(config)
    assert "[stream.files]" in text
    assert load_text(tmp_path, text) == config


@pytest.mark.parametrize(
    ("text", "environ", "message"),
    [
        ('[stream]\nkey = "device"', {}, 'stream.key: expected "topic", "client" or "level:N"'),
        ('[stream]\ntopics = ["a/#/b"]', {}, 'stream.topics[0]: "a/#/b" is not a valid topic'),
        ('[stream]\ntopics = ["$share/g/t"]', {}, "is a shared subscription"),
        (
            "[stream.files]\nroll_byte = 1",
            {},
            'stream.files.roll_byte: unknown key, did you mean "roll_bytes"',
        ),
        ('[stream.kafka]\ndelivery = "later"', {}, "stream.kafka.delivery: expected one of"),
        (
            "",
            {"FERROMQ_STREAM__FILES__ROLL_BYTES": "1"},
            "FERROMQ_STREAM__FILES__ROLL_BYTES: must be",
        ),
        ("", {"FERROMQ_STREAM__FILES__NOPE": "1"}, "unknown key stream.files.nope"),
        (
            '[stream.kafka]\nregistry = "localhost:8081"',
            {},
            'stream.kafka.registry: expected an http:// or https:// URL, got "localhost:8081"',
        ),
        (
            '[stream.kafka]\nregistry_subject = "{topics}-value"',
            {},
            'stream.kafka.registry_subject: "{topics}-value" may hold {topic} and no other',
        ),
        (
            '[stream.kafka]\nregistry_password = "secret"',
            {},
            "stream.kafka.registry_username: required with stream.kafka.registry_password",
        ),
    ],
)
def test_bad_values_name_the_key(
    tmp_path: Path, text: str, environ: dict[str, str], message: str
) -> None:
    assert message in error_of(tmp_path, text, environ)


def _block(values: bytes, count: int, sync: bytes) -> bytes:
    return bytes([count * 2, len(values) * 2]) + values + sync


def test_a_half_written_file_is_cut_after_its_last_whole_block(tmp_path: Path) -> None:
    sync = b"S" * 16
    header = avro_container_header(sync)
    whole = header + _block(b"a" * 10, 1, sync) + _block(b"b" * 12, 2, sync)
    torn = whole + _block(b"c" * 20, 1, sync)[:15]
    assert last_whole_block(torn) == len(whole)
    assert last_whole_block(whole) == len(whole)
    assert last_whole_block(header + _block(b"x", 1, b"T" * 16)) == len(header), "wrong sync"
    assert last_whole_block(header[:-3]) == 0
    (tmp_path / ".f.avro.part").write_bytes(torn)
    (tmp_path / ".empty.avro.part").write_bytes(header + b"\x02")
    recovered = recover_directory(tmp_path)
    assert sorted((path.name, kept) for path, kept, _ in recovered) == [
        (".empty.avro.part", 0),
        ("f.avro", len(whole)),
    ]
    assert [path.name for path in tmp_path.iterdir()] == ["f.avro"]
    assert (tmp_path / "f.avro").read_bytes() == whole


def test_a_shard_recovers_its_own_part_files_and_shard_0_the_orphans(tmp_path: Path) -> None:
    """Two shards write into one directory: each cuts only its own half-written files
    (the other's may be open), shard 0 also those of a shard the node no longer has
    and those named before shards were."""
    header = avro_container_header(b"S" * 16)
    names = {
        0: ".0000000000000001-n1-s0-000001.avro.part",
        1: ".0000000000000002-n1-s1-000001.avro.part",
        2: ".0000000000000003-n1-s2-000001.avro.part",  # a node of 3 before
        -1: ".0000000000000004-n1-000001.avro.part",  # before shards
    }
    for name in names.values():
        (tmp_path / name).write_bytes(header)  # no whole block: removed when recovered
    assert [path.name for path, _, _ in recover_directory(tmp_path, 1, 2)] == [names[1]]
    assert sorted(path.name for path, _, _ in recover_directory(tmp_path, 0, 2)) == sorted(
        [names[0], names[2], names[-1]]
    )
    assert not list(tmp_path.iterdir())
