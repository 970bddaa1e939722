"""memora's own state files never follow planted links.

A project is untrusted input (a cloned repository): a symbolic link planted at
``.memora/.lock``, at a session file or at the memory database would make memora truncate or
append to a file outside the project.  Every state file memora creates or writes is opened
with ``O_NOFOLLOW`` after checking that no folder between its root (the project, the data
folder) and it is a link; SQLite databases are opened with ``nofollow=1``.  A link, or a file
where a folder belongs (``.memora`` being a regular file, ``.lock`` a folder), is a clear
``STORAGE_ERROR`` naming the path — never a traceback.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from ..errors import ErrorCode, MemoraError

__all__ = ["check_state_path", "ensure_state_dir", "open_state_file"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def _refuse(path: Path, what: str) -> MemoraError:
    return MemoraError(
        ErrorCode.STORAGE_ERROR,
        f"{path} {what}; memora does not follow links or replace other files in its own state "
        "folders (a planted link could make it write elsewhere): remove or rename it",
        context={"path": str(path)},
    )


def _check_dir(path: Path) -> bool:
    """True when ``path`` is a real folder, False when missing; raises for anything else."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(path, "is a symbolic link")
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(path, "is not a folder")
    return True


def check_state_path(path: Path, root: Path) -> None:
    """Refuse a link or a non-folder between ``root`` (trusted as given) and ``path``, and a
    ``path`` that is a link or not a regular file (a missing one is fine)."""
    path, root = Path(path), Path(root)
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        parts = ()
    cur = root
    for part in parts[:-1]:
        cur = cur / part
        if not _check_dir(cur):
            break  # the rest will be created by memora itself
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(path, "is a symbolic link")
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(path, "is not a regular file")


def ensure_state_dir(path: Path, root: Path) -> Path:
    """Create ``path`` (and the folders up to it) under ``root``, refusing links and files on
    the way."""
    path, root = Path(path), Path(root)
    check_state_path(path / ".probe", root)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:
        raise _refuse(Path(exc.filename or path), "is not a folder") from exc
    return path


def open_state_file(path: Path, flags: int, root: Path, mode: int = 0o644) -> int:
    """``os.open`` for a state file: checked from ``root``, never following a final link,
    and only a regular file."""
    check_state_path(path, root)
    try:
        fd = os.open(path, flags | _NOFOLLOW | _CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refuse(Path(path), "is a symbolic link") from exc
        if exc.errno == errno.EISDIR:
            raise _refuse(Path(path), "is a folder, not a file") from exc
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _refuse(Path(path), "is not a regular file")
    return fd
