"""Sessions and rounds in PostgreSQL: the ``jsonl`` store's API, one table row per line.

A finished turn (its messages and its round) is one transaction; ``round_count``,
``updated_at`` and the default title are derived from the lines, as in the file store.
"""

from __future__ import annotations

import builtins
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from psycopg import AsyncConnection

from memora.errors import ErrorCode, MemoraError
from memora.memory.redaction import redacted, round_lines, title_without
from memora.memory.sessions import RoundRecord, SessionContents, SessionInfo, lines_until_round

from .database import Database, namespace_from

__all__ = ["PostgresSessionStore"]

_INFO = """
SELECT s.id, s.title, s.created_at, s.updated_at, s.parent_id, s.fork_round_id, s.archived,
       count(l.seq) FILTER (WHERE l.kind = 'round'),
       max((l.body->>'ended_at')::double precision) FILTER (WHERE l.kind = 'round'),
       (array_agg(l.body->>'user' ORDER BY l.seq) FILTER (WHERE l.kind = 'round'))[1],
       s.scope
FROM memora_sessions s
LEFT JOIN memora_session_lines l ON l.namespace = s.namespace AND l.session_id = s.id
WHERE s.namespace = %s {where}
GROUP BY s.id, s.title, s.created_at, s.updated_at, s.parent_id, s.fork_round_id, s.archived,
         s.scope
"""


def _no_session(session_id: str) -> MemoraError:
    return MemoraError(
        ErrorCode.NOT_FOUND, f"no session {session_id!r}", context={"session_id": session_id}
    )


def _info(row: Sequence[Any]) -> SessionInfo:
    info = SessionInfo(
        id=row[0],
        title=row[1],
        created_at=row[2],
        updated_at=max(row[3], row[8] or 0.0),
        parent_id=row[4],
        fork_round_id=row[5],
        archived=row[6],
        round_count=int(row[7] or 0),
        scope=row[10] or None,
    )
    if not info.title and row[9] and row[9].strip():
        info.title = row[9].strip().splitlines()[0][:80]
    return info


