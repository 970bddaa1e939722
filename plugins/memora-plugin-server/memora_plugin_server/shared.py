"""What the workers of one service share about a project's sessions, in files under
``<data dir>/server/`` (one host; the workers of ``memora serve --workers N``):

- ``locks/<session>.lock`` — held (``flock``) by the worker running a turn in the session: one
  turn per session across the workers, and released by the OS when that worker dies;
- ``turns/<session>/<turn>.jsonl`` — the turn's chunks, one JSON line each (written in
  batches, every ``FLUSH_SECONDS``), then ``END``: a client following the turn through another
  worker reads them from there;
- ``pauses/<session>.json`` — a paused turn (``agent.pause_state()`` and what the API shows of
  it), so whichever worker gets the approval or the answer resumes it; sealed with the user's
  key (:mod:`memora.security.seal`), so a pause planted in a project's folder (a cloned
  repository) is ignored, never shown for approval or resumed;
- ``aborts/<session>`` — an abort asked of another worker's turn;
- ``versions/<session>``, ``role-packs/<session>`` — when a worker last changed the session
  (another worker's open Agent of it is opened again) and the role pack chosen for it;
- ``created/<session>.json`` — a session created through the API before its first turn (the
  file session store writes nothing until then).

Everything here is private (0700 folders, 0600 files) and written atomically where it is read
whole; what is fsynced (pauses, role packs, created sessions) is written off the event loop.
None of it is memory or history: the session store keeps those.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import re
import stat
import time
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from memora.security.atomic import atomic_write_bytes
from memora.security.seal import seal, unseal, user_key
from memora.security.state import user_config_dir, warn_once

__all__ = ["FileSharedState", "Lease", "SharedState", "TurnWriter", "lost_turn", "one_by_one"]

logger = logging.getLogger("memora.server")

END = b"END\n"
KEPT_TURNS = 8
TURN_EVENTS_KEPT_SECONDS = 24 * 3600.0
"""A finished turn's events are replayable this long (and the last KEPT_TURNS per session)."""
POLL_SECONDS = 0.05
FLUSH_SECONDS = 0.05
"""A turn's chunks are written at most this often (one write for all that came meanwhile)."""
_SAFE = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


class Lease(Protocol):
    """A session's lock, held for a turn.  ``view``: the session's :class:`SessionView` when
    taking the lock read it too (PostgreSQL: the same statement), else ``None``."""

    view: SessionView | None

    async def release(self) -> None: ...


class TurnWriter(Protocol):
    """Where a turn's chunks go for the other workers: ``add`` as they come, ``end`` once."""

    def add(self, data: str) -> None: ...

    async def end(self) -> None: ...


class SessionView(NamedTuple):
    """What an Agent opened for a session depends on, as the workers share it: the version
    (changes with every turn or switch), the paused turn, the role pack chosen."""

    version: str
    pause: dict[str, Any] | None
    role_pack: str | None


