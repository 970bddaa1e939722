"""The Agent facade: the object a host holds for one session of one project.

Three lifetimes, three objects: the :class:`~memora.agent.runtime.ProjectRuntime` (plugins,
providers, stores, services, the project lock — set up once, shareable by many sessions), the
:class:`Agent` (one live session and its turns: :mod:`memora.agent.session`), and the paused turn
as a value (:class:`~memora.agent.pause.PausedTurn`).  Tool exposure lives in
:mod:`memora.agent.exposure`, prompts in :mod:`memora.agent.prompts`.

Managers are reached as attributes after ``await agent.init()``: ``role_pack``, ``tools``,
``skills``, ``memory``, ``works``, ``polish``, ``sessions``, ``security``.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import functools
import logging
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterator,
    Mapping,
    Sequence,
)
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from .._lazy import lazy_exports
from ..errors import BusyError, InvalidInputError, NotInitializedError
from ..events import EventEmitter, GoalDriftDetected, SessionForked
from ..llm.retry import RetryPolicy
from ..llm.router import ProviderRouter
from ..llm.types import Message
from .driver import TurnDriver
from .options import AgentOptions, check_session_options
from .pause import PAUSE_STATE_VERSION, PausedTurn, PauseVerbs
from .project import ProjectResources
from .state import AfterInit, DuplicateCallInterceptor, Outbox, SessionState
from .sync_verbs import SyncVerbs

# The turn loop, the stores, the role packs and the tools are imported where they are first
# used (init(), the first turn), so ``from memora import Agent`` loads the facade only.
if TYPE_CHECKING:
    from ..capabilities import CapabilityMap
    from ..checks import ApprovalMode
    from ..chunks import AgentChunk
    from ..llm.provider import Provider
    from ..memory.manager import MemoryManager
    from ..plugins import Plugins
    from ..role_pack.manager import RolePackManager
    from ..settings import Settings
    from ..tools.base import Tool, ToolRegistry
    from ..tools.context import ToolContext
    from ..tools.task_table import PlanItem
    from ..tools.works import WorksRegistry
    from ..tracing import Tracer
    from .context_window import ContextOccupancy
    from .machinery import SessionMachinery
    from .record import TurnRecord
    from .results import (
        Checkpoint,
        PolishManager,
        SecurityManager,
        SessionManager,
        ToolCallResult,
    )
    from .state import StatusTransition

__all__ = [
    "PAUSE_STATE_VERSION",
    "Agent",
    "Checkpoint",
    "PolishManager",
    "SecurityManager",
    "SessionManager",
    "ToolCallResult",
]

logger = logging.getLogger("memora.agent")

# the result types live in .results (imported with the session); still importable from here
_RESULTS = ("Checkpoint", "PolishManager", "SecurityManager", "SessionManager", "ToolCallResult")
__getattr__, _ = lazy_exports(__name__, dict.fromkeys(_RESULTS, "memora.agent.results"), ())

T = TypeVar("T")


def _nothing() -> None:
    return None


def _part(agent: Agent, name: str) -> Any:
    """``agent.<name>`` for an :class:`AfterInit` attribute: the session's part."""
    return getattr(agent._ready(name), name)


def _shared(agent: Agent, name: str) -> Any:
    """``agent.<name>`` for a shared :class:`AfterInit` attribute: the runtime's."""
    agent._ready(name)
    return getattr(agent._runtime, name)


