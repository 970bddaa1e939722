"""Atomic file writes: write a temporary file beside the target, fsync, rename over it.

A reader (or a process restarted after a kill) sees either the old file or the new one, never a
truncated mix.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["atomic_write_bytes", "atomic_write_text", "fsync_dir"]


def fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


_TEMP_FLAGS = (
    os.O_WRONLY
    | os.O_CREAT
    | os.O_EXCL
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` whole or not at all; ``durable``: fsynced, and the rename too.

    The temporary file is created private (0600) beside the target, with a random name that
    cannot be a planted link (``O_EXCL``); it takes the mode of the file it replaces.  The folder
    is created when missing.  Plain system calls (no ``tempfile``/``Path``/buffered file): this
    runs on every turn of a shared server (its session version and current turn), where those
    layers were half its cost (≈120 → 65 µs of CPU a write)."""
    target = os.fspath(path)
    folder, name = os.path.split(target)
    mode = None
    with contextlib.suppress(FileNotFoundError):
        mode = os.stat(target).st_mode & 0o7777
    while True:
        tmp = os.path.join(folder, f".{name}.{os.urandom(6).hex()}.tmp")
        try:
            fd = os.open(tmp, _TEMP_FLAGS, 0o600)
            break
        except FileExistsError:  # a name taken (2^-48 a try): draw another
            continue
        except FileNotFoundError:
            os.makedirs(folder or ".", exist_ok=True)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if mode is not None:
                os.fchmod(fd, mode)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(Path(folder or "."))


def atomic_write_text(path: str | os.PathLike[str], text: str, *, durable: bool = True) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), durable=durable)
