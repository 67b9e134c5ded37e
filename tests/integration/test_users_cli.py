"""`ferromq users passwd | delete | list | import-mosquitto` on a users file, and the
users they leave logging in to `ferromq serve` with paho-mqtt: Mosquitto users keep
the passwords Debian's real `mosquitto_passwd` hashed ($7$ PBKDF2-SHA512 and $6$
SHA512), and can use SCRAM once their first login gave the broker SCRAM keys; under
uvloop and asyncio."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conformance.support import prop
from tests.conformance.test_12_auth import scram_connect
from tests.conftest import RunningBroker, ferromq_command, start_broker
from tests.support.commands import users_add
from tests.support.paho_clients import connack

needs_mosquitto_passwd = pytest.mark.skipif(
    shutil.which("mosquitto_passwd") is None, reason="mosquitto (mosquitto_passwd) missing"
)


def users(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ferromq_command(), "users", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
    )


@contextmanager
def users_broker(tmp_path: Path, loop: str, users_file: Path) -> Iterator[RunningBroker]:
    broker = start_broker(tmp_path, loop, f'[auth]\nusers_file = "{users_file}"\n')
    try:
        yield broker
    finally:
        broker.stop()


def mosquitto_passwd(path: Path, name: str, password: str, *options: str) -> None:
    subprocess.run(
        ["mosquitto_passwd", *options, "-b", str(path), name, password],
        check=True,
        capture_output=True,
        timeout=30,
    )


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_passwd_delete_and_list_change_who_logs_in(tmp_path: Path, loop: str) -> None:
    path = tmp_path / "users.toml"
    assert users_add(path, "ann", "first pw").returncode == 0
    assert users_add(path, "bo", "bo pw", "--client-type", "application").returncode == 0
    changed = users("passwd", "ann", "--password-stdin", "--file", str(path), stdin="second pw\n")
    assert changed.returncode == 0, changed.stderr
    assert users("delete", "bo", "--file", str(path)).returncode == 0
    listed = users("list", "--file", str(path))
    assert listed.stdout.splitlines() == ["ann\tdevice\tscram-sha-256"]
    missing = users("delete", "bo", "--file", str(path))
    assert missing.returncode == 2 and "no user 'bo'" in missing.stderr
    with users_broker(tmp_path, loop, path) as broker:
        for version in (4, 5):
            assert connack(broker, "ann", "second pw", version) == "Success"
            assert connack(broker, "ann", "first pw", version) == "Bad user name or password"
            assert connack(broker, "bo", "bo pw", version) == "Bad user name or password"


def test_the_users_file_defaults_to_the_configurations(tmp_path: Path) -> None:
    path = tmp_path / "users.toml"
    config = tmp_path / "ferromq.toml"
    config.write_text(f'[auth]\nusers_file = "{path}"\n')
    added = users("add", "cy", "--password-stdin", "--config", str(config), stdin="pw\n")
    assert added.returncode == 0, added.stderr
    assert users("list", "--file", str(path)).stdout.splitlines() == ["cy\tdevice\tscram-sha-256"]
    none = users("list", "--config", str(tmp_path / "absent.toml"))
    assert none.returncode == 2 and "absent.toml: not found" in none.stderr
    config.write_text("")
    unnamed = users("list", "--config", str(config))
    assert unnamed.returncode == 2
    assert "no --file, and the configuration names no auth.users_file" in unnamed.stderr


@needs_mosquitto_passwd
@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_mosquitto_users_log_in_with_their_old_passwords(tmp_path: Path, loop: str) -> None:
    passwd = tmp_path / "mosquitto.passwd"
    mosquitto_passwd(passwd, "pbkdf2", "old: pw ü", "-c")  # $7$, the default
    mosquitto_passwd(passwd, "salted", "older pw", "-H", "sha512")  # $6$
    path = tmp_path / "users.toml"
    imported = users("import-mosquitto", str(passwd), "--file", str(path))
    assert imported.returncode == 0, imported.stderr
    assert "imported 2 device users" in imported.stdout
    assert users("list", "--file", str(path)).stdout.splitlines() == [
        "pbkdf2\tdevice\tmosquitto-pbkdf2-sha512",
        "salted\tdevice\tmosquitto-sha512",
    ]
    with users_broker(tmp_path, loop, path) as broker:
        for version in (4, 5):
            assert connack(broker, "pbkdf2", "old: pw ü", version) == "Success"
            assert connack(broker, "salted", "older pw", version) == "Success"
            assert connack(broker, "pbkdf2", "older pw", version) == "Bad user name or password"
            assert connack(broker, "salted", "old: pw", version) == "Bad user name or password"


@needs_mosquitto_passwd
@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_a_mosquitto_user_can_use_scram_after_its_first_login(tmp_path: Path, loop: str) -> None:
    passwd = tmp_path / "mosquitto.passwd"
    mosquitto_passwd(passwd, "dev", "old pw", "-c")
    path = tmp_path / "users.toml"
    assert users("import-mosquitto", str(passwd), "--file", str(path)).returncode == 0
    with users_broker(tmp_path, loop, path) as broker:
        # A Mosquitto hash gives no SCRAM keys: refused like a wrong password.
        _, _, refused = scram_connect(broker, "scram-before", "dev", "old pw")
        assert refused["reason_code"] == 0x86, refused
        assert connack(broker, "dev", "old pw", 5) == "Success"
        listed = users("list", "--file", str(path)).stdout.splitlines()
        assert listed == ["dev\tdevice\tscram-sha-256"]  # written back to the file
        client, scram, accepted = scram_connect(broker, "scram-after", "dev", "old pw")
        assert accepted["reason_code"] == 0, accepted
        assert scram.server_signature_ok(prop(accepted, "authentication_data"))
        client.close()
        assert connack(broker, "dev", "old pw", 4) == "Success"
        assert connack(broker, "dev", "other pw", 4) == "Bad user name or password"


@needs_mosquitto_passwd
def test_passwd_turns_a_mosquitto_hash_into_scram(tmp_path: Path) -> None:
    passwd = tmp_path / "mosquitto.passwd"
    mosquitto_passwd(passwd, "dev", "pw", "-c")
    path = tmp_path / "users.toml"
    assert users("import-mosquitto", str(passwd), "--file", str(path)).returncode == 0
    changed = users("passwd", "dev", "--password-stdin", "--file", str(path), stdin="new pw\n")
    assert changed.returncode == 0, changed.stderr
    assert users("list", "--file", str(path)).stdout.splitlines() == ["dev\tdevice\tscram-sha-256"]


@needs_mosquitto_passwd
def test_import_is_all_or_nothing_and_names_what_is_wrong(tmp_path: Path) -> None:
    passwd = tmp_path / "mosquitto.passwd"
    mosquitto_passwd(passwd, "fresh", "pw", "-c")
    mosquitto_passwd(passwd, "taken", "pw")
    path = tmp_path / "users.toml"
    assert users_add(path, "taken", "mine").returncode == 0
    before = path.read_text()
    clash = users("import-mosquitto", str(passwd), "--file", str(path))
    assert clash.returncode == 2 and "user 'taken' exists; nothing imported" in clash.stderr
    assert path.read_text() == before
    passwd.write_text(
        "good:" + passwd.read_text().splitlines()[0].split(":", 1)[1] + "\nbad:plain\n"
    )
    broken = users("import-mosquitto", str(passwd), "--file", str(tmp_path / "other.toml"))
    assert broken.returncode == 2
    assert f"mosquitto password file {passwd}, line 2: expected $7$" in broken.stderr
    assert not (tmp_path / "other.toml").exists()
