"""The live session: the conversation one Agent holds, and the journal its turns are written to.

:class:`LiveSession` owns what lives as long as a session is open in an Agent — the context
window, the session state, the outbox and duplicate-call state, the plan's step log, the ids of
the stored rounds — and :meth:`LiveSession.persist`, which a finished turn calls (through
``TurnDeps.journal``) to store its round and messages in one append and start its summary.
"""

from __future__ import annotations

import asyncio
import builtins
import collections
import logging
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import MemoraError, NotAvailableError, NotFoundError
from ..events import ArchiveFailed, EventEmitter
from ..llm.types import Message
from ..memory.sessions import RoundRecord, SessionContents, SessionInfo, SessionStore
from ..memory.storage import accepts_keyword
from ..tools.task_table import PlanItem
from .context_window import ContextWindow
from .loop import new_round_id
from .record import PLAN_LOG_SIZE, PlanItemOutcome, TurnRecord
from .serialize import message_from_dict
from .state import DuplicateCallInterceptor, Outbox, SessionState

if TYPE_CHECKING:
    from ..llm.router import ProviderRouter
    from ..memory.manager import MemoryManager
    from ..messages import Messages
    from ..tools.context import ToolContext
    from .project import ProjectResources

__all__ = ["LiveSession", "SummaryPlan"]

logger = logging.getLogger("memora.agent")


@dataclass(frozen=True, slots=True)
class SummaryPlan:
    """How a finished turn's round summary is written (``None`` in ``TurnDeps``: not at all)."""

    router: ProviderRouter
    """Asked for the ``summary`` provider when the turn ends."""
    focus: str | None
    verbatim_tokens: int
    messages: Messages


async def _find(
    store: SessionStore, session_id: str, after: object = None
) -> tuple[SessionInfo, SessionContents | None] | None:
    """The session's info, with its contents when the store reads them at once (``load``;
    from ``after``, the mark of this session's last load, when the store reads on from one);
    ``None``: no such session."""
    load = getattr(store, "load", None)
    if load is not None:
        if after is not None and accepts_keyword(load, "after"):
            loaded: SessionContents | None = await load(session_id, after=after)
        else:
            loaded = await load(session_id)
        return None if loaded is None else (loaded.info, loaded)
    if not await store.exists(session_id):
        return None
    return await store.get(session_id), None


@dataclass(frozen=True, slots=True)
class _Read:
    """A session as an Agent last read it from its store: where the read ended (the store's
    mark) and what the history, rounds and plan were up to there."""

    session_id: str
    mark: object
    history: builtins.list[Message]
    round_ids: builtins.list[str]
    plan: builtins.list[dict[str, Any]]


