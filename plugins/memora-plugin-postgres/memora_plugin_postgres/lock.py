"""The project lock in PostgreSQL: a session-level advisory lock on a dedicated connection.

The server releases a session-level advisory lock when the connection that holds it ends, so a
host that crashes, or is killed with SIGKILL, releases its lock as soon as the server notices
the connection is gone; nobody has to clean up.  A row in ``memora_locks`` names the holder for
the error message (it is overwritten by the next holder, never trusted for exclusion).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from psycopg import AsyncConnection

from memora.errors import ErrorCode, MemoraError

from .database import Database, dsn_from, namespace_from

__all__ = ["PostgresProjectLock"]


class PostgresProjectLock:
    """The ``postgres`` project lock (``acquire``/``release`` are async)."""

    def __init__(
        self, dsn: str, namespace: str, *, connect_timeout: float = 10.0, shared: bool = False
    ) -> None:
        self.dsn = dsn
        self.namespace = namespace
        self.shared = shared
        """Held shared by a service's workers (on any host); an exclusive holder excludes them."""
        self.connect_timeout = connect_timeout
        self._conn: AsyncConnection[Any] | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> PostgresProjectLock:
        return cls(
            dsn_from(options),
            namespace_from(options, "project"),
            connect_timeout=float(options.get("connect_timeout", 10.0)),
            shared=bool(options.get("shared", False)),
        )

    @property
    def held(self) -> bool:
        return self._conn is not None

    async def acquire(self) -> None:
        if self._conn is not None:
            return
        # migrations (and so the memora_locks table) come with a store's first connection
        db = Database(self.dsn, max_size=1, connect_timeout=self.connect_timeout)
        await db.pool()
        await db.close()
        conn = await AsyncConnection.connect(
            self.dsn, autocommit=True, connect_timeout=int(self.connect_timeout)
        )
        try:
            how = "pg_try_advisory_lock_shared" if self.shared else "pg_try_advisory_lock"
            cur = await conn.execute(
                f"SELECT {how}(hashtextextended('memora-project:' || %s, 0))",
                (self.namespace,),
            )
            row = await cur.fetchone()
            if not row or not row[0]:
                holder = await self.holder(conn)
                raise MemoraError(
                    ErrorCode.PROJECT_LOCKED,
                    f"project {self.namespace} is locked by PID {holder.get('pid', '?')} on "
                    f"{holder.get('host', '?')} since {_when(holder.get('since'))} (PostgreSQL "
                    "advisory lock); close that Agent first (one Agent per project at a time)",
                    context={"namespace": self.namespace, **holder},
                )
            await conn.execute(
                "INSERT INTO memora_locks (namespace, pid, host, since, backend_pid) "
                "VALUES (%s, %s, %s, %s, pg_backend_pid()) ON CONFLICT (namespace) DO UPDATE SET "
                "pid=EXCLUDED.pid, host=EXCLUDED.host, since=EXCLUDED.since, "
                "backend_pid=EXCLUDED.backend_pid",
                (self.namespace, os.getpid(), socket.gethostname(), time.time()),
            )
        except BaseException:
            await conn.close()
            raise
        self._conn = conn

    async def holder(self, conn: AsyncConnection[Any] | None = None) -> dict[str, Any]:
        """Who holds (or last held) the lock."""
        own = conn is None
        conn = conn or await AsyncConnection.connect(self.dsn, autocommit=True)
        try:
            cur = await conn.execute(
                "SELECT pid, host, since FROM memora_locks WHERE namespace=%s", (self.namespace,)
            )
            row = await cur.fetchone()
        finally:
            if own:
                await conn.close()
        return {"pid": row[0], "host": row[1], "since": row[2]} if row else {}

    async def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            how = "pg_advisory_unlock_shared" if self.shared else "pg_advisory_unlock"
            await conn.execute(
                f"SELECT {how}(hashtextextended('memora-project:' || %s, 0))",
                (self.namespace,),
            )
        finally:
            await conn.close()  # ending the session releases the lock in any case


def _when(since: Any) -> str:
    if isinstance(since, (int, float)):
        return datetime.fromtimestamp(float(since), UTC).isoformat(timespec="seconds")
    return "an unknown time"
