"""The memory database file: its schema and migrations, its SQL, one connection.

:class:`SqliteFile` is synchronous and not thread-safe: :class:`~memora.memory.sqlite_store.
SqliteStorage` (the ``sqlite`` backend) owns one and runs it on its worker thread, or on the
event loop for a lone add (see there).  Schema migrations are functions recorded in
``_memora_migrations`` and applied on open; full-text search is FTS5 with BM25 ranking over
:func:`memora.memory.keywords.index_tokens` (English words + CJK bigrams), every query term
quoted as an FTS5 phrase so no user string can break or widen a query.
"""

from __future__ import annotations

import builtins
import json
import logging
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from ..errors import ErrorCode, MemoraError, NotAvailableError, StorageFullError
from ..security.state import check_state_path, ensure_state_dir, private_file
from .keywords import index_tokens, query_terms
from .local_disk import on_local_disk
from .storage import (
    ROW_LEN,
    record_from_row,
    record_to_row,
)
from .types import MemoryRecord, NewMemory, ScoredMemory, now
from .vectors import VectorRows, pack

__all__ = [
    "BUSY_TIMEOUT_MS",
    "SqliteFile",
    "build_match_query",
    "fts5_available",
    "pinned_query",
    "sqlite_error",
]

T = TypeVar("T")
logger = logging.getLogger("memora.memory")

BUSY_TIMEOUT_MS = 10_000
"""How long a write on the worker waits for another process's lock (SQLite's busy timeout)."""
_BUSY = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)

_COLUMNS = (
    "id, source, name, content, summary_type, created_at, updated_at, superseded_by, "
    "session_id, round_id, meta, scope"
)
_N = ROW_LEN  # the record's columns; a search row adds its rank after them
_PINNED = "json_extract(meta, '$.pinned') IS NOT NULL"
"""A pinned memory, as the partial index ``memories_pinned`` and its query both say it."""


def _script(db: sqlite3.Connection, script: str) -> None:
    """Run DDL statement by statement (``executescript`` would commit the open transaction)."""
    for statement in script.split(";"):
        if statement.strip():
            db.execute(statement)


def _m001_initial(db: sqlite3.Connection) -> None:
    _script(
        db,
        """
        CREATE TABLE memories (
            rowid INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            source TEXT NOT NULL,
            name TEXT NOT NULL DEFAULT '',
            content TEXT NOT NULL,
            summary_type TEXT,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            superseded_by TEXT,
            session_id TEXT,
            round_id TEXT,
            meta TEXT NOT NULL DEFAULT '{}'
        );
        CREATE INDEX memories_source ON memories(source, created_at);
        CREATE INDEX memories_created ON memories(created_at);
        CREATE INDEX memories_superseded_by ON memories(superseded_by);
        CREATE INDEX memories_round ON memories(round_id);
        CREATE VIRTUAL TABLE memories_fts USING fts5(
            tokens, tokenize = "unicode61 remove_diacritics 0 tokenchars '_'"
        );
        """,
    )


def _m002_vectors(db: sqlite3.Connection) -> None:
    # semantic recall (memora.memory.vectors): one float32 BLOB per memory and vector space
    _script(
        db,
        """
        CREATE TABLE memory_vectors (
            space TEXT NOT NULL,
            memory_rowid INTEGER NOT NULL,
            vector BLOB NOT NULL,
            PRIMARY KEY (space, memory_rowid)
        ) WITHOUT ROWID;
        CREATE INDEX memory_vectors_memory ON memory_vectors(memory_rowid);
        """,
    )


def _m003_scopes(db: sqlite3.Connection) -> None:
    # memory scopes (a user, tenant or agent): '' is the project's own, unscoped memory; the
    # index serves the scoped list and count (searches filter the FTS candidates by it)
    _script(
        db,
        """
        ALTER TABLE memories ADD COLUMN scope TEXT NOT NULL DEFAULT '';
        CREATE INDEX memories_scope ON memories(scope, created_at);
        """,
    )


def _m004_pins(db: sqlite3.Connection) -> None:
    # pinned memories (meta.pinned) listed by a partial index: a handful of rows, no scan
    db.execute(f"CREATE INDEX memories_pinned ON memories(created_at) WHERE {_PINNED}")


MIGRATIONS: tuple[tuple[str, Callable[[sqlite3.Connection], None]], ...] = (
    ("001_initial", _m001_initial),
    ("002_vectors", _m002_vectors),
    ("003_scopes", _m003_scopes),
    ("004_pins", _m004_pins),
)
"""Applied in order when a store opens; each is recorded in ``_memora_migrations``."""


