"""A Mosquitto configuration handed to ``-c`` is recognised and answered with the TOML
keys of what it says (ferromq.mosquitto_conf); anything else is left to the TOML
parser's own error."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferromq.config import ConfigError, load_config
from ferromq.mosquitto_conf import toml_hint


def test_each_listener_line_starts_a_listener_and_tls_keys_join_it() -> None:
    hint = toml_hint(
        "listener 1883\n"
        "listener 8883 0.0.0.0\n"
        "certfile /etc/mosquitto/server.crt\n"
        "require_certificate true\n"
        "acl_file /etc/mosquitto/acl\n"
        "log_dest file /var/log/mosquitto.log\n"
    )
    assert hint is not None
    equivalent = hint.split("equivalent: ")[1]
    assert equivalent == (
        "[[listeners]] port = 1883; "
        '[[listeners]] port = 8883, host = "0.0.0.0", certfile = "/etc/mosquitto/server.crt", '
        "require_certificate = true; "
        '[acl] file = "/etc/mosquitto/acl", format = "mosquitto"; '
        '[log] destination = "file", file = "/var/log/mosquitto.log"'
    )


def test_a_file_without_mosquitto_directives_gets_no_hint() -> None:
    assert toml_hint("[[listeners]\nport = 1883\n") is None
    assert toml_hint("connection_messages true\nsys_interval 10\n") is None


def test_the_hint_replaces_the_toml_syntax_error(tmp_path: Path) -> None:
    path = tmp_path / "mosquitto.conf"
    path.write_text("port 1884\nallow_anonymous true\n")
    with pytest.raises(ConfigError) as error:
        load_config(path, {})
    assert str(error.value) == (
        f"config file {path}: this looks like a Mosquitto configuration, but ferromq reads "
        "TOML; equivalent: [[listeners]] port = 1884; [auth] allow_anonymous = true"
    )
