"""A turn's chunks as the hub keeps them: numbered from 1, typed for the protocol adapters of
this process and as JSON for the event stream; and a turn another worker runs, read back from
what the workers share."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator
from typing import Any

from memora.chunks import AgentChunk, chunk_adapter

from .shared import SharedState, one_by_one

__all__ = ["END_TYPES", "RemoteTurnLog", "TurnLog"]

END_TYPES = frozenset({"done", "aborted", "paused", "error"})
"""The chunk types that end a turn (or a stretch of it, for ``paused``)."""


class TurnLog:
    """One turn's chunks, numbered from 1 — as their JSON (for the event stream and late
    readers) and, while the turn runs, as the typed chunks (for the protocol adapters of this
    process) — and whether the turn has ended."""

    def __init__(self, turn_id: str, kind: str = "turn") -> None:
        self.id = turn_id
        self.kind = kind
        """``turn`` (a message), ``continue`` (after an approval or answers)."""
        self.events: list[str] = []
        self.typed: list[AgentChunk] = []
        self.output: Any = None
        """A typed turn's OutputSpec (its text is the result being written), else ``None``."""
        self.ended = False
        self.started_at = time.time()
        self.text: str | None = None
        """The user's message that started the turn (a page reloaded mid-turn shows it)."""
        self._waiters: list[asyncio.Future[None]] = []
        """The followers waiting for the next event: woken by the next ``add`` or ``end``
        (a future each, made only when a follower has caught up — not an Event per chunk)."""

    def add(self, chunk: AgentChunk) -> str:
        """Log ``chunk``; returns its JSON (what the event stream and other workers get)."""
        data = chunk.model_dump_json()
        self.events.append(data)
        self.typed.append(chunk)
        self._wake()
        return data

    def round_id(self) -> str | None:
        """The round the turn writes (its first chunk that names one)."""
        return next((c.round_id for c in self.typed if c.round_id), None)

    def end(self) -> None:
        self.ended = True
        # the typed chunks serve the adapters following the turn while it runs; a finished log
        # is kept for late readers as JSON only (thousands of pydantic objects kept alive per
        # session would only give the garbage collector more to walk)
        self.typed = []
        self._wake()

    def _wake(self) -> None:
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    async def batches(
        self, after: int = 0, idle: float | None = None
    ) -> AsyncGenerator[list[tuple[int, str]], None]:
        """The events after number ``after`` as they arrive, every one already there in one
        list, until the turn ends; an empty list after ``idle`` seconds without one."""
        seq = max(0, after)
        while True:
            if seq < len(self.events):
                batch = [(n + 1, self.events[n]) for n in range(seq, len(self.events))]
                seq = len(self.events)
                yield batch
                continue
            if self.ended:
                return
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                async with asyncio.timeout(idle):
                    await waiter
            except TimeoutError:
                pass
            finally:
                if waiter.cancelled():  # timed out, or the follower left: no future left behind
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(waiter)
            if waiter.cancelled():
                yield []  # idle for `idle` seconds (the event stream sends a keep-alive)

    def follow(self, after: int = 0) -> AsyncGenerator[tuple[int, str], None]:
        """Every event after number ``after``, as it arrives, until the turn ends."""
        return one_by_one(self.batches(after))

    async def chunks(self, after: int = 0) -> AsyncGenerator[AgentChunk, None]:
        """The typed chunks after number ``after``, as they arrive, until the turn ends."""
        async for seq, data in self.follow(after):
            typed = self.typed
            yield typed[seq - 1] if seq <= len(typed) else chunk_adapter.validate_json(data)


class RemoteTurnLog:
    """A turn another worker runs (or ran), followed through the shared files."""

    def __init__(
        self, shared: SharedState, session_id: str, turn_id: str, grace: float = 0.0
    ) -> None:
        self.id = turn_id
        self.output: Any = None  # another worker's turn: whether it is typed is not known here
        self._shared = shared
        self._session = session_id
        self._grace = grace
        """A durable project's turn: how long a dead worker's turn waits for another to take
        it over before its followers are told ``TURN_LOST``."""

    def batches(
        self, after: int = 0, idle: float | None = None
    ) -> AsyncGenerator[list[tuple[int, str]], None]:
        return self._shared.batches(self._session, self.id, after, idle, grace=self._grace)

    def follow(self, after: int = 0) -> AsyncGenerator[tuple[int, str], None]:
        return self._shared.follow(self._session, self.id, after, grace=self._grace)

    async def chunks(self, after: int = 0) -> AsyncGenerator[AgentChunk, None]:
        """The typed chunks, parsed from what the worker running the turn wrote."""
        async for _, data in self.follow(after):
            yield chunk_adapter.validate_json(data)
