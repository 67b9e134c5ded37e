"""``ferromq bench`` as typed: the command line becomes the generator's JSON config."""

from __future__ import annotations

import json

import pytest

from ferromq import bench
from ferromq.cli import build_parser, main


def test_the_command_line_becomes_a_generator_config() -> None:
    args = build_parser().parse_args(
        ["bench", "p2p", "--qos", "1", "--pairs", "3", "--transport", "tls", "--quiet"]
    )
    config = json.loads(json.dumps(bench._config_from_args(args)))
    assert config == {
        "scenario": "p2p",
        "pairs": 3,
        "transport": "tls",
        "pub_qos": 1,
        "sub_qos": 1,
        "progress": False,
    }


def test_the_typed_command_reaches_the_generator(capsys: pytest.CaptureFixture[str]) -> None:
    # Through `main`, as a user types it: nothing `serve` needs leaks into the config
    # (the generator refuses unknown fields). No broker listens on port 1.
    status = main(["bench", "p2p", "--port", "1", "--pairs", "1", "--duration", "0.2"])
    err = capsys.readouterr().err
    assert status != 0
    assert "could not connect" in err and "invalid config" not in err
