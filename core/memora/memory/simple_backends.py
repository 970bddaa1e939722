"""The ``memory`` (in-process, for tests) and ``json`` (one file, atomic rewrites) backends.

Both keep every record in memory and rank with the same BM25 scorer over the same tokens as the
SQLite backend.  The JSON file is rewritten atomically (tmp + fsync + rename) after every change,
so a killed process leaves the previous complete file, never a truncated one; it suits small
memories — use ``sqlite`` beyond a few thousand.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import json
import os
import sys
from collections import Counter
from collections.abc import AsyncIterator, Collection, Sequence
from pathlib import Path
from typing import Any

from ..errors import ErrorCode, MemoraError
from ..security.atomic import atomic_write_bytes
from ..security.state import check_state_path
from .storage import check_new, clamp_limit, score_records, tokens_of, update_changes
from .types import MemoryRecord, NewMemory, ScoredMemory, check_source
from .vectors import VectorRows, embed_text

__all__ = ["InMemoryStorage", "JsonFileStorage"]


class InMemoryStorage:
    """Memories in a dict.  Nothing survives the process."""

    def __init__(self) -> None:
        self._records: dict[str, MemoryRecord] = {}
        self._tokens: dict[str, tuple[str, Counter[str], int]] = {}
        self._lock = asyncio.Lock()
        self._closed = False
        # space -> vectors, and the text each was made from (a changed memory is re-embedded);
        # kept in process memory only: after a restart they are filled in again
        self._vectors: dict[str, tuple[VectorRows, dict[str, str]]] = {}
        # the change being made (see _changing): per record touched, what it was before
        self._undo: list[tuple[str, MemoryRecord | None, Any]] | None = None
        self._pinned: set[str] = set()  # ids of the records whose meta has "pinned"

    # persistence hooks for subclasses
    async def _persist(self) -> None:
        return None

    async def _refresh(self) -> None:
        """Before a read: pick up what another process wrote (the JSON file does)."""
        return None

    @contextlib.asynccontextmanager
    async def _writing(self) -> AsyncIterator[None]:
        """Around every read-modify-write (the JSON file adds a lock other processes see)."""
        async with self._lock:
            yield

    @contextlib.asynccontextmanager
    async def _changing(self) -> AsyncIterator[None]:
        """One change under the writer's lock: persisted when its body is done; when the body
        or the persisting fails, every record it touched is put back as it was (in memory;
        the file was replaced whole or not at all) and the error goes on.  What it touched is
        journaled as it goes, so a change costs what it touches, not a copy of every record."""
        async with self._writing():
            undo: list[tuple[str, MemoryRecord | None, Any]] = []
            self._undo = undo
            try:
                yield
                if undo:
                    await self._persist()
            except BaseException:
                for memory_id, record, tokens in reversed(undo):
                    self._set(memory_id, record, tokens)
                raise
            finally:
                self._undo = None

    def _check_open(self) -> None:
        if self._closed:
            raise MemoraError(ErrorCode.STORAGE_ERROR, "the memory storage is closed")

    def _set(self, memory_id: str, record: MemoryRecord | None, tokens: Any) -> None:
        """The one place a record changes (``None``: gone), with its tokens and pin."""
        if record is None:
            self._records.pop(memory_id, None)
            self._tokens.pop(memory_id, None)
            self._pinned.discard(memory_id)
            return
        self._records[memory_id] = record
        self._tokens[memory_id] = tokens
        if "pinned" in record.meta:
            self._pinned.add(memory_id)
        else:
            self._pinned.discard(memory_id)

    def _put(self, record: MemoryRecord) -> None:
        if self._undo is not None:
            self._undo.append(
                (record.id, self._records.get(record.id), self._tokens.get(record.id))
            )
        self._set(record.id, record, tokens_of(record))

    def _pop(self, memory_id: str) -> MemoryRecord | None:
        record = self._records.get(memory_id)
        if record is not None:
            if self._undo is not None:
                self._undo.append((memory_id, record, self._tokens.get(memory_id)))
            self._set(memory_id, None, None)
        return record

    def _require(self, memory_id: str) -> MemoryRecord:
        record = self._records.get(memory_id)
        if record is None:
            raise MemoraError(
                ErrorCode.NOT_FOUND, f"no memory with id {memory_id!r}", context={"id": memory_id}
            )
        return record

    async def add(self, item: NewMemory) -> MemoryRecord:
        return (await self.add_many([item]))[0]

    async def add_many(self, items: Sequence[NewMemory]) -> builtins.list[MemoryRecord]:
        self._check_open()
        for item in items:
            check_new(item)
        out = []
        async with self._changing():
            for item in items:
                if item.id and item.id in self._records:
                    out.append(self._records[item.id])
                    continue
                check_source(item.source)
                record = MemoryRecord.from_new(item)
                self._put(record)
                out.append(record)
        return out

    async def get(self, memory_id: str) -> MemoryRecord | None:
        self._check_open()
        await self._refresh()
        return self._records.get(memory_id)

    async def update(
        self,
        memory_id: str,
        *,
        content: str | None = None,
        name: str | None = None,
        summary_type: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> MemoryRecord:
        self._check_open()
        async with self._changing():
            record = self._require(memory_id)
            changes = update_changes(content, name, summary_type, meta)
            updated = record.with_changes(**changes)
            self._put(updated)
        return updated

    async def delete(self, memory_id: str) -> bool:
        self._check_open()
        async with self._changing():
            if self._pop(memory_id) is None:
                return False
        for rows, texts in self._vectors.values():  # once the file no longer has it
            rows.drop(memory_id)
            texts.pop(memory_id, None)
        return True

    async def supersede(self, old_id: str, new: NewMemory) -> MemoryRecord:
        self._check_open()
        check_new(new)
        async with self._changing():
            old = self._require(old_id)
            check_source(new.source)
            record = MemoryRecord.from_new(new)
            self._put(record)
            self._put(old.with_changes(superseded_by=record.id))
        return record

    async def list(
        self,
        *,
        source: str | None = None,
        limit: int = 50,
        offset: int = 0,
        include_superseded: bool = True,
        scopes: Collection[str] | None = None,
    ) -> builtins.list[MemoryRecord]:
        self._check_open()
        await self._refresh()
        seen = _scope_set(scopes)
        rows = [
            r
            for r in self._records.values()
            if (source is None or r.source == source)
            and (include_superseded or r.superseded_by is None)
            and (seen is None or r.scope_key in seen)
        ]
        rows.sort(key=lambda r: (-r.created_at, r.id))
        return rows[max(0, offset) : max(0, offset) + clamp_limit(limit)]

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
        await self._refresh()
        if not isinstance(query, str):
            return []
        rounds = set(round_ids) if round_ids is not None else None
        seen = _scope_set(scopes)
        candidates = [
            (r, *self._tokens[r.id])
            for r in self._records.values()
            if (source is None or r.source == source)
            and (include_superseded or r.superseded_by is None)
            and (rounds is None or r.round_id in rounds)
            and (seen is None or r.scope_key in seen)
        ]
        total = len(self._records)
        avg = sum(t[2] for t in self._tokens.values()) / total if total else 1.0
        return score_records(candidates, query, clamp_limit(limit), total, avg)

    async def pinned(
        self, *, scopes: Collection[str] | None = None, limit: int = 10
    ) -> builtins.list[MemoryRecord]:
        self._check_open()
        await self._refresh()
        seen = _scope_set(scopes)
        rows = [
            r
            for r in map(self._records.__getitem__, self._pinned)
            if r.superseded_by is None and (seen is None or r.scope_key in seen)
        ]
        rows.sort(key=lambda r: (-r.created_at, r.id))
        return rows[: clamp_limit(limit)]

    async def count(self, *, scopes: Collection[str] | None = None) -> int:
        self._check_open()
        await self._refresh()
        seen = _scope_set(scopes)
        if seen is None:
            return len(self._records)
        return sum(1 for r in self._records.values() if r.scope_key in seen)

    async def count_by_source(self, source: str, *, scopes: Collection[str] | None = None) -> int:
        self._check_open()
        await self._refresh()
        seen = _scope_set(scopes)
        return sum(
            1
            for r in self._records.values()
            if r.source == source and (seen is None or r.scope_key in seen)
        )

    async def history(self, memory_id: str) -> builtins.list[MemoryRecord]:
        self._check_open()
        await self._refresh()
        record = self._require(memory_id)
        by_successor = {r.superseded_by: r for r in self._records.values() if r.superseded_by}
        chain = [record]
        seen = {record.id}
        cur = record
        while cur.id in by_successor and by_successor[cur.id].id not in seen:
            cur = by_successor[cur.id]
            chain.insert(0, cur)
            seen.add(cur.id)
        cur = record
        while cur.superseded_by and cur.superseded_by not in seen:
            nxt = self._records.get(cur.superseded_by)
            if nxt is None:
                break
            chain.append(nxt)
            seen.add(nxt.id)
            cur = nxt
        return chain

    # -- vectors (memora.memory.vectors) -------------------------------------------------------

    async def put_vectors(self, space: str, vectors: Sequence[tuple[str, Sequence[float]]]) -> None:
        self._check_open()
        rows, texts = self._vectors.setdefault(space, (VectorRows(), {}))
        for memory_id, vector in vectors:
            record = self._records.get(memory_id)
            if record is None:
                continue
            rows.put(memory_id, list(vector))
            texts[memory_id] = embed_text(record)

    async def missing_vectors(self, space: str, *, limit: int = 32) -> builtins.list[MemoryRecord]:
        self._check_open()
        await self._refresh()
        _, texts = self._vectors.get(space, (None, {}))
        out = [r for r in self._records.values() if texts.get(r.id) != embed_text(r)]
        out.sort(key=lambda r: (r.created_at, r.id))
        return out[: clamp_limit(limit)]

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
        self._check_open()
        await self._refresh()
        limit = clamp_limit(limit)
        entry = self._vectors.get(space)
        if entry is None or limit <= 0:
            return []
        rows, texts = entry
        rounds = set(round_ids) if round_ids is not None else None
        seen = _scope_set(scopes)
        k = max(limit * 4, 40)
        while True:
            ranked = rows.ranked(vector, k)
            hits = []
            for memory_id, score in ranked:
                r = self._records.get(memory_id)
                if (
                    r is not None
                    and texts.get(memory_id) == embed_text(r)
                    and (source is None or r.source == source)
                    and (include_superseded or r.superseded_by is None)
                    and (rounds is None or r.round_id in rounds)
                    and (seen is None or r.scope_key in seen)
                ):
                    hits.append(ScoredMemory(r, score))
            if len(hits) >= limit or len(ranked) < k:
                return hits[:limit]
            k *= 4

    async def close(self) -> None:
        self._closed = True


class JsonFileStorage(InMemoryStorage):
    """One JSON file (``memories.json``), rewritten atomically after each change.

    Safe with several processes: every change takes an exclusive ``flock`` on
    ``memories.json.lock``, re-reads the file when another process changed it since, applies
    the change and rewrites the file before letting go; reads re-read a file that changed.
    (Without that, two writer processes lost 127 of 300 writes.)  For more than a few writers,
    or thousands of memories, use ``sqlite``.
    """

    FORMAT = 1

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = Path(path)
        self._lock_path = self.path.with_name(self.path.name + ".lock")
        self._stamp: tuple[int, int, int] | None = None
        self._load()

    def _file_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.lstat(self.path)  # a link is seen as one (and refused by _load)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _load(self) -> None:
        stamp = self._file_stamp()
        if stamp is None or stamp == self._stamp:
            return
        # a link there (a cloned project's, to another project's memories) is refused, not
        # read: its memories would be recalled as this project's
        check_state_path(self.path, self.path.parent)
        try:
            doc = json.loads(self.path.read_text(encoding="utf-8"))
            items = doc["memories"] if isinstance(doc, dict) else doc
            records = [MemoryRecord.from_dict(data) for data in items]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise MemoraError(
                ErrorCode.STORAGE_ERROR,
                f"{self.path} is not a memora memory file ({type(exc).__name__}: {exc}); "
                "it was left untouched",
                context={"path": str(self.path)},
            ) from exc
        self._records.clear()
        self._tokens.clear()
        self._pinned.clear()
        for record in records:
            self._put(record)
        self._stamp = stamp

    async def _refresh(self) -> None:
        if self._file_stamp() != self._stamp:
            async with self._lock:
                await asyncio.to_thread(self._load)

    @contextlib.asynccontextmanager
    async def _writing(self) -> AsyncIterator[None]:
        async with self._lock:
            fd = await asyncio.to_thread(self._take_file_lock)
            try:
                await asyncio.to_thread(self._load)
                yield
            finally:
                _release_file_lock(fd)

    def _take_file_lock(self) -> int:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            if sys.platform != "win32":
                import fcntl

                fcntl.flock(fd, fcntl.LOCK_EX)  # waits for the other process's change
        except BaseException:
            os.close(fd)
            raise
        return fd

    async def _persist(self) -> None:
        doc = {"format": self.FORMAT, "memories": [r.to_dict() for r in self._records.values()]}
        data = json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        await asyncio.to_thread(atomic_write_bytes, self.path, data)
        self._stamp = self._file_stamp()


def _scope_set(scopes: Collection[str] | None) -> set[str] | None:
    return None if scopes is None else {str(s) for s in scopes}


def _release_file_lock(fd: int) -> None:
    if sys.platform != "win32":
        import fcntl

        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
