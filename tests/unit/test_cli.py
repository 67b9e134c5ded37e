"""The installed console script: --version and --help, and every start-up failure a user
can cause as one line and an exit status."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest
from tests.support.commands import one_line_error, run_cli
from tests.support.tls_certs import authority

import ferromq
from ferromq.config import toml_value


def test_version_is_the_package_version() -> None:
    result = run_cli("--version")
    assert result.returncode == 0
    assert result.stdout.startswith(f"ferromq {ferromq.__version__} (_core ")


def test_help_describes_the_broker() -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    assert "MQTT" in result.stdout
    assert "usage: ferromq" in result.stdout


def test_unknown_command_is_refused() -> None:
    result = run_cli("serve-nothing")
    assert result.returncode == 2
    assert "invalid choice" in result.stderr


def test_both_compiled_modules_import() -> None:
    import ferromq._core
    import ferromq._protocol

    assert ferromq._core.__version__ == ferromq.__version__
    assert ferromq._protocol.ReadArena().size > 0


# Start-up failures a user can cause: one line on stderr, no traceback, a documented
# exit status; check-config finds the same problems serve refuses to start with.


def run_with(
    tmp_path: Path, config_text: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "ferromq.toml"
    config.write_text(config_text)
    return run_cli(*args, "--config", str(config), env=env)


def test_port_in_use_is_one_line_and_creates_no_data_directory(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        data = tmp_path / "data"
        config = f'[[listeners]]\nport = {port}\n[storage]\npath = "{data}"\n'
        result = run_with(tmp_path, config, "serve", "--loop", "asyncio")
    one_line_error(result, 4, "listeners[0] (default)", f"127.0.0.1:{port}", "in use")
    assert not data.exists()


# serve and check-config must refuse the same things.
BOTH_COMMANDS = pytest.mark.parametrize(
    "command", [["serve", "--loop", "asyncio"], ["check-config"]]
)


@BOTH_COMMANDS
@pytest.mark.parametrize(
    ("contents", "problem"), [(None, "not found"), ("[users.alice\n", "cannot be read")]
)
def test_a_users_file_that_cannot_be_loaded(
    tmp_path: Path, command: list[str], contents: str | None, problem: str
) -> None:
    users = tmp_path / "users.toml"
    if contents is not None:
        users.write_text(contents)
    result = run_with(tmp_path, f'[auth]\nusers_file = "{users}"\n', *command)
    one_line_error(result, 2, f"users file {users}", problem)


@BOTH_COMMANDS
def test_a_data_directory_that_cannot_be_created(tmp_path: Path, command: list[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    config = f'[storage]\npath = "{blocker / "data"}"\n'
    result = run_with(tmp_path, config, *command, env={"FERROMQ_LISTEN": "127.0.0.1:1"})
    one_line_error(result, 2, "storage.path", "not a directory")


@BOTH_COMMANDS
@pytest.mark.parametrize(
    ("setting", "package", "extra"),
    [
        ('[storage]\nbackend = "redis"\n', "redis", "redis"),
        ('[storage]\napplication_store = "kafka"\n', "aiokafka", "kafka"),
    ],
)
def test_a_backend_whose_extra_is_missing(
    tmp_path: Path, command: list[str], setting: str, package: str, extra: str
) -> None:
    # A package directory that fails to import as an uninstalled one would.
    missing = tmp_path / "site" / package
    missing.mkdir(parents=True)
    (missing / "__init__.py").write_text(
        f"raise ModuleNotFoundError(\"No module named '{package}'\", name={package!r})\n"
    )
    path = os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")])
    result = run_with(tmp_path, setting, *command, env={"PYTHONPATH": path})
    one_line_error(result, 2, f"ferromq[{extra}]", f"No module named '{package}'")


@BOTH_COMMANDS
@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("missing certfile", ["listeners[0].certfile", "missing.pem", "not found"]),
        ("key of another cert", ["listeners[0].keyfile", "does not match listeners[0].certfile"]),
        ("cert is not a certificate", ["listeners[0].certfile", "no PEM certificate"]),
        ("encrypted key", ["listeners[0].keyfile", "is encrypted"]),
        ("missing cafile", ["listeners[0].cafile", "required with require_certificate"]),
        ("tls key on tcp", ["listeners[0].certfile", 'only for protocol = "tls"']),
        ("identity without require", ["listeners[0].use_identity_as_username"]),
    ],
)
def test_tls_listener_files_are_checked(
    tmp_path: Path, command: list[str], case: str, words: list[str]
) -> None:
    ca = authority(tmp_path)
    server, other = ca.server(), ca.server("other")
    keys = {"protocol": "tls", "certfile": server.cert, "keyfile": server.key}
    if case == "missing certfile":
        keys["certfile"] = tmp_path / "missing.pem"
    elif case == "key of another cert":
        keys["keyfile"] = other.key
    elif case == "cert is not a certificate":
        keys["certfile"] = server.key
    elif case == "encrypted key":
        keys["keyfile"] = tmp_path / "encrypted.pem"
        encrypt = ["openssl", "pkey", "-in", str(server.key), "-aes256", "-passout", "pass:x"]
        subprocess.run([*encrypt, "-out", str(keys["keyfile"])], check=True)
    elif case == "missing cafile":
        keys["require_certificate"] = True
    elif case == "tls key on tcp":
        keys["protocol"] = "tcp"
    else:
        keys |= {"cafile": ca.cafile, "use_identity_as_username": True}
    lines = [
        f"{key} = {toml_value(value if isinstance(value, bool) else str(value))}"
        for key, value in keys.items()
    ]
    config = "[[listeners]]\nport = 1\n" + "\n".join(lines) + '\n[storage]\nbackend = "memory"\n'
    one_line_error(run_with(tmp_path, config, *command), 2, *words)
