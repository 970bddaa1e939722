"""Durable turns: the seam through which a plugin owns how a turn's steps are executed and kept.

A turn is a :class:`~memora.agent.record.TurnRecord` moved through steps (:mod:`.loop`).  By
default the Agent runs it in the task that iterates it and keeps nothing until the turn ends
(the round is stored in one append).  A **turn executor** — registered by a plugin under a
name (``register_turn_executors``) and chosen in the user's config (``"turn_executor":
"dbos"``) — runs it instead as a :class:`DurableTurn`: the same engine, stopped at every
**checkpoint** until the executor has kept the turn's state (JSON data) and asks for the next
segment:

- ``step``: a step of the turn is over — an LLM call answered and what it led to is in the
  record, a tool call (or a batch of read-only ones) has its result;
- ``intent``: a tool call that may not be repeated is about to run (the state names it in
  ``in_flight``).

An executor that records each checkpoint before going on (DBOS: each segment is a workflow
step) can continue the turn on another worker after this one died: :meth:`memora.Agent.
recover_turn` rebuilds it from the last state kept, and the engine goes on from the step that
state names.  No LLM call whose answer was kept is made again, no tool call whose result was
kept runs again; a call named ``in_flight`` without its result runs again only if its tool
says it may (``idempotency`` ``read-only`` or ``idempotent``), else it gets the
:data:`INTERRUPTED_CALL` result, which tells the model (and the user) it may or may not have
run.  The round is stored once even when the segment that stores it runs twice.

A state carries :data:`TURN_STATE_VERSION`; a newer one is refused, naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from ..errors import InvalidInputError, StorageError

if TYPE_CHECKING:
    from ..chunks import AgentChunk
    from .pause import TurnControl
    from .record import TurnRecord

__all__ = [
    "INTERRUPTED_CALL",
    "TURN_STATE_VERSION",
    "Checkpoint",
    "DurableTurn",
    "Emit",
    "JournalError",
    "TurnExecutor",
    "UnfinishedTurn",
    "check_state_key",
    "check_state_version",
    "run_elsewhere",
]

TURN_STATE_VERSION = 1
"""The shape of a checkpoint's state (the record's ``to_dict`` and what goes with it)."""

INTERRUPTED_CALL = (
    "[interrupted: the worker running this call stopped before it returned; it may or may not "
    "have run, and it was not run again because this tool may not be repeated]"
)
"""The result a call that may not be repeated gets when the worker running it died."""

Emit = Callable[["AgentChunk"], None]


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Between two steps of a durable run: the turn's state, consistent here (JSON data)."""

    why: Literal["step", "intent"]
    state: dict[str, Any]


def check_state_version(state: Mapping[str, Any]) -> None:
    """Refuse a turn's state written by a newer memora (its version named)."""
    version = state.get("journal", TURN_STATE_VERSION)
    if not isinstance(version, int) or isinstance(version, bool) or version > TURN_STATE_VERSION:
        raise InvalidInputError(
            f"this turn's journal is version {version!r}, written by a newer memora; this one "
            f"reads up to version {TURN_STATE_VERSION}: continue the turn with that memora",
            context={"journal": version},
        )


def check_state_key(state: Mapping[str, Any], key: str) -> None:
    """Refuse a kept state that is not the turn ``key`` names (``memora:<session>:<round>:
    <run>``): continued, it would run another session's turn in this one."""
    parts = key.split(":")
    if len(parts) != 4 or state.get("session_id") != parts[1] or state.get("round_id") != parts[2]:
        raise InvalidInputError(
            f"the journal's state for turn {key!r} is of session {state.get('session_id')!r}, "
            f"round {state.get('round_id')!r}: not that turn's; it is not continued",
            context={"key": key},
        )


_END = object()


class JournalError(StorageError):
    """``STORAGE_ERROR``: a turn executor could not keep a durable turn's step (its journal's
    database failed).  The turn stopped at its last kept step, unfinished: it goes on there
    when the journal answers again, on whichever worker takes it over."""