class SharedState(Protocol):
    """What the workers share (files here, :mod:`.pg_shared` in PostgreSQL)."""

    abort_poll: float

    async def start(self) -> None: ...
    async def close(self) -> None: ...
    async def try_lock(self, session: str) -> Lease | None:
        """The session's lock for a turn, or None while another holds it; taking it discards
        an abort request left from an earlier turn (an old request is not for this one)."""
        ...

    async def alive(self, session: str) -> bool: ...
    async def writer(self, session: str, turn_id: str) -> TurnWriter: ...
    async def resume_writer(self, session: str, turn_id: str) -> TurnWriter:
        """A writer that goes on with ``turn_id``'s events after the last one written (a
        durable turn another worker takes over), the turn the session's current one again."""
        ...

    async def current_turn(self, session: str) -> str | None: ...
    async def last_turn(self, session: str) -> str | None:
        """The session's current turn, whether or not a worker still runs it."""
        ...

    async def has_turn(self, session: str, turn_id: str) -> bool: ...
    async def orphans(self) -> list[tuple[str, str]]:
        """``(session, turn id)`` of each turn left without an end by a worker that died: the
        session's current turn, not ended, and no live worker holds the session."""
        ...

    async def turn_ended(self, session: str, turn_id: str) -> bool:
        """Whether the turn's events end (a turn whose events are gone counts as ended)."""
        ...

    def follow(
        self, session: str, turn_id: str, after: int = 0, grace: float = 0.0
    ) -> AsyncGenerator[tuple[int, str], None]: ...
    def batches(
        self,
        session: str,
        turn_id: str,
        after: int = 0,
        idle: float | None = None,
        grace: float = 0.0,
    ) -> AsyncGenerator[list[tuple[int, str]], None]:
        """A turn's events after ``after`` as they are written; when the worker running it is
        gone, ``grace`` seconds for another to take it over (durable turns) before the last
        ``TURN_LOST`` event."""
        ...

    async def set_pause(self, session: str, value: dict[str, Any] | None) -> None: ...
    async def pause(self, session: str) -> dict[str, Any] | None: ...
    async def request_abort(self, session: str) -> None: ...
    async def take_abort(self, session: str) -> bool: ...
    async def wait_abort(self, session: str) -> None:
        """Return once an abort was asked of the turn running in ``session`` here (taking the
        request); the hub cancels the wait when the turn ends."""

    async def version(self, session: str) -> str: ...
    async def view(self, session: str) -> SessionView: ...
    async def settle(self, session: str, pause: dict[str, Any] | None) -> str: ...
    async def bump(self, session: str) -> str: ...
    async def set_role_pack(self, session: str, name: str) -> None: ...
    async def role_pack(self, session: str) -> str | None: ...
    async def note_created(self, session: str, info: dict[str, Any]) -> None: ...
    async def created(self) -> dict[str, dict[str, Any]]: ...
    async def created_session(self, session: str) -> dict[str, Any] | None: ...
    async def forget_created(self, session: str) -> None: ...
    async def prune(self, older_than: float) -> int: ...
    async def forget_turns(self, session: str) -> None:
        """Remove the events of the session's finished turns (``forget --everywhere``: they
        hold the forgotten text); a turn running there keeps its own."""
        ...


async def one_by_one(
    batches: AsyncGenerator[list[tuple[int, str]], None],
) -> AsyncGenerator[tuple[int, str], None]:
    """The events of ``batches`` one at a time."""
    async for batch in batches:
        for item in batch:
            yield item


class Orphaned:
    """How long a followed turn has had no live writer: :meth:`lost` once ``grace`` seconds
    passed without one (another worker may take a durable turn over meanwhile)."""

    __slots__ = ("grace", "since")

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self.since: float | None = None

    def lost(self, running: bool) -> bool:
        if running:
            self.since = None
            return False
        now = time.monotonic()
        self.since = self.since if self.since is not None else now
        return now - self.since >= self.grace


def lost_turn(seq: int) -> list[tuple[int, str]]:
    """The last event of a turn whose worker died before it ended."""
    from memora.chunks import ErrorChunk

    lost = ErrorChunk(
        message="the worker running this turn stopped; the session is as it was before the turn",
        code="TURN_LOST",
    )
    return [(seq, lost.model_dump_json())]


def _name(value: str) -> str:
    if not _SAFE.match(value):
        raise ValueError(f"not a safe file name: {value!r}")
    return value


class FileLease:
    """The session's flock, held for a turn (``release()`` when it ends)."""

    view: SessionView | None = None  # read on its own (three small files)

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    async def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


