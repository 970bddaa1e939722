"""The ``memory`` (in-process, for tests) and ``json`` (one file, atomic rewrites) backends.

Both keep every record in memory and rank with the same BM25 scorer over the same tokens as the
SQLite backend.  The JSON file is rewritten atomically (tmp + fsync + rename) after every change,
so a killed process leaves the previous complete file, never a truncated one; it suits small
memories — use ``sqlite`` beyond a few thousand.
"""

from __future__ import annotations

import asyncio
import builtins
import json
from collections import Counter
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from ..errors import ErrorCode, MemoraError
from ..security.atomic import atomic_write_bytes
from .storage import check_new, clamp_limit, score_records, tokens_of, update_changes
from .types import MemoryRecord, NewMemory, ScoredMemory, check_source

__all__ = ["InMemoryStorage", "JsonFileStorage"]


class InMemoryStorage:
    """Memories in a dict.  Nothing survives the process."""

    def __init__(self) -> None:
        self._records: dict[str, MemoryRecord] = {}
        self._tokens: dict[str, tuple[str, Counter[str], int]] = {}
        self._lock = asyncio.Lock()
        self._closed = False

    # persistence hook for subclasses
    async def _persist(self) -> None:
        return None

    async def _commit(self, snapshot: tuple[dict[str, MemoryRecord], dict[str, Any]]) -> None:
        """Persist; on failure restore the state from before the change and re-raise."""
        try:
            await self._persist()
        except BaseException:
            self._records, self._tokens = snapshot
            raise

    def _snapshot(self) -> tuple[dict[str, MemoryRecord], dict[str, Any]]:
        return dict(self._records), dict(self._tokens)

    def _check_open(self) -> None:
        if self._closed:
            raise MemoraError(ErrorCode.STORAGE_ERROR, "the memory storage is closed")

    def _put(self, record: MemoryRecord) -> None:
        self._records[record.id] = record
        self._tokens[record.id] = tokens_of(record)

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
        async with self._lock:
            snap = self._snapshot()
            out = []
            for item in items:
                if item.id and item.id in self._records:
                    out.append(self._records[item.id])
                    continue
                check_source(item.source)
                record = MemoryRecord.from_new(item)
                self._put(record)
                out.append(record)
            await self._commit(snap)
            return out

    async def get(self, memory_id: str) -> MemoryRecord | None:
        self._check_open()
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
        async with self._lock:
            snap = self._snapshot()
            record = self._require(memory_id)
            changes = update_changes(content, name, summary_type, meta)
            updated = record.with_changes(**changes)
            self._put(updated)
            await self._commit(snap)
            return updated

    async def delete(self, memory_id: str) -> bool:
        self._check_open()
        async with self._lock:
            snap = self._snapshot()
            if self._records.pop(memory_id, None) is None:
                return False
            self._tokens.pop(memory_id, None)
            await self._commit(snap)
            return True

    async def supersede(self, old_id: str, new: NewMemory) -> MemoryRecord:
        self._check_open()
        check_new(new)
        async with self._lock:
            snap = self._snapshot()
            old = self._require(old_id)
            check_source(new.source)
            record = MemoryRecord.from_new(new)
            self._put(record)
            self._put(old.with_changes(superseded_by=record.id))
            await self._commit(snap)
            return record

    async def list(
        self,
        *,
        source: str | None = None,
        limit: int = 50,
        offset: int = 0,
        include_superseded: bool = True,
    ) -> builtins.list[MemoryRecord]:
        self._check_open()
        rows = [
            r
            for r in self._records.values()
            if (source is None or r.source == source)
            and (include_superseded or r.superseded_by is None)
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
    ) -> builtins.list[ScoredMemory]:
        self._check_open()
        if not isinstance(query, str):
            return []
        scope = set(round_ids) if round_ids is not None else None
        candidates = [
            (r, *self._tokens[r.id])
            for r in self._records.values()
            if (source is None or r.source == source)
            and (include_superseded or r.superseded_by is None)
            and (scope is None or r.round_id in scope)
        ]
        total = len(self._records)
        avg = sum(t[2] for t in self._tokens.values()) / total if total else 1.0
        return score_records(candidates, query, clamp_limit(limit), total, avg)

    async def count(self) -> int:
        self._check_open()
        return len(self._records)

    async def count_by_source(self, source: str) -> int:
        self._check_open()
        return sum(1 for r in self._records.values() if r.source == source)

    async def history(self, memory_id: str) -> builtins.list[MemoryRecord]:
        self._check_open()
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

    async def close(self) -> None:
        self._closed = True


class JsonFileStorage(InMemoryStorage):
    """One JSON file (``memories.json``), rewritten atomically after each change."""

    FORMAT = 1

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = Path(path)
        if self.path.exists():
            try:
                doc = json.loads(self.path.read_text(encoding="utf-8"))
                items = doc["memories"] if isinstance(doc, dict) else doc
                for data in items:
                    self._put(MemoryRecord.from_dict(data))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise MemoraError(
                    ErrorCode.STORAGE_ERROR,
                    f"{self.path} is not a memora memory file ({type(exc).__name__}: {exc}); "
                    "it was left untouched",
                    context={"path": str(self.path)},
                ) from exc

    async def _persist(self) -> None:
        doc = {"format": self.FORMAT, "memories": [r.to_dict() for r in self._records.values()]}
        data = json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        await asyncio.to_thread(atomic_write_bytes, self.path, data)