class _Vanished(BaseException):
    """Thrown into the engine by :meth:`DurableTurn.vanish`: no handler of the turn runs."""


class DurableTurn:
    """One turn as an executor runs it: its identity, its state, and its run in segments.

    ``run`` is the engine's iterator with checkpoints (``TurnEngine.run_durably``); the engine
    runs in a task of its own, started by the first :meth:`segment`, and waits at each
    checkpoint until the next :meth:`segment` asks it on — so what the executor keeps of a
    checkpoint is kept before anything after it happens."""

    def __init__(
        self,
        key: str,
        record: TurnRecord,
        run: Callable[[], AsyncGenerator[AgentChunk | Checkpoint, None]],
        control: TurnControl,
        *,
        on_kept: Callable[[], None] | None = None,
    ) -> None:
        self.key = key
        """``<project>:<session>:<round>:<run>``: the turn's identity across workers (a turn
        continued after a pause is a new run of its round)."""
        self.session_id = record.session_id
        self.round_id = record.round_id
        self._record = record
        self._run = run
        self._control = control
        self._task: asyncio.Task[None] | None = None
        self._out: asyncio.Queue[object] = asyncio.Queue()
        self._proceed = asyncio.Event()
        self._ended = False
        self._vanished = False
        self._on_kept = on_kept
        """Told once, at the first :meth:`segment`: an executor asks for segments only once it
        has kept the turn's start (its workflow started with the turn's state as its input),
        so from then on a worker that dies leaves the turn to another."""

    @property
    def ended(self) -> bool:
        """The engine has finished the turn (done, paused, aborted or failed)."""
        return self._ended

    @property
    def abort_requested(self) -> bool:
        """The Agent's own abort was asked (``agent.abort()``), not an outside cancellation."""
        return self._control.abort

    def state(self) -> dict[str, Any]:
        """The turn's state now, as a checkpoint would give it."""
        return journal_state(self._record)

    async def segment(self, emit: Emit) -> dict[str, Any] | None:
        """Run the turn on to its next checkpoint, handing each chunk to ``emit``: the
        checkpoint's state, or ``None`` once the turn has ended (its last chunk emitted)."""
        if self._ended:
            return None
        if self._task is None:
            if self._on_kept is not None:
                self._on_kept()
            self._task = asyncio.get_running_loop().create_task(
                self._pump(), name=f"memora-turn-{self.round_id}"
            )
        else:
            self._proceed.set()
        while True:
            item = await self._out.get()
            if item is _END:
                self._ended = True
                return None
            if isinstance(item, Checkpoint):
                return item.state
            emit(item)  # type: ignore[arg-type]

    def interrupt(self) -> None:
        """The host's abort (or its cancellation) reaches the engine's task: the turn ends
        ``aborted`` at once, wherever it is."""
        if self._task is not None and not self._task.done():
            self._task.cancel()

    def vanish(self) -> None:
        """Stop the engine at its checkpoint as its worker's death would: none of the turn's
        ending runs (nothing stored, no last chunk) — for tests of executors and hosts."""
        self._vanished = True
        self._proceed.set()

    async def close(self) -> None:
        """Stop the engine if it still runs (a runner that gave up on the turn)."""
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    def leave(self) -> None:
        """The host stopped iterating the turn (it left ``async for``): the engine ends it at
        once, kept as ``interrupted`` (as the Agent's own iterator does when closed)."""
        self._control.left = True
        self.interrupt()

    async def _pump(self) -> None:
        gen = self._run()
        try:
            item: object = await anext(gen)
            while True:
                self._out.put_nowait(item)
                if isinstance(item, Checkpoint):
                    try:
                        await self._proceed.wait()
                    except asyncio.CancelledError:
                        # cancelled between two steps: the engine ends the turn from here
                        item = await gen.athrow(asyncio.CancelledError())
                        continue
                    self._proceed.clear()
                    if self._vanished:
                        with contextlib.suppress(_Vanished):
                            await gen.athrow(_Vanished())
                        return
                item = await anext(gen)
        except StopAsyncIteration:
            pass
        except asyncio.CancelledError:
            pass  # an outside cancellation: the engine ended the turn before re-raising it
        finally:
            self._out.put_nowait(_END)