class PostgresSessionStore:
    """The ``postgres`` session store."""

    def __init__(self, db: Database, namespace: str) -> None:
        self.db = db
        self.namespace = namespace

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> PostgresSessionStore:
        return cls(Database.from_options(options), namespace_from(options, "path"))

    async def _conn(self) -> Any:
        return await self.db.connection()

    async def _one(self, conn: AsyncConnection[Any], session_id: str) -> SessionInfo:
        cur = await conn.execute(_INFO.format(where="AND s.id = %s"), (self.namespace, session_id))
        row = await cur.fetchone()
        if row is None:
            raise _no_session(session_id)
        return _info(row)

    async def create(
        self, title: str = "", session_id: str | None = None, *, scope: str | None = None
    ) -> SessionInfo:
        sid = session_id or f"{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
        t = time.time()
        async with await self._conn() as conn:
            cur = await conn.execute(
                "INSERT INTO memora_sessions (namespace, id, title, created_at, updated_at, scope) "
                "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (self.namespace, sid, title, t, t, scope or ""),
            )
            if cur.rowcount != 1:
                raise MemoraError(ErrorCode.INVALID_INPUT, f"session {sid!r} already exists")
        return SessionInfo(id=sid, title=title, created_at=t, updated_at=t, scope=scope)

    async def get(self, session_id: str) -> SessionInfo:
        async with await self._conn() as conn:
            return await self._one(conn, session_id)

    async def exists(self, session_id: str) -> bool:
        async with await self._conn() as conn:
            cur = await conn.execute(
                "SELECT 1 FROM memora_sessions WHERE namespace=%s AND id=%s",
                (self.namespace, session_id),
            )
            return await cur.fetchone() is not None

    async def list(self, *, include_archived: bool = False) -> builtins.list[SessionInfo]:
        where = "" if include_archived else "AND NOT s.archived"
        async with await self._conn() as conn:
            cur = await conn.execute(_INFO.format(where=where), (self.namespace,))
            infos = [_info(r) for r in await cur.fetchall()]
        infos.sort(key=lambda i: -i.updated_at)
        return infos

    async def _append(self, session_id: str, lines: Sequence[tuple[str, dict[str, Any]]]) -> None:
        # one statement, atomic on its own: the lines go in, in order, only if the session
        # exists — its row found by key and held (FOR KEY SHARE) while they go in
        async with await self._conn() as conn:
            cur = await conn.execute(
                "WITH s AS (SELECT 1 FROM memora_sessions WHERE namespace=%s AND id=%s "
                "FOR KEY SHARE) "
                "INSERT INTO memora_session_lines (namespace, session_id, kind, body) "
                "SELECT %s, %s, t.kind, t.body::jsonb FROM s, "
                "unnest(%s::text[], %s::text[]) WITH ORDINALITY AS t(kind, body, n) ORDER BY t.n",
                (
                    self.namespace,
                    session_id,
                    self.namespace,
                    session_id,
                    [kind for kind, _ in lines],
                    [json.dumps(body, ensure_ascii=False) for _, body in lines],
                ),
            )
            if cur.rowcount != len(lines):
                raise _no_session(session_id)

    async def append_messages(self, session_id: str, messages: Sequence[dict[str, Any]]) -> None:
        if messages:
            await self._append(session_id, [("message", dict(m)) for m in messages])

    async def append_round(self, session_id: str, record: RoundRecord) -> None:
        await self.append_turn(session_id, (), record)

    async def append_turn(
        self, session_id: str, messages: Sequence[dict[str, Any]], record: RoundRecord
    ) -> None:
        """A finished turn in one transaction."""
        lines = [("message", dict(m)) for m in messages]
        lines.append(("round", record.to_dict()))
        await self._append(session_id, lines)

    async def _lines(self, session_id: str, kind: str) -> builtins.list[dict[str, Any]]:
        async with await self._conn() as conn:
            await self._one(conn, session_id)
            cur = await conn.execute(
                "SELECT body FROM memora_session_lines WHERE namespace=%s AND session_id=%s "
                "AND kind=%s ORDER BY seq",
                (self.namespace, session_id, kind),
            )
            return [dict(r[0]) for r in await cur.fetchall()]

    async def messages(self, session_id: str) -> builtins.list[dict[str, Any]]:
        return await self._lines(session_id, "message")

    async def load(self, session_id: str, *, after: object = None) -> SessionContents | None:
        """The session's info, messages and rounds through one connection (what ``exists``,
        ``get``, ``messages`` and ``rounds`` take four for); ``None`` when there is none.
        ``after``: the ``mark`` of an earlier load — how many lines it read and the last one's
        ``seq`` — to read only the lines written since.  The mark holds only while the lines up
        to its ``seq`` are still exactly that many (a line that committed late, out of order,
        or a line removed: the session is read whole, and ``since`` is ``None``)."""
        mark = (
            after
            if isinstance(after, tuple) and len(after) == 2 and all(type(x) is int for x in after)
            else None
        )
        async with await self._conn() as conn:
            cur = await conn.execute(
                _INFO.format(where="AND s.id = %s"), (self.namespace, session_id)
            )
            row = await cur.fetchone()
            if row is None:
                return None
            since: tuple[int, int] | None = None
            if mark is not None:
                cur = await conn.execute(
                    "SELECT count(*) FROM memora_session_lines WHERE namespace=%s "
                    "AND session_id=%s AND seq <= %s",
                    (self.namespace, session_id, mark[1]),
                )
                counted = await cur.fetchone()
                if counted is not None and counted[0] == mark[0]:
                    since = mark
            cur = await conn.execute(
                "SELECT seq, kind, body FROM memora_session_lines WHERE namespace=%s "
                "AND session_id=%s AND seq > %s ORDER BY seq",
                (self.namespace, session_id, since[1] if since is not None else -1),
            )
            lines = await cur.fetchall()
        count = (since[0] if since is not None else 0) + len(lines)
        last = lines[-1][0] if lines else (since[1] if since is not None else -1)
        return SessionContents(
            _info(row),
            [dict(body) for _, kind, body in lines if kind == "message"],
            [RoundRecord.from_dict(body) for _, kind, body in lines if kind == "round"],
            (count, int(last)),
            since,
        )

    async def rounds(self, session_id: str) -> builtins.list[RoundRecord]:
        return [RoundRecord.from_dict(b) for b in await self._lines(session_id, "round")]

    async def fork(
        self, session_id: str, at_round_id: str | None = None, title: str = ""
    ) -> tuple[SessionInfo, int]:
        async with await self._conn() as conn, conn.transaction():
            source = await self._one(conn, session_id)
            cur = await conn.execute(
                "SELECT seq, kind, body FROM memora_session_lines WHERE namespace=%s "
                "AND session_id=%s ORDER BY seq",
                (self.namespace, session_id),
            )
            rows = [{**body, "kind": kind} for _, kind, body in await cur.fetchall()]
            kept = lines_until_round(rows, session_id, at_round_id)
            new_id = f"{session_id[:100]}-fork-{uuid.uuid4().hex[:6]}"
            t = time.time()
            new_title = title or (source.title + " (fork)").strip()
            await conn.execute(
                "INSERT INTO memora_sessions (namespace, id, title, created_at, updated_at, "
                "parent_id, fork_round_id, scope) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                (
                    self.namespace,
                    new_id,
                    new_title,
                    t,
                    t,
                    session_id,
                    at_round_id,
                    source.scope or "",  # a fork stays its owner's
                ),
            )
            async with conn.cursor() as c:
                await c.executemany(
                    "INSERT INTO memora_session_lines (namespace, session_id, kind, body) "
                    "VALUES (%s, %s, %s, %s)",
                    [
                        (
                            self.namespace,
                            new_id,
                            line["kind"],
                            json.dumps(
                                {k: v for k, v in line.items() if k != "kind"}, ensure_ascii=False
                            ),
                        )
                        for line in kept
                    ],
                )
            info = await self._one(conn, new_id)
        return info, info.round_count

    async def redact_round(self, session_id: str, round_id: str, tombstone: dict[str, Any]) -> bool:
        """Forget round ``round_id``'s text: its line and its turn's messages are rewritten
        without it, in one transaction (see :mod:`memora.memory.redaction`).  The rows' old
        versions stay in the table's files until PostgreSQL vacuums them."""
        async with await self._conn() as conn, conn.transaction():
            cur = await conn.execute(
                "SELECT seq, kind, body FROM memora_session_lines WHERE namespace=%s "
                "AND session_id=%s ORDER BY seq FOR UPDATE",
                (self.namespace, session_id),
            )
            rows = await cur.fetchall()
            lines = [{**body, "kind": kind} for _, kind, body in rows]
            targets = round_lines(lines, round_id)
            if targets:  # a fork's title is its source's, which may be the request
                source = await self._one(conn, session_id)
                title = title_without(source.title, lines[targets[-1]].get("user", ""))
                if title is not None:
                    await conn.execute(
                        "UPDATE memora_sessions SET title=%s WHERE namespace=%s AND id=%s",
                        (title, self.namespace, session_id),
                    )
            for index in targets:
                body = {k: v for k, v in redacted(lines[index], tombstone).items() if k != "kind"}
                await conn.execute(
                    "UPDATE memora_session_lines SET body=%s::jsonb WHERE namespace=%s "
                    "AND session_id=%s AND seq=%s",
                    (json.dumps(body), self.namespace, session_id, rows[index][0]),
                )
        return bool(targets)

    async def archive(self, session_id: str, archived: bool = True) -> SessionInfo:
        async with await self._conn() as conn:
            cur = await conn.execute(
                "UPDATE memora_sessions SET archived=%s, updated_at=%s WHERE namespace=%s AND id=%s",
                (archived, time.time(), self.namespace, session_id),
            )
            if cur.rowcount != 1:
                raise MemoraError(ErrorCode.NOT_FOUND, f"no session {session_id!r}")
            return await self._one(conn, session_id)

    async def close(self) -> None:
        await self.db.close()
