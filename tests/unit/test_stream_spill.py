"""The Kafka sink's spill (ferromq.stream.spill) on a real directory: frames come back in
the order written, across segments and restarts; sent segments are deleted; the bound
refuses what does not fit; damage skips the rest of its segment, never more."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from ferromq.stream.spill import FORMAT_VERSION, Frame, Spill, SpillDamaged


def frame(n: int, size: int = 100) -> Frame:
    return Frame(f"topic.{n % 3}", n % 5, n.to_bytes(4, "big") * (size // 4))


FRAME = len(frame(0).encode())  # 121 bytes on disk
HEADER = 5


def drain(spill: Spill) -> list[Frame]:
    read: list[Frame] = []
    while not spill.empty:
        read += spill.read(1000)
        spill.sent()
    return read


def segment_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_frames_come_back_in_order_across_segments(tmp_path: Path) -> None:
    spill = Spill(tmp_path, max_bytes=8000)  # segments of 1000 bytes
    spill.open()
    written = [frame(n) for n in range(40)]
    for n in range(0, 40, 2):
        assert spill.append(written[n : n + 2])
    assert len(segment_files(tmp_path)) >= 3
    assert drain(spill) == written


def test_sent_frames_free_their_segments(tmp_path: Path) -> None:
    spill = Spill(tmp_path, max_bytes=8000)
    spill.open()
    for n in range(30):
        assert spill.append([frame(n)])
    full = spill.bytes
    read = spill.read(1000)
    assert read and spill.bytes == full, "nothing is deleted before it is sent"
    spill.sent()
    assert spill.bytes < full
    drain(spill)
    assert spill.bytes == HEADER, "an emptied spill holds one segment header"
    assert len(segment_files(tmp_path)) == 1


def test_a_unit_past_the_bound_is_refused_whole(tmp_path: Path) -> None:
    spill = Spill(tmp_path, max_bytes=1000)
    spill.open()
    accepted = 0
    while spill.append([frame(accepted), frame(accepted + 1)]):
        accepted += 2
    assert spill.bytes <= 1000
    assert accepted == 2 * (1000 // (2 * FRAME + HEADER))  # a segment per unit
    assert drain(spill) == [frame(n) for n in range(accepted)]


def test_a_restart_reads_what_the_last_run_left_first(tmp_path: Path) -> None:
    first = Spill(tmp_path, max_bytes=1 << 20)
    first.open()
    for n in range(10):
        first.append([frame(n)])
    assert first.read(350) == [frame(n) for n in range(4)]  # read, never sent
    first.close()

    second = Spill(tmp_path, max_bytes=1 << 20)
    second.open()
    assert second.bytes > 10 * 100
    second.append([frame(99)])
    assert drain(second) == [*(frame(n) for n in range(10)), frame(99)]
    assert len(segment_files(tmp_path)) == 1


def test_damage_skips_the_rest_of_its_segment_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = Spill(tmp_path, max_bytes=8000)
    first.open()
    for n in range(20):
        first.append([frame(n)])
    first.close()
    oldest = tmp_path / segment_files(tmp_path)[0]
    data = bytearray(oldest.read_bytes())
    data[HEADER + FRAME + 20] ^= 0xFF  # inside the second frame's body
    oldest.write_bytes(bytes(data))

    second = Spill(tmp_path, max_bytes=8000)
    second.open()
    with caplog.at_level(logging.WARNING, "ferromq.stream"):
        read = drain(second)
    frames_per_segment = -(-(1000 - HEADER) // FRAME)  # segments roll at 1000 bytes
    assert read == [frame(0), *(frame(n) for n in range(frames_per_segment, 20))]
    (warning,) = [r for r in caplog.records if r.getMessage().startswith("stream spill damaged")]
    assert vars(warning)["ferromq_fields"]["file"] == str(oldest)


def test_a_newer_format_is_refused_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "spill-00000000.seg").write_bytes(b"FMQS" + bytes([FORMAT_VERSION + 1]))
    with pytest.raises(SpillDamaged, match=r"spill-00000000\.seg: format 2"):
        Spill(tmp_path, max_bytes=1000).open()
