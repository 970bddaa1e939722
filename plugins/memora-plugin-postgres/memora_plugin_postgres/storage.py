"""Memory storage in PostgreSQL.

Search uses the kernel's tokenizer on both sides, like the SQLite backend: each memory's words
and CJK bigrams (plus each CJK run's last character) are stored as a ``tsvector`` built from
those tokens exactly (no PostgreSQL text parser in between), under a GIN index.  A query becomes
a ``tsquery`` of the same tokens — a CJK phrase as the AND of its bigrams, a single CJK character
as a prefix, terms joined by OR — passed as a parameter, so no query syntax of the user's is
ever interpreted.  The candidates the index returns are then checked and ranked with the
kernel's BM25 (``memora.memory.storage.score_records``): a phrase must really occur, and the
order is the one every backend gives.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import json
import logging
import struct
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from psycopg import AsyncConnection

from memora.errors import ErrorCode, MemoraError
from memora.memory.keywords import index_tokens, query_terms
from memora.memory.storage import (
    check_new,
    clamp_limit,
    record_from_row,
    record_to_row,
    scope_keys,
    score_records,
    tokens_of,
    update_changes,
)
from memora.memory.types import MemoryRecord, NewMemory, ScoredMemory, check_source
from memora.memory.vectors import VectorRows, pack, unpack

from .database import Database, namespace_from

__all__ = ["PostgresStorage", "lexemes_of", "packed_real_arrays", "tsquery_of"]

logger = logging.getLogger("memora.plugins.postgres")

_COLUMNS = (
    "id, source, name, content, summary_type, created_at, updated_at, superseded_by, "
    "session_id, round_id, meta, scope"
)
_ANALYZE_AFTER = 5000  # rows in one add_many that count as a bulk import
_MAX_POSITION = 16383  # PostgreSQL's largest tsvector position
_MAX_POSITIONS = 256  # positions kept per lexeme (PostgreSQL's own limit)
_MAX_LEXEME_BYTES = 2046  # a longer lexeme is an error ("word is too long")
_MAX_LEXEMES_BYTES = 1_000_000  # under the 1 MiB a tsvector's lexemes may take together


def _quote(token: str) -> str:
    return "'" + token.replace("\\", "\\\\").replace("'", "''") + "'"


def _fit(token: str) -> str:
    """``token`` cut to the longest lexeme PostgreSQL indexes (at a character boundary): the
    same cut in the index and in a query, so a long word is still found by its start."""
    raw = token.encode("utf-8", "surrogatepass")
    if len(raw) <= _MAX_LEXEME_BYTES:
        return token
    return raw[:_MAX_LEXEME_BYTES].decode("utf-8", "ignore")


def lexemes_of(name: str, content: str) -> str:
    """The ``tsvector`` text of a memory: every kernel token with its positions — as much as a
    ``tsvector`` holds.  A token past PostgreSQL's lexeme size is indexed by its first 2,046
    bytes; the distinct tokens past the 1 MiB a ``tsvector`` holds are not indexed (the row is
    stored whole all the same: its content is never cut)."""
    positions: dict[str, list[int]] = {}
    budget = _MAX_LEXEMES_BYTES
    for i, token in enumerate(index_tokens(f"{name}\n{content}"), 1):
        token = _fit(token)
        slots = positions.get(token)
        if slots is None:
            # what the lexeme takes in a tsvector: its bytes and a 4-byte entry (measured: 110,000
            # nine-byte words need 1,320,008 bytes), with room for its position count
            size = len(token.encode("utf-8", "surrogatepass")) + 8
            if size > budget:
                continue
            budget -= size
            slots = positions[token] = []
        if len(slots) < _MAX_POSITIONS and budget >= 2:
            slots.append(min(i, _MAX_POSITION))
            budget -= 2  # a position
    return " ".join(
        f"{_quote(t)}:{','.join(map(str, sorted(set(p))))}" if p else _quote(t)
        for t, p in positions.items()
    )


def tsquery_of(query: str) -> str | None:
    """The ``tsquery`` text for a user query, or None when it has no searchable term."""
    parts = []
    for term in query_terms(query):
        tokens = [_fit(t) for t in term.tokens]
        if term.prefix:
            parts.append(f"{_quote(tokens[0])}:*")
        elif len(tokens) == 1:
            parts.append(_quote(tokens[0]))
        else:
            parts.append("(" + " & ".join(_quote(t) for t in dict.fromkeys(tokens)) + ")")
    return " | ".join(parts) if parts else None


class PostgresStorage:
    """The ``postgres`` storage backend (``MemoryStorage`` protocol)."""

    def __init__(self, db: Database, namespace: str) -> None:
        self.db = db
        self.namespace = namespace
        self._closed = False
        # space -> (the oldest transaction in flight at the last read, the vectors read)
        self._vectors: dict[str, tuple[str, VectorRows]] = {}

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> PostgresStorage:
        return cls(Database.from_options(options), namespace_from(options, "path"))

    def _check_open(self) -> None:
        if self._closed:
            raise MemoraError(ErrorCode.STORAGE_ERROR, "the memory storage is closed")

    async def _conn(self) -> Any:
        self._check_open()
        return await self.db.connection()

    # -- writes ----------------------------------------------------------------------------------

    _INSERT = (
        f"INSERT INTO memora_memories (namespace, {_COLUMNS}, lexemes) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s::tsvector) "
        "ON CONFLICT (namespace, id) DO NOTHING"
    )

    def _row(self, record: MemoryRecord) -> tuple[Any, ...]:
        return (self.namespace, *record_to_row(record), lexemes_of(record.name, record.content))

    async def _insert(self, conn: AsyncConnection[Any], record: MemoryRecord) -> None:
        await conn.execute(self._INSERT, self._row(record))

    async def add(self, item: NewMemory) -> MemoryRecord:
        return (await self.add_many([item]))[0]

    async def add_many(self, items: Sequence[NewMemory]) -> builtins.list[MemoryRecord]:
        """One transaction; rows go in one pipelined ``executemany``.  An item whose ``id``
        exists already returns the stored record (imports are idempotent)."""
        for item in items:
            check_new(item)
        records = [MemoryRecord.from_new(item) for item in items]
        for item in items:
            check_source(item.source)
        if len(records) == 1 and not items[0].id:
            # one new memory (a round's): one statement, atomic on its own — no transaction's
            # BEGIN and COMMIT round trips around it
            async with await self._conn() as conn:
                await self._insert(conn, records[0])
            return records
        async with await self._conn() as conn, conn.transaction():
            given = [item.id for item in items if item.id]
            existing: dict[str, MemoryRecord] = {}
            if given:
                cur = await conn.execute(
                    f"SELECT {_COLUMNS} FROM memora_memories WHERE namespace=%s AND id = ANY(%s)",
                    (self.namespace, given),
                )
                existing = {r.id: r for r in map(record_from_row, await cur.fetchall())}
            fresh = [r for r in records if r.id not in existing]
            if fresh:
                async with conn.cursor() as cur:
                    await cur.executemany(self._INSERT, [self._row(r) for r in fresh])
        if len(fresh) >= _ANALYZE_AFTER:
            # a bulk import: refresh the planner's statistics now rather than when autovacuum
            # gets to it, so searches keep using the GIN index
            async with await self._conn() as conn:
                await conn.execute("ANALYZE memora_memories")
        return [existing.get(r.id, r) for r in records]

    async def update(
        self,
        memory_id: str,
        *,
        content: str | None = None,
        name: str | None = None,
        summary_type: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> MemoryRecord:
        changes = update_changes(content, name, summary_type, meta)
        async with await self._conn() as conn, conn.transaction():
            record = await self._require(conn, memory_id, lock=True)
            updated = record.with_changes(**changes)
            await conn.execute(
                "UPDATE memora_memories SET name=%s, content=%s, summary_type=%s, updated_at=%s, "
                "meta=%s, lexemes=%s::tsvector WHERE namespace=%s AND id=%s",
                (
                    updated.name,
                    updated.content,
                    updated.summary_type,
                    updated.updated_at,
                    json.dumps(updated.meta, ensure_ascii=False),
                    lexemes_of(updated.name, updated.content),
                    self.namespace,
                    memory_id,
                ),
            )
            if "content" in changes or "name" in changes:  # re-embedded from the new text
                await conn.execute(
                    "DELETE FROM memora_memory_vectors WHERE namespace=%s AND memory_id=%s",
                    (self.namespace, memory_id),
                )
                self._forget_vector(memory_id)
            return updated

    async def delete(self, memory_id: str) -> bool:
        async with await self._conn() as conn:
            cur = await conn.execute(
                "DELETE FROM memora_memories WHERE namespace=%s AND id=%s",
                (self.namespace, memory_id),
            )
            self._forget_vector(memory_id)  # its vectors went with it (ON DELETE CASCADE)
            return bool(cur.rowcount)

    def _forget_vector(self, memory_id: str) -> None:
        for _, rows in self._vectors.values():
            rows.drop(memory_id)

    async def supersede(self, old_id: str, new: NewMemory) -> MemoryRecord:
        check_new(new)
        async with await self._conn() as conn, conn.transaction():
            await self._require(conn, old_id, lock=True)
            check_source(new.source)
            record = MemoryRecord.from_new(new)
            await self._insert(conn, record)
            await conn.execute(
                "UPDATE memora_memories SET superseded_by=%s, updated_at=%s "
                "WHERE namespace=%s AND id=%s",
                (record.id, record.created_at, self.namespace, old_id),
            )
            return record

    # -- reads -----------------------------------------------------------------------------------

    async def _get(
        self, conn: AsyncConnection[Any], memory_id: str, *, lock: bool = False
    ) -> MemoryRecord | None:
        cur = await conn.execute(
            f"SELECT {_COLUMNS} FROM memora_memories WHERE namespace=%s AND id=%s"
            + (" FOR UPDATE" if lock else ""),
            (self.namespace, memory_id),
        )
        row = await cur.fetchone()
        return record_from_row(row) if row else None

    async def _require(
        self, conn: AsyncConnection[Any], memory_id: str, *, lock: bool = False
    ) -> MemoryRecord:
        record = await self._get(conn, memory_id, lock=lock)
        if record is None:
            raise MemoraError(
                ErrorCode.NOT_FOUND, f"no memory with id {memory_id!r}", context={"id": memory_id}
            )
        return record

    async def get(self, memory_id: str) -> MemoryRecord | None:
        async with await self._conn() as conn:
            return await self._get(conn, memory_id)

    async def list(
        self,
        *,
        source: str | None = None,
        limit: int = 50,
        offset: int = 0,
        include_superseded: bool = True,
        scopes: Collection[str] | None = None,
    ) -> builtins.list[MemoryRecord]:
        where, args = self._filters(source, include_superseded, None, scopes)
        async with await self._conn() as conn:
            cur = await conn.execute(
                f"SELECT {_COLUMNS} FROM memora_memories WHERE {' AND '.join(where)} "
                "ORDER BY created_at DESC, id LIMIT %s OFFSET %s",
                (*args, clamp_limit(limit), max(0, int(offset))),
            )
            return [record_from_row(r) for r in await cur.fetchall()]

    def _filters(
        self,
        source: str | None,
        include_superseded: bool,
        round_ids: builtins.list[str] | None,
        scopes: Collection[str] | None = None,
    ) -> tuple[builtins.list[str], builtins.list[Any]]:
        where = ["namespace = %s"]
        args: builtins.list[Any] = [self.namespace]
        if not include_superseded:
            where.append("superseded_by IS NULL")
        if source is not None:
            where.append("source = %s")
            args.append(source)
        if round_ids is not None:
            where.append("round_id = ANY(%s)")
            args.append(round_ids)
        if scopes is not None:
            # in the query itself: a page counts only what this reader may see
            where.append("scope = ANY(%s)")
            args.append(scope_keys(scopes))
        return where, args

    async def search_by_keyword(
        self,
        query: str,
        *,
        source: str | None = None,
        limit: int = 10,
        include_superseded: bool = False,
        round_ids: Collection[str] | None = None,
        scopes: Collection[str] | None = None,
    ) -> builtins.list[ScoredMemory]:
        self._check_open()
        if not isinstance(query, str):
            return []
        tsquery = tsquery_of(query)
        limit = clamp_limit(limit)
        ids = list(round_ids) if round_ids is not None else None
        if tsquery is None or limit == 0 or ids == []:
            return []
        where, args = self._filters(source, include_superseded, ids, scopes)
        # Candidates in index rank order, then the kernel's phrase check and BM25.  A page
        # larger than `limit` leaves room for candidates the phrase check drops; more pages are
        # read only when it dropped too many.
        page = max(limit * 4, 40)
        found: builtins.list[tuple[MemoryRecord, str, Counter[str], int]] = []
        offset = 0
        async with await self._conn() as conn:
            while True:
                cur = await conn.execute(
                    "WITH query AS (SELECT CAST(%s AS tsquery) AS q) "
                    f"SELECT {_COLUMNS} FROM memora_memories, query "
                    f"WHERE lexemes @@ q AND {' AND '.join(where)} "
                    "ORDER BY ts_rank(lexemes, q) DESC, created_at DESC LIMIT %s OFFSET %s",
                    (tsquery, *args, page, offset),
                    # never a prepared (generic) plan: it cannot see that the query is
                    # selective and scans the whole table instead of the GIN index
                    prepare=False,
                )
                rows = await cur.fetchall()
                for row in rows:
                    record = record_from_row(row)
                    found.append((record, *tokens_of(record)))
                scored = _score(found, query)
                if len(scored) >= limit or len(rows) < page:
                    break
                offset += page
        return scored[:limit]

    # -- vectors (memora.memory.vectors) -------------------------------------------------------

    async def put_vectors(self, space: str, vectors: Sequence[tuple[str, Sequence[float]]]) -> None:
        rows = [(self.namespace, space, i, [float(x) for x in v]) for i, v in vectors]
        if not rows:
            return
        async with await self._conn() as conn, conn.transaction(), conn.cursor() as cur:
            # a memory deleted meanwhile is skipped (the SELECT finds no row)
            await cur.executemany(
                "INSERT INTO memora_memory_vectors (namespace, space, memory_id, vector) "
                "SELECT %s, %s, id, %s::real[] FROM memora_memories WHERE namespace=%s AND id=%s "
                "ON CONFLICT (namespace, space, memory_id) DO UPDATE SET vector = EXCLUDED.vector, "
                "xid = pg_current_xact_id()",
                [(ns, sp, vec, ns, mid) for ns, sp, mid, vec in rows],
            )

    async def missing_vectors(self, space: str, *, limit: int = 32) -> builtins.list[MemoryRecord]:
        """Two plain scans compared here, not an anti-join in SQL: with the vector table's
        statistics stale (right after a backfill) the planner chose a nested loop that took
        8 minutes at 100k memories.  Called when a store opens and after a failure, not per
        write (new memories are embedded as they are written)."""
        limit = clamp_limit(limit)
        if limit == 0:
            return []
        async with await self._conn() as conn:
            cur = await conn.execute(
                "SELECT memory_id FROM memora_memory_vectors WHERE namespace=%s AND space=%s",
                (self.namespace, space),
            )
            have = {row[0] for row in await cur.fetchall()}
            cur = await conn.execute(
                "SELECT id FROM memora_memories WHERE namespace=%s ORDER BY created_at, id",
                (self.namespace,),
            )
            wanted: builtins.list[str] = []
            for (memory_id,) in await cur.fetchall():
                if memory_id not in have:
                    wanted.append(memory_id)
                    if len(wanted) == limit:
                        break
            if not wanted:
                return []
            cur = await conn.execute(
                f"SELECT {_COLUMNS} FROM memora_memories WHERE namespace=%s AND id = ANY(%s) "
                "ORDER BY created_at, id",
                (self.namespace, wanted),
            )
            return [record_from_row(r) for r in await cur.fetchall()]

    async def search_by_vector(
        self,
        space: str,
        vector: Sequence[float],
        *,
        source: str | None = None,
        limit: int = 10,
        include_superseded: bool = False,
        round_ids: Collection[str] | None = None,
        scopes: Collection[str] | None = None,
    ) -> builtins.list[ScoredMemory]:
        """Cosine of unit vectors by brute force in this process (numpy when installed): the
        space's vectors are read once, then only the rows written since (by any process); the
        candidates' records are then read with the filters."""
        self._check_open()
        limit = clamp_limit(limit)
        ids = list(round_ids) if round_ids is not None else None
        if limit == 0 or ids == []:
            return []
        where, args = self._filters(source, include_superseded, ids, scopes)
        async with await self._conn() as conn:
            rows = await self._vector_rows(conn, space)
            k = max(limit * 4, 40)
            while True:
                ranked = (
                    await asyncio.to_thread(rows.ranked, vector, k)
                    if len(rows) > 5000
                    else rows.ranked(vector, k)
                )
                scores = dict(ranked)
                cur = await conn.execute(
                    f"SELECT {_COLUMNS} FROM memora_memories WHERE {' AND '.join(where)} "
                    "AND id = ANY(%s)",
                    (*args, [i for i, _ in ranked]),
                )
                found = {r.id: r for r in map(record_from_row, await cur.fetchall())}
                hits = [ScoredMemory(found[i], scores[i]) for i, _ in ranked if i in found]
                if len(hits) >= limit or len(ranked) < k:
                    return hits[:limit]
                k *= 4

    async def _vector_rows(self, conn: AsyncConnection[Any], space: str) -> VectorRows:
        since, rows = self._vectors.get(space, ("0", None))
        if rows is None:
            rows = VectorRows()
        cur = await conn.execute("SELECT pg_snapshot_xmin(pg_current_snapshot())::text")
        row = await cur.fetchone()
        xmin = str(row[0]) if row else since
        # array_send: the array's binary form, 20 times faster to read than a list of floats
        cur = await conn.execute(
            "SELECT memory_id, array_send(vector) FROM memora_memory_vectors "
            "WHERE namespace=%s AND space=%s AND xid >= %s::xid8",
            (self.namespace, space, since),
            binary=True,
        )
        fetched = await cur.fetchall()
        found = packed_real_arrays(
            [memory_id for memory_id, _ in fetched], [blob for _, blob in fetched]
        )
        if len(rows) == 0:
            rows.load(found)
        else:
            for memory_id, packed in found:
                rows.put(memory_id, unpack(packed))
        self._vectors[space] = (xmin, rows)
        return rows

    async def pinned(
        self, *, scopes: Collection[str] | None = None, limit: int = 10
    ) -> builtins.list[MemoryRecord]:
        where, args = self._filters(None, False, None, scopes)
        async with await self._conn() as conn:
            cur = await conn.execute(
                # (meta ? 'pinned'): the predicate of the partial index memora_memories_pinned
                f"SELECT {_COLUMNS} FROM memora_memories WHERE (meta ? 'pinned') AND "
                f"{' AND '.join(where)} ORDER BY created_at DESC, id LIMIT %s",
                (*args, clamp_limit(limit)),
            )
            return [record_from_row(r) for r in await cur.fetchall()]

    async def count(self, *, scopes: Collection[str] | None = None) -> int:
        return await self._count(None, scopes)

    async def count_by_source(self, source: str, *, scopes: Collection[str] | None = None) -> int:
        return await self._count(source, scopes)

    async def _count(self, source: str | None, scopes: Collection[str] | None) -> int:
        where, args = self._filters(source, True, None, scopes)
        async with await self._conn() as conn:
            cur = await conn.execute(
                f"SELECT count(*) FROM memora_memories WHERE {' AND '.join(where)}", args
            )
            row = await cur.fetchone()
            return int(row[0]) if row else 0

    async def history(self, memory_id: str) -> builtins.list[MemoryRecord]:
        async with await self._conn() as conn:
            record = await self._require(conn, memory_id)
            chain = [record]
            seen = {record.id}
            cur_rec = record
            while True:  # predecessors
                cur = await conn.execute(
                    f"SELECT {_COLUMNS} FROM memora_memories WHERE namespace=%s "
                    "AND superseded_by=%s LIMIT 1",
                    (self.namespace, cur_rec.id),
                )
                row = await cur.fetchone()
                if row is None or row[0] in seen:
                    break
                cur_rec = record_from_row(row)
                chain.insert(0, cur_rec)
                seen.add(cur_rec.id)
            cur_rec = record
            while cur_rec.superseded_by and cur_rec.superseded_by not in seen:
                nxt = await self._get(conn, cur_rec.superseded_by)
                if nxt is None:
                    break
                chain.append(nxt)
                seen.add(nxt.id)
                cur_rec = nxt
            return chain

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self.db.close()


