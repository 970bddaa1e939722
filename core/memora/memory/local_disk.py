"""Whether a folder lies on a local disk, from ``/proc/self/mountinfo``.

A network file system may stall any call, not only ``fsync``: a store whose folder lies on one
keeps its whole write on a worker thread (:mod:`.sqlite_file` writes inline on the event loop
only on a local disk).  Where the mount table cannot be read, nothing is local.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["LOCAL_FILE_SYSTEMS", "file_system_of", "on_local_disk"]

LOCAL_FILE_SYSTEMS = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "tmpfs", "overlay", "zfs", "bcachefs"}
)
"""File systems on a local disk (or in memory): a page-cache ``write`` there does not wait on a
network.  ``overlay`` is a container's root, over a local one."""


def _mount_points() -> list[tuple[str, str]]:
    """``(mount point, file system)`` of this process's mounts."""
    out = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as fh:
        for line in fh:
            left, sep, right = line.partition(" - ")
            fields = left.split()
            if not sep or len(fields) < 5 or not right.split():
                continue
            # octal escapes for a space, tab, newline and backslash in the path
            point = fields[4]
            for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
                point = point.replace(code, char)
            out.append((point, right.split()[0]))
    return out


def file_system_of(path: str | Path, mounts: list[tuple[str, str]] | None = None) -> str | None:
    """The file system ``path`` lies on (the innermost mount that holds it); ``None`` when
    unknown."""
    try:
        real = os.path.realpath(path)
        mounts = _mount_points() if mounts is None else mounts
    except OSError:
        return None
    best, kind = "", None
    for point, fs in mounts:
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):  # a later mount over the same point wins
            best, kind = point, fs
    return kind


def on_local_disk(path: str | Path) -> bool:
    """Whether ``path`` lies on a local file system (:data:`LOCAL_FILE_SYSTEMS`)."""
    return file_system_of(path) in LOCAL_FILE_SYSTEMS
