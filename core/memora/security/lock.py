"""The project lock: one process (one Agent) per project at a time.

``<project>/.memora/.lock`` is held with an OS advisory lock (``flock`` on POSIX, ``msvcrt`` on
Windows) for as long as the Agent is open.  The OS drops the lock when the holder dies, so a
stale lock left by a killed process is taken over safely by the next one; the file's content
(PID, host, start time) only serves the error message.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from ..errors import ErrorCode, MemoraError
from .state import ensure_state_dir, keep_out_of_git, open_state_file

__all__ = ["ProjectLock", "describe_time"]


def _try_lock(fh: IO[bytes], *, shared: bool = False) -> bool:
    if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
        import msvcrt

        if shared:
            raise MemoraError(ErrorCode.NOT_AVAILABLE, "a shared project lock needs flock (POSIX)")
        try:
            msvcrt.locking(fh.fileno(), msvcrt.LK_NBLCK, 1)
            return True
        except OSError:
            return False
    import fcntl

    try:
        fcntl.flock(fh.fileno(), (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        return True
    except OSError:
        return False


def _unlock(fh: IO[bytes]) -> None:
    if sys.platform == "win32":  # pragma: no cover
        import msvcrt

        with contextlib.suppress(OSError):
            msvcrt.locking(fh.fileno(), msvcrt.LK_UNLCK, 1)
        return
    import fcntl

    with contextlib.suppress(OSError):
        fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def describe_time(value: object) -> str:
    """A holder's start time for a message; anything absurd (NaN, 1e308, a string) is
    "an unknown time", never an exception."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "an unknown time"
    try:
        return datetime.fromtimestamp(float(value), UTC).isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):
        return "an unknown time"


def _field(info: dict[str, Any], key: str) -> str:
    """A holder field for a message: printable and short, whatever the lock file holds."""
    value = info.get(key, "?")
    text = str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else "?"
    return text.encode("utf-8", "replace").decode("utf-8")[:64] or "?"


class ProjectLock:
    """``with ProjectLock(project):`` or ``acquire()`` / ``release()``.

    ``shared=True``: several processes hold it at once (a service's workers, which serialise
    turns per session themselves); an exclusive holder excludes them and they exclude it."""

    def __init__(self, project_path: str | os.PathLike[str], *, shared: bool = False) -> None:
        self.path = Path(project_path) / ".memora" / ".lock"
        self.shared = shared
        self._fh: IO[bytes] | None = None

    @property
    def held(self) -> bool:
        return self._fh is not None

    def holder(self) -> dict[str, Any] | None:
        """Who holds (or last held) the lock, from the lock file."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def acquire(self) -> None:
        if self._fh is not None:
            return
        project = self.path.parent.parent
        ensure_state_dir(self.path.parent, project)
        # .memora/ holds the project's config and role packs (committed) and this lock (not)
        keep_out_of_git(self.path.parent, ("/" + self.path.name,))
        fd = open_state_file(self.path, os.O_RDWR | os.O_CREAT, project)
        fh = os.fdopen(fd, "r+b")  # kept open while the lock is held
        try:
            locked = _try_lock(fh, shared=self.shared)
        except BaseException:
            fh.close()
            raise
        if not locked:
            fh.close()
            info = self.holder() or {}
            pid, host, since = _field(info, "pid"), _field(info, "host"), info.get("since")
            held_shared = info.get("shared") is True
            raise MemoraError(
                ErrorCode.PROJECT_LOCKED,
                f"project {self.path.parent.parent} is locked by PID {pid} on {host} since "
                f"{describe_time(since)}"
                + (
                    " (shared by the workers of a service); stop the service first"
                    if held_shared
                    else "; close that Agent first (one Agent per project at a time)"
                ),
                context={"path": str(self.path), "pid": pid, "host": host, "shared": held_shared},
            )
        record = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
        if self.shared:
            record["shared"] = True
        if not self.shared or not (self.holder() or {}).get("shared"):
            fh.seek(0)
            fh.truncate()
            fh.write(json.dumps(record).encode())
            fh.flush()
        self._fh = fh

    def release(self) -> None:
        fh, self._fh = self._fh, None
        if fh is None:
            return
        if not self.shared:  # a shared holder leaves the record to the others
            with contextlib.suppress(OSError):
                fh.seek(0)
                fh.truncate()
        _unlock(fh)
        fh.close()

    def __enter__(self) -> ProjectLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