def _score(
    found: builtins.list[tuple[MemoryRecord, str, Counter[str], int]], query: str
) -> builtins.list[ScoredMemory]:
    if not found:
        return []
    avg = sum(f[3] for f in found) / len(found)
    return score_records(found, query, len(found), len(found), avg)


def packed_real_arrays(
    ids: builtins.list[str], blobs: builtins.list[bytes], *, use_numpy: bool | None = None
) -> builtins.list[tuple[str, bytes]]:
    """One-dimensional ``real[]`` values in PostgreSQL's binary form (``array_send``: a 20-byte
    header, then per element a 4-byte length and a big-endian float) as packed float32 — with
    numpy in one pass when it is installed (``use_numpy=None``), else with ``struct``."""
    if not blobs:
        return []
    np: Any = None
    if use_numpy is not False:
        with contextlib.suppress(ImportError):
            import numpy as np
    width = len(blobs[0])
    if np is not None and all(len(b) == width for b in blobs):
        matrix = np.frombuffer(b"".join(bytes(b) for b in blobs), dtype=">f4")
        floats = matrix.reshape(len(blobs), width // 4)[:, 5:][:, 1::2].astype("<f4")
        return [(i, row.tobytes()) for i, row in zip(ids, floats, strict=True)]
    out = []
    for memory_id, blob in zip(ids, blobs, strict=True):
        raw = bytes(blob)
        count = (len(raw) - 20) // 8
        out.append((memory_id, pack(struct.unpack_from(">" + "if" * count, raw, 20)[1::2])))
    return out