def journal_state(record: TurnRecord) -> dict[str, Any]:
    """A record as a durable turn's state: its ``to_dict`` with the journal's version."""
    state = record.to_dict()
    state["journal"] = TURN_STATE_VERSION
    return state


@dataclass(frozen=True, slots=True)
class UnfinishedTurn:
    """A durable turn its executor has not seen end: running on a live worker, or left by a
    dead one (the host tells which: it knows who holds the session)."""

    key: str
    session_id: str
    round_id: str
    updated_at: float
    """When its last state was kept (seconds since the epoch)."""


@runtime_checkable
class TurnExecutor(Protocol):
    """What a ``register_turn_executors`` factory returns."""

    def execute(self, turn: DurableTurn) -> AsyncIterator[AgentChunk]:
        """Run ``turn`` to its end (or its pause), keeping each checkpoint before asking for
        the next segment; the chunks as they come (usually :func:`run_elsewhere`)."""
        ...

    def recover(self, turn: DurableTurn) -> AsyncIterator[AgentChunk]:
        """Go on with ``turn`` — rebuilt here from :meth:`last_state` of its ``key`` — under
        the same identity: what was kept of it stays kept, the rest runs here."""
        ...

    async def last_state(self, key: str) -> dict[str, Any] | None:
        """The last state kept of the unfinished turn ``key`` (``None``: none is unfinished)."""
        ...

    async def unfinished(self, session_id: str | None = None) -> list[UnfinishedTurn]:
        """The turns not seen to end (of one session, or all), oldest first."""
        ...

    async def abandon(self, key: str) -> None:
        """Mark ``key`` ended without running it on (a turn the host ended otherwise: its
        pause discarded, its session's user cancelled it)."""
        ...

    async def close(self) -> None: ...


async def run_elsewhere(
    turn: DurableTurn, runner: Callable[[Emit], Awaitable[None]]
) -> AsyncIterator[AgentChunk]:
    """The chunks of ``turn`` as ``runner(emit)`` — an executor's workflow, in a task of its
    own — runs it: the Agent's iterator for an executed turn.  The host's abort (a
    cancellation of the task iterating this) is passed to the turn's engine, never to the
    runner, whose record of the turn stays whole: the turn ends ``aborted`` and its last chunks
    still go out; a cancellation from outside the Agent is raised once they have."""
    queue: asyncio.Queue[AgentChunk | None] = asyncio.Queue()
    failure: list[BaseException] = []

    async def drive() -> None:
        try:
            await runner(queue.put_nowait)
        except BaseException as exc:
            failure.append(exc)
        finally:
            queue.put_nowait(None)

    task = asyncio.get_running_loop().create_task(drive(), name=f"memora-run-{turn.round_id}")
    cancelled: asyncio.CancelledError | None = None
    try:
        while True:
            try:
                chunk = await queue.get()
            except asyncio.CancelledError as exc:
                cancelled = exc
                current = asyncio.current_task()
                if current is not None:
                    current.uncancel()
                turn.interrupt()
                continue
            if chunk is None:
                break
            yield chunk
    finally:
        if not task.done():  # the host left the iteration: closed at the next checkpoint
            turn.leave()
            with contextlib.suppress(BaseException):
                await task
    if failure:
        # the executor could not keep the turn (its journal failed): stopped where it stands,
        # as a dead worker's turn, to go on from its last kept step once the journal answers
        # — never ended here and run again there
        turn.vanish()
        raise JournalError(
            f"the turn's journal failed ({type(failure[0]).__name__}: {failure[0]}); the turn "
            "is kept up to its last step and goes on from there once the journal answers again",
            context={"key": turn.key},
        ) from failure[0]
    if cancelled is not None and not turn.abort_requested:
        raise cancelled
