"""`memora.security.atomic.atomic_write_bytes`: whole or not at all, private, beside its target.

It runs on every turn of a shared server (the session's version and current turn), so it is
plain system calls; these pin what it promises whatever it is made of."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from memora.security.atomic import atomic_write_bytes, atomic_write_text


def _leftovers(folder: Path) -> list[str]:
    return [n for n in os.listdir(folder) if n.endswith(".tmp")]


def test_a_new_file_is_written_private_in_a_folder_made_for_it(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "版本"
    for durable in (False, True):
        atomic_write_bytes(target, b"\x00v1\xff" * 1000, durable=durable)
        assert target.read_bytes() == b"\x00v1\xff" * 1000
        assert stat.S_IMODE(target.stat().st_mode) == 0o600
        target.unlink()
    atomic_write_text(target, "中文 ✓")
    assert target.read_text("utf-8") == "中文 ✓"
    assert _leftovers(target.parent) == []


def test_a_replaced_file_keeps_its_mode_and_its_readers_see_old_or_new(tmp_path: Path) -> None:
    target = tmp_path / "shared.json"
    target.write_bytes(b"old")
    target.chmod(0o640)
    before = os.open(target, os.O_RDONLY)  # a reader that opened the old file keeps it whole
    try:
        atomic_write_bytes(target, b"new" * 10, durable=False)
        assert os.read(before, 100) == b"old"
    finally:
        os.close(before)
    assert target.read_bytes() == b"new" * 10
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    atomic_write_bytes(target, memoryview(b"view"))  # any bytes-like value
    assert target.read_bytes() == b"view"


def test_a_failed_rename_leaves_the_target_and_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "folder-in-the-way"
    (target / "inside").mkdir(parents=True)
    with pytest.raises(OSError):
        atomic_write_bytes(target, b"x")
    assert target.is_dir() and (target / "inside").is_dir()
    assert _leftovers(tmp_path) == []


def test_a_planted_link_at_the_target_is_replaced_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_bytes(b"keep")
    target = tmp_path / "state" / "current"
    target.parent.mkdir()
    target.symlink_to(outside)
    atomic_write_bytes(target, b"turn-1", durable=False)
    assert outside.read_bytes() == b"keep"
    assert not target.is_symlink() and target.read_bytes() == b"turn-1"


def test_writers_at_once_each_land_whole(tmp_path: Path) -> None:
    target = tmp_path / "version"
    values = [bytes([65 + n]) * (1000 + n) for n in range(8)]
    errors: list[BaseException] = []

    def write(value: bytes) -> None:
        try:
            for _ in range(50):
                atomic_write_bytes(target, value, durable=False)
                assert target.read_bytes() in values  # never a mix or a torn write
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(v,)) for v in values]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert target.read_bytes() in values
    assert _leftovers(tmp_path) == []
