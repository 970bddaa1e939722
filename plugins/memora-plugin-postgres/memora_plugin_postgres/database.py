"""The connection pool of one store, and the schema migrations every store runs once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from psycopg import AsyncConnection, errors
from psycopg_pool import AsyncConnectionPool

from memora.errors import ErrorCode, MemoraError, StorageError, StorageFullError

__all__ = ["Database", "dsn_from", "namespace_from", "server_disk_error"]

logger = logging.getLogger("memora.plugins.postgres")

_PASSWORD_IN_DSN = re.compile(r"(?i)(?:\bpassword\s*=|://[^/@:]*:[^/@]*@)")


def dsn_from(options: Mapping[str, Any]) -> str:
    """The DSN: ``options["dsn"]`` (no password in it: the config file is not for secrets),
    else ``MEMORA_POSTGRES_DSN``.  Passwords come from ``MEMORA_POSTGRES_DSN``, ``PGPASSWORD``
    or ``~/.pgpass``."""
    dsn = options.get("dsn")
    if dsn:
        if not isinstance(dsn, str):
            raise MemoraError(ErrorCode.INVALID_CONFIG, "plugins.postgres.dsn must be a string")
        if _PASSWORD_IN_DSN.search(dsn):
            raise MemoraError(
                ErrorCode.INVALID_CONFIG,
                "plugins.postgres.dsn holds a password; put it in MEMORA_POSTGRES_DSN, PGPASSWORD "
                "or ~/.pgpass instead (config files are not for secrets)",
            )
        return dsn
    env = os.environ.get("MEMORA_POSTGRES_DSN", "").strip()
    if not env:
        raise MemoraError(
            ErrorCode.INVALID_CONFIG,
            "no PostgreSQL DSN: set MEMORA_POSTGRES_DSN (or plugins.postgres.dsn without a "
            "password), e.g. 'host=db.internal dbname=memora user=memora'",
        )
    return env


def namespace_from(options: Mapping[str, Any], key: str) -> str:
    """Whose data: ``options["namespace"]``, else the absolute ``options[key]`` path.  Hosts on
    several machines serving one project set the same ``namespace``."""
    namespace = options.get("namespace")
    if namespace:
        return str(namespace)
    if key not in options:
        raise MemoraError(
            ErrorCode.INVALID_CONFIG, f"the postgres plugin needs option 'namespace' or '{key}'"
        )
    return str(Path(options[key]).resolve())


Migration = Callable[[AsyncConnection[Any]], Awaitable[None]]


async def _m1_tables(conn: AsyncConnection[Any]) -> None:
    await conn.execute(
        """
        CREATE TABLE memora_memories (
            namespace text NOT NULL,
            id text NOT NULL,
            source text NOT NULL,
            name text NOT NULL DEFAULT '',
            content text NOT NULL,
            summary_type text,
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL,
            superseded_by text,
            session_id text,
            round_id text,
            meta jsonb NOT NULL DEFAULT '{}',
            lexemes tsvector NOT NULL,
            PRIMARY KEY (namespace, id)
        )
        """
    )
    await conn.execute(
        # fastupdate off: a search never scans a pending list of recent inserts linearly
        "CREATE INDEX memora_memories_lexemes ON memora_memories USING gin (lexemes) "
        "WITH (fastupdate = off)"
    )
    await conn.execute(
        "CREATE INDEX memora_memories_recent ON memora_memories (namespace, created_at DESC, id)"
    )
    await conn.execute(
        # partial: only superseded rows; a planner with stale statistics must not pick it for
        # "superseded_by IS NULL" over the GIN index (seen: 55 ms instead of 0.5 ms)
        "CREATE INDEX memora_memories_successor ON memora_memories (namespace, superseded_by) "
        "WHERE superseded_by IS NOT NULL"
    )
    await conn.execute(
        """
        CREATE TABLE memora_sessions (
            namespace text NOT NULL,
            id text NOT NULL,
            title text NOT NULL DEFAULT '',
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL,
            parent_id text,
            fork_round_id text,
            archived boolean NOT NULL DEFAULT false,
            PRIMARY KEY (namespace, id)
        )
        """
    )
    await conn.execute(
        """
        CREATE TABLE memora_session_lines (
            namespace text NOT NULL,
            session_id text NOT NULL,
            seq bigserial,
            kind text NOT NULL,
            body jsonb NOT NULL,
            PRIMARY KEY (namespace, session_id, seq)
        )
        """
    )
    await conn.execute(
        """
        CREATE TABLE memora_locks (
            namespace text PRIMARY KEY,
            pid integer NOT NULL,
            host text NOT NULL,
            since double precision NOT NULL,
            backend_pid integer NOT NULL
        )
        """
    )


async def _m2_vectors(conn: AsyncConnection[Any]) -> None:
    # semantic recall (memora.memory.vectors): one unit vector per memory and vector space
    await conn.execute(
        """
        CREATE TABLE memora_memory_vectors (
            namespace text NOT NULL,
            space text NOT NULL,
            memory_id text NOT NULL,
            vector real[] NOT NULL,
            -- the writing transaction: a process keeps the vectors in memory and reads only
            -- the rows written since its last read (xid >= the oldest then in flight)
            xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
            PRIMARY KEY (namespace, space, memory_id),
            FOREIGN KEY (namespace, memory_id) REFERENCES memora_memories (namespace, id)
                ON DELETE CASCADE
        )
        """
    )
    await conn.execute(
        "CREATE INDEX memora_memory_vectors_memory ON memora_memory_vectors (namespace, memory_id)"
    )
    await conn.execute(
        "CREATE INDEX memora_memory_vectors_recent ON memora_memory_vectors (namespace, space, xid)"
    )


async def _m3_scopes(conn: AsyncConnection[Any]) -> None:
    # memory scopes (a user, tenant or agent): '' is the project's own, unscoped memory; a
    # session belongs to a scope too
    await conn.execute("ALTER TABLE memora_memories ADD COLUMN scope text NOT NULL DEFAULT ''")
    await conn.execute(
        "CREATE INDEX memora_memories_scope ON memora_memories (namespace, scope, created_at DESC)"
    )
    await conn.execute("ALTER TABLE memora_sessions ADD COLUMN scope text NOT NULL DEFAULT ''")


async def _m4_pins(conn: AsyncConnection[Any]) -> None:
    # pinned memories (meta.pinned) listed by a partial index: a handful of rows, no scan
    await conn.execute(
        "CREATE INDEX memora_memories_pinned ON memora_memories (namespace, created_at DESC) "
        "WHERE (meta ? 'pinned')"
    )


MIGRATIONS: list[tuple[str, Migration]] = [
    ("0001_tables", _m1_tables),
    ("0002_vectors", _m2_vectors),
    ("0003_scopes", _m3_scopes),
    ("0004_pins", _m4_pins),
]
"""Applied in order, each once, recorded in ``memora_migrations``; new ones are appended."""


class Database:
    """An async pool, opened on first use (in the event loop that uses it); migrations run
    then, under a transaction-level advisory lock, so several hosts starting together do not
    race."""

    def __init__(self, dsn: str, *, max_size: int = 5, connect_timeout: float = 10.0) -> None:
        self.dsn = dsn
        self.max_size = max_size
        self.connect_timeout = connect_timeout
        self._pool: AsyncConnectionPool[AsyncConnection[Any]] | None = None
        self._ready = asyncio.Lock()

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> Database:
        return cls(
            dsn_from(options),
            max_size=int(options.get("pool_size", 5)),
            connect_timeout=float(options.get("connect_timeout", 10.0)),
        )

    async def pool(self) -> AsyncConnectionPool[AsyncConnection[Any]]:
        if self._pool is not None:
            return self._pool
        async with self._ready:
            if self._pool is None:
                pool: AsyncConnectionPool[AsyncConnection[Any]] = AsyncConnectionPool(
                    self.dsn,
                    min_size=1,
                    max_size=self.max_size,
                    open=False,
                    kwargs={"autocommit": True},
                    timeout=self.connect_timeout,
                )
                try:
                    await pool.open(wait=True, timeout=self.connect_timeout)
                    await self._migrate(pool)
                except Exception as exc:
                    await pool.close()
                    raise MemoraError(
                        ErrorCode.STORAGE_ERROR,
                        f"cannot use PostgreSQL at {_safe(self.dsn)}: {type(exc).__name__}: {exc}",
                    ) from exc
                self._pool = pool
        return self._pool

    @staticmethod
    async def _migrate(pool: AsyncConnectionPool[AsyncConnection[Any]]) -> None:
        async with pool.connection() as conn, conn.transaction():
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended('memora-migrations', 0))"
            )
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS memora_migrations ("
                "name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            cur = await conn.execute("SELECT name FROM memora_migrations")
            done = {row[0] for row in await cur.fetchall()}
            for name, migration in MIGRATIONS:
                if name not in done:
                    logger.info("applying migration %s", name)
                    await migration(conn)
                    await conn.execute("INSERT INTO memora_migrations (name) VALUES (%s)", (name,))

    async def connection(self) -> AbstractAsyncContextManager[AsyncConnection[Any]]:
        """A connection from the pool (``async with await db.connection() as conn``); a
        statement that failed on the server's disk comes out as memora's error for it
        (:func:`server_disk_error`), after the connection went back to the pool."""
        return _disk_errors_mapped((await self.pool()).connection())

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()


def _safe(dsn: str) -> str:
    """The DSN for messages: without a password (should one have come from the environment)."""
    return re.sub(
        r"(?i)(password\s*=\s*)\S+", r"\1***", re.sub(r"(://[^/@:]*:)[^/@]*@", r"\1***@", dsn)
    )


def server_disk_error(exc: Exception) -> MemoraError | None:
    """``exc`` as memora's error when it is the server's disk failing: ``STORAGE_FULL`` for
    SQLSTATE 53100 (``disk_full``: the statement and its transaction were rolled back, nothing
    of them is stored), ``STORAGE_ERROR`` for 58030 (``io_error``); ``None`` for the rest."""
    context = {"sqlstate": getattr(exc, "sqlstate", None)}
    if isinstance(exc, errors.DiskFull):
        return StorageFullError(
            "the PostgreSQL server's disk is full (SQLSTATE 53100); nothing of this write was "
            "kept: free space on the database server and the next one is written",
            context=context,
        )
    if isinstance(exc, errors.IoError):
        return StorageError(
            "the PostgreSQL server could not read or write its disk (SQLSTATE 58030); nothing "
            "of this write was kept",
            context=context,
        )
    return None


@contextlib.asynccontextmanager
async def _disk_errors_mapped(
    connecting: AbstractAsyncContextManager[AsyncConnection[Any]],
) -> AsyncIterator[AsyncConnection[Any]]:
    try:
        async with connecting as conn:
            yield conn
    except (errors.DiskFull, errors.IoError) as exc:
        mapped = server_disk_error(exc)
        assert mapped is not None
        raise mapped from exc