def fts5_available() -> bool:
    db = sqlite3.connect(":memory:")
    try:
        db.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        db.close()


def build_match_query(query: str) -> str | None:
    """An FTS5 MATCH expression for ``query``: quoted phrases joined by OR, or ``None``."""
    parts = []
    for term in query_terms(query):
        phrase = " ".join(t.replace('"', '""') for t in term.tokens)
        parts.append(f'"{phrase}"*' if term.prefix else f'"{phrase}"')
    return " OR ".join(parts) if parts else None


class SqliteFile:
    """Synchronous SQLite work; only ever touched from the store's worker thread."""

    def __init__(self, path: Path, read_only: bool) -> None:
        if not fts5_available():
            raise NotAvailableError(
                "this Python's SQLite has no FTS5 full-text search; use the 'json' backend or a "
                "Python built with FTS5 (SQLite >= 3.9 with FTS5 enabled)",
                context={"sqlite_version": sqlite3.sqlite_version},
            )
        self.write_inline = False
        if read_only:
            if not path.exists():
                raise MemoraError(ErrorCode.NOT_FOUND, f"no memory database at {path}")
            # timeout: SQLite's busy timeout (a reader or writer waits up to 10 s for
            # another process's lock); the path is quoted, as a URI's must be ('#', '?', '%')
            self.db = sqlite3.connect(
                f"file:{quote(str(path))}?mode=ro", uri=True, timeout=10, isolation_level=None
            )
        else:
            ensure_state_dir(path.parent, path.parent.parent)
            check_state_path(path, path.parent)
            # SQLite creates a new database 0644, and its -wal and -shm files like the database:
            # made 0600 first, all three stay private
            private_file(path)
            # nofollow: SQLite itself refuses a database path that is a symbolic link
            # check_same_thread off: the store's lock (SqliteStorage) serialises this connection
            # between its worker and the event loop's inline adds
            self.db = sqlite3.connect(
                f"file:{quote(str(path))}?nofollow=1",
                uri=True,
                timeout=BUSY_TIMEOUT_MS / 1000,
                isolation_level=None,
                check_same_thread=False,
            )
            mode = self.db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            self.db.execute("PRAGMA synchronous=NORMAL")
            # a forgotten memory's text is overwritten in the pages that are rewritten anyway
            # (FAST: no extra I/O); scrub() takes care of the rest
            self.db.execute("PRAGMA secure_delete=FAST")
            # an add may be written on the event loop only where a commit waits for no disk: in
            # WAL mode (a file system without shared memory keeps the rollback journal, which
            # fsyncs at every commit) on a local file system (see memora.memory.local_disk)
            self.write_inline = str(mode).lower() == "wal" and on_local_disk(path.parent)
        if not read_only:
            self._migrate()
        elif not self._has_column("memories", "scope"):
            # a file no writer has opened since scopes came: read it as it is, every memory
            # the project's (a temporary view shadows the table on this connection only)
            self.db.execute("CREATE TEMP VIEW memories AS SELECT *, '' AS scope FROM main.memories")
        # a file read as an older memora left it may lack the index of pinned memories (and a
        # view, as above, has no indexes): its pins are then found by a scan, as they were
        self._pins_indexed = (
            self.db.execute(
                "SELECT 1 FROM main.sqlite_master WHERE type = 'index' AND name = 'memories_pinned'"
            ).fetchone()
            is not None
            and self.db.execute(
                "SELECT 1 FROM temp.sqlite_master WHERE name = 'memories'"
            ).fetchone()
            is None
        )
        # vectors per space, loaded on the first vector search; kept up to date by this
        # connection's writes and reloaded when another connection committed (data_version)
        self._vectors: dict[str, tuple[int, VectorRows]] = {}
        # per space: (data_version, rowid) — every memory up to rowid has a vector
        self._vectors_done: dict[str, tuple[int, int]] = {}

    def _has_column(self, table: str, column: str) -> bool:
        return any(r[1] == column for r in self.db.execute(f"PRAGMA table_info({table})"))

    def _migrate(self) -> None:
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute(
                "CREATE TABLE IF NOT EXISTS _memora_migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)"
            )
            done = {r[0] for r in db.execute("SELECT name FROM _memora_migrations")}
            for name, fn in MIGRATIONS:
                if name not in done:
                    fn(db)
                    db.execute("INSERT INTO _memora_migrations VALUES (?, ?)", (name, now()))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _tx(self, fn: Callable[[], T]) -> T:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            result = fn()
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")
        return result

    def _insert(self, record: MemoryRecord) -> None:
        cur = self.db.execute(
            f"INSERT INTO memories ({_COLUMNS}) VALUES ({', '.join('?' * _N)})",
            record_to_row(record),
        )
        # OR REPLACE: an index row a hand edit left behind (a memory deleted with the sqlite3
        # shell) would otherwise refuse this row number for every later memory
        self.db.execute(
            "INSERT OR REPLACE INTO memories_fts(rowid, tokens) VALUES (?, ?)",
            (cur.lastrowid, " ".join(index_tokens(f"{record.name}\n{record.content}"))),
        )

    def get(self, memory_id: str) -> MemoryRecord | None:
        row = self.db.execute(
            f"SELECT {_COLUMNS} FROM memories WHERE id = ?", (memory_id,)
        ).fetchone()
        return record_from_row(row) if row else None

    def _add_one(self, item: NewMemory) -> tuple[MemoryRecord]:
        existing = self.get(item.id) if item.id else None
        if existing is not None:
            return (existing,)
        record = MemoryRecord.from_new(item)
        self._insert(record)
        return (record,)

    def add_now(self, item: NewMemory) -> MemoryRecord | sqlite3.Error | None:
        """``add`` in its own transaction, waiting for nothing: ``None`` (nothing written) when
        another connection holds the write lock.  Without SQLite's automatic checkpoint, which
        would ``fsync`` here (:meth:`checkpoint` runs it on the worker)."""
        db = self.db
        db.execute("PRAGMA busy_timeout=0")
        db.execute("PRAGMA wal_autocheckpoint=0")
        try:
            try:
                db.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode & 0xFF in _BUSY:
                    return None
                return exc
            try:
                (record,) = self._add_one(item)
                db.execute("COMMIT")
            except sqlite3.Error as exc:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                busy = isinstance(exc, sqlite3.OperationalError) and (
                    exc.sqlite_errorcode & 0xFF in _BUSY
                )
                return None if busy else exc
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            return record
        finally:
            db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            db.execute("PRAGMA wal_autocheckpoint=1000")

    def checkpoint(self) -> None:
        """Copy the write-ahead log into the database as far as no reader holds it back (what
        SQLite's automatic checkpoint does; it ``fsync``s)."""
        self.db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def scrub(self) -> None:
        """After text was forgotten: the search index's segments merged (an updated row's old
        terms stay in them until a merge) and the write-ahead log copied in and cut to nothing
        (its older page images hold the old text).  Costs a rewrite of the index, so it runs
        only for ``forget --everywhere``."""
        self.db.execute("INSERT INTO memories_fts(memories_fts) VALUES ('optimize')")
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

    def add_many(self, items: Sequence[NewMemory]) -> builtins.list[MemoryRecord]:
        return self._tx(lambda: [r for item in items for r in self._add_one(item)])

    def add_each(self, items: Sequence[NewMemory]) -> builtins.list[MemoryRecord | sqlite3.Error]:
        """``add`` for each of ``items`` in one transaction (one commit: a group commit); with
        several, each under a savepoint of its own, so one that fails is rolled back alone and
        answered with its error while the others are written."""
        if len(items) == 1:  # a lone add: its own transaction is its isolation
            try:
                return [*self.add_many(items)]
            except sqlite3.Error as exc:
                return [exc]

        def work() -> builtins.list[MemoryRecord | sqlite3.Error]:
            out: builtins.list[MemoryRecord | sqlite3.Error] = []
            for item in items:
                self.db.execute("SAVEPOINT one")
                try:
                    out.extend(self._add_one(item))
                except sqlite3.Error as exc:
                    self.db.execute("ROLLBACK TO one")
                    out.append(exc)
                self.db.execute("RELEASE one")
            return out

        return self._tx(work)

    def _require(self, memory_id: str) -> tuple[int, MemoryRecord]:
        row = self.db.execute(
            f"SELECT rowid, {_COLUMNS} FROM memories WHERE id = ?", (memory_id,)
        ).fetchone()
        if row is None:
            raise MemoraError(
                ErrorCode.NOT_FOUND, f"no memory with id {memory_id!r}", context={"id": memory_id}
            )
        return row[0], record_from_row(row[1:])

    def update(self, memory_id: str, changes: dict[str, Any]) -> MemoryRecord:
        def work() -> MemoryRecord:
            rowid, record = self._require(memory_id)
            updated = record.with_changes(**changes)
            self.db.execute(
                "UPDATE memories SET name=?, content=?, summary_type=?, updated_at=?, meta=?, superseded_by=? WHERE rowid=?",
                (
                    updated.name,
                    updated.content,
                    updated.summary_type,
                    updated.updated_at,
                    json.dumps(updated.meta, ensure_ascii=False),
                    updated.superseded_by,
                    rowid,
                ),
            )
            if "content" in changes or "name" in changes:
                self.db.execute(
                    "UPDATE memories_fts SET tokens=? WHERE rowid=?",
                    (" ".join(index_tokens(f"{updated.name}\n{updated.content}")), rowid),
                )
                self._forget_vectors(rowid, memory_id)  # re-embedded from the new text
            return updated

        return self._tx(work)

    def delete(self, memory_id: str) -> bool:
        def work() -> bool:
            row = self.db.execute(
                "SELECT rowid FROM memories WHERE id = ?", (memory_id,)
            ).fetchone()
            if row is None:
                return False
            self.db.execute("DELETE FROM memories WHERE rowid = ?", (row[0],))
            self.db.execute("DELETE FROM memories_fts WHERE rowid = ?", (row[0],))
            self._forget_vectors(row[0], memory_id)
            return True

        return self._tx(work)

    def supersede(self, old_id: str, new: NewMemory) -> MemoryRecord:
        def work() -> MemoryRecord:
            rowid, _old = self._require(old_id)
            record = MemoryRecord.from_new(new)
            self._insert(record)
            self.db.execute(
                "UPDATE memories SET superseded_by=?, updated_at=? WHERE rowid=?",
                (record.id, now(), rowid),
            )
            return record

        return self._tx(work)

    def list(
        self,
        source: str | None,
        limit: int,
        offset: int,
        include_superseded: bool,
        scopes: builtins.list[str] | None,
    ) -> builtins.list[MemoryRecord]:
        where, args = self._filters(source, include_superseded, None, scopes, prefix="")
        sql = f"SELECT {_COLUMNS} FROM memories"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at DESC, id LIMIT ? OFFSET ?"
        return [record_from_row(r) for r in self.db.execute(sql, (*args, limit, max(0, offset)))]

    def search(
        self,
        match: str,
        source: str | None,
        limit: int,
        include_superseded: bool,
        round_ids: builtins.list[str] | None,
        scopes: builtins.list[str] | None,
    ) -> builtins.list[ScoredMemory]:
        """Top-k first: rank on the FTS table alone (FTS5 keeps only the best k while sorting),
        then fetch and filter those rows; fall back to the full join when filters discard too
        many candidates."""
        k = max(limit * 4, 40)
        where, args = self._filters(source, include_superseded, round_ids, scopes, prefix="m.")
        cols = ", ".join(f"m.{c.strip()}" for c in _COLUMNS.split(","))
        sql = (
            "WITH top AS MATERIALIZED (SELECT rowid, rank FROM memories_fts WHERE memories_fts MATCH ? "
            f"ORDER BY rank LIMIT ?) SELECT {cols}, top.rank, (SELECT count(*) FROM top) "
            "FROM top JOIN memories m ON m.rowid = top.rowid"
            + (" WHERE " + " AND ".join(where) if where else "")
            + " ORDER BY top.rank LIMIT ?"
        )
        rows = self.db.execute(sql, (match, k, *args, limit)).fetchall()
        if len(rows) >= limit or not rows or rows[0][_N + 1] < k:
            if not rows and where:
                # every top candidate was filtered out: ask again without the shortcut
                return self._search_join(match, limit, where, args)
            return [ScoredMemory(record_from_row(r[:_N]), -float(r[_N])) for r in rows]
        return self._search_join(match, limit, where, args)

    @staticmethod
    def _filters(
        source: str | None,
        include_superseded: bool,
        round_ids: builtins.list[str] | None,
        scopes: builtins.list[str] | None,
        *,
        prefix: str,
    ) -> tuple[builtins.list[str], builtins.list[Any]]:
        where: builtins.list[str] = []
        args: builtins.list[Any] = []
        if not include_superseded:
            where.append(f"{prefix}superseded_by IS NULL")
        if source is not None:
            where.append(f"{prefix}source = ?")
            args.append(source)
        if round_ids is not None:
            where.append(f"{prefix}round_id IN (SELECT value FROM json_each(?))")
            args.append(json.dumps(round_ids))
        if scopes is not None:
            # in the query itself: a limit counts only what this reader may see
            if scopes:
                where.append(f"{prefix}scope IN ({', '.join('?' * len(scopes))})")
                args.extend(scopes)
            else:
                where.append("0")
        return where, args

    def _search_join(
        self, match: str, limit: int, where: builtins.list[str], args: builtins.list[Any]
    ) -> builtins.list[ScoredMemory]:
        cols = ", ".join(f"m.{c.strip()}" for c in _COLUMNS.split(","))
        sql = (
            f"SELECT {cols}, bm25(memories_fts) AS score FROM memories_fts "
            "JOIN memories m ON m.rowid = memories_fts.rowid WHERE memories_fts MATCH ?"
        )
        for clause in where:
            sql += " AND " + clause
        sql += " ORDER BY score LIMIT ?"
        return [
            ScoredMemory(record_from_row(r[:_N]), -float(r[_N]))
            for r in self.db.execute(sql, (match, *args, limit))
        ]

    def pinned(self, scopes: builtins.list[str] | None, limit: int) -> builtins.list[MemoryRecord]:
        sql, args = pinned_query(scopes, limit, indexed=self._pins_indexed)
        return [record_from_row(r) for r in self.db.execute(sql, args)]

    def count(self, source: str | None, scopes: builtins.list[str] | None) -> int:
        where, args = self._filters(source, True, None, scopes, prefix="")
        sql = "SELECT count(*) FROM memories" + (" WHERE " + " AND ".join(where) if where else "")
        return int(self.db.execute(sql, args).fetchone()[0])

    def history(self, memory_id: str) -> builtins.list[MemoryRecord]:
        _, record = self._require(memory_id)
        chain, seen = [record], {record.id}
        cur = record
        while True:
            row = self.db.execute(
                f"SELECT {_COLUMNS} FROM memories WHERE superseded_by = ?", (cur.id,)
            ).fetchone()
            if row is None or row[0] in seen:
                break
            cur = record_from_row(row)
            chain.insert(0, cur)
            seen.add(cur.id)
        cur = record
        while cur.superseded_by and cur.superseded_by not in seen:
            nxt = self.get(cur.superseded_by)
            if nxt is None:
                break
            chain.append(nxt)
            seen.add(nxt.id)
            cur = nxt
        return chain

    # -- vectors (memora.memory.vectors) -------------------------------------------------------

    def _data_version(self) -> int:
        return int(self.db.execute("PRAGMA data_version").fetchone()[0])

    def _has_vector_table(self) -> bool:
        return (
            self.db.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'memory_vectors'"
            ).fetchone()
            is not None
        )

    def _forget_vectors(self, rowid: int, memory_id: str) -> None:
        self.db.execute("DELETE FROM memory_vectors WHERE memory_rowid = ?", (rowid,))
        for _, rows in self._vectors.values():
            rows.drop(memory_id)
        for space, (version, done) in list(self._vectors_done.items()):
            if rowid <= done:
                self._vectors_done[space] = (version, rowid - 1)

    def put_vectors(self, space: str, vectors: builtins.list[tuple[str, Any]]) -> None:
        def work() -> builtins.list[tuple[str, Any]]:
            stored = []
            for memory_id, vector in vectors:
                row = self.db.execute(
                    "SELECT rowid FROM memories WHERE id = ?", (memory_id,)
                ).fetchone()
                if row is None:
                    continue  # deleted meanwhile
                self.db.execute(
                    "INSERT OR REPLACE INTO memory_vectors (space, memory_rowid, vector) "
                    "VALUES (?, ?, ?)",
                    (space, row[0], pack(vector)),
                )
                stored.append((memory_id, vector))
            return stored

        stored = self._tx(work)
        cached = self._vectors.get(space)
        if cached is not None:
            for memory_id, vector in stored:
                cached[1].put(memory_id, vector)

    def missing_vectors(self, space: str, limit: int) -> builtins.list[MemoryRecord]:
        if not self._has_vector_table():
            return []
        version = self._data_version()
        seen_version, done = self._vectors_done.get(space, (version, 0))
        if seen_version != version:
            done = 0  # another process wrote: look at everything again
        cols = ", ".join(f"m.{c.strip()}" for c in _COLUMNS.split(","))
        rows = self.db.execute(
            f"SELECT m.rowid, {cols} FROM memories m WHERE m.rowid > ? AND NOT EXISTS "
            "(SELECT 1 FROM memory_vectors v WHERE v.space = ? AND v.memory_rowid = m.rowid) "
            "ORDER BY m.rowid LIMIT ?",
            (done, space, limit),
        ).fetchall()
        if not rows:
            top = self.db.execute("SELECT max(rowid) FROM memories").fetchone()[0] or 0
            self._vectors_done[space] = (version, int(top))
        else:
            self._vectors_done[space] = (version, int(rows[0][0]) - 1)
        return [record_from_row(r[1:]) for r in rows]

    def _vector_rows(self, space: str) -> VectorRows:
        version = self._data_version()
        cached = self._vectors.get(space)
        if cached is not None and cached[0] == version:
            return cached[1]
        rows = VectorRows()
        rows.load(
            self.db.execute(
                "SELECT m.id, v.vector FROM memory_vectors v JOIN memories m "
                "ON m.rowid = v.memory_rowid WHERE v.space = ? ORDER BY v.memory_rowid",
                (space,),
            ).fetchall()
        )
        self._vectors[space] = (version, rows)
        return rows

    def search_vector(
        self,
        space: str,
        vector: builtins.list[float],
        source: str | None,
        limit: int,
        include_superseded: bool,
        round_ids: builtins.list[str] | None,
        scopes: builtins.list[str] | None,
    ) -> builtins.list[ScoredMemory]:
        if limit <= 0 or not self._has_vector_table():
            return []
        rows = self._vector_rows(space)
        where, args = self._filters(source, include_superseded, round_ids, scopes, prefix="m.")
        cols = ", ".join(f"m.{c.strip()}" for c in _COLUMNS.split(","))
        # CROSS JOIN: the candidates drive the lookup by id (a plain IN lets the planner walk
        # the superseded_by index over every memory instead)
        sql = f"SELECT {cols} FROM json_each(?) AS j CROSS JOIN memories m ON m.id = j.value"
        sql += (" WHERE " + " AND ".join(where)) if where else ""
        k = max(limit * 4, 40)
        while True:
            ranked = rows.ranked(vector, k)
            scores = dict(ranked)
            found = {
                r[0]: record_from_row(r)
                for r in self.db.execute(sql, (json.dumps([i for i, _ in ranked]), *args))
            }
            hits = [ScoredMemory(found[i], scores[i]) for i, _ in ranked if i in found]
            if len(hits) >= limit or len(ranked) < k:
                return hits[:limit]
            k *= 4

    def integrity_check(self) -> str:
        return str(self.db.execute("PRAGMA integrity_check").fetchone()[0])

    def close(self) -> None:
        self.db.close()


