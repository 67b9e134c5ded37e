"""The configuration schema: defaults, every error with its key path, env overrides, the CLI."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ferromq import preflight
from ferromq.codec import MAX_PACKET_SIZE
from ferromq.config import (
    AdminConfig,
    BansConfig,
    Config,
    ConfigError,
    KafkaConfig,
    LimitsConfig,
    ListenerConfig,
    LogConfig,
    Mqtt5Config,
    RedirectConfig,
    RedisConfig,
    SessionConfig,
    SysConfig,
    load_config,
    parse_duration,
    parse_size,
    render_toml,
)


def load_text(tmp_path: Path, text: str, environ: dict[str, str] | None = None) -> Config:
    path = tmp_path / "ferromq.toml"
    path.write_text(text, encoding="utf-8")
    return load_config(path, environ or {})


def error_of(tmp_path: Path, text: str, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        load_text(tmp_path, text, environ)
    return str(caught.value)


def env_error_of(environ: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(None, environ)
    return str(caught.value)


# --- defaults ---------------------------------------------------------------------------


def test_defaults_without_file_or_environment() -> None:
    config = load_config(None, {})
    assert config == Config()
    assert config.listeners == (
        ListenerConfig(name="default", host="127.0.0.1", port=1883, protocol="tcp"),
    )
    assert config.listeners[0].max_connections == 0
    assert config.limits == LimitsConfig(
        max_packet_size=1024 * 1024,
        max_inflight=1024,
        receive_maximum=1024,
        max_topic_alias=64,
        max_keepalive=0,
        connect_timeout=10,
        write_buffer_high_water=1024 * 1024,
        max_client_id_length=65535,
        max_publish_rate=0,
        max_publish_bytes_rate=0,
        max_publish_rate_per_user=0,
        max_publish_bytes_rate_per_user=0,
        max_subscriptions_per_client=0,
        max_retained_messages=0,
        max_retained_bytes=0,
        max_retained_messages_per_user=0,
        max_retained_bytes_per_user=0,
        retained_max_expiry=0,
        allow_control_characters=False,
    )
    assert config.mqtt5 == Mqtt5Config(
        maximum_qos=2,
        retain_available=True,
        wildcard_subscription_available=True,
        subscription_identifiers_available=True,
        shared_subscription_available=True,
        assign_client_id=True,
        response_information_prefix="",
        outbound_topic_aliases=16,
        validate_utf8_payload=False,
    )
    assert config.redirect == RedirectConfig(server_reference="", permanent=False)
    assert config.session == SessionConfig(
        queue_limit=1000,
        max_queued_bytes=0,
        memory_budget=0,
        drop_policy="drop_oldest",
        queue_qos0_offline=False,
        max_session_expiry=0,
        default_session_expiry_v311=7 * 24 * 3600,
    )
    assert config.sys == SysConfig(interval=10)
    assert config.log == LogConfig(level="info", format="text")


@pytest.mark.parametrize(
    "section",
    [
        ListenerConfig(),
        LimitsConfig(),
        SessionConfig(),
        Mqtt5Config(),
        RedirectConfig(),
        RedisConfig(),
        SysConfig(),
        LogConfig(),
    ],
)
def test_every_default_passes_its_own_validation(section: object) -> None:
    assert dataclasses.is_dataclass(section) and not isinstance(section, type)
    for setting in dataclasses.fields(section):
        value = getattr(section, setting.name)
        if value is None:  # unset: a listener's override falls back to [limits]
            continue
        assert setting.metadata["kind"].parse(value, setting.name) == value


def test_config_is_immutable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Config().limits.max_inflight = 1  # type: ignore[misc]


def test_empty_file_gives_defaults(tmp_path: Path) -> None:
    assert load_text(tmp_path, "") == Config()


def test_full_file(tmp_path: Path) -> None:
    config = load_text(
        tmp_path,
        """
        [[listeners]]
        name = "public"
        host = "0.0.0.0"
        port = 1883
        max_connections = 50000

        [[listeners]]
        name = "local"
        port = 1884

        [limits]
        max_packet_size = "256KiB"
        max_inflight = 16
        max_keepalive = "5m"
        connect_timeout = "30s"

        [session]
        drop_policy = "REFUSE_NEWEST"
        queue_qos0_offline = true
        share_strategy = "hash_topic"
        max_session_expiry = "30d"
        default_session_expiry_v311 = "1d"

        [mqtt5]
        maximum_qos = 1
        retain_available = false
        response_information_prefix = "reply/"
        outbound_topic_aliases = 0

        [redirect]
        server_reference = "mqtt2.example.com:1883"
        permanent = true

        [sys]
        interval = 0

        [log]
        level = "warning"
        format = "json"
        """,
    )
    assert [(lst.name, lst.host, lst.port) for lst in config.listeners] == [
        ("public", "0.0.0.0", 1883),
        ("local", "127.0.0.1", 1884),
    ]
    assert config.listeners[0].max_connections == 50000
    assert config.limits.max_packet_size == 256 * 1024
    assert config.limits.max_inflight == 16
    assert config.limits.max_keepalive == 300
    assert config.limits.connect_timeout == 30
    assert config.limits.receive_maximum == 1024  # untouched keys keep their defaults
    assert config.session.drop_policy == "refuse_newest"
    assert config.session.queue_qos0_offline is True
    assert config.session.share_strategy == "hash_topic"
    assert config.session.max_session_expiry == 30 * 86400
    assert config.session.default_session_expiry_v311 == 86400
    assert config.mqtt5.maximum_qos == 1
    assert config.mqtt5.retain_available is False
    assert config.mqtt5.response_information_prefix == "reply/"
    assert config.mqtt5.outbound_topic_aliases == 0
    assert config.mqtt5.wildcard_subscription_available is True
    assert config.redirect == RedirectConfig("mqtt2.example.com:1883", permanent=True)
    assert config.sys.interval == 0
    assert config.log == LogConfig(level="warning", format="json")


def test_rendered_toml_loads_back_unchanged(tmp_path: Path) -> None:
    config = load_text(
        tmp_path,
        '[[listeners]]\nname = "a \\"quoted\\" name"\nport = 1\n[log]\nformat = "json"\n',
    )
    assert load_text(tmp_path, render_toml(config)) == config
    assert load_text(tmp_path, render_toml(Config())) == Config()


# --- sizes and durations ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spelling", "size"),
    [
        (0, 0),
        (1048576, 1048576),
        ("1048576", 1048576),
        ("1MiB", 1048576),
        ("1mib", 1048576),
        (" 2 MiB ", 2 * 1048576),
        ("256KB", 256000),
        ("256KiB", 262144),
        ("10B", 10),
        ("1GB", 10**9),
        ("1GiB", 2**30),
    ],
)
def test_parse_size(spelling: int | str, size: int) -> None:
    assert parse_size(spelling) == size


@pytest.mark.parametrize("spelling", ["big", "", "1.5MiB", "-1", "1 TiB", "MiB", "1MiBs", True])
def test_parse_size_refuses(spelling: int | str) -> None:
    with pytest.raises(ValueError):
        parse_size(spelling)


@pytest.mark.parametrize(
    ("spelling", "seconds"),
    [(0, 0), (10, 10), ("10", 10), ("10s", 10), ("5m", 300), ("1h", 3600), ("7d", 604800)],
)
def test_parse_duration(spelling: int | str, seconds: int) -> None:
    assert parse_duration(spelling) == seconds


@pytest.mark.parametrize("spelling", ["soon", "1.5h", "10ms", "1w", "-5s", "", False])
def test_parse_duration_refuses(spelling: int | str) -> None:
    with pytest.raises(ValueError):
        parse_duration(spelling)


# --- errors in the file name the key path --------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[[listeners]]\nport = 70000\n",
            "listeners[0].port: must be between 1 and 65535, got 70000",
        ),
        (
            "[[listeners]]\nname = 'a'\n[[listeners]]\nname = 'b'\nport = 0\n",
            "listeners[1].port: must be between 1 and 65535, got 0",
        ),
        (
            '[limits]\nmax_packet_size = "big"\n',
            'limits.max_packet_size: expected a size like 1048576 or "1MiB", got "big"',
        ),
        (
            '[limits]\nmax_packet_size = "300MiB"\n',
            'limits.max_packet_size: must be between 64 and 268435460, got 314572800 ("300MiB")',
        ),
        (
            "[limits]\nmax_packet_size = 1.5\n",
            'limits.max_packet_size: expected a size like 1048576 or "1MiB", got float 1.5',
        ),
        (
            "[limits]\nmax_inflight = 0\n",
            "limits.max_inflight: must be between 1 and 65535, got 0",
        ),
        (
            '[limits]\nmax_inflight = "32"\n',
            'limits.max_inflight: expected an integer, got string "32"',
        ),
        (
            "[limits]\nmax_inflight = true\n",
            "limits.max_inflight: expected an integer, got boolean true",
        ),
        (
            '[limits]\nconnect_timeout = "soon"\n',
            'limits.connect_timeout: expected a duration like 10 or "10s", "5m", "1h", got "soon"',
        ),
        (
            "[limits]\nmax_keepalive = 65536\n",
            "limits.max_keepalive: must be between 0 and 65535, got 65536",
        ),
        (
            "[limits]\nmax_client_id_length = 10\n",
            "limits.max_client_id_length: must be between 23 and 65535, got 10",
        ),
        (
            "[session]\nqueue_limit = 70000\n",
            "session.queue_limit: must be between 1 and 65535, got 70000",
        ),
        (
            '[session]\ndrop_policy = "drop_newest"\n',
            'session.drop_policy: expected one of "drop_oldest", "refuse_newest", '
            'got "drop_newest"',
        ),
        (
            '[session]\nqueue_qos0_offline = "yes"\n',
            'session.queue_qos0_offline: expected a boolean (true or false), got string "yes"',
        ),
        (
            "[mqtt5]\nmaximum_qos = 3\n",
            "mqtt5.maximum_qos: must be between 0 and 2, got 3",
        ),
        (
            '[mqtt5]\nresponse_information_prefix = " "\n',
            "mqtt5.response_information_prefix: must not be empty",
        ),
        (
            "[redirect]\npermanent = 1\n",
            "redirect.permanent: expected a boolean (true or false), got integer 1",
        ),
        (
            "[limits]\nmax_publish_rate = -5\n",
            "limits.max_publish_rate: must be between 0 and 4294967295, got -5",
        ),
        (
            "[sys]\ninterval = -1\n",
            "sys.interval: must be at least 0, got -1",
        ),
        (
            '[log]\nlevel = "verbose"\n',
            'log.level: expected one of "debug", "info", "warning", "error", got "verbose"',
        ),
        (
            "[log]\nformat = 1\n",
            "log.format: expected a string, got integer 1",
        ),
        (
            '[[listeners]]\nhost = ""\n',
            "listeners[0].host: must not be empty",
        ),
        (
            "[[listeners]]\nmax_connections = -1\n",
            "listeners[0].max_connections: must be at least 0, got -1",
        ),
        (
            # A message's Redis key holds its packet id: at most 65535 per client.
            "[redis]\nmax_messages_per_client = 70000\n",
            "redis.max_messages_per_client: must be between 1 and 65535, got 70000",
        ),
        (
            '[redis]\ncluster = "yes"\n',
            'redis.cluster: expected a boolean (true or false), got string "yes"',
        ),
        (
            '[storage]\nbackend = "postgres"\n',
            'storage.backend: expected one of "embedded", "redis", "memory", got "postgres"',
        ),
    ],
)
def test_bad_value_names_key_path(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "ferromq.toml"
    assert error_of(tmp_path, text) == f"config file {path}: {message}"


def test_websocket_and_proxy_keys(tmp_path: Path) -> None:
    path = tmp_path / "ferromq.toml"
    path.write_text(
        '[[listeners]]\nprotocol = "ws"\npath = "/ws"\norigins = ["https://app.example"]\n'
        'proxy_protocol = true\nproxy_trusted = ["10.0.0.7", "192.168.0.0/16"]\n'
    )
    listener = load_config(path, {}).listeners[0]
    assert (listener.protocol, listener.path, listener.origins) == (
        "ws",
        "/ws",
        ("https://app.example",),
    )
    assert listener.proxy_trusted == ("10.0.0.7", "192.168.0.0/16")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('path = "/ws"', 'listeners[0].path: only with protocol = "ws" or "wss"'),
        ('origins = ["x"]', 'listeners[0].origins: only with protocol = "ws" or "wss"'),
        ('proxy_trusted = ["10.0.0.0/8"]', "listeners[0].proxy_trusted: only with proxy_protocol"),
        (
            'proxy_protocol = true\nproxy_trusted = ["ten"]',
            'listeners[0].proxy_trusted: "ten" is not an IPv4 or IPv6 address or network',
        ),
        ('protocol = "ws"\npath = "mqtt"', 'listeners[0].path: must start with /, got "mqtt"'),
        ('protocol = "wss"', 'listeners[0].certfile: required with protocol = "wss"'),
    ],
)
def test_websocket_and_proxy_key_errors(tmp_path: Path, text: str, message: str) -> None:
    assert message in error_of(tmp_path, f"[[listeners]]\n{text}\n")


def test_unknown_protocol(tmp_path: Path) -> None:
    message = error_of(tmp_path, '[[listeners]]\nprotocol = "udp"\n')
    assert message.endswith(
        'listeners[0].protocol: expected one of "tcp", "tls", "ws", "wss", got "udp"'
    )


def test_a_tls_listener_needs_its_certificate_and_key(tmp_path: Path) -> None:
    message = error_of(tmp_path, '[[listeners]]\nprotocol = "tls"\n')
    assert message == 'listeners[0].certfile: required with protocol = "tls"'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[limits]\nmax_pakcet_size = 1\n",
            'limits.max_pakcet_size: unknown key, did you mean "max_packet_size"?',
        ),
        ("[lmits]\n", 'lmits: unknown key, did you mean "limits"?'),
        ("[[listeners]]\nprot = 1883\n", 'listeners[0].prot: unknown key, did you mean "port"?'),
        (
            "zebra = 1\n",
            "zebra: unknown key (expected one of: "
            + ", ".join(sorted(f.name for f in dataclasses.fields(Config)))
            + ")",
        ),
    ],
)
def test_unknown_keys_suggest(tmp_path: Path, text: str, message: str) -> None:
    assert error_of(tmp_path, text).endswith(f": {message}")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("limits = 5\n", "limits: expected a table, got integer 5"),
        (
            "[listeners]\nport = 1\n",
            "listeners: expected an array of tables ([[listeners]]), got a table",
        ),
        ("listeners = []\n", "listeners: at least one listener is required"),
        ("listeners = [1]\n", "listeners[0]: expected a table, got integer 1"),
    ],
)
def test_wrong_shapes(tmp_path: Path, text: str, message: str) -> None:
    assert error_of(tmp_path, text).endswith(f": {message}")


def test_toml_syntax_error_names_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "ferromq.toml"
    message = error_of(tmp_path, "[limits]\nmax_inflight = 32\nreceive_maximum =\n")
    assert message == f"config file {path} at line 3, column 18: invalid TOML: Invalid value"


def test_toml_error_at_end_of_document(tmp_path: Path) -> None:
    path = tmp_path / "ferromq.toml"
    message = error_of(tmp_path, '[log]\nlevel = "info')
    assert message == f"config file {path} at end of document: invalid TOML: Unterminated string"


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "x" / "y.toml"
    with pytest.raises(ConfigError, match=r"^config file .*y\.toml: not found$"):
        load_config(path, {})


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r": is a directory$"):
        load_config(tmp_path, {})


def test_file_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'[[listeners]]\nname = "caf\xe9"\n')
    with pytest.raises(ConfigError, match=r": not UTF-8 text \(byte offset 25\)$"):
        load_config(path, {})


# --- rules across settings ------------------------------------------------------------------


def test_duplicate_listener_names(tmp_path: Path) -> None:
    message = error_of(tmp_path, "[[listeners]]\nport = 1\n[[listeners]]\nport = 2\n")
    assert message == (
        'listeners[1].name: "default" is already the name of listeners[0]; '
        "listener names must be unique"
    )


def test_duplicate_listener_addresses(tmp_path: Path) -> None:
    text = '[[listeners]]\nname = "a"\n[[listeners]]\nname = "b"\n'
    assert error_of(tmp_path, text) == (
        "listeners[1]: 127.0.0.1:1883 is already used by listeners[0]"
    )


@pytest.mark.parametrize("v311", ["2h", 0])
def test_v311_expiry_must_fit_under_the_cap(tmp_path: Path, v311: str | int) -> None:
    text = f'[session]\nmax_session_expiry = "1h"\ndefault_session_expiry_v311 = {v311!r}\n'
    message = error_of(tmp_path, text.replace("'", '"'))
    assert message.startswith("session.default_session_expiry_v311: ")
    assert "exceeds session.max_session_expiry (3600)" in message


def test_v311_expiry_under_the_cap(tmp_path: Path) -> None:
    text = '[session]\nmax_session_expiry = "1h"\ndefault_session_expiry_v311 = "1h"\n'
    assert load_text(tmp_path, text).session.default_session_expiry_v311 == 3600


# --- environment overrides ------------------------------------------------------------------


def test_env_overrides_file(tmp_path: Path) -> None:
    config = load_text(
        tmp_path,
        '[limits]\nmax_packet_size = "1MiB"\n[log]\nlevel = "info"\n',
        {
            "FERROMQ_LIMITS__MAX_PACKET_SIZE": "2MiB",
            "FERROMQ_LOG__LEVEL": "DEBUG",
            "FERROMQ_SESSION__QUEUE_QOS0_OFFLINE": "yes",
            "FERROMQ_SESSION__DEFAULT_SESSION_EXPIRY_V311": "1h",
            "FERROMQ_LIMITS__MAX_INFLIGHT": "100",
        },
    )
    assert config.limits.max_packet_size == 2 * 1024 * 1024
    assert config.limits.max_inflight == 100
    assert config.log.level == "debug"
    assert config.session.queue_qos0_offline is True
    assert config.session.default_session_expiry_v311 == 3600


def test_env_without_double_underscore_is_not_configuration() -> None:
    environ = {"FERROMQ_SLOW": "1", "FERROMQ_FUZZ_SECONDS": "x", "PATH": "/bin", "HOME__X": "y"}
    assert load_config(None, environ) == Config()


@pytest.mark.parametrize(
    ("listen", "host", "port"),
    [
        ("0.0.0.0:1884", "0.0.0.0", 1884),
        ("[::1]:1883", "::1", 1883),
        ("broker.local:8883", "broker.local", 8883),
    ],
)
def test_env_listen_overrides_first_listener(
    tmp_path: Path, listen: str, host: str, port: int
) -> None:
    text = '[[listeners]]\nname = "a"\n[[listeners]]\nname = "b"\nport = 2000\n'
    config = load_text(tmp_path, text, {"FERROMQ_LISTEN": listen})
    assert (config.listeners[0].host, config.listeners[0].port) == (host, port)
    assert config.listeners[0].name == "a"
    assert config.listeners[1].port == 2000


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        (
            {"FERROMQ_LIMITS__MAX_PACKET_SIZE": "big"},
            'FERROMQ_LIMITS__MAX_PACKET_SIZE: expected a size like 1048576 or "1MiB", got "big"',
        ),
        (
            {"FERROMQ_LIMITS__MAX_INFLIGHT": "lots"},
            'FERROMQ_LIMITS__MAX_INFLIGHT: expected an integer, got "lots"',
        ),
        (
            {"FERROMQ_LIMITS__MAX_INFLIGHT": "0"},
            "FERROMQ_LIMITS__MAX_INFLIGHT: must be between 1 and 65535, got 0",
        ),
        (
            {"FERROMQ_SESSION__QUEUE_QOS0_OFFLINE": "maybe"},
            "FERROMQ_SESSION__QUEUE_QOS0_OFFLINE: expected a boolean "
            '(true/false, 1/0, yes/no, on/off), got "maybe"',
        ),
        (
            {"FERROMQ_LOG__LEVEL": "loud"},
            'FERROMQ_LOG__LEVEL: expected one of "debug", "info", "warning", "error", got "loud"',
        ),
        (
            {"FERROMQ_LIMITS__MAX_PAKCET_SIZE": "1"},
            "FERROMQ_LIMITS__MAX_PAKCET_SIZE: unknown key limits.max_pakcet_size, "
            'did you mean "FERROMQ_LIMITS__MAX_PACKET_SIZE"?',
        ),
        (
            {"FERROMQ_LIMTS__MAX_INFLIGHT": "1"},
            'FERROMQ_LIMTS__MAX_INFLIGHT: unknown section "limts", '
            'did you mean "FERROMQ_LIMITS__MAX_INFLIGHT"?',
        ),
        (
            {"FERROMQ_LISTENERS__PORT": "1"},
            "FERROMQ_LISTENERS__PORT: listeners are a list and cannot be overridden key by "
            "key; use FERROMQ_LISTEN=host:port or the config file",
        ),
        (
            {"FERROMQ_LISTEN": "0.0.0.0:70000"},
            "FERROMQ_LISTEN: must be between 1 and 65535, got 70000",
        ),
        (
            {"FERROMQ_LISTEN": "0.0.0.0:mqtt"},
            'FERROMQ_LISTEN: expected an integer, got "mqtt"',
        ),
        (
            {"FERROMQ_LISTEN": "1883"},
            'FERROMQ_LISTEN: expected host:port like 0.0.0.0:1883 or [::1]:1883, got "1883"',
        ),
        (
            {"FERROMQ_LISTEN": "::1:1883"},
            'FERROMQ_LISTEN: expected host:port like 0.0.0.0:1883 or [::1]:1883, got "::1:1883"',
        ),
    ],
)
def test_bad_env_value_names_the_variable(environ: dict[str, str], message: str) -> None:
    assert env_error_of(environ) == message


def test_env_errors_are_reported_in_a_stable_order() -> None:
    environ = {"FERROMQ_LOG__LEVEL": "x", "FERROMQ_LIMITS__MAX_INFLIGHT": "x"}
    assert env_error_of(environ).startswith("FERROMQ_LIMITS__MAX_INFLIGHT:")


def test_env_cannot_break_a_cross_setting_rule() -> None:
    message = env_error_of({"FERROMQ_SESSION__MAX_SESSION_EXPIRY": "1d"})
    assert message.startswith("session.default_session_expiry_v311: 604800")


def test_max_packet_size_bound_is_the_codec_bound() -> None:
    config = load_config(None, {"FERROMQ_LIMITS__MAX_PACKET_SIZE": str(MAX_PACKET_SIZE)})
    assert config.limits.max_packet_size == MAX_PACKET_SIZE


# --- ferromq check-config ---------------------------------------------------------------------


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    script = shutil.which("ferromq")
    command = [script] if script else [sys.executable, "-m", "ferromq"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=30, env=env)


def clean_env(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERROMQ_")}
    return {**env, **overrides}


def test_check_config_prints_effective_toml(tmp_path: Path) -> None:
    path = tmp_path / "ferromq.toml"
    path.write_text('[limits]\nmax_packet_size = "2MiB"\n', encoding="utf-8")
    result = run_cli(
        "check-config", "--config", str(path), env=clean_env(FERROMQ_LOG__LEVEL="debug")
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "max_packet_size = 2097152\n" in result.stdout
    assert 'level = "debug"\n' in result.stdout
    path.write_text(result.stdout, encoding="utf-8")
    assert load_config(path, {}).limits.max_packet_size == 2097152


def test_control_characters_are_refused_unless_allowed(tmp_path: Path) -> None:
    assert load_config(None, {}).limits.allow_control_characters is False
    from_file = load_text(tmp_path, "[limits]\nallow_control_characters = true\n")
    assert from_file.limits.allow_control_characters is True
    env = {"FERROMQ_LIMITS__ALLOW_CONTROL_CHARACTERS": "false"}
    path = tmp_path / "ferromq.toml"
    assert load_config(path, env).limits.allow_control_characters is False
    result = run_cli("check-config", env=clean_env(FERROMQ_LIMITS__ALLOW_CONTROL_CHARACTERS="true"))
    assert result.returncode == 0, result.stderr
    assert "allow_control_characters = true\n" in result.stdout


def test_check_config_lists_redis_cluster(tmp_path: Path) -> None:
    path = tmp_path / "ferromq.toml"
    path.write_text('[redis]\nurl = "redis://10.0.0.7:7000/0"\ncluster = true\n')
    result = run_cli("check-config", "--config", str(path), env=clean_env())
    assert result.returncode == 0, result.stderr
    assert "cluster = true\n" in result.stdout
    assert load_config(None, {}).redis.cluster is False, "one server by default"
    assert load_text(tmp_path, "", {"FERROMQ_REDIS__CLUSTER": "true"}).redis.cluster is True


def test_check_config_json_without_file() -> None:
    result = run_cli("check-config", "--json", env=clean_env())
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    # Through JSON, as the CLI prints it (tuples become lists).
    assert data["listeners"] == [json.loads(json.dumps(dataclasses.asdict(ListenerConfig())))]
    assert data["limits"]["max_inflight"] == 1024


def test_check_config_bad_file_exits_2_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[[listeners]]\nport = 70000\n", encoding="utf-8")
    result = run_cli("check-config", "--config", str(path), env=clean_env())
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == (
        f"ferromq: error: config file {path}: "
        "listeners[0].port: must be between 1 and 65535, got 70000\n"
    )


def test_check_config_bad_env_exits_2_naming_the_variable() -> None:
    result = run_cli("check-config", env=clean_env(FERROMQ_LOG__FORMAT="xml"))
    assert result.returncode == 2
    assert result.stderr.startswith("ferromq: error: FERROMQ_LOG__FORMAT: expected one of")


def test_check_config_missing_file_exits_2(tmp_path: Path) -> None:
    result = run_cli("check-config", "--config", str(tmp_path / "nope.toml"), env=clean_env())
    assert result.returncode == 2
    assert result.stderr == f"ferromq: error: config file {tmp_path / 'nope.toml'}: not found\n"


# --- [auth] -------------------------------------------------------------------------------


def test_auth_is_off_by_default_and_loads_from_file_and_environment(tmp_path: Path) -> None:
    from ferromq.config import AuthConfig

    assert load_config(None, {}).auth == AuthConfig(None, None, ("SCRAM-SHA-256",))
    config = load_text(
        tmp_path,
        '[auth]\nusers_file = "users.toml"\nallow_anonymous = true\nmethods = []\n',
        {"FERROMQ_AUTH__METHODS": "SCRAM-SHA-256, SCRAM-SHA-256"},
    )
    assert config.auth == AuthConfig("users.toml", True, ("SCRAM-SHA-256",))
    assert load_text(tmp_path, render_toml(config)) == config


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[auth]\nmethods = ["scram-sha-256"]\n',
            'auth.methods: expected names among "SCRAM-SHA-256", got "scram-sha-256"',
        ),
        ('[auth]\nmethods = "SCRAM-SHA-256"\n', "auth.methods: expected an array of strings"),
        ("[auth]\nallow_anonymous = 1\n", "auth.allow_anonymous: expected a boolean"),
        (
            "[auth]\nallow_anonymous = false\n",
            "auth.allow_anonymous: false with no auth.users_file would refuse every client",
        ),
        ('[auth]\nproviders = ["hook"]\n', 'auth.providers: "hook" needs auth.hook, exactly one'),
        (
            '[auth]\nproviders = ["jwt"]\njwt_key_file = "k"\njwt_jwks_url = "https://a/j"\n',
            'auth.providers: "jwt" needs auth.jwt_key_file or auth.jwt_jwks_url, exactly one',
        ),
        (
            '[auth]\nproviders = ["jwt"]\njwt_jwks_url = "ftp://keys/jwks"\n',
            'auth.jwt_jwks_url: expected an http:// or https:// URL, got "ftp://keys/jwks"',
        ),
        (
            '[auth]\nproviders = ["hook"]\nhook = "m:a"\nusers_file = "u.toml"\n',
            'auth.users_file: set, but "users_file" is not in auth.providers',
        ),
        ('[auth]\nproviders = ["ldap"]\n', 'auth.providers: expected names among "users_file"'),
    ],
)
def test_bad_auth_settings_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    assert message in error_of(tmp_path, text)


def test_application_queues_in_kafka(tmp_path: Path) -> None:
    config = load_text(
        tmp_path,
        '[storage]\napplication_store = "kafka"\n'
        '[kafka]\nbootstrap_servers = "k1:9092,k2:9092"\nacks = "1"\nrequest_timeout = "30s"\n',
    )
    assert config.storage.application_store == "kafka"
    assert config.kafka == KafkaConfig(
        bootstrap_servers="k1:9092,k2:9092", acks="1", request_timeout=30
    )
    assert Config().storage.application_store == "primary"
    assert KafkaConfig().acks == "all" and KafkaConfig().partitions == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[storage]\nbackend = "memory"\napplication_store = "kafka"\n',
            'storage.application_store: "kafka" needs a durable primary store '
            '(storage.backend = "memory" keeps no sessions to restore)',
        ),
        (
            '[kafka]\ntopic_prefix = "app/"\n',
            'kafka.topic_prefix: "app/" must be at most 100 of the characters Kafka allows '
            "in topic names: a-z A-Z 0-9 . _ -",
        ),
        (
            "[kafka]\npartitions = 0\n",
            "config file {path}: kafka.partitions: must be between 1 and 10000, got 0",
        ),
    ],
)
def test_kafka_settings_are_checked(tmp_path: Path, text: str, message: str) -> None:
    assert error_of(tmp_path, text) == message.format(path=tmp_path / "ferromq.toml")


# --- admission: [limits] connection limits, listener overrides, [bans] ------------------


def test_bans_and_admission_limits_load_with_listener_overrides(tmp_path: Path) -> None:
    config = load_text(
        tmp_path,
        "[[listeners]]\nmax_connections_per_address = 50\n"
        '[[listeners]]\nname = "b"\nport = 1884\n'
        '[limits]\nmax_connections_per_address = 5\nflapping_window = "2m"\n'
        '[bans]\naddresses = ["10.0.0.0/8", "2001:db8::/32", "::1"]\nclient_ids = ["x"]\n',
    )
    assert [listener.max_connections_per_address for listener in config.listeners] == [50, None]
    assert config.limits.max_connections_per_address == 5
    assert config.limits.flapping_window == 120
    assert config.bans.addresses == ("10.0.0.0/8", "2001:db8::/32", "::1")
    assert config.bans.configured() and not BansConfig().configured()
    assert load_text(tmp_path, render_toml(config)) == config


def test_a_bad_ban_address_names_the_key_and_the_value(tmp_path: Path) -> None:
    message = error_of(tmp_path, '[bans]\naddresses = ["10.0.0.1/8"]\n')
    assert message.endswith(
        'bans.addresses: "10.0.0.1/8" is not an IPv4 or IPv6 address or network: '
        "10.0.0.1/8 has host bits set"
    )
    environ = {"FERROMQ_BANS__ADDRESSES": "1.2.3.4,nowhere"}
    assert env_error_of(environ).startswith('FERROMQ_BANS__ADDRESSES: "nowhere" is not')


def test_a_listener_override_is_checked_like_the_limit(tmp_path: Path) -> None:
    message = error_of(tmp_path, "[[listeners]]\nmax_connect_rate = -1\n")
    assert message.endswith("listeners[0].max_connect_rate: must be at least 0, got -1")


# --- [admin] -----------------------------------------------------------------------------


def test_admin_is_off_on_loopback_by_default_and_loads(tmp_path: Path) -> None:
    assert Config().admin == AdminConfig(enabled=False, host="127.0.0.1", port=8080)
    config = load_text(
        tmp_path,
        '[admin]\nenabled = true\nhost = "::"\nport = 9100\ntoken = "t"\nmetrics_public = true\n',
    )
    assert config.admin == AdminConfig(
        enabled=True, host="::", port=9100, token="t", metrics_public=True
    )
    assert AdminConfig(host="::1").loopback() and AdminConfig(host="localhost").loopback()
    assert not AdminConfig(host="broker.example").loopback()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[admin]\nenabled = true\nhost = "0.0.0.0"\n',
            'admin.token: required when admin.host ("0.0.0.0") is not a loopback address; '
            "set admin.token or admin.token_file",
        ),
        (
            '[admin]\ntoken = "a"\ntoken_file = "b"\n',
            "admin.token_file: set beside admin.token; give one of them",
        ),
        (
            '[admin]\ncertfile = "c.pem"\n',
            "admin.keyfile: required with admin.certfile (HTTPS needs both)",
        ),
    ],
)
def test_bad_admin_settings_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    assert error_of(tmp_path, text) == message


CLUSTER = '[cluster]\nnode_id = "a"\nkafka = "k:9092"\nredis = "redis://r:6379/0"\n'


def test_a_clustered_node_keeps_sessions_in_the_clusters_redis_on_every_core(
    tmp_path: Path,
) -> None:
    config = load_text(tmp_path, CLUSTER)
    assert config.storage.backend == "redis"
    assert config.redis.url == "redis://r:6379/0"
    assert config.server.workers == "auto"
    assert load_text(tmp_path, CLUSTER + "[server]\nworkers = 2\n").server.workers == 2
    assert config.cluster.lease == 5
    roomy = "[session]\nqueue_limit = 50000\n[redis]\nmax_messages_per_client = 60000\n"
    assert load_text(tmp_path, CLUSTER + roomy).session.queue_limit == 50000
    assert load_text(tmp_path, CLUSTER + 'lease = "1m"\n').cluster.lease == 60


def test_a_clustered_node_without_the_kafka_extra_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for module in ("ferromq.cluster.bus", "ferromq.cluster.producer"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)  # as if not installed
    with pytest.raises(ConfigError) as caught:
        preflight.check(load_text(tmp_path, CLUSTER))
    message = str(caught.value)
    assert message.startswith('cluster.node_id: "a" needs the kafka extra (')
    assert message.endswith("install it with pip install 'ferromq[kafka]'")
    assert "confluent_kafka" in message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[cluster]\nnode_id = "a"\n', "cluster.kafka: a clustered node needs Kafka bootstrap"),
        ('[cluster]\nkafka = "k:9092"\n', "cluster.kafka: set, but cluster.node_id is empty"),
        (CLUSTER.replace('"a"', '"a b"'), 'cluster.node_id: "a b" must be 1 to 64 letters'),
        (CLUSTER + '[storage]\nbackend = "memory"\n', 'storage.backend: "memory" cannot hold'),
        (CLUSTER + "lease = 1\n", "cluster.lease: must be between 2 and 3600, got 1"),
        (
            CLUSTER + "[session]\nqueue_limit = 9000\n",
            "session.queue_limit (9000) + limits.max_inflight (1024) is above "
            "redis.max_messages_per_client (10000)",
        ),
    ],
)
def test_cluster_settings_that_cannot_work_are_named(
    tmp_path: Path, text: str, message: str
) -> None:
    assert message in error_of(tmp_path, text)
