"""Reading a session's JSONL logs (the writing is :mod:`.log_write`; the store is
:mod:`.sessions`): which files are its logs, their lines from an offset on, and the counts a
listing needs from the bytes appended since the last look.

A line is a record only when it is whole: a torn last line (another process's append caught
part-way, a killed writer's) is left for the next read; a corrupt line in the middle is skipped
with a warning.
"""

from __future__ import annotations

import json
import logging
import math
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO

from ..security.state import warn_once

__all__ = ["count_round", "open_log", "read_logs", "scan_log", "session_logs"]

logger = logging.getLogger("memora.sessions")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def _valid_entry(entry: Any) -> bool:
    return (
        isinstance(entry, dict)
        and type(entry.get("size")) is int
        and type(entry.get("rounds")) is int
        and entry["size"] >= 0
        and entry["rounds"] >= 0
        and (entry.get("first_user") is None or isinstance(entry.get("first_user"), str))
        and type(entry.get("last_ended")) in (int, float)
        and math.isfinite(entry["last_ended"])
    )


def count_round(entry: dict[str, Any], line: dict[str, Any]) -> None:
    """What a ``round`` line adds to a session's counts (``rounds``, ``first_user``,
    ``last_ended`` in ``entry``)."""
    entry["rounds"] += 1
    if entry["first_user"] is None:
        entry["first_user"] = str(line.get("user", ""))
    ended = line.get("ended_at")
    if isinstance(ended, (int, float)):
        entry["last_ended"] = max(entry["last_ended"], float(ended))


def scan_log(path: Path, cached: dict[str, Any] | None) -> dict[str, Any]:
    """Rounds, first user text and last end time of one log file, reading only the bytes after
    what ``cached`` already covers (logs are append-only)."""
    size = path.stat().st_size
    if not _valid_entry(cached):
        cached = None  # a cache entry of the wrong shape is rebuilt, never trusted
    if cached is not None and cached.get("size") == size:
        return cached
    fresh = cached is None or not isinstance(cached.get("size"), int) or cached["size"] > size
    entry: dict[str, Any] = (
        {"size": 0, "rounds": 0, "first_user": None, "last_ended": 0.0} if fresh else dict(cached)  # type: ignore[arg-type]
    )
    with open_log(path) as fh:
        fh.seek(entry["size"])
        data = fh.read()
    end = data.rfind(b"\n") + 1  # a torn last line is left for the next scan
    for raw in data[:end].splitlines():
        if b'"round"' not in raw:
            continue
        try:
            item = json.loads(raw)
        except ValueError:
            continue
        if isinstance(item, dict) and item.get("kind") == "round":
            count_round(entry, item)
    entry["size"] += end
    return entry


def session_logs(folder: Path) -> list[Path]:
    """A session's logs, oldest first.  A link among them (memora never makes one: planted, it
    could show another project's conversation as this one's) or a FIFO (a read would wait for
    a writer) is left unread, with one warning;
    an append to it is refused (:func:`~memora.security.state.open_state_file`)."""
    paths = []
    for path in sorted(folder.glob("*.jsonl")):
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(mode):  # a link, or a FIFO that would block the read
            what = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
            warn_once(logger, path, "%s is %s: not read (memora does not follow links)", path, what)
            continue
        paths.append(path)
    return paths


def open_log(path: Path) -> BinaryIO:
    """A log opened for reading, never through a link put there since it was listed."""
    return os.fdopen(os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC), "rb")


def read_logs(
    folder: Path, offsets: dict[str, int]
) -> tuple[list[dict[str, Any]], tuple[tuple[str, int], ...]] | None:
    """The lines of a session's logs, each log from its offset in ``offsets`` (0 when absent),
    and the bytes read of each; ``None`` when a log named in ``offsets`` is gone or shorter."""
    out: list[dict[str, Any]] = []
    sizes = []
    paths = session_logs(folder)
    if not set(offsets) <= {p.name for p in paths}:
        return None
    for path in paths:
        start = offsets.get(path.name, 0)
        with open_log(path) as fh:
            if start:
                if os.fstat(fh.fileno()).st_size < start:
                    return None
                fh.seek(start)
            data = fh.read()
        end = len(data)
        lines = data.split(b"\n")
        for n, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            try:
                item = json.loads(raw)
            except ValueError:
                if n == len(lines):
                    # the last line, not ended: another process's append caught part-way (a
                    # write reaches the page cache a page at a time) or a killed writer's torn
                    # line.  Not read, and the mark stops before it: the next read gets it
                    # whole — or, once the next append has closed a torn line, skips it then
                    end -= len(raw)
                    continue
                where = f"line {n}" if not start else f"line {n} after byte {start}"
                logger.warning("%s %s is torn or corrupt; skipped", path, where)
                continue
            if isinstance(item, dict):
                out.append(item)
        sizes.append((path.name, start + end))
    return out, tuple(sizes)
