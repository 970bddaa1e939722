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

import asyncio
import builtins
import contextlib
import dataclasses
import functools
import json
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
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from .._lazy import lazy_exports
from ..errors import (
    AbortedError,
    BusyError,
    ErrorCode,
    InvalidConfigError,
    InvalidInputError,
    MemoraError,
    NotInitializedError,
    ProviderError,
    TurnFailedError,
)
from ..events import EventEmitter, GoalDriftDetected, SessionForked
from ..llm.provider import complete_text
from ..llm.retry import RetryPolicy
from ..llm.router import ProviderRouter
from ..llm.types import LLMRequest, Message, clean_text
from .context_window import ContextWindow
from .options import AgentOptions
from .pause import PAUSE_STATE_VERSION, TurnControl
from .runtime import SESSION_OPTIONS, ProjectRuntime
from .serialize import message_from_dict, message_to_dict
from .state import DuplicateCallInterceptor, Outbox, SessionState

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
    from ..tools.base import Tool, ToolRegistry
    from ..tools.context import ToolContext
    from ..tools.task_table import PlanItem
    from ..tools.works import WorksRegistry
    from .loop import TurnDeps
    from .pause import PausedTurn
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


def _upgrade_pause_state(state: Mapping[str, Any]) -> dict[str, Any]:
    """The turn of a saved pause state, in version 2's shape (version 1 kept the outbox, the
    duplicate-call state and the plan next to the turn)."""
    version = state.get("version")
    if version not in (1, PAUSE_STATE_VERSION):
        raise InvalidInputError(
            f"unsupported pause state version {version!r} (this memora reads 1 and "
            f"{PAUSE_STATE_VERSION})"
        )
    data = dict(state["turn"])
    if version == 1:
        data.setdefault("outbox", state.get("outbox") or [])
        data.setdefault("duplicates", state.get("duplicates") or {})
        data.setdefault("plan", state.get("task_table") or [])
        paused = data.get("paused") or {}
        data.setdefault("step", "tools" if data.get("pending_calls") else "model")
        if paused.get("kind") == "question":
            paused.setdefault("name", "ask_user")
    return data


def _chat_text_error(chunk: AgentChunk) -> MemoraError | None:
    """What ``chat_text`` raises for a chunk that ends the turn without an answer."""
    from ..chunks import AbortedChunk, ErrorChunk

    if isinstance(chunk, ErrorChunk):
        code = chunk.code
        if code is not None and code in ErrorCode.__members__ and code != "PROVIDER_ERROR":
            return MemoraError(code, chunk.message)
        if chunk.code is not None or chunk.category != "unknown":
            return ProviderError(chunk.message, category=chunk.category)
        return TurnFailedError(chunk.message)
    if isinstance(chunk, AbortedChunk):
        return AbortedError(f"aborted: {chunk.reason}", context={"stop_reason": chunk.stop_reason})
    if chunk.type == "paused":
        return BusyError("the turn paused for the host; use chat() to handle pauses")
    return None


