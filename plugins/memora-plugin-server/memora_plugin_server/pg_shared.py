"""What the workers of a service share about a project's sessions, in PostgreSQL: the same as
:class:`~.shared.FileSharedState`, for workers on several machines (``"storage": "postgres"``).

- A session's lock is a row naming the worker that holds it by its **presence connection**
  (``pg_backend_pid()`` and ``backend_start`` of a connection each worker keeps open): when a
  worker dies its connection ends, the server forgets its backend, and the next worker takes the
  session at once — no lease to expire.
- A turn's chunks are rows (``memora_server_events``), written in batches as they come and read
  by followers on other machines every ``POLL_SECONDS``.
- Pauses, aborts, role-pack choices and versions are columns of ``memora_server_sessions``.
- An abort asked through one worker reaches the worker running the turn at once: the request
  sets the session's ``abort`` flag and sends a notification on ``memora_server_abort``, which
  every worker listens to on its presence connection.  Should that connection fail, the
  worker goes back to reading the flag every ``abort_poll`` seconds, and makes a presence
  connection again at once, named on the sessions it holds (:meth:`PgSharedState.
  _keep_presence`): a live worker never looks dead for good.

Tables are created on first start (``CREATE TABLE IF NOT EXISTS`` under an advisory lock).
Every statement is parameterised.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import AsyncGenerator
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from .shared import TURN_EVENTS_KEPT_SECONDS, Orphaned, SessionView, lost_turn, one_by_one

__all__ = ["PgSharedState", "for_store"]

logger = logging.getLogger("memora.server")

POLL_SECONDS = 0.1
ABORT_CHANNEL = "memora_server_abort"
ABORT_CHECK_SECONDS = 5.0
"""While the abort channel is listened to, a running turn's flag is still read this often (a
notification is sent once; this is the guard against one that was never sent or received)."""
_HINTS_KEPT = 1024
"""Abort notifications kept for turns not yet waiting (the oldest go first)."""
FLUSH_SECONDS = 0.05
"""A turn's chunks are written at most this often (one INSERT for all that came meanwhile)."""
KEPT_TURNS = 8

_TABLES = """
CREATE TABLE IF NOT EXISTS memora_server_sessions (
    namespace text NOT NULL,
    session_id text NOT NULL,
    holder_pid integer,
    holder_start timestamptz,
    current_turn text,
    pause jsonb,
    role_pack text,
    version text NOT NULL DEFAULT '',
    abort boolean NOT NULL DEFAULT false,
    created jsonb,
    PRIMARY KEY (namespace, session_id)
);
CREATE TABLE IF NOT EXISTS memora_server_turns (
    namespace text NOT NULL,
    turn_id text NOT NULL,
    session_id text NOT NULL,
    started_at double precision NOT NULL,
    ended boolean NOT NULL DEFAULT false,
    PRIMARY KEY (namespace, turn_id)
);
CREATE INDEX IF NOT EXISTS memora_server_turns_open ON memora_server_turns (namespace)
    WHERE NOT ended;
CREATE TABLE IF NOT EXISTS memora_server_events (
    namespace text NOT NULL,
    turn_id text NOT NULL,
    seq integer NOT NULL,
    data text NOT NULL,
    PRIMARY KEY (namespace, turn_id, seq)
);
"""

_ALIVE = """
EXISTS (SELECT 1 FROM pg_stat_activity a
        WHERE a.pid = s.holder_pid AND a.backend_start = s.holder_start)
"""


async def _backend(conn: AsyncConnection[Any]) -> tuple[int, Any]:
    """The ``(pid, backend_start)`` that names ``conn``'s backend while it lives."""
    cur = await conn.execute(
        "SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()"
    )
    row = await cur.fetchone()
    if row is None:
        raise RuntimeError("the server does not list this connection's backend")
    return int(row[0]), row[1]


def _view(row: tuple[Any, ...]) -> SessionView:
    """A session's row (version, pause, role pack) as a :class:`SessionView`."""
    version, pause, pack = row
    return SessionView(
        str(version or ""),
        pause if isinstance(pause, dict) else None,
        str(pack) if pack else None,
    )


