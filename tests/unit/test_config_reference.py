"""The configuration reference (docs/configuration.md) is the schema's: the committed page
is what ``python -m ferromq.config_reference`` prints, and it has a section for every
table the loader accepts, so a key added without regenerating the page fails here."""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from pathlib import Path

from ferromq import config
from ferromq.config import Config
from ferromq.config_reference import COMMAND, main, reference

PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_the_committed_page_is_the_generated_one() -> None:
    assert PAGE.read_text(encoding="utf-8") == reference(), (
        f"docs/configuration.md is out of date with python/ferromq/config.py; run: {COMMAND}"
    )


def test_every_table_the_loader_accepts_has_a_section_and_every_key_a_row() -> None:
    text = reference()
    defaults = Config()
    accepted = ("listeners", *config._TABLE_LISTS, *config._SECTIONS)  # the loader's tables
    assert {f.name for f in fields(Config)} == set(accepted)
    for name in accepted:
        table = getattr(defaults, name)
        item = next(f for f in fields(Config) if f.name == name).metadata.get("tables")
        if isinstance(table, tuple):  # [[listeners]] has a default entry, the others none
            assert table or item is not None, f"[[{name}]] has no 'tables' metadata"
            header, table = f"[[{name}]]", table[0] if table or item is None else item()
        else:
            header = f"[{name}]"
        assert f"\n## `{header}`\n" in text, header
        for key in fields(table):
            if is_dataclass(getattr(table, key.name)):  # a sub-table: [stream.files]
                assert f"\n## `[{name}.{key.name}]`\n" in text
            if key.metadata.get("tables"):  # an array of sub-tables: [[rewrite.rules]]
                assert f"\n## `[[{name}.{key.name}]]`\n" in text
            assert f"\n| `{key.name}` | " in text, f"{name}.{key.name}"


def test_a_key_shows_its_kind_range_default_and_docstring() -> None:
    text = reference()
    assert "| `max_packet_size` | size | 64 B to 268435460 B | `1048576` (1 MiB) |" in text
    assert "- **`max_packet_size`**: Largest packet accepted or sent; v5 Maximum" in text
    assert '| `workers` | workers | `"auto"` or 1 to 1024 | `"auto"` |' in text
    # An inherited key keeps the docstring of the table it comes from (BansConfig(BanList)).
    assert "- **`client_ids`**: Client ids refused at CONNECT" in text


def test_check_refuses_a_stale_page(tmp_path: Path) -> None:
    stale = tmp_path / "configuration.md"
    stale.write_text(reference().replace("max_packet_size", "max_pakcet_size"))
    assert main(["--check", str(stale)]) == 1
    stale.write_text(reference())
    assert main(["--check", str(stale)]) == 0
