"""A real small file system for full-disk tests: a ``tmpfs`` mounted with a size (root only),
filled to the brim by a filler file and freed again.  Where mounting is not allowed (not
root, a container without the right), the test is skipped with the reason."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PAGE = 4096
"""What a tmpfs allocates at a time."""


@contextlib.contextmanager
def small_disk(folder: Path, size: str = "1m") -> Iterator[Path]:
    """``folder`` as a tmpfs of ``size`` while the block runs; unmounted afterwards."""
    if sys.platform != "linux" or shutil.which("mount") is None:
        pytest.skip(f"full-disk tests need Linux's mount (this is {sys.platform})")
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(
            "full-disk tests SKIPPED: cannot mount a small tmpfs here (root and the right to "
            f"mount are needed): {mounted.stderr.strip() or mounted.returncode}"
        )
    try:
        yield folder
    finally:
        # lazily if something still holds a file there (a failing test's open store)
        if subprocess.run(["umount", str(folder)], capture_output=True, check=False).returncode:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True, check=False)


def fill(disk: Path, leave_pages: int = 0) -> Path:
    """Fill ``disk`` to the brim with a filler file, then give back ``leave_pages`` pages;
    returns the filler (unlink it to free the space)."""
    filler = disk / f"filler-{os.urandom(4).hex()}"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        block = b"\0" * (64 * 1024)
        while True:
            try:
                os.write(fd, block)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                break
        size = os.fstat(fd).st_size
        os.ftruncate(fd, max(0, size - leave_pages * PAGE))
    finally:
        os.close(fd)
    return filler
