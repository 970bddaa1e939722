"""Which turn an Agent is running, and the one generator that runs it.

:class:`TurnDriver` hands the host the chunks of a turn (``chat``, ``meeting`` and a continued
pause return its generator itself, so each chunk passes one generator of the Agent, not two),
remembers the task iterating it (for ``abort()``), and lets a turn the host walked away from
close before the next one starts.  The per-chunk path is kept short on purpose: it is the hot
path ``bench_loop`` and ``bench_conversation`` measure.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Literal

from ..errors import InvalidInputError
from .pause import TurnControl

if TYPE_CHECKING:
    from ..chunks import AgentChunk
    from .record import TurnRecord
    from .session import LiveSession

__all__ = ["TurnDriver"]


class TurnDriver:
    """The running turn of one Agent (see the module docstring)."""

    __slots__ = ("_done", "_ref", "consumer", "control", "record")

    def __init__(self) -> None:
        self.control = TurnControl()
        """The host's signals to the running turn (abort, pause), read by the engine."""
        self.consumer: asyncio.Task[object] | None = None
        """The task iterating the running turn: ``abort()`` cancels it."""
        self.record: TurnRecord | None = None
        self._ref: Callable[[], object] | None = None
        """A weak reference to the generator driving the running turn."""
        self._done: asyncio.Event | None = None

    def drive(
        self,
        live: LiveSession,
        start: Callable[[], Awaitable[TurnRecord]],
        chunks_of: Callable[[TurnRecord], AsyncIterator[AgentChunk]],
    ) -> AsyncIterator[AgentChunk]:
        """The chunks of the turn ``start`` begins (or resumes) when the first is asked for;
        ``chunks_of(record)`` runs it (the turn engine)."""
        ref: list[Callable[[], object]] = []
        turn = self._chunks(live, start, chunks_of, ref)
        ref.append(weakref.ref(turn))
        return turn

    async def _chunks(
        self,
        live: LiveSession,
        start: Callable[[], Awaitable[TurnRecord]],
        chunks_of: Callable[[TurnRecord], AsyncIterator[AgentChunk]],
        ref: list[Callable[[], object]],
    ) -> AsyncIterator[AgentChunk]:
        record = await start()  # outside the try: a refused start leaves another turn alone
        control = self.control
        # the task iterating the turn, for abort(): looked up again after each chunk (a host may
        # move the iteration to another task); with the loop given, current_task() skips
        # get_running_loop(), a system call per chunk on Python 3.11
        loop = asyncio.get_running_loop()
        self.consumer = asyncio.current_task(loop)
        self.record = record
        self._ref, done = ref[0], asyncio.Event()
        self._done = done
        control.abort = False
        control.abort_reason = "user"
        control.left = False
        try:
            # aclosing: a host's early exit closes the engine's turn here, not later
            async with contextlib.aclosing(chunks_of(record)) as chunks:  # type: ignore[type-var]
                async for chunk in chunks:
                    self.consumer = asyncio.current_task(loop)
                    yield chunk
        finally:
            done.set()
            # a host that stopped iterating early has its generator closed later (by the event
            # loop): by then another turn may be running, whose state this must not touch
            if self.record is record:
                self.record = self._ref = self._done = None
                self.consumer = None
                control.abort = False
                live.busy = False
                if record.paused is None:
                    control.pause_reason = None  # the turn ended before it could pause
            if record.paused is None and live.turn is record:
                live.turn = None

    async def release_left_turn(self, live: LiveSession) -> None:
        """A host that broke out of ``async for`` dropped the turn's generator: the event loop
        closes it soon (its finaliser), and the next turn waits for that instead of refusing
        with ``BusyError``.  A generator still referenced somewhere is still the host's turn."""
        ref, done = self._ref, self._done
        if live.busy and ref is not None and ref() is None and done is not None:
            await done.wait()

    def abort(self, live: LiveSession | None, reason: Literal["user", "timeout"]) -> None:
        """End the running turn with ``aborted(stop_reason=reason)`` (see ``Agent.abort``)."""
        if reason not in ("user", "timeout"):
            raise InvalidInputError(f"abort reason must be 'user' or 'timeout', not {reason!r}")
        consumer = self.consumer
        if consumer is not None and not consumer.done() and live is not None and live.busy:
            self.control.abort = True
            self.control.abort_reason = reason
            consumer.cancel()