class Agent:
    """An LLM agent for one project.

    ``async with Agent(project_path=..., data_dir=...) as agent:`` then
    ``async for chunk in agent.chat("...")``.  ``Agent(runtime=runtime, session_id=...)`` (or
    ``await runtime.agent(...)``) shares an open :class:`ProjectRuntime` with other sessions.
    """

    def __init__(
        self,
        options: AgentOptions | None = None,
        *,
        runtime: ProjectRuntime | None = None,
        **kwargs: Any,
    ) -> None:
        if runtime is not None:
            unknown = sorted(set(kwargs) - SESSION_OPTIONS)
            if options is not None or unknown:
                raise InvalidConfigError(
                    f"{unknown[0] if unknown else 'options'} is a project setting, shared by the "
                    f"runtime's sessions; an Agent of a runtime may set: "
                    f"{', '.join(sorted(SESSION_OPTIONS))}"
                )
            self._runtime = runtime
            self._owns_runtime = False
            self._session_options = dict(kwargs)
        else:
            opts = options if options is not None else AgentOptions(**kwargs)
            self._runtime = ProjectRuntime(opts, events=EventEmitter())
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
        self._control = TurnControl()
        self._consumer: asyncio.Task[Any] | None = None
        self._driving: TurnRecord | None = None
        self._override_router: ProviderRouter | None = None
        self._router_fixed: tuple[ProviderRouter, ProviderRouter] | None = None
        self._sync_runner: asyncio.Runner | None = None
        self._unlisten: Callable[[], None] = lambda: None
        self.session_state = SessionState(on_drift=self._drift)
        self._window = ContextWindow(self.messages, summarise=opts.enable_context_summary)
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
    def runtime(self) -> ProjectRuntime:
        """The project runtime this Agent runs on (its own, or one shared with others)."""
        return self._runtime

    # ------------------------------------------------------------------------------------------
    # managers (available after init)

    def _need(self, name: str) -> Any:
        if not self._initialised:
            raise NotInitializedError(
                f"agent.{name} is available after `await agent.init()` (or `async with Agent(...)`)"
            )
        return getattr(self, f"_{name}")

    def _shared(self, name: str) -> Any:
        """A runtime object, after init (the same ``NOT_INITIALIZED`` as the Agent's own)."""
        if not self._initialised:
            self._need(name)
        return getattr(self._runtime, name)

    role_pack: RolePackManager = property(lambda self: self._need("role_pack"))  # type: ignore[assignment]
    tools: ToolRegistry = property(lambda self: self._need("tools"))  # type: ignore[assignment]
    polish: PolishManager = property(lambda self: self._need("polish"))  # type: ignore[assignment]
    sessions: SessionManager = property(lambda self: self._need("sessions"))  # type: ignore[assignment]
    tool_context: ToolContext = property(lambda self: self._need("tool_context"))  # type: ignore[assignment]

    memory: MemoryManager = property(lambda self: self._shared("memory"))  # type: ignore[assignment]
    works: WorksRegistry = property(lambda self: self._shared("works"))  # type: ignore[assignment]
    security: SecurityManager = property(lambda self: self._shared("security"))  # type: ignore[assignment]
    plugins: Plugins = property(lambda self: self._shared("plugins"))  # type: ignore[assignment]

    @property
    def settings(self) -> Any:
        """The resolved :class:`~memora.settings.Settings` (after ``init()``)."""
        return self._runtime.settings

    @property
    def tracer(self) -> Any:
        return self._runtime.tracer

    @property
    def outbox(self) -> Outbox:
        """The executed non-idempotent calls of the session (never run twice)."""
        return self._live.outbox if self._initialised else Outbox()

    @property
    def duplicate_interceptor(self) -> DuplicateCallInterceptor:
        """The session's duplicate-call state (a host may replace it between turns)."""
        return self._live.duplicates if self._initialised else self._duplicates

    @duplicate_interceptor.setter
    def duplicate_interceptor(self, value: DuplicateCallInterceptor) -> None:
        if self._initialised:
            self._live.duplicates = value
        else:
            self._duplicates = value

    @property
    def router(self) -> ProviderRouter:
        """Task type -> provider; ``act.providerRouting = fixed`` sends everything to the chat
        provider."""
        self._need("tools")
        if self._override_router is not None:
            return self._override_router
        base = self._runtime.router
        if self._role_pack.strategy.provider_routing == "fixed":
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
        return str(self._need("live").session_id)

    @property
    def history(self) -> tuple[Message, ...]:
        """The live conversation of the current session as the model sees it (oldest first,
        without the system prompt); a read-only copy.  Trimmed messages are not in it."""
        return self._window.messages

    @property
    def plan(self) -> builtins.list[PlanItem]:
        """The session's plan (task table items, in order); the model keeps it with
        ``task_table_update``, it survives turns, restarts and is shown to the model."""
        return [dataclasses.replace(i) for i in self._need("tool_context").task_table.items()]

    def set_provider(self, provider: Provider, *, background: Provider | None = None) -> None:
        """Send every task (chat, summaries, background work) to ``provider`` from the next
        LLM call on — a model switch in a host, or a scripted provider in tests
        (:mod:`memora.testing`).  ``background`` keeps a separate background provider.
        The Agent does not close providers passed here."""
        self._need("tools")
        self._override_router = ProviderRouter(provider, background=background)
        self._exposure.invalidate()

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
            self._setup()
            await self._live.open(self.options.session_id, self)
        except BaseException:
            runtime.detach(self)
            if self._owns_runtime:
                await runtime.close()
            raise
        self._unlisten = runtime.plugins.add_listener(self._plugins_changed)
        self._initialised = True
        return self

    def _setup(self) -> None:
        """The session's objects, on the open runtime."""
        from ..role_pack.manager import RolePackManager
        from ..tools.base import ToolRegistry
        from ..tools.context import ToolContext
        from ..tools.process import child_environment
        from ..tools.task_table import TaskTable
        from .exposure import ToolExposure
        from .prompts import Prompts
        from .results import PolishManager, SessionManager
        from .session import LiveSession

        runtime = self._runtime
        opts = self.options
        self.messages = opts.messages
        self.approvals = self._session_options.get("approvals", runtime.approvals)
        self.retry_policy = RetryPolicy(
            max_attempts=opts.retry_attempts, base_delay=opts.retry_base_delay
        )
        project = Path(opts.project_path)
        self._role_pack = RolePackManager(
            opts.config_dir,
            pack_roots=opts.role_pack_dirs,
            active=opts.active_role_pack,
            fallback_role=opts.builtin_fallback_role,
            disabled_skills=opts.disabled_skills,
            project_path=project,
            strategy_override=opts.strategy_override,
            events=self.events,
            messages=self.messages,
        )
        self._role_pack.resolve_initial()
        self._role_pack.edit_check = opts.role_pack_edit_check
        self._tools = ToolRegistry()
        self._tools.executor = self.call_tool
        self._plugin_tools: dict[str, Tool] = {}
        self._sync_plugin_tools()
        table = TaskTable()
        self._window = ContextWindow(self.messages, summarise=opts.enable_context_summary)
        self._live = LiveSession(
            runtime,
            self._window,
            self.session_state,
            DuplicateCallInterceptor(opts.duplicate_call_threshold),
            events=self.events,
        )
        self._tool_context = ToolContext(
            project=project,
            guard=runtime.guard,
            permission=opts.permission,
            memory=runtime.memory,
            role_packs=self._role_pack,
            works=runtime.works,
            background=runtime.background,
            task_table=table,
            services=runtime.services,
            node_path=opts.node_path,
            env=child_environment(opts.command_env_allow, opts.command_env)
            if opts.command_env_allow or opts.command_env
            else None,
            branch_round_ids=lambda: list(self._live.round_ids),
            consistency_check=opts.file_consistency_check,
        )
        self._live.bind(self._tool_context)
        self._window.spawn = self._live.spawn
        if runtime.router.for_task("background") is not runtime.router.chat:
            # a background provider is configured: trimmed history gets an LLM summary there
            self._window.summariser = self._summarise_trimmed
        self._exposure = ToolExposure(
            runtime, self._tools, self._role_pack, table, window=self._window_of
        )
        self._prompts = Prompts(
            self._role_pack,
            self.messages,
            table,
            self._live.plan_log,
            project=project,
            teams=opts.role_pack_teams,
        )
        self._polish = PolishManager(self)
        self._sessions = SessionManager(self)

    def _sync_plugin_tools(self) -> None:
        wanted = self._runtime.plugins.registered("tool")
        for name, old in list(self._plugin_tools.items()):
            reg = wanted.get(name)
            if reg is None or reg.value is not old:
                if self._tools.get(name) is old:
                    self._tools.unregister(name)
                del self._plugin_tools[name]
        for name, reg in wanted.items():
            if name in self._plugin_tools:
                continue
            if name in self._tools:  # registered directly on agent.tools by the host: it wins
                logger.info("tool %r of plugin %r is shadowed by agent.tools", name, reg.plugin)
                continue
            self._tools.register(reg.value, owner=reg.plugin)
            self._plugin_tools[name] = reg.value

    def _plugins_changed(self) -> None:
        """A plugin was registered or unregistered on ``agent.plugins`` after init()."""
        self._sync_plugin_tools()
        self._exposure.invalidate()

    async def close(self) -> None:
        """Finish the round summaries; then, when the runtime is this Agent's own, kill
        background commands, close providers and stores and release the project lock."""
        if self._closed or not self._initialised:
            self._closed = True
            return
        self._closed = True
        self._unlisten()
        await self._live.idle()  # round summaries still being written
        self._runtime.detach(self)
        if self._owns_runtime:
            await self._runtime.close()

    # ------------------------------------------------------------------------------------------
    # conversation state

    def _drift(self, main: str, current: str, similarity: float) -> None:
        seq = self.session_state.goal_change_seq
        self.events.emit(GoalDriftDetected(main, current, similarity, seq))

    def _window_of(self, provider: Provider) -> int:
        """The context window a request to ``provider`` may fill."""
        window = min(provider.context_window, self.options.max_context_tokens)
        return self._role_pack.strategy.effective_window(window)

    def capability_map(self) -> CapabilityMap:
        """The active role pack's capability map: which privileged capabilities are on, and
        ``unavailable``: the declared ones no plugin provides, with the reason."""
        self._need("tools")
        return self._exposure.capability_map()

    async def load_capability_tools(self) -> None:
        """Bring the tools of the capabilities the active role pack declares and a tool source
        serves (``mcp:<server>``...) up to date: started on first use, listed again before
        every turn.  A source that fails costs only its capability: its tools disappear, the
        reason is in ``capability_map().unavailable``."""
        self._need("tools")
        await self._exposure.load_capability_tools()

    @property
    def tools_withheld(self) -> str | None:
        """Why no tool is sent to the model: its provider says it does not use tools
        (``supports_tools = False``), or the tool schemas would take more than half of its
        context window (a small local model); ``None`` when tools are sent."""
        self._need("tools")
        return self._exposure.withheld(self.router.for_task("chat"))

    def _turn_deps(self, record: TurnRecord, *, model_turn: bool = True) -> TurnDeps:
        """What the turn engine sees (built once per turn or resumption): values and objects,
        no callbacks into the Agent.  A model turn whose tools do not fit the window runs as
        ``toolMode: block``; a host's own ``call_tool`` (``model_turn=False``) is not."""
        from .loop import TurnDeps
        from .session import SummaryPlan

        opts = self.options
        router = self.router
        provider = router.for_task("chat")
        tools = self._exposure.for_turn(provider)
        strategy = self._role_pack.strategy
        if model_turn and strategy.tool_mode != "block" and tools.withheld is not None:
            strategy = dataclasses.replace(strategy, tool_mode="block")
        base = self._tool_context.derive(
            session_id=record.session_id,
            round_id=record.round_id,
            readonly=strategy.tool_readonly,
            web_search_limit=strategy.web_search_limit,
            counters=record.counters,
            file_stamps=record.file_stamps,
            task_table=record.plan,
            progress=None,
        )
        summary = (
            SummaryPlan(router, strategy.summary_focus, opts.summary_verbatim_tokens, self.messages)
            if opts.archive_mode == "full" and strategy.summary
            else None
        )
        return TurnDeps(
            window=self._window,
            tools=self._tools,
            strategy=strategy,
            messages=self.messages,
            tracer=self._runtime.tracer,
            session=self.session_state,
            provider=provider,
            review_provider=router.for_task("reasoning"),
            retry_policy=self.retry_policy,
            check=self._runtime.plugins.pre_execution_check,
            tool_context=base,
            exposure=tools,
            prompts=self._prompts.for_turn(provider, tools),
            window_tokens=self._window_of(provider),
            output_reserve=strategy.max_tokens(opts.max_tokens) or 1024,
            max_tokens=strategy.max_tokens(opts.max_tokens),
            history_key=self._live.session_id,
            project_path=opts.project_path,
            permission=opts.permission,
            role_pack=self._role_pack.active.name,
            confirm_writes=opts.confirm_writes,
            confirm_scripts=opts.confirm_scripts,
            approvals=self.approvals,
            duplicate_threshold=opts.duplicate_call_threshold,
            duplicate_interceptor=opts.duplicate_interceptor,
            max_iterations=strategy.max_iterations(opts.max_iterations),
            stall_timeout=opts.llm_stall_timeout,
            journal=self._live,
            summary=summary,
            control=self._control,
        )

    async def _summarise_trimmed(self, dropped: builtins.list[Message]) -> str:
        """An LLM summary of messages trimmed from the context, on the background provider."""
        labels = {"user": self.messages.user_label, "assistant": self.messages.assistant_label}
        transcript = "\n".join(
            f"{labels[m.role]}: {m.content[:2000]}"
            for m in dropped
            if m.role in labels and m.content.strip()
        )
        if not transcript:
            return ""
        request = LLMRequest(
            [Message.system(self.messages.context_summary_prompt), Message.user(transcript)],
            temperature=0.2,
            max_tokens=400,
        )
        text = await complete_text(self.router.for_task("background"), request)
        return f"{self.messages.recent_conversation_label} (summary): {text.strip()}"

    async def idle(self) -> None:
        """Wait until the work the Agent does after ``done`` (round summaries) has finished.

        Failures are not raised: they are logged and emitted as ``ArchiveFailed`` events.
        """
        if self._initialised:
            await self._live.idle()
            await self._runtime.memory.idle()  # the new memories' vectors (an embedder)

    # ------------------------------------------------------------------------------------------
    # chat

    def _start(self) -> None:
        if not self._initialised:
            raise NotInitializedError("call `await agent.init()` before chatting")
        if self._closed:
            raise NotInitializedError("this agent is closed")
        live = self._live
        if live.busy:
            raise BusyError(
                "a turn is already running on this agent (one session runs at a time); wait for it, "
                "or use one Agent per project to work in parallel"
            )
        if live.turn is not None and live.turn.paused is not None:
            raise BusyError(
                "the current turn is paused; answer it (answer_question / approve / reject) and call "
                "continue_after_pause(), or call discard_paused_turn()"
            )

    def _begin(self, text: str) -> TurnRecord:
        """A new turn's record, the session moved to ``running``."""
        self._start()
        text = clean_text(text)  # a lone surrogate would make every later request unencodable
        self.session_state.start()  # raises while an unrecovered error stands
        self.session_state.set_goal(text)
        self._live.busy = True
        return self._live.new_record(text)

    def chat(self, text: str) -> AsyncIterator[AgentChunk]:
        """Run one turn; yields every chunk.  Never raises once started (errors are chunks);
        a cancellation from outside the Agent (a host's timeout) ends the turn with an
        ``aborted`` chunk and then propagates.  Nothing happens until the first chunk is
        asked for (it is an async generator)."""
        return self._drive(functools.partial(self._chat_turn, text))

    async def _chat_turn(self, text: str) -> TurnRecord:
        record = self._begin(text)
        live = self._live
        live.duplicates.reset()
        self._exposure.plan_asked = self._prompts.asks_for_plan(record.user_text)
        try:
            await self._exposure.load_capability_tools()
        except BaseException:
            live.busy = False
            raise
        live.turn = record
        return record

    def meeting(
        self,
        question: str,
        *,
        team: str | None = None,
        members: Sequence[str] | None = None,
    ) -> AsyncIterator[AgentChunk]:
        """A team meeting as one turn: each member (a role pack) answers ``question`` in turn,
        seeing what was said before, streamed as ``meeting_turn(member)`` then
        ``text(stage="meeting", speaker=member)``; then the leader, as chair, sums up
        (``meeting_turn(role="chair")``, ``text(stage="answer", speaker=leader)``); ``done``
        carries the summary.  The session keeps the question and the summary; each
        contribution is a ``meeting_turn`` round event.

        ``team``: a team's name or leader (default: the team the active pack leads);
        ``members``: a subset of its members, in speaking order."""

        async def start() -> TurnRecord:
            self._need("tools")
            chosen, speakers = self._prompts.meeting_team(
                team, list(members) if members is not None else None
            )
            record = self._begin(question)
            record.step = "meeting"
            record.meeting = {"members": speakers, "chair": chosen.leader, "spoken": []}
            self._live.turn = record
            return record

        return self._drive(start)

    async def _drive(self, start: Callable[[], Awaitable[TurnRecord]]) -> AsyncIterator[AgentChunk]:
        """The chunks of a turn that ``start`` begins (or resumes) when the first is asked
        for: ``chat``, ``meeting`` and a continued turn return this generator itself, so each
        chunk passes one generator of the Agent, not two."""
        from .loop import TurnEngine

        record = await start()  # outside the try: a refused start leaves another turn alone
        live, control = self._live, self._control
        # the task iterating the turn, for abort(): looked up again after each chunk (a host may
        # move the iteration to another task); with the loop given, current_task() skips
        # get_running_loop(), a system call per chunk on Python 3.11
        loop = asyncio.get_running_loop()
        self._consumer = asyncio.current_task(loop)
        self._driving = record
        control.abort = False
        engine = TurnEngine(self._turn_deps(record), record)
        try:
            async for chunk in engine.run():
                self._consumer = asyncio.current_task(loop)
                yield chunk
        finally:
            # a host that stopped iterating early has its generator closed later (by the event
            # loop): by then another turn may be running, whose state this must not touch
            if self._driving is record:
                self._driving = None
                self._consumer = None
                control.abort = False
                live.busy = False
                if record.paused is None:
                    control.pause_reason = None  # the turn ended before it could pause
            if record.paused is None and live.turn is record:
                live.turn = None

    def _continue(self, record: TurnRecord) -> AsyncIterator[AgentChunk]:
        """Run a paused turn on (after :class:`PausedTurn` checked it may)."""

        async def start() -> TurnRecord:
            if self._live.busy:
                raise BusyError("a turn is already running")
            self.session_state.start()
            self._live.busy = True
            return record

        return self._drive(start)

    async def chat_text(self, text: str) -> str:
        """Run one turn and return the final answer text.  Raises by what ended the turn:
        ``ProviderError`` (the model's provider failed), ``TurnFailedError`` (memora or a
        plugin failed), ``AbortedError``, ``BusyError`` (the turn paused) — each a
        ``MemoraError`` with its code."""
        from ..chunks import DoneChunk

        turn = cast("AsyncGenerator[AgentChunk, None]", self.chat(text))
        async with contextlib.aclosing(turn) as stream:
            async for chunk in stream:
                if isinstance(chunk, DoneChunk):
                    return chunk.answer or ""
                error = _chat_text_error(chunk)
                if error is not None:
                    raise error
        return ""

    def chat_sync(self, text: str) -> str:
        """Synchronous hosts: initialise if needed, run one turn, return the final answer.

        Runs on an event loop owned by this Agent; do not mix with ``await agent.chat()``.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise BusyError(
                "chat_sync() cannot run inside an event loop; use `async for ... in agent.chat()`"
            )
        runner = self._sync_runner
        if runner is None:
            runner = asyncio.Runner()
            self._sync_runner = runner
        if not self._initialised:
            runner.run(self.init())
        return runner.run(self.chat_text(text))

    def close_sync(self) -> None:
        runner = self._sync_runner
        if runner is not None:
            runner.run(self.close())
            runner.close()
            self._sync_runner = None

    def abort(self) -> None:
        """Host abort signal: the running turn ends with ``aborted(stop_reason="user")``; the
        iterator then ends normally (no exception reaches the host)."""
        consumer = self._consumer
        if consumer is not None and not consumer.done() and self._live.busy:
            self._control.abort = True
            consumer.cancel()

    # ------------------------------------------------------------------------------------------
    # host control

    def switch_role_pack(self, name: str) -> None:
        """Activate another role pack (``agent.role_pack.activate``): prompt, strategy,
        capability map and tool set follow from the next LLM call on."""
        self._start()
        self.role_pack.activate(name)
        self._exposure.invalidate()

    def reload_config(self) -> builtins.list[str]:
        """Read the configuration again: role packs changed on disk (the active one is rebuilt
        and ``RolePackSwitched(reloaded=True)`` emitted), added or removed packs, project rules
        and skills, and the Agent ``options`` of the config files.  Providers, storage, the
        session store and the lock stay as they are (they hold connections and files; build a
        new Agent to change them).  Returns the names of the packs read again."""
        self._start()
        self._runtime.resolve()
        opts = self.options
        if "approvals" not in self._session_options:
            self.approvals = self._runtime.approvals
        self._live.duplicates = DuplicateCallInterceptor(opts.duplicate_call_threshold)
        self.retry_policy = RetryPolicy(
            max_attempts=opts.retry_attempts, base_delay=opts.retry_base_delay
        )
        changed = self.role_pack.refresh()
        self._exposure.invalidate()
        self._window.summarise = opts.enable_context_summary
        return changed

    def effective_max_tokens(self) -> int | None:
        """The output limit requests carry: min(``max_tokens``, the role pack's
        ``act.outputLimit``), ``None`` when neither is set.  Hosts must not recompute it."""
        return self.role_pack.strategy.max_tokens(self.options.max_tokens)

    async def append_message(self, role: str, content: str) -> None:
        """Add a message to the live conversation between turns (a system note, a message the
        host received elsewhere): the next request carries it and the session store keeps it.
        ``role`` is ``user``, ``assistant`` or ``system``."""
        self._start()
        if role not in ("user", "assistant", "system"):
            raise InvalidInputError(
                f"append_message role must be user, assistant or system, not {role!r}"
            )
        message = self._window.append(Message(role, clean_text(content)))  # type: ignore[arg-type]
        await self._runtime.session_store.append_messages(
            self._live.session_id, [message_to_dict(message)]
        )

    # ------------------------------------------------------------------------------------------
    # tools outside the conversation

    def exposed_tools(self) -> builtins.list[Tool]:
        """The tools the model sees under the active role pack (flags, capability map,
        ``resident_tools``), in registration order."""
        self._need("tools")
        return self._exposure.exposed(self.router.for_task("chat"))

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
        from ..chunks import ToolProgressChunk, ToolResultChunk
        from .loop import TurnEngine, new_round_id
        from .record import ApprovalDecision, ApprovalPause, PendingCall
        from .results import ToolCallResult

        self._start()
        await self._exposure.load_capability_tools()
        raw = args if isinstance(args, str) else json.dumps(dict(args or {}), ensure_ascii=False)
        live = self._live
        record = live.new_record(f"[direct tool call] {name}")
        record.duplicates = DuplicateCallInterceptor(self.options.duplicate_call_threshold)
        scratch = ContextWindow(self.messages, summarise=False)
        deps = dataclasses.replace(self._turn_deps(record, model_turn=False), window=scratch)
        engine = TurnEngine(deps, record)
        call = PendingCall(f"direct-{new_round_id()[2:]}", name, raw)
        live.busy = True
        try:
            chunks = [c async for c in engine.run_call(call)]
            pause = record.paused
            if isinstance(pause, ApprovalPause):
                if not approve:
                    return ToolCallResult(
                        name,
                        call.id,
                        False,
                        True,
                        "NEEDS_APPROVAL",
                        f"needs approval: {pause.reason}",
                        "",
                        needs_approval=pause.reason,
                    )
                record.approval = ApprovalDecision(call.id, True)
                chunks += [c async for c in engine.run_call(call)]
        finally:
            live.busy = False
            self.session_state.finish("direct tool call")
        result = next((c for c in chunks if isinstance(c, ToolResultChunk)), None)
        if result is None:  # ask_user: a question needs a conversation
            return ToolCallResult(
                name,
                call.id,
                False,
                True,
                "NOT_AVAILABLE",
                "this tool asks the user; it only runs inside a conversation",
                "",
            )
        last = scratch.last
        return ToolCallResult(
            name,
            call.id,
            result.ok,
            result.blocked,
            result.error_code,
            result.summary,
            last.content if last is not None else "",
            started=any(c.type == "tool_start" for c in chunks),
            progress=[c.content for c in chunks if isinstance(c, ToolProgressChunk)],
        )

    # ------------------------------------------------------------------------------------------
    # pauses: the PausedTurn value, and the Agent's own names for what it does

    @property
    def paused_turn(self) -> PausedTurn | None:
        """The paused turn (:class:`~memora.agent.pause.PausedTurn`: ``paused`` is a
        ``QuestionPause``, an ``ApprovalPause`` or a ``HostPause``; ``approve``, ``deny``,
        ``answer``, ``to_json``, ``discard``, ``resume``), or ``None``."""
        from .pause import PausedTurn

        turn = self._live.turn if self._initialised else None
        return PausedTurn(self, turn) if turn is not None and turn.paused is not None else None

    def _paused(self) -> PausedTurn:
        """The paused turn (dropped with ``PAUSE_EXPIRED`` when it waited too long)."""
        paused = self.paused_turn
        if paused is None:
            raise InvalidInputError("no turn is paused")
        paused._live()
        return paused

    def answer_question(self, answers: Mapping[str, str] | str, answer: str | None = None) -> None:
        """Answer a ``question_pending``: ``answer_question({"slot": "text"})`` or
        ``answer_question("slot", "text")`` (``paused_turn.answer``)."""
        paused = self.paused_turn
        if paused is None:
            raise InvalidInputError("no question is pending")
        paused.answer(answers, answer)

    def approve(self, tool_call_id: str, args: Mapping[str, Any] | None = None) -> None:
        """Approve the pending call, optionally with **edited** arguments (re-validated)
        (``paused_turn.approve``)."""
        self._paused().approve(args, tool_call_id=tool_call_id)

    def reject(self, tool_call_id: str, reason: str = "") -> None:
        """Refuse the pending call (``paused_turn.deny``)."""
        self._paused().deny(reason, tool_call_id=tool_call_id)

    def request_pause(self, reason: str = "") -> None:
        """Ask the running turn to pause before its next model call (a host's "pause" button):
        it yields ``paused``; ``continue_after_pause()`` resumes it where it stopped.  The
        checkpoint's ``pause_meta`` says ``source="user"``."""
        if not self._initialised or not self._live.busy or self._live.turn is None:
            raise InvalidInputError("no turn is running")
        self._control.pause_reason = reason

    def checkpoint(self) -> Checkpoint:
        """The session's checkpoint: status and error, goals, the plan and its step log, the
        pause (with its source), executed tool calls, heartbeat."""
        from .results import Checkpoint

        session_id = self.session_id
        state, live = self.session_state, self._live
        turn = live.turn
        return Checkpoint(
            session_id=session_id,
            status=state.status,
            error=state.error,
            error_at=state.error_at,
            recovered=state.recovered,
            main_goal=state.main_goal,
            current_goal=state.current_goal,
            goal_change_seq=state.goal_change_seq,
            plan=self.plan,
            plan_item_log=list(live.plan_log),
            pause_meta=turn.pause_meta if turn is not None and turn.paused is not None else None,
            completed_tool_calls=live.outbox.to_list(),
            last_heartbeat=state.heartbeat_at,
            paused_at=state.paused_at,
        )

    async def continue_after_pause(self) -> AsyncIterator[AgentChunk]:
        """Resume the paused turn (same round) after answering or approving — or, for a pause
        the host requested, as it is (``paused_turn.resume()``)."""
        async for chunk in self._paused().resume():
            yield chunk

    def pause_state(self) -> dict[str, Any]:
        """The paused turn as JSON-able data (``paused_turn.to_json()``); ``Agent.resume(state)``
        in a new process picks it up."""
        paused = self.paused_turn
        if paused is None:
            raise InvalidInputError("no turn is paused")
        return paused.to_json()

    async def resume(self, state: Mapping[str, Any]) -> None:
        """Restore a paused turn saved with :meth:`pause_state` (after a restart)."""
        from .record import TurnRecord

        data = _upgrade_pause_state(state)
        if self._live.busy or self.paused_turn is not None:
            raise BusyError("another turn is active")
        await self.switch_session(str(state["session_id"]))
        if state.get("role_pack") and state["role_pack"] != self._role_pack.active.name:
            self._role_pack.activate(str(state["role_pack"]))
        live = self._live
        turn = TurnRecord.from_dict(
            data,
            outbox=live.outbox,
            duplicates=live.duplicates,
            file_stamps=self._tool_context.file_stamps,
            plan=self._tool_context.task_table,
            plan_log=live.plan_log,
        )
        for m in turn.messages:
            self._window.append(message_from_dict(m))
        self.session_state.start()
        self.session_state.pause("resumed from a saved pause")
        live.turn = turn

    def discard_paused_turn(self) -> None:
        """Drop a paused turn without finishing it (``paused_turn.discard()``): its messages
        leave the live history (they were never stored), so no tool call is left without a
        result; nothing of it is stored.  Calls it already executed stay in the outbox."""
        self._drop_paused(self._live.turn if self._initialised else None)

    def _drop_paused(self, record: TurnRecord | None) -> None:
        if not self._initialised:
            return
        live = self._live
        if record is not None and record is not live.turn:
            return  # a stale PausedTurn: the Agent has moved on
        if record is not None and record.paused is not None:
            self._window.rollback(len(record.messages))
        live.turn = None
        self.session_state.finish("paused turn discarded")

    # ------------------------------------------------------------------------------------------
    # sessions and background tasks

    async def switch_session(self, session_id: str) -> None:
        self._start()
        await self._live.open(session_id, self)

    async def new_session(self, title: str = "") -> str:
        self._start()
        return await self._live.create(title, self)

    async def fork_session(self, at_round_id: str | None = None, *, switch: bool = True) -> str:
        """Copy this session's rounds up to ``at_round_id`` into a new session (emits
        ``SessionForked`` with the round count)."""
        self._start()
        current = self._live.session_id
        info, count = await self._runtime.session_store.fork(current, at_round_id)
        self.events.emit(SessionForked(current, info.id, count))
        if switch:
            await self._live.open(info.id, self)
        return str(info.id)

    def list_background_tasks(self) -> builtins.list[dict[str, object]]:
        self._need("tools")
        return self._runtime.background.list()

    async def kill_background_task(self, task_id: str) -> bool:
        self._need("tools")
        return await self._runtime.background.kill(task_id)

    def mark_recovered(self) -> StatusTransition:
        """The host dealt with the error that stopped the session: chatting is allowed again."""
        return self.session_state.mark_recovered()
