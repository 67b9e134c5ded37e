"""``ferromq bench`` as typed: the command line becomes the generator's JSON config."""

from __future__ import annotations

import json

from ferromq import bench
from ferromq.cli import build_parser


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
