"""The store's layout across numbers of workers (python/ferromq/storage/layout.py):
which journals a shard takes over, and what a commit records and deletes, at every
point a crash can leave the directory in."""

from __future__ import annotations

import json
from pathlib import Path

from ferromq.storage.layout import MANIFEST, commit, previous_layout, shard_path


def journal(directory: Path, name: str = "journal-00000001.log") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_bytes(b"FMQJ")
    return directory


def test_one_worker_keeps_the_root_and_more_get_a_directory_each(tmp_path: Path) -> None:
    assert shard_path(tmp_path, 0, 1) == tmp_path
    assert shard_path(tmp_path, 2, 4) == tmp_path / "workers-4" / "shard-2"


def test_a_store_that_never_had_shards_is_left_as_it_is(tmp_path: Path) -> None:
    journal(tmp_path)
    assert previous_layout(tmp_path, 1) == []
    assert commit(tmp_path, 1) is False
    assert not (tmp_path / MANIFEST).exists()


def test_from_one_worker_to_two_the_root_journal_is_taken_over(tmp_path: Path) -> None:
    journal(tmp_path)
    assert previous_layout(tmp_path, 2) == [tmp_path]
    # Crashed before the commit: the root is still the authority, read again.
    journal(shard_path(tmp_path, 0, 2))
    assert previous_layout(tmp_path, 2) == [tmp_path]
    assert commit(tmp_path, 2) is True
    assert json.loads((tmp_path / MANIFEST).read_text()) == {"workers": 2}
    assert not any(tmp_path.glob("journal-*.log"))
    assert (tmp_path / "workers-2" / "shard-0" / "journal-00000001.log").exists()
    assert previous_layout(tmp_path, 2) == []
    assert commit(tmp_path, 2) is False


def test_from_two_workers_to_three_and_back_to_one(tmp_path: Path) -> None:
    for shard in range(2):
        journal(shard_path(tmp_path, shard, 2))
    commit(tmp_path, 2)
    assert previous_layout(tmp_path, 3) == [shard_path(tmp_path, k, 2) for k in range(2)]
    commit(tmp_path, 3)
    assert not (tmp_path / "workers-2").exists()
    for shard in range(3):
        journal(shard_path(tmp_path, shard, 3))
    assert previous_layout(tmp_path, 1) == [shard_path(tmp_path, k, 3) for k in range(3)]
    journal(tmp_path)
    commit(tmp_path, 1)
    assert json.loads((tmp_path / MANIFEST).read_text()) == {"workers": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["journal-00000001.log", MANIFEST]


def test_a_layout_no_node_served_from_is_ignored_then_deleted(tmp_path: Path) -> None:
    # Committed at 2; a move to 3 crashed before its commit; now starting at 1.
    for shard in range(2):
        journal(shard_path(tmp_path, shard, 2))
    commit(tmp_path, 2)
    journal(shard_path(tmp_path, 0, 3))
    assert previous_layout(tmp_path, 1) == [shard_path(tmp_path, k, 2) for k in range(2)]
    commit(tmp_path, 1)
    assert not (tmp_path / "workers-2").exists() and not (tmp_path / "workers-3").exists()


def test_a_commit_interrupted_after_the_manifest_finishes_next_time(tmp_path: Path) -> None:
    journal(tmp_path)
    journal(shard_path(tmp_path, 0, 2))
    (tmp_path / MANIFEST).write_text('{"workers": 2}\n')  # the old root not yet deleted
    assert previous_layout(tmp_path, 2) == []  # the manifest is the authority
    assert commit(tmp_path, 2) is True
    assert not any(tmp_path.glob("journal-*.log"))
