"""``agent.memory``: the one entry point for reading and writing memories."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from ..errors import ConflictError, InvalidInputError, NotFoundError
from ..events import EventEmitter, MemoryAdded, MemoryRecalled
from ..llm.provider import Provider
from ..messages import Messages
from .grounding import short_name
from .storage import MemoryStorage
from .summary import round_memory
from .types import SOURCE_LABELS, MemoryRecord, NewMemory, ScoredMemory, now
from .vectors import SemanticSearch

__all__ = ["MemoryManager", "MemorySnapshot"]

logger = logging.getLogger("memora.memory")


@dataclass(frozen=True, slots=True)
class MemorySnapshot:
    """Totals for a host's memory panel."""

    total: int
    by_source: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {"total": self.total, "by_source": dict(self.by_source)}


class MemoryManager:
    def __init__(
        self,
        storage: MemoryStorage,
        events: EventEmitter | None = None,
        *,
        semantic: SemanticSearch | None = None,
    ) -> None:
        self.storage = storage
        self.events = events or EventEmitter()
        self.semantic = semantic
        """Semantic recall when an embedder is configured (see :mod:`memora.memory.vectors`)."""
        self._fill_task: asyncio.Task[None] | None = None
        self._queue: list[MemoryRecord] = []  # written here: embedded without a search
        self._scan = False  # look for every memory without a vector (open, after a failure)
        self._scan_later = False  # an embedding failed: the next write scans too
        self._warm = False

    async def search(
        self,
        query: str,
        *,
        source: str | None = None,
        limit: int = 10,
        round_ids: Collection[str] | None = None,
    ) -> list[ScoredMemory]:
        """Keyword search — fused with vector search when an embedder is configured; emits
        ``MemoryRecalled`` with the number of hits."""
        if self.semantic is not None:
            hits = await self.semantic.search(
                query, source=source, limit=limit, round_ids=round_ids
            )
        else:
            hits = await self.storage.search_by_keyword(
                query, source=source, limit=limit, round_ids=round_ids
            )
        self.events.emit(MemoryRecalled(query, len(hits)))
        return hits

    async def write(self, item: NewMemory) -> MemoryRecord:
        """Write one memory; emits ``MemoryAdded``.  With an embedder, its vector is written in
        the background (:meth:`idle` waits for it)."""
        record = await self.storage.add(item)
        self.events.emit(MemoryAdded(record.id, record.source, record.summary_type, record.name))
        self.embed_pending([record])
        return record

    async def supersede(self, old_id: str, item: NewMemory) -> MemoryRecord:
        record = await self.storage.supersede(old_id, item)
        self.events.emit(MemoryAdded(record.id, record.source, record.summary_type, record.name))
        self.embed_pending([record])
        return record

    async def get(self, memory_id: str) -> MemoryRecord:
        """The memory ``memory_id`` (``NOT_FOUND`` when there is none)."""
        record = await self.storage.get(memory_id)
        if record is None:
            raise NotFoundError(f"no memory {memory_id!r}", context={"memory_id": memory_id})
        return record

    async def _current(self, memory_id: str, verb: str) -> MemoryRecord:
        record = await self.get(memory_id)
        if record.superseded_by is not None:
            raise ConflictError(
                f"memory {memory_id} was superseded by {record.superseded_by}; {verb} the "
                "current one (memora memory history shows the chain)",
                context={"memory_id": memory_id, "superseded_by": record.superseded_by},
            )
        return record

    async def edit(
        self, memory_id: str, content: str, *, by: str = "host", name: str | None = None
    ) -> MemoryRecord:
        """A person's correction: a new memory with ``content`` supersedes ``memory_id``
        (the old one leaves recall; ``history`` keeps the chain), its ``meta["edited"]``
        saying who and when."""
        old = await self._current(memory_id, "edit")
        if not content.strip():
            raise InvalidInputError("the edited memory is empty; to remove it, forget it")
        meta = {**old.meta, "edited": {"by": by, "at": now(), "from": old.id}}
        return await self.supersede(
            old.id,
            NewMemory(
                content=content,
                source=old.source,
                name=old.name if name is None else name,
                summary_type=old.summary_type,
                session_id=old.session_id,
                round_id=old.round_id,
                meta=meta,
            ),
        )

    async def forget(self, memory_id: str, *, by: str = "host") -> MemoryRecord:
        """Take ``memory_id`` out of recall: an empty record supersedes it, its
        ``meta["forgotten"]`` saying who and when (the chain keeps the old text for
        ``history``; every search leaves superseded memories out)."""
        old = await self._current(memory_id, "forget")
        tombstone = await self.storage.supersede(
            old.id,
            NewMemory(
                content="",
                source=old.source,
                name="",  # nothing of it is searchable: its name is indexed too
                summary_type=old.summary_type,
                session_id=old.session_id,
                round_id=old.round_id,
                meta={"forgotten": {"by": by, "at": now(), "memory": old.id}},
            ),
        )
        return tombstone

    def embed_pending(self, records: Sequence[MemoryRecord] | None = None) -> None:
        """With an embedder: write, in the background, the vectors of ``records`` (memories
        just written), or — without — of every memory that has none (at open; also on the next
        write after an embedding failed); after the first pass, read the vectors into memory
        for searches.  One pass at a time: a call during a pass queues its work.  Without an
        embedder: nothing."""
        if self.semantic is None:
            return
        if records is None or self._scan_later:
            self._scan, self._scan_later = True, False
        if records:
            self._queue.extend(records)
        if self._fill_task is None or self._fill_task.done():
            self._fill_task = asyncio.get_running_loop().create_task(
                self._fill(), name="memora-embed-memories"
            )

    async def _fill(self) -> None:
        assert self.semantic is not None
        while self._queue or self._scan:
            records, self._queue = self._queue, []
            scan, self._scan = self._scan, False
            try:
                if records and not await self.semantic.embed_records(records):
                    self._scan_later = True
                    continue
                if scan:
                    await self.semantic.fill()
                if not self._warm:
                    self._warm = True
                    await self.semantic.warm()
            except Exception as exc:  # the storage failed: logged, tried again on the next write
                logger.warning("writing memory vectors failed: %s", exc)
                self._scan_later = True
                return

    async def idle(self) -> None:
        """Wait until the vectors being written in the background are written."""
        while self._fill_task is not None and not self._fill_task.done():
            await asyncio.wait([self._fill_task])

    async def close(self) -> None:
        """Stop writing vectors (those not written yet are written after the next open)."""
        task, self._fill_task = self._fill_task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def history(self, memory_id: str) -> list[MemoryRecord]:
        return await self.storage.history(memory_id)

    async def snapshot(self) -> MemorySnapshot:
        by_source = {s: await self.storage.count_by_source(s) for s in SOURCE_LABELS}
        total = await self.storage.count()
        known = sum(by_source.values())
        if total > known:
            by_source["other"] = total - known
        return MemorySnapshot(total, {k: v for k, v in by_source.items() if v})

    async def write_round_summary(
        self,
        provider: Provider,
        *,
        user: str,
        assistant: str,
        session_id: str | None,
        round_id: str | None,
        tool_notes: Sequence[str] = (),
        focus: str | None = None,
        messages: Messages | None = None,
        verbatim_tokens: int = 0,
    ) -> MemoryRecord | None:
        """Summarise a finished round with ``provider`` and store it (``None`` when empty): the
        summary is checked against the round first (:func:`~memora.memory.summary.round_memory`:
        a summary saying what the round did not becomes an extractive one).

        A round of at most ``verbatim_tokens`` tokens (estimated) is stored as it was said,
        without calling ``provider`` (0: always summarise)."""
        memory = await round_memory(
            provider,
            user=user,
            assistant=assistant,
            tool_notes=tool_notes,
            focus=focus,
            messages=messages,
            verbatim_tokens=verbatim_tokens,
        )
        if not memory.text.strip():
            return None
        return await self.write(
            NewMemory(
                content=memory.text,
                source="round_summary",
                name=short_name(user, 60),  # at a word boundary: the request's words stay whole
                summary_type=memory.summary_type,
                session_id=session_id,
                round_id=round_id,
                meta=memory.meta(),
            )
        )