class PgLease:
    def __init__(self, state: PgSharedState, session: str, view: SessionView | None) -> None:
        self._state = state
        self._session = session
        self._held = True
        self.view = view
        """The session's version, pause and role pack, read by the statement that took the lock."""

    async def release(self) -> None:
        if not self._held:
            return
        self._held = False
        await self._state._execute(
            "UPDATE memora_server_sessions SET holder_pid = NULL, holder_start = NULL "
            "WHERE namespace = %s AND session_id = %s AND holder_pid = %s AND holder_start = %s",
            (self._state.namespace, self._session, *self._state.presence),
        )


class PgTurnWriter:
    """Buffers a turn's chunks and writes them in batches (one INSERT per batch, at most every
    ``FLUSH_SECONDS``); the last batch and the turn's end are one statement."""

    def __init__(self, state: PgSharedState, turn_id: str, seq: int = 0) -> None:
        self._state = state
        self._turn = turn_id
        self._seq = seq
        self._buffer: list[tuple[int, str]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._waiting = False
        """The flusher is still gathering (asleep), not writing."""

    def add(self, data: str) -> None:
        self._seq += 1
        self._buffer.append((self._seq, data))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush())

    async def _flush(self) -> None:
        # gather what streams in meanwhile: followers read every POLL_SECONDS anyway
        self._waiting = True
        try:
            await asyncio.sleep(FLUSH_SECONDS)
        finally:
            self._waiting = False
        while self._buffer:
            batch, self._buffer = self._buffer, []
            await self._write(batch)

    async def _write(self, batch: list[tuple[int, str]], *, ended: bool = False) -> None:
        state = self._state
        insert = (
            "INSERT INTO memora_server_events (namespace, turn_id, seq, data) "
            "SELECT %s, %s, t.seq, t.data FROM unnest(%s::integer[], %s::text[]) AS t(seq, data)"
        )
        params: tuple[Any, ...] = (
            state.namespace,
            self._turn,
            [seq for seq, _ in batch],
            [data for _, data in batch],
        )
        if ended:  # the last chunks and the end flag commit together: a follower that sees
            # the turn ended finds every chunk of it
            insert = (
                f"WITH events AS ({insert}) UPDATE memora_server_turns SET ended = true "
                "WHERE namespace = %s AND turn_id = %s"
            )
            params = (*params, state.namespace, self._turn)
        await state._execute(insert, params)

    async def end(self) -> None:
        flusher = self._flusher
        if flusher is not None and not flusher.done():
            if self._waiting:  # still gathering: its chunks go with the end instead
                flusher.cancel()
            await asyncio.wait([flusher])  # a write under way finishes first (order of seq)
        batch, self._buffer = self._buffer, []
        await self._write(batch, ended=True)