class FileTurnWriter:
    """Appends a turn's chunks to its file (no fsync: it is a replay cache, not history), in
    batches: what comes within ``FLUSH_SECONDS`` is one write (followers look every
    ``POLL_SECONDS`` anyway), and ``end()`` writes what is left, then ``END``.  ``going_on``:
    the turn's file exists (a durable turn taken over): appended to, after its last whole line
    (a line torn by the worker that died is cut off)."""

    def __init__(self, path: Path, *, going_on: bool = False) -> None:
        self.path = path
        self._fd = _reopen_turn_file(path) if going_on else _open_turn_file(path)
        self._buffer: list[bytes] = []
        self._timer: asyncio.TimerHandle | None = None

    def add(self, data: str) -> None:
        self._buffer.append(data.encode("utf-8") + b"\n")
        if self._timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no event loop to flush later: written now
                self._flush()
                return
            self._timer = loop.call_later(FLUSH_SECONDS, self._flush)

    def _flush(self) -> None:
        self._timer = None
        data, self._buffer = b"".join(self._buffer), []
        if data:
            with contextlib.suppress(OSError):  # a full disk loses the replay, not the turn
                os.write(self._fd, data)

    async def end(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._buffer.append(END)
        self._flush()
        os.close(self._fd)


def _open_turn_file(path: Path) -> int:
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_EXCL | os.O_NOFOLLOW
    try:
        return os.open(path, flags, 0o600)
    except FileNotFoundError:  # the session's first turn here: its folder is made first
        path.parent.mkdir(exist_ok=True, mode=0o700)
        return os.open(path, flags, 0o600)


def _reopen_turn_file(path: Path) -> int:
    # never through a symlink (the data folder may come with a cloned project): its target
    # would be cut back to its last newline and appended to
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a regular file: a turn's events are not written there")
    size = info.st_size
    if size:
        tail = os.pread(fd, min(size, 1 << 20), max(0, size - (1 << 20)))
        whole = tail.rfind(b"\n") + 1 + max(0, size - (1 << 20))
        if whole != size:
            os.ftruncate(fd, whole)
    return fd


class FileSharedState:
    """See the module docstring."""

    abort_poll = 0.2

    def __init__(self, root: Path, user_dir: Path | None = None) -> None:
        self.root = root
        self._user_dir = user_config_dir(user_dir)  # its key seals the pauses
        self._key: bytes | None = None
        self._mkdirs()

    def _sealing_key(self) -> bytes:
        if self._key is None:
            self._key = user_key(self._user_dir)
        return self._key

    async def start(self) -> None:
        await self.prune(TURN_EVENTS_KEPT_SECONDS)

    async def close(self) -> None:
        return None

    async def prune(self, older_than: float) -> int:
        """Remove the events of turns that ended more than ``older_than`` seconds ago (the
        sessions keep their rounds); returns how many turns."""

        def work() -> int:
            cutoff = time.time() - older_than
            removed = 0
            for path in (self.root / "turns").glob("*/*.jsonl"):
                with contextlib.suppress(OSError):
                    if path.stat().st_mtime < cutoff:
                        path.unlink()
                        removed += 1
            return removed

        return await asyncio.to_thread(work)

    async def forget_turns(self, session: str) -> None:
        folder = self.root / "turns" / _name(session)
        running = await self.current_turn(session)

        def work() -> None:
            for path in folder.glob("*.jsonl"):
                if running is None or path.name != f"{_name(running)}.jsonl":
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()

        await asyncio.to_thread(work)

    def _mkdirs(self) -> None:
        root = self.root
        for sub in ("locks", "turns", "pauses", "aborts", "created", "versions", "role-packs"):
            (root / sub).mkdir(parents=True, exist_ok=True, mode=0o700)

    # -- the session lock ------------------------------------------------------------------------

    async def try_lock(self, session: str) -> FileLease | None:
        lease = self._lock(session)
        if lease is not None:
            await self.take_abort(session)
        return lease

    def _lock(self, session: str) -> FileLease | None:
        fd = os.open(self.root / "locks" / f"{_name(session)}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        return FileLease(fd)

    async def alive(self, session: str) -> bool:
        """Whether some worker holds the session's lock (runs a turn there)."""
        lease = self._lock(session)
        if lease is None:
            return True
        await lease.release()
        return False

    # -- turns -----------------------------------------------------------------------------------

    async def writer(self, session: str, turn_id: str) -> FileTurnWriter:
        folder = self.root / "turns" / _name(session)
        writer = FileTurnWriter(folder / f"{_name(turn_id)}.jsonl")
        # the last KEPT_TURNS stay; their times are read only when there are more
        names = [n for n in os.listdir(folder) if n.endswith(".jsonl")]
        if len(names) > KEPT_TURNS:
            turns = sorted((folder / n for n in names), key=_mtime)
            for old in turns[: len(turns) - KEPT_TURNS]:
                if old != writer.path:
                    with contextlib.suppress(OSError):
                        old.unlink()
        atomic_write_bytes(folder / "current", turn_id.encode(), durable=False)
        return writer

    async def resume_writer(self, session: str, turn_id: str) -> FileTurnWriter:
        folder = self.root / "turns" / _name(session)
        writer = FileTurnWriter(folder / f"{_name(turn_id)}.jsonl", going_on=True)
        atomic_write_bytes(folder / "current", turn_id.encode(), durable=False)
        return writer

    async def last_turn(self, session: str) -> str | None:
        current = _regular(self.root / "turns" / _name(session) / "current", 256)
        return None if current is None else current.decode("utf-8", "replace") or None

    async def current_turn(self, session: str) -> str | None:
        """The turn running in the session on some worker."""
        if not await self.alive(session):
            return None
        with contextlib.suppress(OSError):
            return (self.root / "turns" / _name(session) / "current").read_text() or None
        return None

    async def _running(self, session: str, turn_id: str) -> bool:
        """Whether ``turn_id`` is the session's current turn and a worker holds the session."""
        try:
            current = (self.root / "turns" / _name(session) / "current").read_text()
        except FileNotFoundError:
            return False
        return current == turn_id and await self.alive(session)

    async def has_turn(self, session: str, turn_id: str) -> bool:
        return (self.root / "turns" / _name(session) / f"{_name(turn_id)}.jsonl").is_file()

    async def orphans(self) -> list[tuple[str, str]]:
        def scan() -> list[tuple[str, str]]:
            found = []
            with os.scandir(self.root / "turns") as folders:
                for folder in folders:
                    # a project's folder, which a cloned repository fills: a symlink (to be
                    # written through) is no session's; a fifo is never waited on (_regular)
                    if not folder.is_dir(follow_symlinks=False):
                        continue
                    current = _regular(Path(folder.path, "current"), 256)
                    if current is None:
                        continue
                    turn = current.decode("utf-8", "replace")
                    if _SAFE.match(turn) and not _ends(Path(folder.path, f"{turn}.jsonl")):
                        found.append((folder.name, turn))
            return found

        unended = await asyncio.to_thread(scan)
        return [(s, t) for s, t in unended if _SAFE.match(s) and not await self.alive(s)]

    async def turn_ended(self, session: str, turn_id: str) -> bool:
        path = self.root / "turns" / _name(session) / f"{_name(turn_id)}.jsonl"
        return await asyncio.to_thread(_ends, path)

    def follow(
        self, session: str, turn_id: str, after: int = 0, grace: float = 0.0
    ) -> AsyncGenerator[tuple[int, str], None]:
        """A turn's chunks after number ``after`` as they are written, until it ends — or until
        no worker runs it any more (the worker died: a last ``error`` chunk says so, once
        ``grace`` seconds passed without another taking it over)."""
        return one_by_one(self.batches(session, turn_id, after, grace=grace))

    async def batches(
        self,
        session: str,
        turn_id: str,
        after: int = 0,
        idle: float | None = None,
        grace: float = 0.0,
    ) -> AsyncGenerator[list[tuple[int, str]], None]:
        """:meth:`follow` in lists of what was there at each look; an empty list after
        ``idle`` seconds without a chunk."""
        path = self.root / "turns" / _name(session) / f"{_name(turn_id)}.jsonl"
        seq, offset, rest = 0, 0, b""
        quiet_since = time.monotonic()
        orphaned = Orphaned(grace)
        while True:
            data = await asyncio.to_thread(_read_from, path, offset)
            offset += len(data)
            lines = (rest + data).split(b"\n")
            rest = lines.pop()
            batch: list[tuple[int, str]] = []
            ended = False
            for line in lines:
                if line + b"\n" == END:
                    ended = True
                    break
                seq += 1
                if seq > after:
                    batch.append((seq, line.decode("utf-8")))
            if batch:
                quiet_since = time.monotonic()
                yield batch
            if ended:
                return
            if data:
                continue
            if rest and _size(path) < offset:  # a torn last line cut off by a taking-over worker
                offset, rest = _size(path), b""
            if not await self._running(session, turn_id):
                # one more look: the writer may have ended between the two
                if await asyncio.to_thread(_read_from, path, offset):
                    continue
                if orphaned.lost(running=False):
                    yield lost_turn(seq + 1)
                    return
            else:
                orphaned.lost(running=True)
            if idle is not None and time.monotonic() - quiet_since >= idle:
                quiet_since = time.monotonic()
                yield []
            await asyncio.sleep(POLL_SECONDS)

    # -- pauses, aborts, created sessions --------------------------------------------------------

    async def set_pause(self, session: str, value: dict[str, Any] | None) -> None:
        path = self.root / "pauses" / f"{_name(session)}.json"
        if value is None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            return
        data = json.dumps(seal(value, self._sealing_key()), ensure_ascii=False).encode("utf-8")
        await asyncio.to_thread(_write_private, path, data)  # fsynced: not on the event loop

    async def pause(self, session: str) -> dict[str, Any] | None:
        path = self.root / "pauses" / f"{_name(session)}.json"
        try:
            doc = json.loads(path.read_bytes())
        except (FileNotFoundError, ValueError):
            return None
        value = unseal(doc, self._sealing_key())
        if value is None:
            warn_once(logger, path, "%s was not sealed by this user's memora: ignored", path)
            return None
        return value if isinstance(value, dict) else None

    async def request_abort(self, session: str) -> None:
        atomic_write_bytes(self.root / "aborts" / _name(session), b"", durable=False)

    async def take_abort(self, session: str) -> bool:
        try:
            (self.root / "aborts" / _name(session)).unlink()
        except FileNotFoundError:
            return False
        return True

    async def wait_abort(self, session: str) -> None:
        while True:
            await asyncio.sleep(self.abort_poll)
            if await self.take_abort(session):
                return

    async def note_created(self, session: str, info: dict[str, Any]) -> None:
        path = self.root / "created" / f"{_name(session)}.json"
        await asyncio.to_thread(atomic_write_bytes, path, json.dumps(info).encode("utf-8"))

    async def created(self) -> dict[str, dict[str, Any]]:
        def work() -> dict[str, dict[str, Any]]:
            out: dict[str, dict[str, Any]] = {}
            for path in (self.root / "created").glob("*.json"):
                value = _read_created(path)
                if value is not None:
                    out[path.stem] = value
            return out

        return await asyncio.to_thread(work)

    async def created_session(self, session: str) -> dict[str, Any] | None:
        """What :meth:`created` says of one session (one file read, not the folder's)."""
        return _read_created(self.root / "created" / f"{_name(session)}.json")

    async def version(self, session: str) -> str:
        """Changes whenever a worker changed the session (a turn ended, a role-pack switch):
        an Agent opened at another version is opened again."""
        try:
            return (self.root / "versions" / _name(session)).read_text()
        except FileNotFoundError:
            return ""

    async def view(self, session: str) -> SessionView:
        """The version, pause and role pack at once (three small files, read inline)."""
        return SessionView(
            await self.version(session), await self.pause(session), await self.role_pack(session)
        )

    async def settle(self, session: str, pause: dict[str, Any] | None) -> str:
        """A turn ended: its pause saved (or cleared), the version moved on; the new version."""
        await self.set_pause(session, pause)
        return await self.bump(session)

    async def bump(self, session: str) -> str:
        value = os.urandom(8).hex()
        atomic_write_bytes(self.root / "versions" / _name(session), value.encode(), durable=False)
        return value

    async def set_role_pack(self, session: str, name: str) -> None:
        path = self.root / "role-packs" / _name(session)
        await asyncio.to_thread(atomic_write_bytes, path, name.encode("utf-8"))

    async def role_pack(self, session: str) -> str | None:
        try:
            return (self.root / "role-packs" / _name(session)).read_text("utf-8") or None
        except FileNotFoundError:
            return None

    async def forget_created(self, session: str) -> None:
        with contextlib.suppress(FileNotFoundError, ValueError):
            (self.root / "created" / f"{_name(session)}.json").unlink()


def _write_private(path: Path, data: bytes) -> None:
    atomic_write_bytes(path, data)
    os.chmod(path, 0o600)


def _read_created(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:  # pruned by another worker meanwhile
        return 0.0


def _ends(path: Path) -> bool:
    """Whether a turn's file ends with ``END`` (a file that is gone — or is no regular file of
    its own: nothing a worker wrote — counts as ended)."""
    tail = _regular(path, len(END), tail=True)
    return tail is None or tail == END


def _regular(path: Path, limit: int, *, tail: bool = False) -> bytes | None:
    """The first (``tail``: last) ``limit`` bytes of ``path`` when it is a regular file, not a
    symlink; else ``None``.  Opened without waiting: a fifo planted there never blocks."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        return os.pread(fd, limit, max(0, info.st_size - limit) if tail else 0)
    except OSError:
        return None
    finally:
        os.close(fd)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read_from(path: Path, offset: int) -> bytes:
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            return fh.read(1 << 20)
    except FileNotFoundError:
        return b""