def pinned_query(
    scopes: builtins.list[str] | None, limit: int, *, indexed: bool = True
) -> tuple[str, builtins.list[Any]]:
    """The SQL (and its arguments) that lists the current pinned memories of ``scopes`` (scope
    keys; None: all), newest first.  ``indexed`` (a file with the index ``memories_pinned``):
    read through that partial index (``INDEXED BY``) — left to itself the planner walks the
    scope's, or every current, memory and tests each one's meta, a cost that grew with the
    store and was paid on every turn's prompt; the index holds only the pinned few."""
    where, args = SqliteFile._filters(None, False, None, scopes, prefix="")
    source = "memories INDEXED BY memories_pinned" if indexed else "memories"
    sql = (
        f"SELECT {_COLUMNS} FROM {source} WHERE {_PINNED} AND {' AND '.join(where)} "
        "ORDER BY created_at DESC, id LIMIT ?"
    )
    return sql, [*args, limit]


def sqlite_error(exc: sqlite3.Error, path: Path) -> MemoraError:
    """A SQLite failure on the database at ``path`` as a host's error: ``STORAGE_FULL`` when
    the disk (or SQLite's own page limit) is full — the transaction was rolled back, nothing
    of it is stored, and a write once space is back works — else ``STORAGE_ERROR``."""
    context = {"path": str(path), "sqlite_error": getattr(exc, "sqlite_errorname", None)}
    if getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_FULL:
        return StorageFullError(
            f"the disk holding the memory database {path} is full ({exc}); nothing of this "
            "write was kept: free some space and the next one is written",
            context=context,
        )
    return MemoraError(ErrorCode.STORAGE_ERROR, f"SQLite error on {path}: {exc}", context=context)
