"""One append to a session's log, checked from its ``write`` to its ``fsync``.

A finished turn is one append (see :mod:`memora.memory.sessions`), and an append is only
acknowledged once all of it is on the disk.  A full or failing disk breaks that in three ways,
each handled here:

* ``os.write`` may write less than it was given: a full disk takes what fits and says how much.
  The rest is written by the next call, which writes it or fails with the reason (``ENOSPC``).
* A ``write`` or ``fsync`` that fails leaves the bytes already written in the file, where a
  reader would take the whole lines among them (a turn's first messages, say) as written.  The
  append's bytes are taken back out: the log is cut to the size it had before (a log the append
  began is removed, so a new session stays unwritten), and the log ends as it did.
* The error says what happened: ``STORAGE_FULL`` (:class:`~memora.errors.StorageFullError`)
  for a full disk or quota, ``STORAGE_ERROR`` naming ``EIO`` for a disk that failed.

Once space is back the next append works as before; a log left ending in a torn line (the cut
itself failed, or a killed process) is closed by the next append's leading newline, and the
reader skips it.
"""

from __future__ import annotations

import errno
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import StorageError, StorageFullError
from ..security.atomic import fsync_dir

__all__ = ["FULL_ERRNOS", "LogAppend", "append_to", "disk_error"]

logger = logging.getLogger("memora.sessions")

FULL_ERRNOS = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)})
"""A full disk, or the user's quota on it."""


def disk_error(exc: OSError, path: Path, doing: str) -> StorageError:
    """``exc``, raised while ``doing`` (``write to``, ``sync``, ``create``) the file at
    ``path``, as an error a host can act on: ``STORAGE_FULL`` for a full disk or quota, else
    ``STORAGE_ERROR`` naming the system's reason (``EIO``: the disk failed)."""
    name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    reason = exc.strerror or str(exc)
    context = {"path": str(path), "errno": name}
    if exc.errno in FULL_ERRNOS:
        return StorageFullError(
            f"the disk holding {path} is full ({name}: {reason}); nothing of this write was "
            "kept: free some space and the next one is written",
            context=context,
        )
    return StorageError(
        f"could not {doing} {path} ({name}: {reason}); nothing of this write was kept",
        context=context,
    )


@dataclass(slots=True)
class LogAppend:
    """An append written into the page cache, not yet durable; it owns ``fd`` (the log, open
    for appending) and closes it when synced or failed."""

    fd: int
    path: Path
    size: int
    """The log's size before this append: where a failed one is cut back to."""
    new_log_in: Path | None
    """The folder of a log this append began: its entry there is made durable too."""
    written: int = 0

    def write(self, payload: bytes) -> None:
        """All of ``payload``; on a failure the append is taken back out, ``fd`` closed and a
        :func:`disk_error` raised."""
        view = memoryview(payload)
        try:
            while view:
                # a short write is what a full disk does: the next call writes the rest, or
                # fails with the reason
                count = os.write(self.fd, view)
                if count <= 0:  # a regular file never does this; never loop on it
                    raise OSError(errno.EIO, "write wrote nothing")
                self.written += count
                view = view[count:]
        except OSError as exc:
            try:
                raise self._failed(exc, "write to") from exc
            finally:
                os.close(self.fd)
        except BaseException:
            os.close(self.fd)
            raise

    def sync(self) -> None:
        """``fsync`` the log (and a new log's folder) and close it, on a worker thread; a
        failed ``fsync`` takes the append back out and raises (its bytes are not on the
        disk, whatever the page cache still shows)."""
        try:
            os.fsync(self.fd)
        except OSError as exc:
            raise self._failed(exc, "sync") from exc
        finally:
            os.close(self.fd)
        if self.new_log_in is not None:
            fsync_dir(self.new_log_in)

    def _failed(self, exc: OSError, doing: str) -> StorageError:
        self._undo()
        error = disk_error(exc, self.path, doing)
        logger.warning("%s", error.message)
        return error

    def _undo(self) -> None:
        """Take this append's bytes back out of the log: a reader must not take a whole line
        of an unacknowledged turn (its first messages) as written."""
        try:
            st = os.fstat(self.fd)
            if st.st_size != self.size + self.written:
                # someone else appended since (the session's lock keeps this process's
                # appends apart; another process ignoring it): their bytes are not ours to cut
                logger.warning("%s changed during a failed append: left as it is", self.path)
                return
            if self.size == 0:
                # a log this append began: removed, so a new session stays unwritten (an empty
                # log would make it a session on disk without its first line) — if the name
                # is still this file
                if os.stat(self.path, follow_symlinks=False).st_ino == st.st_ino:
                    os.unlink(self.path)
                return
            os.ftruncate(self.fd, self.size)
        except OSError as exc:
            # the partial line stays: the next append starts on a new line and the reader
            # skips the torn one (a whole message line among it would be read, hence the cut)
            logger.warning("could not cut the failed append out of %s: %s", self.path, exc)


def append_to(fd: int, path: Path, payload: bytes, *, fresh: bool) -> LogAppend:
    """Write ``payload`` at the end of the log ``path`` open on ``fd`` (taken over: closed on
    a failure, and by the returned append's sync); ``fresh``: a file just created, known
    empty."""
    try:
        size = 0 if fresh else os.fstat(fd).st_size
        # a previous crash may have left a torn line without its newline: start on a new line
        if size and os.pread(fd, 1, size - 1) != b"\n":
            payload = b"\n" + payload
    except OSError as exc:
        os.close(fd)
        raise disk_error(exc, path, "read") from exc
    except BaseException:
        os.close(fd)
        raise
    # a log this append begins (a new session, a new day): its name in the folder is made
    # durable too, or a power cut could keep the data and lose the file
    append = LogAppend(fd, path, size, None if size else path.parent)
    append.write(payload)
    return append
