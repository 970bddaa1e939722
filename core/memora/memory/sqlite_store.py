"""The ``sqlite`` backend — the embedded default, on the standard library's ``sqlite3``.

* WAL journal, ``synchronous=NORMAL`` (a committed write survives a killed process), a busy
  timeout so two processes can share the file;
* the file itself — schema, migrations, SQL, the connection — is :mod:`.sqlite_file`'s
  :class:`~memora.memory.sqlite_file.SqliteFile`; this module runs it off the event loop;
* schema migrations are functions recorded in ``_memora_migrations`` and applied on open;
* full-text search with FTS5 and BM25 ranking.  Text is pre-tokenised by
  :func:`memora.memory.keywords.index_tokens` (English words + CJK bigrams) into a ``unicode61``
  index, so two-character Chinese words such as 记忆 or 大纲 match exactly; every query term is
  quoted as an FTS5 phrase built from the same tokens, so no user string can break or widen a
  query;
* SQLite work runs on one worker thread per store — with one exception: a lone ``add`` on a
  local disk, when the worker is idle, is written on the event loop (see :meth:`SqliteStorage.add`:
  in WAL mode with ``synchronous=NORMAL`` a commit is page-cache work, no ``fsync``; the write is
  tried without waiting for another process's lock, and checkpoints, which do ``fsync``, run on
  the worker);
* ``read_only=True`` opens the file read-only and returns a view without write methods;
* a Python whose SQLite lacks FTS5 gets a clear ``NOT_AVAILABLE`` error.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import sqlite3
import threading
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from ..errors import ErrorCode, MemoraError
from .sqlite_file import (
    SqliteFile,
    build_match_query,
    fts5_available,
    pinned_query,
    sqlite_error,
)
from .storage import (
    ReadOnlyView,
    check_new,
    clamp_limit,
    scope_keys,
    update_changes,
)
from .types import MemoryRecord, NewMemory, ScoredMemory, check_source

__all__ = [
    "SqliteStorage",
    "build_match_query",
    "fts5_available",
    "open_sqlite_storage",
    "pinned_query",
    "sqlite_error",
]

T = TypeVar("T")
logger = logging.getLogger("memora.memory")

CHECKPOINT_EVERY = 64
"""Adds written on the event loop between two checkpoints on the worker (each add leaves a few
pages in the write-ahead log; SQLite's own checkpoint, at 1,000 pages, would ``fsync`` on the
committing thread, so it is off for those commits)."""


class SqliteStorage:
    """SQLite memory storage.  Create with :func:`open_sqlite_storage` (or ``SqliteStorage(path)``
    from synchronous code)."""

    def __init__(
        self, path: str | Path, *, read_only: bool = False, write_inline: bool = True
    ) -> None:
        self.path = Path(path)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memora-sqlite")
        self._closed = False
        self._core: SqliteFile = self._executor.submit(SqliteFile, self.path, read_only).result()
        self._pending: builtins.list[tuple[NewMemory, asyncio.Future[MemoryRecord]]] = []
        """Adds waiting for the batch being written (see :meth:`add`)."""
        self._batch: asyncio.Future[Any] | None = None
        self._lock = threading.Lock()
        """Held by whoever uses the connection: the worker's jobs, an add on the event loop."""
        self.write_inline = write_inline and self._core.write_inline
        """Whether a lone add may be written on the event loop (:meth:`add`): asked for (the
        ``sqlite`` plugin's ``write_inline`` option), in WAL mode and on a local disk."""
        self._inline_writes = 0

    def _locked(self, fn: Callable[..., T], *args: Any) -> T:
        with self._lock:
            return fn(*args)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        if self._closed:
            raise MemoraError(ErrorCode.STORAGE_ERROR, f"the memory storage {self.path} is closed")
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, self._locked, fn, *args)
        except sqlite3.Error as exc:
            raise sqlite_error(exc, self.path) from exc

    async def add(self, item: NewMemory) -> MemoryRecord:
        """Write one memory; it has been committed when this returns.

        A lone add — the worker idle, no batch being written — is written here on the event
        loop (:attr:`write_inline`): the trip to the worker thread and back cost three times
        the insert itself.  It never waits there: a commit in WAL mode with
        ``synchronous=NORMAL`` writes to the page cache, the write lock is taken without
        waiting (held by another process, the add goes to the worker, which waits for it), and
        the checkpoints that ``fsync`` run on the worker, one every :data:`CHECKPOINT_EVERY`
        such adds.

        Group commit: adds that arrive while a batch is being written go together in the next
        transaction (each under a savepoint of its own), so concurrent sessions (``memora
        serve``) share a commit and the full-text index's segment writes."""
        check_new(item)
        check_source(item.source)
        if self._closed:
            raise MemoraError(ErrorCode.STORAGE_ERROR, f"the memory storage {self.path} is closed")
        loop = asyncio.get_running_loop()
        if self._batch is not None:  # a batch is being written: join the next one
            future: asyncio.Future[MemoryRecord] = loop.create_future()
            self._pending.append((item, future))
            return await future
        if self.write_inline and self._lock.acquire(blocking=False):
            try:
                written = self._core.add_now(item)
            finally:
                self._lock.release()
            if written is not None:
                self._inline_writes += 1
                if self._inline_writes % CHECKPOINT_EVERY == 0:
                    self._checkpoint_soon(loop)
                if isinstance(written, MemoryRecord):
                    return written
                raise self._storage_error(written)
        # nothing being written: this add goes at once, awaited directly (no extra trip round
        # the event loop); adds arriving meanwhile wait for the next batch
        job = self._batch = loop.run_in_executor(
            self._executor, self._locked, self._core.add_each, [item]
        )
        try:
            (outcome,) = await job
        finally:
            self._batch = None
            if self._pending:
                self._write_batch(loop)
        if isinstance(outcome, MemoryRecord):
            return outcome
        raise self._storage_error(outcome)

    def _checkpoint_soon(self, loop: asyncio.AbstractEventLoop) -> None:
        job = loop.run_in_executor(self._executor, self._locked, self._core.checkpoint)
        job.add_done_callback(self._checkpointed)

    def _checkpointed(self, job: asyncio.Future[None]) -> None:
        # a checkpoint that could not run is taken up by the next one (or SQLite's own, at the
        # next commit on the worker); the log keeps every committed page meanwhile
        exc = None if job.cancelled() else job.exception()
        if exc is not None:
            logger.debug("checkpoint of %s failed: %s", self.path, exc)

    def _write_batch(self, loop: asyncio.AbstractEventLoop) -> None:
        # every pending add was accepted before close(), which waits for this batch: written
        batch, self._pending = self._pending, []
        job = loop.run_in_executor(
            self._executor, self._locked, self._core.add_each, [i for i, _ in batch]
        )
        self._batch = job
        job.add_done_callback(lambda done: self._batch_written(loop, batch, done))

    def _batch_written(
        self,
        loop: asyncio.AbstractEventLoop,
        batch: builtins.list[tuple[NewMemory, asyncio.Future[MemoryRecord]]],
        job: asyncio.Future[Any],
    ) -> None:
        self._batch = None
        failure = None if job.cancelled() else job.exception()
        results = job.result() if failure is None and not job.cancelled() else None
        for n, (_, future) in enumerate(batch):
            if future.done():  # its caller was cancelled: the memory is written all the same
                continue
            outcome = results[n] if results is not None else failure
            if isinstance(outcome, MemoryRecord):
                future.set_result(outcome)
            else:
                future.set_exception(self._storage_error(outcome))
        if self._pending:
            self._write_batch(loop)

    def _storage_error(self, exc: BaseException | None) -> BaseException:
        if isinstance(exc, sqlite3.Error):
            error = sqlite_error(exc, self.path)
            error.__cause__ = exc
            return error
        return exc if exc is not None else asyncio.CancelledError()

    async def add_many(self, items: Sequence[NewMemory]) -> builtins.list[MemoryRecord]:
        for item in items:
            check_new(item)
            check_source(item.source)
        return await self._run(self._core.add_many, list(items))

    async def get(self, memory_id: str) -> MemoryRecord | None:
        return await self._run(self._core.get, memory_id)

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
        return await self._run(self._core.update, memory_id, changes)

    async def delete(self, memory_id: str) -> bool:
        return await self._run(self._core.delete, memory_id)

    async def supersede(self, old_id: str, new: NewMemory) -> MemoryRecord:
        check_new(new)
        check_source(new.source)
        return await self._run(self._core.supersede, old_id, new)

    async def list(
        self,
        *,
        source: str | None = None,
        limit: int = 50,
        offset: int = 0,
        include_superseded: bool = True,
        scopes: Collection[str] | None = None,
    ) -> builtins.list[MemoryRecord]:
        return await self._run(
            self._core.list,
            source,
            clamp_limit(limit),
            offset,
            include_superseded,
            scope_keys(scopes),
        )

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
        if not isinstance(query, str):
            return []
        match = build_match_query(query)
        limit = clamp_limit(limit)
        if match is None or limit == 0:
            return []
        ids = list(round_ids) if round_ids is not None else None
        return await self._run(
            self._core.search, match, source, limit, include_superseded, ids, scope_keys(scopes)
        )

    async def pinned(
        self, *, scopes: Collection[str] | None = None, limit: int = 10
    ) -> builtins.list[MemoryRecord]:
        return await self._run(self._core.pinned, scope_keys(scopes), clamp_limit(limit))

    async def count(self, *, scopes: Collection[str] | None = None) -> int:
        return await self._run(self._core.count, None, scope_keys(scopes))

    async def count_by_source(self, source: str, *, scopes: Collection[str] | None = None) -> int:
        return await self._run(self._core.count, source, scope_keys(scopes))

    async def history(self, memory_id: str) -> builtins.list[MemoryRecord]:
        return await self._run(self._core.history, memory_id)

    async def put_vectors(self, space: str, vectors: Sequence[tuple[str, Sequence[float]]]) -> None:
        await self._run(self._core.put_vectors, space, [(i, list(v)) for i, v in vectors])

    async def missing_vectors(self, space: str, *, limit: int = 32) -> builtins.list[MemoryRecord]:
        return await self._run(self._core.missing_vectors, space, clamp_limit(limit))

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
        return await self._run(
            self._core.search_vector,
            space,
            list(vector),
            source,
            clamp_limit(limit),
            include_superseded,
            list(round_ids) if round_ids is not None else None,
            scope_keys(scopes),
        )

    async def integrity_check(self) -> str:
        return await self._run(self._core.integrity_check)

    async def scrub(self) -> None:
        """Make the database's files forget text that updates removed (see
        the core's ``scrub``): ``forget --everywhere`` asks for it."""
        await self._run(self._core.scrub)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        while self._batch is not None:  # adds already accepted are written, then answered
            await asyncio.wait([self._batch])
            await asyncio.sleep(0)  # their callbacks (and a last batch's) run first
        await asyncio.get_running_loop().run_in_executor(
            self._executor, self._locked, self._core.close
        )
        self._executor.shutdown(wait=True)

    def close_sync(self) -> None:
        """Close from synchronous code (CLI, atexit)."""
        if self._closed:
            return
        self._closed = True
        self._executor.submit(self._locked, self._core.close).result()
        self._executor.shutdown(wait=True)


def open_sqlite_storage(
    path: str | Path, *, read_only: bool = False, write_inline: bool = True
) -> SqliteStorage | ReadOnlyView:
    """Open the SQLite store at ``path``; with ``read_only`` a view without write methods;
    ``write_inline=False``: every write on the worker thread (see :meth:`SqliteStorage.add`)."""
    store = SqliteStorage(path, read_only=read_only, write_inline=write_inline)
    return ReadOnlyView(store) if read_only else store