class Agent(PauseVerbs, SyncVerbs):
    """An LLM agent for one project.

    ``async with Agent(project_path=..., data_dir=...) as agent:`` then
    ``async for chunk in agent.chat("...")``.  ``await runtime.agent(session_id=...)`` (or
    ``Agent(runtime=runtime, ...)``) shares an open :class:`ProjectRuntime` with other sessions.
    """

    _parts: SessionMachinery
    """The session's machinery (memora.agent.machinery), built by init()."""

    def __init__(
        self,
        options: AgentOptions | None = None,
        *,
        runtime: ProjectResources | None = None,
        **kwargs: Any,
    ) -> None:
        if runtime is not None:
            check_session_options(kwargs, "options" if options is not None else None)
            self._runtime = runtime
            self._owns_runtime = False
            self._session_options = dict(kwargs)
        else:
            opts = options if options is not None else AgentOptions(**kwargs)
            self._runtime = ProjectResources(opts, events=EventEmitter())
            self._owns_runtime = True
            self._session_options = {}
        self.events = self._runtime.events
        self._options_cache: tuple[AgentOptions, AgentOptions] | None = None
        opts = self.options
        self.messages = opts.messages
        self.approvals: ApprovalMode | None = opts.approvals
        """The approval mode in force (set from the options and the config at ``init()``)."""
        self._initialised = False
        self._closed = False
        self._output_validators: builtins.list[Callable[[Any], Any]] = []
        self._driver = TurnDriver()
        self._override_router: ProviderRouter | None = None
        self._router_fixed: tuple[ProviderRouter, ProviderRouter] | None = None
        self._unlisten: Callable[[], None] = _nothing
        self.session_state = SessionState(on_drift=self._drift)
        self._duplicates = DuplicateCallInterceptor(opts.duplicate_call_threshold)
        self.retry_policy = RetryPolicy(
            max_attempts=opts.retry_attempts, base_delay=opts.retry_base_delay
        )

    @property
    def options(self) -> AgentOptions:
        """The options in force: the host's, with the config files' ``options`` filled in
        where the host set nothing (after ``init()``)."""
        base = self._runtime.options
        if not self._session_options:
            return base
        cached = self._options_cache
        if cached is None or cached[0] is not base:
            cached = (base, base.model_copy(update=self._session_options))
            self._options_cache = cached
        return cached[1]

    @property
    def runtime(self) -> ProjectResources:
        """The project runtime this Agent runs on (its own, or one shared with others)."""
        return self._runtime

    # ------------------------------------------------------------------------------------------
    # managers (available after init)

    def _ready(self, name: str) -> SessionMachinery:
        """The session's machinery, or ``NOT_INITIALIZED`` naming ``agent.<name>``."""
        if not self._initialised:
            raise NotInitializedError(
                f"agent.{name} is available after `await agent.init()` (or `async with Agent(...)`)"
            )
        return self._parts

    role_pack: AfterInit[RolePackManager] = AfterInit(_part)
    tools: AfterInit[ToolRegistry] = AfterInit(_part)
    polish: AfterInit[PolishManager] = AfterInit(_part)
    sessions: AfterInit[SessionManager] = AfterInit(_part)
    tool_context: AfterInit[ToolContext] = AfterInit(_part)
    memory: AfterInit[MemoryManager] = AfterInit(_part)
    """Memory as this Agent sees it: its ``memory_scope``'s and the project's unscoped."""
    works: AfterInit[WorksRegistry] = AfterInit(_shared)
    security: AfterInit[SecurityManager] = AfterInit(_shared)
    plugins: AfterInit[Plugins] = AfterInit(_shared)

    @property
    def settings(self) -> Settings:
        """The resolved :class:`~memora.settings.Settings` (after ``init()``)."""
        return self._runtime.settings

    @property
    def tracer(self) -> Tracer:
        return self._runtime.tracer

    @property
    def outbox(self) -> Outbox:
        """The executed non-idempotent calls of the session (never run twice)."""
        return self._parts.live.outbox if self._initialised else Outbox()

    @property
    def duplicate_interceptor(self) -> DuplicateCallInterceptor:
        """The session's duplicate-call state (a host may replace it between turns)."""
        return self._parts.live.duplicates if self._initialised else self._duplicates

    @duplicate_interceptor.setter
    def duplicate_interceptor(self, value: DuplicateCallInterceptor) -> None:
        if self._initialised:
            self._parts.live.duplicates = value
        else:
            self._duplicates = value

    @property
    def router(self) -> ProviderRouter:
        """Task type -> provider; ``act.providerRouting = fixed`` sends everything to the chat
        provider."""
        parts = self._ready("router")
        if self._override_router is not None:
            return self._override_router
        base = self._runtime.router
        if parts.role_pack.strategy.provider_routing == "fixed":
            if self._router_fixed is None or self._router_fixed[0] is not base:
                self._router_fixed = (base, base.with_fixed(True))
            return self._router_fixed[1]
        return base

    @property
    def skills(self) -> Mapping[str, Any]:
        """The active skills (global pool < role pack < project), by name."""
        return self.role_pack.skills()

    @property
    def session_id(self) -> str:
        return str(self._ready("session_id").live.session_id)

    @property
    def history(self) -> tuple[Message, ...]:
        """The live conversation of the current session as the model sees it (oldest first,
        without the system prompt); a read-only copy.  Trimmed messages are not in it."""
        return self._parts.window.messages if self._initialised else ()

    @property
    def plan(self) -> builtins.list[PlanItem]:
        """The session's plan (task table items, in order); the model keeps it with
        ``task_table_update``, it survives turns, restarts and is shown to the model."""
        return [dataclasses.replace(i) for i in self.tool_context.task_table.items()]

    def set_provider(self, provider: Provider, *, background: Provider | None = None) -> None:
        """Send every task (chat, summaries, background work) to ``provider`` from the next
        LLM call on — a model switch in a host, or a scripted provider in tests
        (:mod:`memora.testing`).  ``background`` keeps a separate background provider.
        The Agent does not close providers passed here."""
        parts = self._ready("set_provider")
        self._override_router = ProviderRouter(provider, background=background)
        parts.exposure.invalidate()

    @contextlib.contextmanager
    def override(self, *, provider: Provider) -> Iterator[Agent]:
        """``with agent.override(provider=scripted): ...`` — :meth:`set_provider` for a block,
        restored afterwards."""
        before = self._override_router
        self.set_provider(provider)
        try:
            yield self
        finally:
            self._override_router = before

    # ------------------------------------------------------------------------------------------
    # lifecycle

    async def __aenter__(self) -> Agent:
        await self.init()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def init(self) -> Agent:
        """Assemble plugins, take the project lock, load role packs, open the stores (the
        runtime's part, when this Agent has its own), then open the session."""
        if self._initialised:
            return self
        runtime = self._runtime
        if self._owns_runtime:
            await runtime.open()
        runtime.attach(self)
        try:
            from .machinery import SessionMachinery  # the machinery is loaded by init()

            opts = self.options
            self.messages = opts.messages
            self.approvals = self._session_options.get("approvals", runtime.approvals)
            self.retry_policy = RetryPolicy(
                max_attempts=opts.retry_attempts, base_delay=opts.retry_base_delay
            )
            self._parts = SessionMachinery(self, self._driver)
            await self._parts.live.open(opts.session_id, self)
        except BaseException:
            runtime.detach(self)
            if self._owns_runtime:
                await runtime.close()
            raise
        self._unlisten = runtime.plugins.add_listener(self._parts.plugins_changed)
        self._initialised = True
        return self

    async def close(self) -> None:
        """Finish the round summaries; then, when the runtime is this Agent's own, kill
        background commands, close providers and stores and release the project lock."""
        if self._closed or not self._initialised:
            self._closed = True
            return
        self._closed = True
        self._unlisten()
        self._unlisten = _nothing
        await self._parts.live.idle()  # round summaries still being written
        self._parts.release()
        self._runtime.detach(self)
        if self._owns_runtime:
            await self._runtime.close()

    # ------------------------------------------------------------------------------------------
    # conversation state

    def _drift(self, main: str, current: str, similarity: float) -> None:
        seq = self.session_state.goal_change_seq
        self.events.emit(GoalDriftDetected(main, current, similarity, seq))

    def capability_map(self) -> CapabilityMap:
        """The active role pack's capability map: which privileged capabilities are on, and
        ``unavailable``: the declared ones no plugin provides, with the reason."""
        return self._ready("capability_map").exposure.capability_map()

    async def load_capability_tools(self) -> None:
        """Bring the tools of the capabilities the active role pack declares and a tool source
        serves (``mcp:<server>``...) up to date: started on first use, listed again before
        every turn.  A source that fails costs only its capability: its tools disappear, the
        reason is in ``capability_map().unavailable``."""
        await self._ready("load_capability_tools").exposure.load_capability_tools()

    @property
    def tools_withheld(self) -> str | None:
        """Why no tool is sent to the model: its provider says it does not use tools
        (``supports_tools = False``), or the tool schemas would take more than half of its
        context window (a small local model); ``None`` when tools are sent."""
        parts = self._ready("tools_withheld")
        return parts.exposure.withheld(self.router.for_task("chat"))

    async def idle(self) -> None:
        """Wait until the work the Agent does after ``done`` (round summaries) has finished.

        Failures are not raised: they are logged and emitted as ``ArchiveFailed`` events.
        """
        if self._initialised:
            await self._parts.live.idle()
            await self._runtime.memory.idle()  # the new memories' vectors (an embedder)

    # ------------------------------------------------------------------------------------------
    # chat

    def _start(self) -> SessionMachinery:
        """The session's machinery, once no turn runs or waits paused."""
        if not self._initialised:
            raise NotInitializedError("call `await agent.init()` before chatting")
        if self._closed:
            raise NotInitializedError("this agent is closed")
        self._parts.check_idle()
        return self._parts

    def _begin(self, text: str, spec: Any, deps: Any) -> TurnRecord:
        """A new turn's record (typed by ``spec``, with the host's ``deps``), the session moved
        to ``running``."""
        record = self._start().begin(text)
        record.deps = deps
        if spec is not None:
            record.output_spec, record.output_schema = spec, spec.schema
        return record

    def chat(
        self,
        text: str,
        *,
        output_type: Any = None,
        deps: Any = None,
        output_retries: int | None = None,
    ) -> AsyncIterator[AgentChunk]:
        """Run one turn; yields every chunk.  Never raises once started (errors are chunks);
        a cancellation from outside the Agent (a host's timeout) ends the turn with an
        ``aborted`` chunk and then propagates.  Nothing happens until the first chunk is
        asked for (it is an async generator).  A host that leaves ``async for`` early may call
        ``chat()`` again at once: the left turn is closed first (kept as ``interrupted``).

        ``output_type``: the turn ends with a result of that type, validated
        (``output_partial`` chunks while it is written, ``done.output`` as JSON data;
        :meth:`run` returns it typed); ``deps``: what the host's tools read as ``ctx.deps``."""
        spec = self._output_spec(output_type, output_retries)
        return self._drive(functools.partial(self._chat_turn, text, spec, deps))

    async def run(
        self,
        prompt: str,
        *,
        output_type: type[T] | Any = None,
        deps: Any = None,
        output_retries: int | None = None,
    ) -> T | Any:
        """Run one turn and return its result: a validated ``output_type`` value (see
        "Typed results" in docs/agent.md), or the answer's text when no type is given.
        Raises what :meth:`chat_text` raises, and ``OutputValidationError``
        (``OUTPUT_INVALID``, with the last ``raw`` answer and its ``errors``) when the result
        still did not validate after ``output_retries``."""
        spec = self._output_spec(output_type, output_retries)
        records: builtins.list[TurnRecord] = []

        async def start() -> TurnRecord:
            record = await self._chat_turn(prompt, spec, deps)
            records.append(record)
            return record

        from .outcome import turn_result

        return await turn_result(self._drive(start), records)

    def output_validator(self, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """Register a check of every typed result (sync or async ``fn(value) -> value``):
        it may return a corrected value, or raise ``memora.OutputRetry(message)`` to send the
        model back with ``message``.  Usable as a decorator: ``@agent.output_validator``."""
        self._output_validators.append(fn)
        return fn

    def _output_spec(self, output_type: Any, retries: int | None) -> Any:
        """The turn's OutputSpec: built from a type, or one the host built itself
        (``OutputSpec.from_json_schema(...)``), with the Agent's validators and retries."""
        if output_type is None:
            return None
        from . import output  # typed results: loaded by the first typed turn

        if isinstance(output_type, output.OutputSpec):
            # the turn's own copy: the host's spec may serve other Agents and turns at once
            return output_type.for_turn(self._output_validators, retries)
        return output.OutputSpec(
            output_type,
            retries=self.options.output_retries if retries is None else retries,
            validators=list(self._output_validators),
        )

    async def _chat_turn(self, text: str, spec: Any = None, deps: Any = None) -> TurnRecord:
        await self._driver.release_left_turn(self._ready("chat").live)
        return await self._parts.chat_turn(self._begin(text, spec, deps))

    def meeting(
        self,
        question: str,
        *,
        team: str | None = None,
        members: Sequence[str] | None = None,
        output_type: Any = None,
        deps: Any = None,
        output_retries: int | None = None,
    ) -> AsyncIterator[AgentChunk]:
        """A team meeting as one turn: each member (a role pack) answers ``question`` in turn,
        seeing what was said before, streamed as ``meeting_turn(member)`` then
        ``text(stage="meeting", speaker=member)``; then the leader, as chair, sums up
        (``meeting_turn(role="chair")``, ``text(stage="answer", speaker=leader)``); ``done``
        carries the summary.  The session keeps the question and the summary; each
        contribution is a ``meeting_turn`` round event.

        ``team``: a team's name or leader (default: the team the active pack leads);
        ``members``: a subset of its members, in speaking order; ``output_type``: the chair
        sums up as a typed result (``done.output``), as :meth:`chat`'s."""
        spec = self._output_spec(output_type, output_retries)

        async def start() -> TurnRecord:
            parts = self._ready("meeting")
            await self._driver.release_left_turn(parts.live)
            chosen, speakers = parts.prompts.meeting_team(
                team, list(members) if members is not None else None
            )
            record = self._begin(question, spec, deps)
            record.step = "meeting"
            record.meeting = {"members": speakers, "chair": chosen.leader, "spoken": []}
            parts.live.turn = record
            return record

        return self._drive(start)

    def _drive(self, start: Callable[[], Awaitable[TurnRecord]]) -> AsyncIterator[AgentChunk]:
        return self._ready("chat").drive(start)

    async def chat_text(self, text: str) -> str:
        """Run one turn and return the final answer text.  Raises by what ended the turn:
        ``ProviderError`` (the model's provider failed), ``TurnFailedError`` (memora or a
        plugin failed), ``AbortedError``, ``BusyError`` (the turn paused) — each a
        ``MemoraError`` with its code."""
        from ..chunks import DoneChunk
        from .outcome import chat_text_error

        turn = cast("AsyncGenerator[AgentChunk, None]", self.chat(text))
        async with contextlib.aclosing(turn) as stream:
            async for chunk in stream:
                if isinstance(chunk, DoneChunk):
                    return chunk.answer or ""
                error = chat_text_error(chunk)
                if error is not None:
                    raise error
        return ""

    def take_over(self, key: str) -> AsyncIterator[AgentChunk]:
        """Continue the durable turn ``key`` (``runtime.turn_executor.unfinished()``) that a
        worker left unfinished when it died, from the last state its executor kept: yields
        the rest of its chunks, as :meth:`chat` does (see docs/durability.md)."""
        return self._ready("take_over").take_over(key)

    def turn_kept(self) -> Awaitable[None]:
        """Done once the turn :meth:`chat` (or a paused turn's resume) last started is kept by
        the turn executor — from then on a process that dies leaves it to another (see
        docs/durability.md) — or has ended or was refused; at once without a turn executor.
        For a host that acknowledges a turn (``202``) while another task iterates its
        chunks: call it right after :meth:`chat` (the turn is the one started then)."""
        event = self._parts.turn_kept if self._initialised else None

        async def kept() -> None:
            if event is not None:
                await event.wait()

        return kept()

    def abort(self, reason: Literal["user", "timeout"] = "user") -> None:
        """Host abort signal: the running turn ends with ``aborted(stop_reason=reason)`` —
        ``"user"`` (a stop button), or ``"timeout"`` for the host's own deadline; the iterator
        then ends normally (no exception reaches the host)."""
        self._driver.abort(self._parts.live if self._initialised else None, reason)

    # ------------------------------------------------------------------------------------------
    # host control

    def switch_role_pack(self, name: str) -> None:
        """Activate another role pack (``agent.role_pack.activate``): prompt, strategy,
        capability map and tool set follow from the next LLM call on."""
        parts = self._start()
        parts.role_pack.activate(name)
        parts.exposure.invalidate()

    def reload_config(self) -> builtins.list[str]:
        """Read the configuration again: role packs changed on disk (the active one is rebuilt
        and ``RolePackSwitched(reloaded=True)`` emitted), added or removed packs, project rules
        and skills, and the Agent ``options`` of the config files.  Providers, storage, the
        session store and the lock stay as they are (they hold connections and files; build a
        new Agent to change them).  Returns the names of the packs read again."""
        parts = self._start()
        self._runtime.resolve()
        opts = self.options
        if "approvals" not in self._session_options:
            self.approvals = self._runtime.approvals
        self.retry_policy = RetryPolicy(
            max_attempts=opts.retry_attempts, base_delay=opts.retry_base_delay
        )
        return parts.reload()

    def effective_max_tokens(self) -> int | None:
        """The output limit requests carry: min(``max_tokens``, the role pack's
        ``act.outputLimit``), ``None`` when neither is set.  Hosts must not recompute it."""
        return self.role_pack.strategy.max_tokens(self.options.max_tokens)

    def context_usage(self) -> ContextOccupancy:
        """How full the context window is, by part, against the effective window (the seed's
        occupancy snapshot): the last request's, or — before this session's first — what the
        next request would hold now.  See :class:`~memora.agent.context_window.ContextOccupancy`."""
        return self._ready("context_usage").context_usage()

    async def append_message(self, role: str, content: str) -> None:
        """Add a message to the live conversation between turns (a system note, a message the
        host received elsewhere): the next request carries it and the session store keeps it.
        ``role`` is ``user``, ``assistant`` or ``system``."""
        await self._start().append_message(role, content)

    # ------------------------------------------------------------------------------------------
    # tools outside the conversation

    def exposed_tools(self) -> builtins.list[Tool]:
        """The tools the model sees under the active role pack (flags, capability map,
        ``resident_tools``), in registration order."""
        parts = self._ready("exposed_tools")
        return parts.exposure.exposed(self.router.for_task("chat"))

    async def call_tool(
        self,
        name: str,
        args: Mapping[str, Any] | str | None = None,
        *,
        approve: bool = False,
    ) -> ToolCallResult:
        """Run one tool call through the same gates as the loop (role pack, permission,
        capability map, limits, every ``pre_execution_check``) without the model and without
        touching the conversation: for hosts, plugin authors and ``memora tools call``.

        A check answering ``Ask`` runs the call only with ``approve=True``; otherwise the result
        says approval is needed (``needs_approval``)."""
        return await self._start().direct_call(name, args, approve=approve)

    # ------------------------------------------------------------------------------------------
    # pauses: the PausedTurn value (the Agent's own older names warn and forward to it)

    @property
    def paused_turn(self) -> PausedTurn | None:
        """The paused turn (:class:`~memora.agent.pause.PausedTurn`: ``paused`` is a
        ``QuestionPause``, an ``ApprovalPause`` or a ``HostPause``; ``approve``, ``deny``,
        ``answer``, ``to_json``, ``discard``, ``resume``), or ``None``."""
        if not self._initialised:
            return None
        turn = self._parts.live.turn
        if turn is None or turn.paused is None:
            return None
        return PausedTurn(self, self._parts, turn)

    def request_pause(self, reason: str = "") -> None:
        """Ask the running turn to pause before its next model call (a host's "pause" button):
        it yields ``paused``; ``continue_after_pause()`` resumes it where it stopped.  The
        checkpoint's ``pause_meta`` says ``source="user"``."""
        live = self._parts.live if self._initialised else None
        if live is None or not live.busy or live.turn is None:
            raise InvalidInputError("no turn is running")
        self._driver.control.pause_reason = reason

    def checkpoint(self) -> Checkpoint:
        """The session's checkpoint: status and error, goals, the plan and its step log, the
        pause (with its source), executed tool calls, heartbeat."""
        return self._ready("checkpoint").checkpoint()

    async def resume(
        self,
        state: Mapping[str, Any],
        *,
        output_type: Any = None,
        deps: Any = None,
        output_retries: int | None = None,
    ) -> None:
        """Restore a paused turn saved with ``paused_turn.to_json()`` (after a restart).  A
        typed turn needs its ``output_type`` again (its schema is checked against the saved
        one); ``deps`` are the host's, never saved."""
        parts = self._ready("resume")
        if parts.live.busy or self.paused_turn is not None:
            raise BusyError("another turn is active")
        spec = self._output_spec(output_type, output_retries)
        await parts.restore_pause(state, spec, deps)

    def _drop_paused(self, record: TurnRecord | None) -> None:
        if self._initialised:
            self._parts.drop_paused(record)

    # ------------------------------------------------------------------------------------------
    # sessions and background tasks

    async def switch_session(self, session_id: str) -> None:
        await self._start().live.open(session_id, self)

    async def new_session(self, title: str = "") -> str:
        return await self._start().live.create(title, self)

    async def fork_session(self, at_round_id: str | None = None, *, switch: bool = True) -> str:
        """Copy this session's rounds up to ``at_round_id`` into a new session (emits
        ``SessionForked`` with the round count)."""
        live = self._start().live
        current = live.session_id
        info, count = await self._runtime.session_store.fork(current, at_round_id)
        self.events.emit(SessionForked(current, info.id, count))
        if switch:
            await live.open(info.id, self)
        return str(info.id)

    def list_background_tasks(self) -> builtins.list[dict[str, object]]:
        """The background commands of this Agent's scope (another user's are not there)."""
        return self._runtime.background.for_scope(self.memory.scope).list()

    async def kill_background_task(self, task_id: str) -> bool:
        return await self._runtime.background.for_scope(self.memory.scope).kill(task_id)

    def mark_recovered(self) -> StatusTransition:
        """The host dealt with the error that stopped the session: chatting is allowed again."""
        return self.session_state.mark_recovered()
