"""Whether a folder lies on a local disk (``memora.memory.local_disk``), from the mount table."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memora.memory.local_disk import LOCAL_FILE_SYSTEMS, file_system_of, on_local_disk


def test_the_file_system_of_a_path_is_the_innermost_mount() -> None:
    mounts = [
        ("/", "ext4"),
        ("/home", "nfs4"),
        ("/home/me/fast disk", "xfs"),
        ("/proc", "proc"),
    ]
    assert file_system_of("/var/lib/memora", mounts) == "ext4"
    assert file_system_of("/home/you/project/.memora", mounts) == "nfs4"
    assert file_system_of("/home/me/fast disk/p", mounts) == "xfs"
    assert file_system_of("/home/me/fast diskette", mounts) == "nfs4"  # a prefix is not a mount
    assert file_system_of("/", [("/", "ext4"), ("/", "overlay")]) == "overlay"  # the later one
    assert "nfs4" not in LOCAL_FILE_SYSTEMS and "ext4" in LOCAL_FILE_SYSTEMS


@pytest.mark.skipif(not os.path.exists("/proc/self/mountinfo"), reason="no mountinfo")
def test_this_machines_temporary_folder_is_read_from_mountinfo(tmp_path: Path) -> None:
    kind = file_system_of(tmp_path)
    assert kind is not None
    assert on_local_disk(tmp_path) == (kind in LOCAL_FILE_SYSTEMS)
    assert not on_local_disk("/proc/self")  # procfs is no disk
