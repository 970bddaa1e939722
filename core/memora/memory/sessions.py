"""Session and round store: append-only JSONL per session, grouped by date.

Layout under the data directory::

    sessions/<session_id>/<YYYY-MM-DD>.jsonl  # one JSON object per line, appended
    sessions/<session_id>/meta.json          # what a host changed later (atomic writes)

Each line is ``{"kind": "message", ...}`` (one LLM-history message) or ``{"kind": "round", ...}``
(a finished round: the user message, the assistant answer and the process events — thoughts,
tool calls and results, errors — so a host can replay a turn after a restart).  The first line
of a session's first log is ``{"kind": "session", ...}``: its id, title, creation time, parent
and fork point as created.

A finished turn is **one** append: its history messages and its round in a single ``write`` +
``fsync`` (:meth:`JsonlSessionStore.append_turn`), so a killed process loses at most the turn
that was running, and never half of one.  A torn last line left by a crash is skipped on read.
An append a full or failing disk refuses is taken back out of the log and raised
(``STORAGE_FULL``; :mod:`.log_write`), and the log's reading is :mod:`.log_read`.

The whole append (``write`` and ``fsync``) runs on a worker thread, so the event loop never
waits for the disk; the append returns once its data is on the disk.  Awaiting the ``fsync`` in
the kernel instead (Linux AIO, by hand or through caio) saved about 5% of ``memora serve``'s CPU
a turn, too little for what it cost (issue #70 item 3, docs/benchmarks.md).

A new session costs nothing on disk until its first turn: :meth:`JsonlSessionStore.create`
keeps it in memory and the first append writes its ``session`` line with the turn's lines — one
folder, one file, one ``write``, one ``fsync`` of the file and one of its folder (a new log's
name is durable too).  A process killed before that first turn loses
the empty session, nothing else; another process sees the session from its first turn on.

``meta.json`` holds what a host set after that (title, parent, fork point, archived) and wins
over the ``session`` line; forks write one.  What follows
from the log — ``round_count``, ``updated_at``, the default title — is derived from it, never
read-modify-written beside it, so it cannot drift from what is on disk; ``index.json`` caches the
derivation (file sizes and counts) so a listing reads only bytes appended since.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import json
import logging
import math
import os
import re
import stat
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import ErrorCode, MemoraError
from ..security.atomic import atomic_write_bytes, atomic_write_text
from ..security.state import check_state_path, ensure_state_dir, open_state_file
from .log_read import count_round, open_log, read_logs, scan_log, session_logs
from .log_write import LogAppend, append_to, disk_error
from .redaction import redact_log_in_place, title_without
from .session_memory import InMemorySessionStore
from .session_types import (
    RoundRecord,
    SessionContents,
    SessionInfo,
    SessionStore,
    lines_until_round,
    messages_of,
    new_session_id,
    no_session,
    rounds_of,
)

__all__ = [
    "InMemorySessionStore",
    "JsonlSessionStore",
    "RoundRecord",
    "SessionContents",
    "SessionInfo",
    "SessionStore",
    "lines_until_round",
    "new_session_id",
]

logger = logging.getLogger("memora.sessions")
_ID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


def _line_bytes(line: dict[str, Any]) -> bytes:
    """One JSONL line, readable UTF-8; a line holding text UTF-8 cannot carry (a lone
    surrogate in a tool's output, say) is written with JSON escapes instead, so it is stored
    exactly and the append never fails."""
    text = _LINE_JSON(line) + "\n"
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return (json.dumps(line) + "\n").encode("ascii")


_LINE_JSON = json.JSONEncoder(ensure_ascii=False).encode
"""``json.dumps(..., ensure_ascii=False)`` without a new encoder per line."""


def _day(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d")


_INDEX = "index.json"
_FOUND_KEPT = 4096
"""How many sessions a JSONL store remembers having found on disk (a server's working set)."""
_LOG_FLAGS = os.O_RDWR | os.O_CREAT | os.O_APPEND
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_META_FIELDS = (
    "id",
    "title",
    "created_at",
    "updated_at",
    "parent_id",
    "fork_round_id",
    "archived",
    "scope",
)


def _meta_info(session_id: str, data: Any, path: Path) -> SessionInfo:
    """meta.json as a SessionInfo; a field of the wrong type or an absurd value is a clear
    STORAGE_ERROR naming the file and the field, never a TypeError later on."""

    def bad(field_name: str) -> MemoraError:
        return MemoraError(
            ErrorCode.STORAGE_ERROR,
            f"{path} is corrupt: {field_name} has a wrong type or value",
            context={"path": str(path), "field": field_name},
        )

    if not isinstance(data, dict):
        raise bad("(root)")
    info = SessionInfo(id=session_id)
    for key in ("title",):
        value = data.get(key, "")
        if not isinstance(value, str):
            raise bad(key)
        info.title = value[:1000]
    for key in ("created_at", "updated_at"):
        value = data.get(key, 0.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad(key)
        if not math.isfinite(value) or abs(value) > 1e11:  # ~ year 5000
            raise bad(key)
        setattr(info, key, float(value))
    for key in ("parent_id", "fork_round_id", "scope"):
        value = data.get(key)
        if value is not None and not isinstance(value, str):
            raise bad(key)
        setattr(info, key, value or None if key == "scope" else value)
    archived = data.get("archived", False)
    if not isinstance(archived, bool):
        raise bad("archived")
    info.archived = archived
    return info


def _session_line(log: Path) -> dict[str, Any]:
    """The ``session`` line a log starts with (its fields without ``kind``); for a log written
    without one, the file's times."""
    with open_log(log) as fh:
        first = fh.readline()
    try:
        item = json.loads(first)
    except ValueError:
        item = None
    if isinstance(item, dict) and item.get("kind") == "session":
        return {k: v for k, v in item.items() if k in _META_FIELDS}
    created = log.stat().st_mtime
    return {"id": log.parent.name, "created_at": created, "updated_at": created}


class _SessionLocks:
    """One ``asyncio.Lock`` per session with an append running or waiting; a session's entry
    leaves the table with its last user (a long-running server meets millions of sessions)."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: dict[str, tuple[asyncio.Lock, int]] = {}

    def lock(self, key: str) -> _SessionLock:
        return _SessionLock(self._held, key)


class _SessionLock:
    """``async with``: the session's lock, counted in and out of :class:`_SessionLocks`."""

    __slots__ = ("_held", "_key", "_lock")

    def __init__(self, held: dict[str, tuple[asyncio.Lock, int]], key: str) -> None:
        self._held = held
        self._key = key
        self._lock: asyncio.Lock | None = None

    async def __aenter__(self) -> None:
        held, key = self._held, self._key
        lock, users = held.get(key) or (asyncio.Lock(), 0)
        held[key] = (lock, users + 1)
        self._lock = lock
        try:
            await lock.acquire()
        except BaseException:  # cancelled while waiting: no longer a user
            self._leave()
            raise

    async def __aexit__(self, *exc: object) -> None:
        assert self._lock is not None
        self._lock.release()
        self._leave()

    def _leave(self) -> None:
        lock, users = self._held[self._key]
        if users <= 1:
            del self._held[self._key]
        else:
            self._held[self._key] = (lock, users - 1)


def _with_derived(
    info: SessionInfo, rounds: int, first_user: str | None, last_ended: float
) -> None:
    """What a session's log says of it: its round count, last update and default title."""
    info.round_count = rounds
    info.updated_at = max(float(info.updated_at or 0.0), last_ended)
    if not info.title and first_user:
        info.title = first_user.strip().splitlines()[0][:80] if first_user.strip() else ""


@dataclass(frozen=True, slots=True)
class _LogMark:
    """Where a read of a session's logs ended (a JSONL store's ``SessionContents.mark``): the
    bytes read of each log and what the lines up to there said of the session."""

    sizes: tuple[tuple[str, int], ...]
    rounds: int
    first_user: str | None
    last_ended: float


class JsonlSessionStore:
    """The built-in session store (``jsonl``)."""

    def __init__(self, data_dir: str | Path, *, kernel_fsync: bool = True) -> None:
        self.root = Path(data_dir) / "sessions"
        self.kernel_fsync = kernel_fsync
        """Accepted and ignored: every append runs whole on a worker thread.  It asked for the
        ``fsync`` in the kernel (Linux AIO), which is gone; a config or a host that still sets
        it keeps working."""
        self._locks = _SessionLocks()
        self._root_checked = False
        """``sessions/`` was found (or made) a real folder, not a link."""
        self._unwritten: dict[str, SessionInfo] = {}
        """Sessions created here and not yet on disk: the first append writes their ``session``
        line (and their folder)."""
        self._found: dict[str, None] = {}
        """Sessions found on disk (or written) by this store, the most recent last: the next
        append to one skips looking for it again (a stat and a folder scan per turn)."""
        self._found_lock = threading.Lock()  # the appends run on worker threads

    # -- helpers -------------------------------------------------------------------------------

    def _dir(self, session_id: str) -> Path:
        if (
            not isinstance(session_id, str)
            or not _ID.match(session_id)
            or session_id in (".", "..")
        ):
            raise MemoraError(
                ErrorCode.INVALID_INPUT,
                f"invalid session id {session_id!r}; use 1–128 letters, digits, '.', '_' or '-'",
            )
        return self.root / session_id

    def _is_session(self, folder: Path) -> bool:
        # meta.json is written without fsync at creation; after a power loss a folder may hold
        # its fsynced log without it, and is still a session.  A session created and not yet
        # written (asked on every read of it) has no folder: one stat says so.  A link there
        # (planted in a cloned project, say) is refused, not read: it could show another
        # project's conversation as this one's.
        try:
            st = os.lstat(folder)
        except OSError:
            return False
        if stat.S_ISLNK(st.st_mode):
            check_state_path(folder / "meta.json", self.root.parent)  # raises, naming the link
        if not stat.S_ISDIR(st.st_mode):
            return False
        return (folder / "meta.json").is_file() or any(folder.glob("*.jsonl"))

    def _pending(self, session_id: str) -> SessionInfo | None:
        """The session as created here, while no process has written it yet.  Once one has —
        another worker of the same server ran its first turn — the disk is the truth: the entry
        goes, or this process would read the session as empty and write its header twice."""
        info = self._unwritten.get(session_id)
        if info is None:
            return None
        if self._is_session(self._dir(session_id)):
            self._unwritten.pop(session_id, None)
            self._seen(session_id)
            return None
        return info

    def _existing(self, session_id: str) -> Path:
        folder = self._dir(session_id)
        if session_id in self._found or session_id in self._unwritten:
            return folder
        if not self._is_session(folder):
            raise no_session(session_id)
        self._seen(session_id)
        return folder

    def _seen(self, session_id: str) -> None:
        found = self._found
        with self._found_lock:
            found.pop(session_id, None)
            found[session_id] = None
            if len(found) > _FOUND_KEPT:
                del found[next(iter(found))]

    def _lock(self, session_id: str) -> _SessionLock:
        return self._locks.lock(session_id)

    def _read_meta(self, session_id: str) -> SessionInfo:
        """meta.json plus what is derived from the log (round count, last update, title)."""
        unwritten = self._pending(session_id)
        if unwritten is not None:
            return unwritten.copy()
        folder = self._dir(session_id)
        info = self._meta_only(session_id, folder)
        _with_derived(info, *self._derived(folder))
        return info

    def _meta_only(self, session_id: str, folder: Path) -> SessionInfo:
        """meta.json (or, before it was written, the first log's ``session`` line); a link
        in the way is refused, as a write would refuse it."""
        path = folder / "meta.json"
        check_state_path(path, self.root.parent)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            logs = session_logs(folder)
            if not logs:
                raise no_session(session_id) from None
            data = _session_line(logs[0])
            path = logs[0]
        except ValueError as exc:
            raise MemoraError(ErrorCode.STORAGE_ERROR, f"{path} is corrupt: {exc}") from exc
        return _meta_info(session_id, data, path)

    def _derived(self, folder: Path) -> tuple[int, str | None, float]:
        index_path = folder / _INDEX
        try:
            check_state_path(index_path, folder)  # a link (to /dev/zero, say) is no cache
            cached = json.loads(index_path.read_text(encoding="utf-8"))
            if not isinstance(cached, dict):
                cached = {}
        except (OSError, ValueError, MemoraError):
            cached = {}
        files = {p.name: scan_log(p, cached.get(p.name)) for p in session_logs(folder)}
        if files != cached:
            # a cache, derivable at any time: no fsync, and a failed write is harmless
            with contextlib.suppress(OSError):
                atomic_write_bytes(index_path, json.dumps(files).encode("utf-8"), durable=False)
        rounds = sum(int(e["rounds"]) for e in files.values())
        first = next((e["first_user"] for e in files.values() if e["first_user"] is not None), None)
        last = max((float(e["last_ended"]) for e in files.values()), default=0.0)
        return rounds, first, last

    def _write_meta(self, info: SessionInfo, *, durable: bool = True) -> None:
        ensure_state_dir(self._dir(info.id), self.root.parent)
        doc = {k: v for k, v in info.to_dict().items() if k in _META_FIELDS}
        path = self._dir(info.id) / "meta.json"
        try:  # whole or not at all (a temporary file renamed over it)
            atomic_write_text(path, json.dumps(doc, ensure_ascii=False, indent=1), durable=durable)
        except OSError as exc:
            raise disk_error(exc, path, "write") from exc
        self._unwritten.pop(info.id, None)

    def _open_new_log(self, folder: Path, path: Path) -> int | None:
        """A new session's folder and first log, created with the fewest system calls: the
        ``sessions`` folder is checked once per store (no link, a real folder); a folder this
        call creates holds nothing, and ``O_EXCL | O_NOFOLLOW`` refuses anything put there
        since.  ``None`` when the folder exists already (a host's id whose folder was left
        behind): the caller opens the log with the full checks."""
        if not self._root_checked:
            ensure_state_dir(self.root, self.root.parent)
            self._root_checked = True
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            ensure_state_dir(folder, self.root.parent)  # refuses a link or a file there
            return None
        except FileNotFoundError:  # the sessions folder was removed while we ran
            self._root_checked = False
            ensure_state_dir(folder, self.root.parent)
            return None
        try:
            return os.open(path, _LOG_FLAGS | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600)
        except FileExistsError:
            return None

    def _write(self, session_id: str, lines: Sequence[dict[str, Any]]) -> tuple[LogAppend, bool]:
        """The append's ``write`` into the page cache, all of it (:mod:`.log_write`), not yet
        durable; and whether this was the session's first."""
        unwritten = self._pending(session_id)
        if unwritten is not None:
            # the session's first append: the session line leads the turn's lines, in the same
            # write and fsync (a meta.json beside it would cost a file and a rename more)
            doc = {k: v for k, v in unwritten.to_dict().items() if k in _META_FIELDS}
            lines = [{"kind": "session", **doc}, *lines]
            folder = self._dir(session_id)
        else:
            folder = self._existing(session_id)
        path = folder / f"{_day(time.time())}.jsonl"
        payload = b"".join(_line_bytes(line) for line in lines)
        try:
            fd = self._open_new_log(folder, path) if unwritten is not None else None
            fresh = fd is not None
            if fd is None:
                fd = open_state_file(path, _LOG_FLAGS, self.root.parent)
        except FileNotFoundError:  # its folder was removed (by hand) since it was found
            with self._found_lock:
                self._found.pop(session_id, None)
            raise no_session(session_id) from None
        except OSError as exc:  # a full disk has no room for a new folder or log either
            raise disk_error(exc, path, "create") from exc
        return append_to(fd, path, payload, fresh=fresh), unwritten is not None

    def _written(self, session_id: str, first: bool) -> None:
        """The append is durable: a session written for the first time is on disk now."""
        if first:
            self._unwritten.pop(session_id, None)
            self._seen(session_id)

    def _append(self, session_id: str, lines: Sequence[dict[str, Any]]) -> None:
        """One whole append, synchronously (on a worker thread, or in a fork's work)."""
        append, first = self._write(session_id, lines)
        append.sync()
        self._written(session_id, first)

    async def _append_durably(self, session_id: str, lines: Sequence[dict[str, Any]]) -> None:
        """One append (call under the session's lock), whole on a worker thread; a failed one
        is taken back out of the log and raised (:mod:`.log_write`)."""
        await asyncio.to_thread(self._append, session_id, lines)

    def _lines(self, session_id: str) -> builtins.list[dict[str, Any]]:
        read = read_logs(self._existing(session_id), {})
        assert read is not None  # from the start, every log is read whole
        return read[0]

    # -- API -------------------------------------------------------------------------------------

    async def create(
        self, title: str = "", session_id: str | None = None, *, scope: str | None = None
    ) -> SessionInfo:
        sid = session_id or new_session_id()
        folder = self._dir(sid)
        if session_id is not None:  # a host's id: refuse a planted link now, not at the first turn
            check_state_path(folder / "meta.json", self.root.parent)
        if sid in self._unwritten or (folder.exists() and self._is_session(folder)):
            raise MemoraError(ErrorCode.INVALID_INPUT, f"session {sid!r} already exists")
        t = time.time()
        info = SessionInfo(id=sid, title=title, created_at=t, updated_at=t, scope=scope)
        # nothing on disk yet: the first append writes meta.json with the turn (an empty
        # session is not worth a file, a folder and a worker hop)
        self._unwritten[sid] = info
        return info.copy()

    async def get(self, session_id: str) -> SessionInfo:
        if self._pending(session_id) is not None:
            return self._read_meta(session_id)
        return await asyncio.to_thread(self._read_meta, session_id)

    async def exists(self, session_id: str) -> bool:
        folder = self._dir(session_id)
        return session_id in self._unwritten or self._is_session(folder)

    async def list(self, *, include_archived: bool = False) -> builtins.list[SessionInfo]:
        def work() -> builtins.list[SessionInfo]:
            pending = (self._pending(sid) for sid in builtins.list(self._unwritten))
            infos = [i.copy() for i in pending if i is not None]
            seen = {i.id for i in infos}
            if not self.root.is_dir():
                return infos
            for folder in self.root.iterdir():
                if folder.name in seen:
                    continue
                try:
                    if not self._is_session(folder):
                        continue
                    info = self._read_meta(folder.name)
                except MemoraError as exc:
                    logger.warning("session %s skipped: %s", folder.name, exc)
                    continue
                if include_archived or not info.archived:
                    infos.append(info)
            infos.sort(key=lambda i: -i.updated_at)
            return infos

        return await asyncio.to_thread(work)

    async def append_messages(self, session_id: str, messages: Sequence[dict[str, Any]]) -> None:
        if not messages:
            return
        lines = [{"kind": "message", **m} for m in messages]
        async with self._lock(session_id):
            await self._append_durably(session_id, lines)

    async def messages(self, session_id: str) -> builtins.list[dict[str, Any]]:
        if self._pending(session_id) is not None:
            return []
        return messages_of(await asyncio.to_thread(self._lines, session_id))

    async def load(self, session_id: str, *, after: object = None) -> SessionContents | None:
        """The session's info, messages and rounds (``get``, ``messages``, ``rounds``) in one
        trip to a worker thread and one reading of its log; ``None`` when there is no such
        session.  ``after``: the ``mark`` of an earlier load of it — only the lines written
        since are read and returned (``since`` says so)."""
        unwritten = self._pending(session_id)
        if unwritten is not None:
            return SessionContents(unwritten.copy(), [], [])
        return await asyncio.to_thread(self._load, session_id, after)

    def _load(self, session_id: str, after: object) -> SessionContents | None:
        folder = self._dir(session_id)
        if not self._is_session(folder):
            return None
        info = self._meta_only(session_id, folder)
        # the logs are append-only: from a mark, only the bytes after it are read (a log
        # shorter than its mark, or gone, and it is all read again)
        since = after if isinstance(after, _LogMark) else None
        read = read_logs(folder, dict(since.sizes)) if since is not None else None
        if read is None:
            since = None
            read = read_logs(folder, {})
            assert read is not None
        lines, sizes = read
        self._seen(session_id)
        # the counts from the lines just read, as the index would give them (the index is
        # brought up to date by get and list, which read no whole log)
        start = (since.rounds, since.first_user, since.last_ended) if since else (0, None, 0.0)
        counts: dict[str, Any] = dict(
            zip(("rounds", "first_user", "last_ended"), start, strict=True)
        )
        for line in lines:
            if line.get("kind") == "round":
                count_round(counts, line)
        rounds, first_user, last_ended = (
            counts["rounds"],
            counts["first_user"],
            counts["last_ended"],
        )
        _with_derived(info, rounds, first_user, last_ended)
        return SessionContents(
            info,
            messages_of(lines),
            rounds_of(session_id, lines),
            _LogMark(sizes, rounds, first_user, last_ended),
            since,
        )

    async def append_round(self, session_id: str, record: RoundRecord) -> None:
        await self.append_turn(session_id, (), record)

    async def append_turn(
        self, session_id: str, messages: Sequence[dict[str, Any]], record: RoundRecord
    ) -> None:
        """A finished turn — its history messages and its round — as one append + one fsync."""
        lines = [{"kind": "message", **m} for m in messages]
        lines.append({"kind": "round", **record.to_dict()})
        async with self._lock(session_id):
            await self._append_durably(session_id, lines)

    async def rounds(self, session_id: str) -> builtins.list[RoundRecord]:
        if self._pending(session_id) is not None:
            return []
        return rounds_of(session_id, await asyncio.to_thread(self._lines, session_id))

    async def fork(
        self, session_id: str, at_round_id: str | None = None, title: str = ""
    ) -> tuple[SessionInfo, int]:
        """Copy the session's lines up to and including ``at_round_id`` (all when ``None``) into a
        new session; returns it and the number of rounds copied."""
        async with self._lock(session_id):

            def work() -> tuple[SessionInfo, int]:
                source = self._read_meta(session_id)
                kept = lines_until_round(
                    (x for x in self._lines(session_id) if x.get("kind") != "session"),
                    session_id,
                    at_round_id,
                )
                rounds = sum(1 for line in kept if line.get("kind") == "round")
                t = time.time()
                new_id = f"{session_id[:100]}-fork-{uuid.uuid4().hex[:6]}"
                info = SessionInfo(
                    id=new_id,
                    title=title or (source.title + " (fork)").strip(),
                    created_at=t,
                    updated_at=t,
                    parent_id=session_id,
                    fork_round_id=at_round_id,
                    round_count=rounds,
                    scope=source.scope,  # a fork stays its owner's
                )
                self._write_meta(info)
                if kept:
                    self._append(new_id, kept)
                return info, rounds

            return await asyncio.to_thread(work)

    async def redact_round(self, session_id: str, round_id: str, tombstone: dict[str, Any]) -> bool:
        """Forget round ``round_id``'s text in the session's log, in place (see
        :func:`~memora.memory.redaction.redact_log_in_place`); the session's cached counts
        (which hold its first request, its default title) are read again."""
        if self._pending(session_id) is not None:
            return False
        async with self._lock(session_id):

            def work() -> bool:
                folder = self._existing(session_id)
                for path in session_logs(folder):  # a turn is one append: its lines are in one log
                    said = redact_log_in_place(path, round_id, tombstone)
                    if said is None:
                        continue
                    with contextlib.suppress(FileNotFoundError):
                        (folder / _INDEX).unlink()  # its counts held the first request
                    if (folder / "meta.json").exists():  # a fork's title is its source's
                        info = self._meta_only(session_id, folder)
                        title = title_without(info.title, said)
                        if title is not None:
                            info.title = title
                            self._write_meta(info)
                    return True
                return False

            return await asyncio.to_thread(work)

    async def archive(self, session_id: str, archived: bool = True) -> SessionInfo:
        def work() -> SessionInfo:
            info = self._read_meta(session_id)
            info.archived = archived
            info.updated_at = time.time()
            self._write_meta(info)
            return info

        return await asyncio.to_thread(work)

    async def close(self) -> None:
        return None