class LiveSession:
    """One open session of an Agent (see the module docstring)."""

    def __init__(
        self,
        runtime: ProjectResources,
        window: ContextWindow,
        state: SessionState,
        duplicates: DuplicateCallInterceptor,
        *,
        events: EventEmitter,
        memory: MemoryManager | None = None,
    ) -> None:
        self._runtime = runtime
        self.memory = memory if memory is not None else runtime.memory
        """The Agent's view of memory: round memories go into its scope."""
        self.scope = self.memory.scope
        """Whose sessions this Agent opens (``None``: the project's unscoped ones)."""
        self.window = window
        self.state = state
        self.duplicates = duplicates
        self.outbox = Outbox()
        self.events = events
        self.plan_log: collections.deque[PlanItemOutcome] = collections.deque(maxlen=PLAN_LOG_SIZE)
        self.round_ids: builtins.list[str] = []
        self.session_id = ""
        self.turn: TurnRecord | None = None
        """The running or paused turn."""
        self.busy = False
        """A turn (or a direct tool call) is running."""
        self._tool_context: ToolContext | None = None
        self._plan_seen: tuple[tuple[Any, ...], ...] = ()
        self._tasks: set[asyncio.Task[None]] = set()
        self._read: _Read | None = None
        """The session as last read from the store, to read on from when it is opened again."""

    def bind(self, tool_context: ToolContext) -> None:
        """The tool context whose task table and file stamps are the session's."""
        self._tool_context = tool_context

    @property
    def tool_context(self) -> ToolContext:
        assert self._tool_context is not None, "LiveSession.bind() first"
        return self._tool_context

    # -- opening -------------------------------------------------------------------------------

    async def open(self, session_id: str | None, holder: object) -> None:
        """Open ``session_id`` (None: the most recent, else a new one), created if missing; its
        history, rounds and plan are read back."""
        store = self._runtime.session_store
        round_store = self._runtime.round_store
        read, self._read = self._read, None
        if read is not None and (read.session_id != session_id or round_store is not store):
            read = None
        info, loaded = await self._session(store, session_id, read)
        self._runtime.hold(holder, info.id, self.session_id or None)
        messages = loaded.messages if loaded is not None else await store.messages(info.id)
        history = [message_from_dict(m) for m in messages]
        if round_store is not store and not await round_store.exists(info.id):
            await round_store.create(session_id=info.id)  # a separate round store follows
        if loaded is not None and round_store is store:
            rounds = loaded.rounds
        else:
            rounds = await round_store.rounds(info.id)
        plan = _last_plan(rounds)
        round_ids = [r.round_id for r in rounds]
        if loaded is not None and loaded.since is not None and read is not None:
            history, round_ids, plan = _read_on(read, history, round_ids, plan)
        if loaded is not None and loaded.mark is not None and round_store is store:
            self._read = _Read(info.id, loaded.mark, history, list(round_ids), plan or [])
        self.reset(info.id, history, round_ids, plan or [])

    async def _session(
        self, store: SessionStore, session_id: str | None, read: _Read | None
    ) -> tuple[SessionInfo, SessionContents | None]:
        """The session to open — ``session_id`` (created when missing; ``NOT_FOUND`` when it is
        another scope's), or this scope's most recent, or a new one — and what was read of it
        (``None`` where only its info was)."""
        if session_id is None:
            existing = [i for i in await store.list() if i.scope == self.scope]
            return (existing[0] if existing else await self._new(store)), None
        opened = await _find(store, session_id, read.mark if read is not None else None)
        if opened is None:
            return await self._new(store, session_id=session_id), None
        info, loaded = opened
        if info.scope != self.scope:
            # another user's session is not there for this one (nor a user's for the
            # project's unscoped Agent, whose memories would leak its rounds)
            raise NotFoundError(
                f"no session {session_id!r}"
                + (f" in memory scope {self.scope!r}" if self.scope else " without a scope"),
                context={"session_id": session_id},
            )
        return info, loaded

    async def _new(
        self, store: SessionStore, *, title: str = "", session_id: str | None = None
    ) -> SessionInfo:
        """A new session of this Agent's scope."""
        if self.scope is None:
            return await store.create(title=title, session_id=session_id)
        if not accepts_keyword(store.create, "scope"):
            raise NotAvailableError(
                f"the session store {type(store).__name__} keeps no scopes (its create takes "
                "no scope=), so a scoped Agent cannot use it",
                context={"session_store": type(store).__name__},
            )
        return await store.create(title=title, session_id=session_id, scope=self.scope)

    async def create(self, title: str, holder: object) -> str:
        runtime = self._runtime
        info = await self._new(runtime.session_store, title=title)
        if runtime.round_store is not runtime.session_store:
            await runtime.round_store.create(session_id=info.id, title=title)
        runtime.hold(holder, info.id, self.session_id or None)
        self._read = None
        self.reset(info.id, [], [])  # just created: nothing to read back
        return str(info.id)

    def reset(
        self,
        session_id: str,
        history: builtins.list[Message],
        round_ids: builtins.list[str],
        plan: builtins.list[dict[str, Any]] | None = None,
    ) -> None:
        self.session_id = session_id
        self.window.reset(history)
        self.round_ids = round_ids
        self.duplicates.reset()
        first = next((m.content for m in history if m.role == "user"), None)
        self.state.reset(session_id, first)
        table = self.tool_context.task_table
        table.clear()
        if plan:
            table.update([PlanItem(**i) for i in plan])
        self._plan_seen = self._plan_key()

    def _plan_key(self) -> tuple[tuple[Any, ...], ...]:
        return tuple(
            (i.id, i.description, i.status, i.order, i.member)
            for i in self.tool_context.task_table.items()
        )

    def new_record(self, text: str) -> TurnRecord:
        context = self.tool_context
        return TurnRecord(
            round_id=new_round_id(),
            user_text=text,
            session_id=self.session_id,
            outbox=self.outbox,
            duplicates=self.duplicates,
            file_stamps=context.file_stamps,
            plan=context.task_table,
            plan_log=self.plan_log,
        )

    # -- the journal -----------------------------------------------------------------------------

    async def persist(
        self, state: TurnRecord, summary: SummaryPlan | None, *, once: bool = False
    ) -> bool:
        """Store the round and its messages (one append, before ``done``: a killed process
        loses at most the running turn); start the round summary in the background when
        ``summary`` says how.  False when the round could not be written (``done.saved``).
        ``once``: a durable turn taken over from a worker that died — the round is stored
        only if that worker had not stored it yet, and its summary written only if missing."""
        self.busy = False
        self.turn = None
        plan_key = self._plan_key()
        if plan_key != self._plan_seen:  # the plan changed: the round carries the new one
            self._plan_seen = plan_key
            state.note("plan", items=[i.to_dict() for i in state.plan.items()])
        record = RoundRecord(
            round_id=state.round_id,
            user=state.user_text,
            assistant=state.answer,
            events=state.events,
            status=state.status,
            started_at=state.started_at,
            ended_at=time.time(),
            usage=dict(state.usage),
            output=state.output,
            model=state.model,
        )
        stored = once and await self._stored(state)
        try:
            store, rounds = self._runtime.session_store, self._runtime.round_store
            if stored:
                pass  # the worker that died stored it before its state was kept
            elif rounds is store and hasattr(store, "append_turn"):
                await store.append_turn(state.session_id, state.messages, record)
            else:  # a host's store without the one-append method
                await store.append_messages(state.session_id, state.messages)
                await rounds.append_round(state.session_id, record)
            self.round_ids.append(state.round_id)
        except Exception as exc:
            logger.exception("persisting round %s failed", state.round_id)
            self.events.emit(
                ArchiveFailed(state.session_id, f"{type(exc).__name__}: {exc}", "round")
            )
            saved = False
        else:
            saved = True
        if summary is None:
            return saved
        tool_notes = [
            f"{e['name']}: {e.get('summary', '')}"
            for e in state.events
            if e.get("type") == "tool_result"
        ][:20]
        # The summary is an extra LLM call: `done` does not wait for it.  The session owns
        # the task; `await agent.idle()` waits for it and `close()` finishes it.
        self.spawn(
            self._write_summary(state, tool_notes, summary, self.memory, once=stored),
            name=f"memora-round-summary-{state.round_id}",
        )
        return saved

    async def _stored(self, state: TurnRecord) -> bool:
        """The round is in the session's store already (a taken-over turn's)."""
        try:
            rounds = await self._runtime.round_store.rounds(state.session_id)
        except MemoraError:  # no such session yet: nothing of it was stored
            return False
        return any(r.round_id == state.round_id for r in rounds)

    async def _write_summary(
        self,
        state: TurnRecord,
        tool_notes: builtins.list[str],
        plan: SummaryPlan,
        memory: MemoryManager,
        *,
        once: bool = False,
    ) -> None:
        provider = plan.router.for_task("summary")
        try:
            if once:
                recent = await memory.list(source="round_summary", limit=20)
                if any(m.round_id == state.round_id for m in recent):
                    return  # the worker that died wrote it
            await memory.write_round_summary(
                provider,
                user=state.user_text,
                assistant=state.answer,
                session_id=state.session_id,
                round_id=state.round_id,
                tool_notes=tool_notes,
                focus=plan.focus,
                messages=plan.messages,
                verbatim_tokens=plan.verbatim_tokens,
            )
        except Exception as exc:
            logger.warning("round summary for %s failed: %s", state.round_id, exc)
            self.events.emit(
                ArchiveFailed(state.session_id, f"round summary failed: {exc}", "summary")
            )

    def spawn(self, coro: Coroutine[Any, Any, None], name: str | None = None) -> None:
        """Work after the answer (summaries): ``idle()`` waits for it, ``close()`` finishes it."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def idle(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


def _last_plan(rounds: Sequence[RoundRecord]) -> builtins.list[dict[str, Any]] | None:
    """The plan as the last round that changed it left it (``None``: no round did)."""
    for r in reversed(rounds):
        found = next((e for e in reversed(r.events) if e.get("type") == "plan"), None)
        if found is not None:
            return list(found.get("items") or [])
    return None


def _read_on(
    read: _Read,
    history: builtins.list[Message],
    round_ids: builtins.list[str],
    plan: builtins.list[dict[str, Any]] | None,
) -> tuple[builtins.list[Message], builtins.list[str], builtins.list[dict[str, Any]] | None]:
    """A read that went on from the last one: what that one read, then what was written since
    (this Agent's own turns included) — what a read from the start gives."""
    return (
        [*read.history, *history],
        [*read.round_ids, *round_ids],
        read.plan if plan is None else plan,
    )