class PgSharedState:
    """See the module docstring.  ``db`` is the session store's
    :class:`memora_plugin_postgres.database.Database` (its pool is shared), ``namespace`` its
    namespace."""

    abort_poll = 0.5
    """How often a running turn's abort flag is read when the abort channel is not listened to."""

    def __init__(self, db: Any, namespace: str) -> None:
        self.db = db
        self.namespace = namespace
        self.presence: tuple[int, Any] = (0, None)
        self._presence_conn: AsyncConnection[Any] | None = None
        self._listener: asyncio.Task[None] | None = None
        self._keeper: asyncio.Task[None] | None = None
        """Makes the presence connection again whenever it goes (:meth:`_keep_presence`)."""
        self._former: list[tuple[int, Any]] = []
        """This worker's earlier presences, whose sessions a new one takes back."""
        self._abort_waiters: dict[str, set[asyncio.Event]] = {}
        self._abort_hints: dict[str, None] = {}
        """Sessions an abort notification named while nothing here waited for them (a turn
        that had taken its lock but not begun to wait yet): its wait reads the flag at once."""
        # the namespace as a notification names it: a digest, short and of one length
        # whatever the namespace (every worker on the database receives every notification)
        self._channel_key = hashlib.sha256(namespace.encode("utf-8")).hexdigest()[:32]

    async def _conn(self) -> Any:
        return (await self.db.pool()).connection()

    async def _execute(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        async with await self._conn() as conn:
            cur = await conn.execute(sql, params)
            return list(await cur.fetchall()) if cur.description else []

    async def start(self) -> None:
        async with await self._conn() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended('memora-server', 0))")
            await conn.execute(_TABLES)
        conn = await AsyncConnection.connect(self.db.dsn, autocommit=True)
        self.presence = await _backend(conn)
        self._presence_conn = conn
        await conn.execute(f"LISTEN {ABORT_CHANNEL}")
        self._listener = asyncio.get_running_loop().create_task(
            self._listen(conn), name="memora-abort-listen"
        )
        await self.prune(TURN_EVENTS_KEPT_SECONDS)

    @property
    def listening(self) -> bool:
        """Aborts from other workers arrive as notifications (else the flag is polled)."""
        return self._listener is not None and not self._listener.done()

    async def _listen(self, conn: AsyncConnection[Any]) -> None:
        try:
            async for note in conn.notifies():
                try:
                    namespace, session = json.loads(note.payload)
                except (ValueError, TypeError):
                    continue
                if namespace != self._channel_key or not isinstance(session, str):
                    continue
                waiters = self._abort_waiters.get(session)
                if waiters:
                    for event in waiters:
                        event.set()
                else:
                    hints = self._abort_hints
                    hints[session] = None
                    if len(hints) > _HINTS_KEPT:
                        del hints[next(iter(hints))]
        except Exception as exc:  # the connection went: poll from now on
            logger.warning(
                "the abort channel of the shared state stopped (%s); aborts asked through "
                "other workers are read every %.1f s instead",
                type(exc).__name__,
                self.abort_poll,
            )
            for waiters in self._abort_waiters.values():  # each running turn: to the poll now
                for event in waiters:
                    event.set()
            self._keeper = asyncio.get_running_loop().create_task(
                self._keep_presence(), name="memora-presence"
            )

    async def _keep_presence(self) -> None:
        """The presence connection went: another at once, named on the sessions this worker
        holds — else each of them, and each it took later, looked free to the other workers
        for good, and their take-over ran a live worker's turns a second time beside it.  The
        new one only says this worker lives (aborts are read from the flag from now on), and
        is made again whenever it goes."""
        delay = 0.0
        while True:
            await asyncio.sleep(delay)
            delay = min(5.0, max(0.2, delay * 2))
            try:
                conn = await AsyncConnection.connect(self.db.dsn, autocommit=True)
            except Exception as exc:
                logger.warning("the shared state's presence connection failed (%s)", exc)
                continue
            try:
                self._former = [self.presence, *self._former][:16]
                self.presence = await _backend(conn)  # locks from now on: under the new one
                stale, self._presence_conn = self._presence_conn, conn
                if stale is not None:
                    with contextlib.suppress(Exception):
                        await stale.close()
                # a session another worker took meanwhile (it saw this one dead) stays its own
                await conn.execute(
                    "UPDATE memora_server_sessions SET holder_pid = %s, holder_start = %s "
                    "WHERE namespace = %s AND (holder_pid, holder_start) IN "
                    "(SELECT * FROM unnest(%s::integer[], %s::timestamptz[]))",
                    (
                        *self.presence,
                        self.namespace,
                        [p for p, _ in self._former],
                        [t for _, t in self._former],
                    ),
                )
                logger.warning("the shared state's presence connection was made again")
                delay = 0.0
                async for _ in conn.notifies():  # returns, or raises, once it goes
                    pass
            except Exception as exc:
                logger.warning("the shared state's presence connection went (%s)", exc)

    async def prune(self, older_than: float) -> int:
        """Remove the events of turns started more than ``older_than`` seconds ago."""
        cutoff = time.time() - older_than
        async with await self._conn() as conn, conn.transaction():
            cur = await conn.execute(
                "DELETE FROM memora_server_turns WHERE namespace = %s AND started_at < %s "
                "RETURNING turn_id",
                (self.namespace, cutoff),
            )
            gone = [r[0] for r in await cur.fetchall()]
            if gone:
                await conn.execute(
                    "DELETE FROM memora_server_events WHERE namespace = %s AND turn_id = ANY(%s)",
                    (self.namespace, gone),
                )
        return len(gone)

    async def forget_turns(self, session: str) -> None:
        async with await self._conn() as conn, conn.transaction():
            cur = await conn.execute(
                "DELETE FROM memora_server_turns WHERE namespace = %s AND session_id = %s "
                "AND ended RETURNING turn_id",
                (self.namespace, session),
            )
            gone = [r[0] for r in await cur.fetchall()]
            if gone:
                await conn.execute(
                    "DELETE FROM memora_server_events WHERE namespace = %s AND turn_id = ANY(%s)",
                    (self.namespace, gone),
                )

    async def close(self) -> None:
        listener, self._listener = self._listener, None
        for task in (listener, self._keeper):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._keeper = None
        conn, self._presence_conn = self._presence_conn, None
        if conn is not None:
            await conn.close()

    async def _ensure(self, session: str) -> None:
        await self._execute(
            "INSERT INTO memora_server_sessions (namespace, session_id) VALUES (%s, %s) "
            "ON CONFLICT DO NOTHING",
            (self.namespace, session),
        )

    # -- the session lock ----------------------------------------------------------------------

    async def try_lock(self, session: str) -> PgLease | None:
        rows = await self._execute(
            "INSERT INTO memora_server_sessions AS s (namespace, session_id, holder_pid, "
            "holder_start) VALUES (%s, %s, %s, %s) ON CONFLICT (namespace, session_id) DO UPDATE "
            "SET holder_pid = EXCLUDED.holder_pid, holder_start = EXCLUDED.holder_start, "
            f"abort = false WHERE s.holder_pid IS NULL OR NOT {_ALIVE} "
            "RETURNING s.version, s.pause, s.role_pack",
            (self.namespace, session, *self.presence),
        )
        return PgLease(self, session, _view(rows[0])) if rows else None

    async def alive(self, session: str) -> bool:
        rows = await self._execute(
            f"SELECT {_ALIVE} FROM memora_server_sessions s "
            "WHERE s.namespace = %s AND s.session_id = %s AND s.holder_pid IS NOT NULL",
            (self.namespace, session),
        )
        return bool(rows and rows[0][0])

    # -- turns ---------------------------------------------------------------------------------

    async def writer(self, session: str, turn_id: str) -> PgTurnWriter:
        # one statement (a round trip, atomic on its own): the turn is recorded and made the
        # session's current one, and its turns older than the last KEPT_TURNS go with their
        # events.  The statement's parts share one snapshot — `stale` does not see the turn
        # inserted beside it — so it skips KEPT_TURNS - 1 of the older ones
        ns = self.namespace
        await self._execute(
            "WITH new AS (INSERT INTO memora_server_turns (namespace, turn_id, session_id, "
            "started_at) VALUES (%s, %s, %s, %s)), "
            "made_current AS (UPDATE memora_server_sessions SET current_turn = %s "
            "WHERE namespace = %s AND session_id = %s), "
            "stale AS (SELECT turn_id FROM memora_server_turns WHERE namespace = %s AND "
            "session_id = %s ORDER BY started_at DESC OFFSET %s), "
            "events AS (DELETE FROM memora_server_events WHERE namespace = %s AND turn_id IN "
            "(SELECT turn_id FROM stale)) "
            "DELETE FROM memora_server_turns WHERE namespace = %s AND turn_id IN "
            "(SELECT turn_id FROM stale)",
            (
                *(ns, turn_id, session, time.time()),
                *(turn_id, ns, session),
                *(ns, session, KEPT_TURNS - 1),
                ns,
                ns,
            ),
        )
        return PgTurnWriter(self, turn_id)

    async def resume_writer(self, session: str, turn_id: str) -> PgTurnWriter:
        rows = await self._execute(
            "WITH made_current AS (UPDATE memora_server_sessions SET current_turn = %s "
            "WHERE namespace = %s AND session_id = %s) "
            "SELECT coalesce(max(seq), 0) FROM memora_server_events "
            "WHERE namespace = %s AND turn_id = %s",
            (turn_id, self.namespace, session, self.namespace, turn_id),
        )
        return PgTurnWriter(self, turn_id, int(rows[0][0]) if rows else 0)

    async def last_turn(self, session: str) -> str | None:
        rows = await self._execute(
            "SELECT current_turn FROM memora_server_sessions WHERE namespace = %s AND "
            "session_id = %s",
            (self.namespace, session),
        )
        return str(rows[0][0]) if rows and rows[0][0] else None

    async def current_turn(self, session: str) -> str | None:
        rows = await self._execute(
            f"SELECT s.current_turn FROM memora_server_sessions s WHERE s.namespace = %s AND "
            f"s.session_id = %s AND s.holder_pid IS NOT NULL AND {_ALIVE}",
            (self.namespace, session),
        )
        return str(rows[0][0]) if rows and rows[0][0] else None

    async def has_turn(self, session: str, turn_id: str) -> bool:
        rows = await self._execute(
            "SELECT 1 FROM memora_server_turns WHERE namespace = %s AND turn_id = %s "
            "AND session_id = %s",
            (self.namespace, turn_id, session),
        )
        return bool(rows)

    async def orphans(self) -> list[tuple[str, str]]:
        rows = await self._execute(
            "SELECT t.session_id, t.turn_id FROM memora_server_turns t "
            "JOIN memora_server_sessions s ON s.namespace = t.namespace "
            "AND s.session_id = t.session_id AND s.current_turn = t.turn_id "
            f"WHERE t.namespace = %s AND NOT t.ended AND NOT (s.holder_pid IS NOT NULL AND {_ALIVE})",
            (self.namespace,),
        )
        return [(str(r[0]), str(r[1])) for r in rows]

    async def turn_ended(self, session: str, turn_id: str) -> bool:
        rows = await self._execute(
            "SELECT ended FROM memora_server_turns WHERE namespace = %s AND turn_id = %s "
            "AND session_id = %s",
            (self.namespace, turn_id, session),
        )
        return not rows or bool(rows[0][0])

    def follow(
        self, session: str, turn_id: str, after: int = 0, grace: float = 0.0
    ) -> AsyncGenerator[tuple[int, str], None]:
        return one_by_one(self.batches(session, turn_id, after, grace=grace))

    async def batches(
        self,
        session: str,
        turn_id: str,
        after: int = 0,
        idle: float | None = None,
        grace: float = 0.0,
    ) -> AsyncGenerator[list[tuple[int, str]], None]:
        """A turn's chunks after number ``after`` as they are written, in lists; an empty list
        after ``idle`` seconds without one; a last ``TURN_LOST`` error when the worker running
        it is gone before it ended (and ``grace`` seconds passed without another taking it
        over)."""
        seq = max(0, after)
        quiet_since = time.monotonic()
        orphaned = Orphaned(grace)
        while True:
            rows = await self._execute(
                "SELECT seq, data FROM memora_server_events WHERE namespace = %s AND turn_id = %s "
                "AND seq > %s ORDER BY seq",
                (self.namespace, turn_id, seq),
            )
            if rows:
                seq = int(rows[-1][0])
                quiet_since = time.monotonic()
                yield [(int(r[0]), str(r[1])) for r in rows]
                continue
            state = await self._execute(
                f"SELECT t.ended, (s.current_turn = t.turn_id AND s.holder_pid IS NOT NULL "
                f"AND {_ALIVE}) FROM memora_server_turns t JOIN memora_server_sessions s "
                "ON s.namespace = t.namespace AND s.session_id = t.session_id "
                "WHERE t.namespace = %s AND t.turn_id = %s",
                (self.namespace, turn_id),
            )
            ended, running = (bool(state[0][0]), bool(state[0][1])) if state else (True, False)
            if ended:
                # rows written just before the end flag: one more read
                rows = await self._execute(
                    "SELECT seq, data FROM memora_server_events WHERE namespace = %s AND "
                    "turn_id = %s AND seq > %s ORDER BY seq",
                    (self.namespace, turn_id, seq),
                )
                if rows:
                    yield [(int(r[0]), str(r[1])) for r in rows]
                return
            if orphaned.lost(running):
                yield lost_turn(seq + 1)
                return
            if idle is not None and time.monotonic() - quiet_since >= idle:
                quiet_since = time.monotonic()
                yield []
            await asyncio.sleep(POLL_SECONDS)

    # -- pauses, aborts, role packs, versions, created sessions ---------------------------------

    async def _set(self, session: str, column: str, value: Any) -> None:
        assert column in {"pause", "role_pack", "version", "created"}
        await self._execute(
            f"INSERT INTO memora_server_sessions (namespace, session_id, {column}) "
            f"VALUES (%s, %s, %s) ON CONFLICT (namespace, session_id) "
            f"DO UPDATE SET {column} = EXCLUDED.{column}",
            (self.namespace, session, value),
        )

    async def _get(self, session: str, column: str) -> Any:
        assert column in {"pause", "role_pack", "version", "created"}
        rows = await self._execute(
            f"SELECT {column} FROM memora_server_sessions WHERE namespace = %s AND session_id = %s",
            (self.namespace, session),
        )
        return rows[0][0] if rows else None

    async def set_pause(self, session: str, value: dict[str, Any] | None) -> None:
        await self._set(session, "pause", Jsonb(value) if value is not None else None)

    async def pause(self, session: str) -> dict[str, Any] | None:
        value = await self._get(session, "pause")
        return value if isinstance(value, dict) else None

    async def request_abort(self, session: str) -> None:
        # the flag, and a notification for the worker running the turn, in one statement: the
        # notification is delivered when the flag is committed
        await self._execute(
            "WITH s AS (INSERT INTO memora_server_sessions (namespace, session_id, abort) "
            "VALUES (%s, %s, true) ON CONFLICT (namespace, session_id) DO UPDATE SET abort = true "
            "RETURNING 1) SELECT pg_notify(%s, %s) FROM s",
            (self.namespace, session, ABORT_CHANNEL, json.dumps([self._channel_key, session])),
        )

    async def wait_abort(self, session: str) -> None:
        event = asyncio.Event()
        if session in self._abort_hints:  # named before this wait began: read the flag now
            del self._abort_hints[session]
            event.set()
        waiters = self._abort_waiters.setdefault(session, set())
        waiters.add(event)
        try:
            while True:
                wait = ABORT_CHECK_SECONDS if self.listening else self.abort_poll
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await event.wait()
                event.clear()
                if await self.take_abort(session):
                    return
        finally:
            waiters.discard(event)
            if not waiters and self._abort_waiters.get(session) is waiters:
                del self._abort_waiters[session]

    async def take_abort(self, session: str) -> bool:
        rows = await self._execute(
            "UPDATE memora_server_sessions SET abort = false WHERE namespace = %s AND "
            "session_id = %s AND abort RETURNING 1",
            (self.namespace, session),
        )
        return bool(rows)

    async def version(self, session: str) -> str:
        return str(await self._get(session, "version") or "")

    async def view(self, session: str) -> SessionView:
        """The version, pause and role pack in one query (where three took three)."""
        rows = await self._execute(
            "SELECT version, pause, role_pack FROM memora_server_sessions "
            "WHERE namespace = %s AND session_id = %s",
            (self.namespace, session),
        )
        return _view(rows[0]) if rows else SessionView("", None, None)

    async def settle(self, session: str, pause: dict[str, Any] | None) -> str:
        """A turn ended: its pause saved (or cleared) and the version moved on, in one statement."""
        value = os.urandom(8).hex()
        await self._execute(
            "INSERT INTO memora_server_sessions (namespace, session_id, pause, version) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT (namespace, session_id) "
            "DO UPDATE SET pause = EXCLUDED.pause, version = EXCLUDED.version",
            (self.namespace, session, Jsonb(pause) if pause is not None else None, value),
        )
        return value

    async def bump(self, session: str) -> str:
        value = os.urandom(8).hex()
        await self._set(session, "version", value)
        return value

    async def set_role_pack(self, session: str, name: str) -> None:
        await self._set(session, "role_pack", name)

    async def role_pack(self, session: str) -> str | None:
        value = await self._get(session, "role_pack")
        return str(value) if value else None

    async def note_created(self, session: str, info: dict[str, Any]) -> None:
        return None  # the PostgreSQL session store has the session from its creation

    async def created(self) -> dict[str, dict[str, Any]]:
        return {}

    async def created_session(self, session: str) -> dict[str, Any] | None:
        return None

    async def forget_created(self, session: str) -> None:
        return None


def for_store(store: Any) -> PgSharedState | None:
    """The shared state for a runtime whose session store is the ``postgres`` one."""
    db, namespace = getattr(store, "db", None), getattr(store, "namespace", None)
    if type(store).__name__ != "PostgresSessionStore" or db is None or namespace is None:
        return None
    return PgSharedState(db, str(namespace))
