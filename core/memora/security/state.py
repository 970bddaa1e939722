"""memora's own state files never follow planted links.

A project is untrusted input (a cloned repository): a symbolic link planted at
``.memora/.lock``, at a session file or at the memory database would make memora truncate or
append to a file outside the project.  Every state file memora creates or writes is opened
with ``O_NOFOLLOW`` after checking that no folder between its root (the project, the data
folder) and it is a link; SQLite databases are opened with ``nofollow=1``.  A link, or a file
where a folder belongs (``.memora`` being a regular file, ``.lock`` a folder), is a clear
``STORAGE_ERROR`` naming the path — never a traceback.

memora's own files are private: the folders it creates for its state are 0700 and the files
0600 (a session log or the memory database holds the project's conversations; a sandboxed
snippet or another local user must not read them).  :func:`warn_if_shared` names a state folder
that is wider, once per process.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
from pathlib import Path

from ..errors import ErrorCode, MemoraError

__all__ = [
    "PRIVATE_DIR",
    "PRIVATE_FILE",
    "check_state_path",
    "ensure_state_dir",
    "keep_out_of_git",
    "open_state_file",
    "private_file",
    "user_config_dir",
    "warn_if_shared",
    "warn_once",
]

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
_warned: set[tuple[str, str]] = set()
log = logging.getLogger("memora")

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def _refuse(path: Path, what: str) -> MemoraError:
    return MemoraError(
        ErrorCode.STORAGE_ERROR,
        f"{path} {what}; memora does not follow links or replace other files in its own state "
        "folders (a planted link could make it write elsewhere): remove or rename it",
        context={"path": str(path)},
    )


def _check_dir(path: str | Path) -> bool:
    """True when ``path`` is a real folder, False when missing; raises for anything else."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(Path(path), "is a symbolic link")
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(Path(path), "is not a folder")
    return True


def _parts(path: str) -> list[str]:
    """The parts of ``path`` as :class:`~pathlib.PurePath` reads them (repeated separators and
    ``.`` dropped), without building a path object: a session append checks its path on every
    turn."""
    if os.altsep:
        path = path.replace(os.altsep, os.sep)
    return [p for p in path.split(os.sep) if p and p != "."]


def check_state_path(path: str | Path, root: str | Path) -> None:
    """Refuse a link or a non-folder between ``root`` (trusted as given) and ``path``, and a
    ``path`` that is a link or not a regular file (a missing one is fine)."""
    path, root = os.fspath(path), os.fspath(root)
    inner, outer = _parts(path), _parts(root)
    # ``path`` relative to ``root``, as PurePath.relative_to: nothing when it is not under it
    under = path.startswith(os.sep) == root.startswith(os.sep) and inner[: len(outer)] == outer
    cur = root
    for part in inner[len(outer) : -1] if under else ():
        cur = os.path.join(cur, part)
        if not _check_dir(cur):
            break  # the rest will be created by memora itself
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(Path(path), "is a symbolic link")
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(Path(path), "is not a regular file")


def ensure_state_dir(path: Path, root: Path) -> Path:
    """Create ``path`` (and the folders up to it) under ``root``, refusing links and files on
    the way."""
    path, root = Path(path), Path(root)
    check_state_path(path / ".probe", root)
    missing: list[Path] = []
    cur = path
    while not cur.exists() and cur != cur.parent:
        missing.append(cur)
        cur = cur.parent
    for folder in reversed(missing):  # each folder memora creates is private (not the umask's)
        try:
            folder.mkdir(mode=PRIVATE_DIR)
        except FileExistsError:
            if not folder.is_dir():
                raise _refuse(folder, "is not a folder") from None
        except NotADirectoryError as exc:
            raise _refuse(Path(exc.filename or folder), "is not a folder") from exc
    if not path.is_dir():
        raise _refuse(path, "is not a folder")
    return path


def private_file(path: Path) -> None:
    """Create ``path`` empty and 0600 when it does not exist (for files another library creates
    with its own default mode, such as SQLite's 0644); an existing file is left as it is."""
    with contextlib.suppress(FileExistsError):
        fd = os.open(
            path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, PRIVATE_FILE
        )
        os.close(fd)


def warn_if_shared(path: Path) -> bool:
    """Warn (once per folder and process) when ``path``, a state folder, may be read by other
    users; True when it may."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return False
    if not mode & 0o077:
        return False
    warn_once(
        log,
        path,
        "%s is readable by other users (mode %04o): it holds this project's conversations "
        "and memory; make it private with: chmod -R go-rwx %s",
        path,
        mode,
        path,
    )
    return True


def warn_once(logger: logging.Logger, about: object, message: str, *args: object) -> None:
    """``logger.warning(message, *args)`` the first time this process says ``message`` about
    ``about`` (a path): a file read on every request is named once, not on every read."""
    key = (message, str(about))
    if key not in _warned:
        _warned.add(key)
        logger.warning(message, *args)


def open_state_file(path: Path, flags: int, root: Path, mode: int = PRIVATE_FILE) -> int:
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


GITIGNORE_HEADER = (
    "# made by memora: its conversations, memories, paused turns and lock stay out of commits\n"
    "# (edit or empty this file to decide otherwise; memora leaves an existing one alone)\n"
)


def keep_out_of_git(folder: Path, entries: tuple[str, ...] = ("*",)) -> bool:
    """Put a ``.gitignore`` of ``entries`` (all of it by default) in ``folder``, as pytest's and
    ruff's caches do, unless one is there: a person who commits the project does not publish
    their conversations with it.  Never follows a link; True when it wrote one."""
    path = os.path.join(folder, ".gitignore")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600)
    except FileExistsError:
        return False
    except OSError as exc:  # a read-only project, say: memora still works
        log.debug("no .gitignore in %s: %s", folder, exc)
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(GITIGNORE_HEADER + "".join(f"{e}\n" for e in entries))
    return True


def user_config_dir(config_dir: str | Path | None = None) -> Path:
    """The user's memora folder: ``config_dir``, else ``$MEMORA_HOME``, else the XDG folder
    (also :func:`memora.settings.user_config_dir`)."""
    if config_dir is not None:
        return Path(config_dir)
    home = os.environ.get("MEMORA_HOME")
    if home:
        return Path(home)
    xdg = os.environ.get("XDG_CONFIG_HOME")
    return (Path(xdg) if xdg else Path.home() / ".config") / "memora"
