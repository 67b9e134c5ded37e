"""``ferromq init`` as a user runs it: the starter file passes check-config and loads to
the defaults, names every section and key of the schema with its documentation, changes
exactly the setting whose line is uncommented, and replaces an existing file only with
--force."""

from __future__ import annotations

import subprocess
from dataclasses import fields, is_dataclass, replace
from pathlib import Path

from tests.conftest import ferromq_command
from tests.support.commands import one_line_error, run_cli

from ferromq.config import Config, MiB, load_config
from ferromq.starter_config import starter_config


def test_the_starter_file_passes_check_config_and_loads_to_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    written = run_cli("init", str(path))
    assert written.returncode == 0, written.stderr
    assert str(path) in written.stdout
    checked = run_cli("check-config", "--config", str(path))
    assert checked.returncode == 0, checked.stderr
    assert load_config(path, {}) == Config()


def test_every_section_and_key_is_there_with_its_documentation() -> None:
    text = starter_config()
    defaults = Config()
    for section in fields(Config):
        table = getattr(defaults, section.name)
        example = section.metadata.get("tables")
        if example is not None:  # none by default: an example entry, commented out
            header, table = f"#[[{section.name}]]", example()
        elif isinstance(table, tuple):
            header, table = f"[[{section.name}]]", table[0]
        else:
            header = f"[{section.name}]"
        assert f"\n{header}\n" in text
        for key in fields(table):
            value = getattr(table, key.name)
            if is_dataclass(value):  # a sub-table: [stream.files]
                assert f"\n[{section.name}.{key.name}]\n" in text
                assert all(f"\n#{inner.name} = " in text for inner in fields(value))
                continue
            assert f"\n#{key.name} = " in text or f"\n##{key.name} = " in text, key.name
    # A key's docstring comments it; a section's heads it.
    assert (
        "# Largest packet accepted or sent; v5 Maximum Packet Size [MQTT-3.2.2-15].\n"
        "#max_packet_size = 1048576\n"
    ) in text
    assert "# `[session]`: what the broker keeps for clients while they are away.\n" in text
    assert "#users_file = (not set)\n" in text


def test_uncommenting_a_line_changes_that_setting_only(tmp_path: Path) -> None:
    path = tmp_path / "ferromq.toml"
    assert run_cli("init", str(path)).returncode == 0
    text = path.read_text()
    text = text.replace("\n#port = 1883\n", "\nport = 1884\n")
    text = text.replace("\n#max_packet_size = 1048576\n", '\nmax_packet_size = "2MiB"\n')
    path.write_text(text)
    defaults = Config()
    assert load_config(path, {}) == replace(
        defaults,
        listeners=(replace(defaults.listeners[0], port=1884),),
        limits=replace(defaults.limits, max_packet_size=2 * MiB),
    )


def test_an_existing_file_is_replaced_only_with_force(tmp_path: Path) -> None:
    path = tmp_path / "ferromq.toml"
    path.write_text("# my settings\n")
    refused = run_cli("init", str(path))
    one_line_error(refused, 2, str(path), "--force")
    assert path.read_text() == "# my settings\n"
    forced = run_cli("init", "--force", str(path))
    assert forced.returncode == 0, forced.stderr
    assert path.read_text() == starter_config()


def test_the_default_path_is_ferromq_toml_in_the_working_directory(tmp_path: Path) -> None:
    subprocess.run([*ferromq_command(), "init"], cwd=tmp_path, check=True, timeout=30)
    assert load_config(tmp_path / "ferromq.toml", {}) == Config()
