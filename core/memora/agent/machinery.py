"""The machinery of one Agent's session, with one owner.

The Agent (:mod:`memora.agent.agent`) is the facade a host holds; :class:`SessionMachinery` is
what ``init()`` builds behind it and owns until the Agent is freed: the role packs, the tool
registry, the context window, the live session, the tool context, tool exposure and prompts.
Its parts are its public state — the Agent, :class:`~memora.agent.pause.PausedTurn` and the
turn engine (through the :class:`~memora.agent.loop.TurnDeps` it builds per turn) use them, and
nothing reaches into another object's private attributes.  It reads the Agent through the
Agent's public surface only (options, router, approvals, retry policy, session state), held
weakly: the Agent owns it, not the other way round.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ..chunks import AgentChunk, ToolProgressChunk, ToolResultChunk
from ..errors import (
    BusyError,
    InvalidInputError,
    NotAvailableError,
    NotFoundError,
    NotInitializedError,
)
from ..llm.provider import complete_text, model_label
from ..llm.types import LLMRequest, Message, clean_text
from ..role_pack.manager import RolePackManager
from ..security.state import user_config_dir
from ..tools.base import Tool, ToolRegistry
from ..tools.context import ToolContext
from ..tools.process import child_environment
from ..tools.task_table import TaskTable
from .context_window import ContextOccupancy, ContextWindow, no_background
from .driver import TurnDriver
from .durable import DurableTurn, JournalError, check_state_key, check_state_version
from .exposure import ToolExposure
from .loop import TurnDeps, TurnEngine, new_round_id
from .output import OutputSpec
from .pause import upgrade_pause_state
from .prompts import Prompts
from .record import ApprovalDecision, ApprovalPause, PendingCall, TurnRecord
from .results import Checkpoint, PolishManager, SessionManager, ToolCallResult
from .serialize import message_from_dict, message_to_dict
from .session import LiveSession, SummaryPlan
from .state import DuplicateCallInterceptor

if TYPE_CHECKING:
    from ..llm.provider import Provider
    from ..memory.manager import MemoryManager
    from .agent import Agent
    from .options import AgentOptions

logger = logging.getLogger("memora.agent")

__all__ = ["SessionMachinery", "role_packs_for"]


def role_packs_for(opts: AgentOptions, **extra: Any) -> RolePackManager:
    """The role packs the options name (config folder, pack folders, the active one, the
    fallback, the project's); ``extra``: what a session adds (its skills, events, messages)."""
    return RolePackManager(
        # the user config folder as everywhere else (config_dir, else $MEMORA_HOME, else
        # ~/.config/memora): with no config_dir the user's own packs and skills were not read
        user_config_dir(opts.config_dir),
        pack_roots=opts.role_pack_dirs,
        active=opts.active_role_pack,
        fallback_role=opts.builtin_fallback_role,
        project_path=Path(opts.project_path),
        **extra,
    )


class SessionMachinery:
    """One Agent's session parts, built at ``init()`` (see the module docstring)."""

    def __init__(self, agent: Agent, driver: TurnDriver) -> None:
        # the parts refer back to the Agent weakly (they live only as long as it does) and
        # release() cuts the rest at close: a closed Agent is freed when its last user lets
        # go, not at the next full garbage collection
        me = cast("Agent", weakref.proxy(agent))
        self.agent = me
        """The Agent, held weakly; only its public surface is read."""
        self.driver = driver
        """The Agent's turn driver: the running turn and the host's signals to it."""
        self.turn_kept = asyncio.Event()
        """Set once the turn last started is kept by the turn executor (at once without one),
        or has ended: :meth:`Agent.turn_kept`."""
        runtime = agent.runtime
        opts = agent.options
        project = Path(opts.project_path)
        isolated = bool(opts.isolate_tools if opts.isolate_tools is not None else opts.memory_scope)
        self.role_pack = role_packs_for(
            opts,
            disabled_skills=opts.disabled_skills,
            strategy_override=opts.strategy_override,
            events=agent.events,
            messages=agent.messages,
        )
        self.role_pack.resolve_initial()
        self.role_pack.edit_check = opts.role_pack_edit_check
        self.tools = ToolRegistry()
        self.tools.executor = _executor(agent)
        self.plugin_tools: dict[str, Tool] = {}
        """The plugins' tools this session registered (to replace or remove them later)."""
        self.sync_plugin_tools()
        table = TaskTable()
        self.window = ContextWindow(agent.messages, summarise=opts.enable_context_summary)
        # the Agent's view of memory: its scope's and the project's unscoped (every read filtered
        # in the storage's own query; the round memories it writes go into its scope)
        self.memory: MemoryManager = runtime.memory.for_scope(opts.memory_scope)
        self.live = LiveSession(
            runtime,
            self.window,
            agent.session_state,
            DuplicateCallInterceptor(opts.duplicate_call_threshold),
            events=agent.events,
            memory=self.memory,
        )
        self.tool_context = ToolContext(
            project=project,
            guard=runtime.guard,
            permission=opts.permission,
            memory=self.memory,
            role_packs=self.role_pack,
            works=runtime.works,
            background=runtime.background.for_scope(opts.memory_scope),
            task_table=table,
            services=runtime.services,
            node_path=opts.node_path,
            env=child_environment(opts.command_env_allow, opts.command_env)
            if opts.command_env_allow or opts.command_env
            else None,
            branch_round_ids=_branch_rounds(self.live),
            consistency_check=opts.file_consistency_check,
            # one of several people's Agents: what a tool starts finds memora's data empty
            hide=runtime.hidden if isolated else (),
            hide_refused=_unhideable(runtime.unhideable) if isolated else None,
        )
        self.live.bind(self.tool_context)
        self.window.spawn = self.live.spawn
        if runtime.router.for_task("background") is not runtime.router.chat:
            # a background provider is configured: trimmed history gets an LLM summary there
            self.window.summariser = functools.partial(_summarise_trimmed, me)
        self.exposure = ToolExposure(
            runtime,
            self.tools,
            self.role_pack,
            table,
            window=functools.partial(_window_of, self.role_pack, me),
        )
        self.prompts = Prompts(
            self.role_pack,
            agent.messages,
            table,
            self.live.plan_log,
            project=project,
            teams=opts.role_pack_teams,
        )
        self.polish = PolishManager(me)
        self.sessions = SessionManager(me)

    def release(self) -> None:
        """At close: the hooks that only a running turn calls let go of the Agent and its live
        session (no turn runs once it is closed)."""
        self.agent.session_state.on_drift = None
        self.window.spawn = no_background
        self.window.summariser = None

    # -- tools, config --------------------------------------------------------------------------

    def sync_plugin_tools(self) -> None:
        """The plugins' tools on the session's registry: added, replaced and removed as plugins
        come and go; a tool the host registered on ``agent.tools`` under the same name wins."""
        wanted = self.agent.runtime.plugins.registered("tool")
        registry, mine = self.tools, self.plugin_tools
        for name, old in list(mine.items()):
            reg = wanted.get(name)
            if reg is None or reg.value is not old:
                if registry.get(name) is old:
                    registry.unregister(name)
                del mine[name]
        for name, reg in wanted.items():
            if name in mine:
                continue
            if name in registry:  # registered directly on agent.tools by the host: it wins
                logger.info("tool %r of plugin %r is shadowed by agent.tools", name, reg.plugin)
                continue
            registry.register(reg.value, owner=reg.plugin)
            mine[name] = reg.value

    def plugins_changed(self) -> None:
        """A plugin was registered or unregistered after ``init()``."""
        self.sync_plugin_tools()
        self.exposure.invalidate()

    def reload(self) -> list[str]:
        """The parts' share of ``agent.reload_config()`` (after the settings were resolved
        again): the duplicate guard, the role packs, exposure and the window."""
        opts = self.agent.options
        self.live.duplicates = DuplicateCallInterceptor(opts.duplicate_call_threshold)
        changed = self.role_pack.refresh()
        self.exposure.invalidate()
        self.window.summarise = opts.enable_context_summary
        return changed

    def window_of(self, provider: Provider) -> int:
        """The context window a request to ``provider`` may fill."""
        return _window_of(self.role_pack, self.agent, provider)

    # -- turns ----------------------------------------------------------------------------------

    def check_idle(self) -> None:
        """Refuse a new turn while one runs or waits paused."""
        live = self.live
        if live.busy:
            raise BusyError(
                "a turn is already running on this agent (one session runs at a time); wait for it, "
                "or use one Agent per project to work in parallel"
            )
        if live.turn is not None and live.turn.paused is not None:
            raise BusyError(
                "the current turn is paused; answer it through agent.paused_turn (answer, approve "
                "or deny, then resume()), or drop it with agent.paused_turn.discard()"
            )

    def begin(self, text: str) -> TurnRecord:
        """A new turn's record, the session moved to ``running`` (the Agent checked it may)."""
        text = clean_text(text)  # a lone surrogate would make every later request unencodable
        state = self.agent.session_state
        state.start()  # raises while an unrecovered error stands
        state.set_goal(text)
        self.live.busy = True
        return self.live.new_record(text)

    async def chat_turn(self, record: TurnRecord) -> TurnRecord:
        """A chat turn made ready to run: its tools loaded, its pinned memories read."""
        live = self.live
        live.duplicates.reset()
        await self._ready(record)
        live.turn = record
        return record

    async def _ready(self, record: TurnRecord) -> None:
        """What a turn needs besides its record — its capabilities' tools loaded, the scope's
        pinned memories read — for a new turn and for one taken over from its journal alike."""
        self.exposure.plan_asked = self.prompts.asks_for_plan(record.user_text)
        try:
            await self.exposure.load_capability_tools()
            self.prompts.pinned = await self._pinned_block()
        except BaseException:
            self.live.busy = False
            raise

    async def _pinned_block(self) -> str | None:
        """The scope's pinned memories for this turn's prompt; a store that fails to answer
        costs the block, never the turn."""
        try:
            return await self.memory.pinned_block()
        except Exception as exc:
            logger.warning("reading the pinned memories failed: %s", exc)
            return None

    def drive(self, start: Callable[[], Awaitable[TurnRecord]]) -> AsyncIterator[AgentChunk]:
        """The chunks of the turn ``start`` begins or resumes, run by the turn engine."""
        previous, kept = self.turn_kept, asyncio.Event()
        self.turn_kept = kept

        async def started() -> TurnRecord:
            try:
                return await start()
            except BaseException:
                kept.set()  # refused (busy, its tools failed to load): it will never be kept
                if self.turn_kept is kept:  # a turn still running is the one to wait for
                    self.turn_kept = previous
                raise

        return self.driver.drive(self.live, started, self.run_turn)

    def run_turn(self, record: TurnRecord) -> AsyncIterator[AgentChunk]:
        engine = TurnEngine(self.turn_deps(record), record)
        executor = self.agent.runtime.turn_executor
        if executor is None:
            self.turn_kept.set()  # nothing is kept: as accepted as it will be
            return engine.run()
        record.runs += 1  # a durable turn: each start or continuation is one run of its round
        return self._kept(record, executor.execute(self._durable(record, engine)))

    async def _kept(
        self, record: TurnRecord, chunks: AsyncIterator[AgentChunk]
    ) -> AsyncIterator[AgentChunk]:
        """An executed turn's chunks; when its executor could not keep it (``JournalError``),
        the turn's messages leave the window: it is unfinished, and goes on — from what was
        kept — wherever it is taken over, this Agent's history as the store has it."""
        kept = self.turn_kept
        try:
            async for chunk in chunks:
                yield chunk
        except JournalError:
            self.window.rollback(len(record.messages))
            raise
        finally:
            kept.set()  # ended, or failed before its start was kept: nobody waits on for it

    def _durable(self, record: TurnRecord, engine: TurnEngine) -> DurableTurn:
        key = f"memora:{record.session_id}:{record.round_id}:{record.runs}"
        control = self.driver.control
        return DurableTurn(key, record, engine.run_durably, control, on_kept=self.turn_kept.set)

    def take_over(self, key: str) -> AsyncIterator[AgentChunk]:
        """``agent.take_over(key)``: the durable turn ``key``, left unfinished by a worker
        that died, continued here from the last state its executor kept."""
        executor = self.agent.runtime.turn_executor
        if executor is None:
            raise NotAvailableError(
                'no turn executor is configured ("turn_executor" in the user\'s config): '
                "there is no durable turn to take over"
            )

        async def start() -> TurnRecord:
            self.check_idle()
            state = await executor.last_state(key)
            if state is None:
                raise NotFoundError(f"no unfinished durable turn {key!r}", context={"key": key})
            check_state_version(state)
            check_state_key(state, key)
            return await self._restore_running(state)

        def chunks_of(record: TurnRecord) -> AsyncIterator[AgentChunk]:
            engine = TurnEngine(self.turn_deps(record), record)
            engine.recovered = True
            turn = DurableTurn(key, record, engine.run_durably, self.driver.control)
            return self._kept(record, executor.recover(turn))

        return self.driver.drive(self.live, start, chunks_of)

    async def _restore_running(self, state: Mapping[str, Any]) -> TurnRecord:
        """A running turn's kept state made this session's turn again (its session opened,
        its messages in the window), ready for the engine to go on from its step."""
        await self.agent.switch_session(str(state["session_id"]))
        live = self.live
        record = TurnRecord.from_dict(
            dict(state),
            outbox=live.outbox,
            duplicates=live.duplicates,
            file_stamps=self.tool_context.file_stamps,
            plan=self.tool_context.task_table,
            plan_log=live.plan_log,
        )
        schema = record.output_schema
        if schema is not None:  # a typed turn checks its result against the same schema
            record.output_spec = OutputSpec.from_json_schema(schema)
        for m in record.messages:
            self.window.append(message_from_dict(m))
        session = self.agent.session_state
        session.start()
        session.set_goal(record.user_text)
        live.busy = True
        # a worker that never served the session has not loaded its capabilities' tools: the
        # turn would go on without them (every call to one "no tool named ... here")
        await self._ready(record)
        live.turn = record
        return record

    def continue_turn(self, record: TurnRecord) -> AsyncIterator[AgentChunk]:
        """Run a paused turn on (after :class:`PausedTurn` checked it may)."""

        async def start() -> TurnRecord:
            if self.live.busy:
                raise BusyError("a turn is already running")
            self.agent.session_state.start()
            self.live.busy = True
            return record

        return self.drive(start)

    def turn_deps(self, record: TurnRecord, *, model_turn: bool = True) -> TurnDeps:
        """What the turn engine sees (built once per turn or resumption): values and objects,
        no callbacks into the Agent.  A model turn whose tools do not fit the window runs as
        ``toolMode: block``; a host's own ``call_tool`` (``model_turn=False``) is not."""
        agent = self.agent
        opts = agent.options
        router = agent.router
        provider = router.for_task("chat")
        if model_turn:
            record.model = model_label(provider)
        tools = self.exposure.for_turn(provider)
        strategy = self.role_pack.strategy
        if model_turn and strategy.tool_mode != "block" and tools.withheld is not None:
            strategy = dataclasses.replace(strategy, tool_mode="block")
        base = self.tool_context.derive(
            session_id=record.session_id,
            round_id=record.round_id,
            readonly=strategy.tool_readonly,
            web_search_limit=strategy.web_search_limit,
            counters=record.counters,
            file_stamps=record.file_stamps,
            task_table=record.plan,
            progress=None,
            deps=record.deps,
        )
        spec = record.output_spec if model_turn else None
        summary = (
            SummaryPlan(
                router, strategy.summary_focus, opts.summary_verbatim_tokens, agent.messages
            )
            if opts.archive_mode == "full" and strategy.summary
            else None
        )
        runtime = agent.runtime
        return TurnDeps(
            window=self.window,
            tools=self.tools,
            strategy=strategy,
            messages=agent.messages,
            tracer=runtime.tracer,
            session=agent.session_state,
            provider=provider,
            review_provider=router.for_task("reasoning"),
            retry_policy=agent.retry_policy,
            check=runtime.plugins.pre_execution_check,
            tool_context=base,
            exposure=tools,
            prompts=self.prompts.for_turn(provider, tools),
            window_tokens=self.window_of(provider),
            output_reserve=strategy.max_tokens(opts.max_tokens) or 1024,
            max_tokens=strategy.max_tokens(opts.max_tokens),
            history_key=self.live.session_id,
            project_path=opts.project_path,
            permission=opts.permission,
            role_pack=self.role_pack.active.name,
            confirm_writes=opts.confirm_writes,
            confirm_scripts=opts.confirm_scripts,
            approvals=agent.approvals,
            duplicate_threshold=opts.duplicate_call_threshold,
            duplicate_interceptor=opts.duplicate_interceptor,
            max_iterations=strategy.max_iterations(opts.max_iterations),
            stall_timeout=opts.llm_stall_timeout,
            journal=self.live,
            summary=summary,
            control=self.driver.control,
            output=spec,
            # a typed turn with tools ends by calling final_result; without, its text is the result
            output_tool=spec is not None and strategy.tool_mode != "block" and bool(tools.specs()),
        )

    # -- pauses ---------------------------------------------------------------------------------

    def drop_paused(self, record: TurnRecord | None) -> None:
        """Drop the paused turn ``record`` (its messages leave the live history); a stale one
        (the session moved on) is left alone."""
        live = self.live
        if record is not None and record is not live.turn:
            return
        if record is not None and record.paused is not None:
            self.window.rollback(len(record.messages))
        live.turn = None
        self.agent.session_state.finish("paused turn discarded")

    async def restore_pause(
        self, state: Mapping[str, Any], spec: OutputSpec | None = None, deps: Any = None
    ) -> None:
        """``agent.resume(state)``: the paused turn saved by ``paused_turn.to_json()`` restored
        (on the session ``agent.switch_session`` opened) — typed again with ``spec`` when it was
        a typed turn (the same schema), with the host's ``deps``."""
        data = upgrade_pause_state(state)
        saved = data.get("output_schema")
        if saved is not None and spec is None:
            raise InvalidInputError(
                "this paused turn was a typed turn: pass its output_type to resume(state, "
                "output_type=...)"
            )
        if spec is not None and saved != spec.schema:
            raise InvalidInputError(
                f"output_type {spec.name} is not the type this paused turn asked for (its JSON "
                "schema differs)"
                if saved is not None
                else "this paused turn was not a typed turn"
            )
        await self.agent.switch_session(str(state["session_id"]))
        if state.get("role_pack") and state["role_pack"] != self.role_pack.active.name:
            self.role_pack.activate(str(state["role_pack"]))
        live = self.live
        turn = TurnRecord.from_dict(
            data,
            outbox=live.outbox,
            duplicates=live.duplicates,
            file_stamps=self.tool_context.file_stamps,
            plan=self.tool_context.task_table,
            plan_log=live.plan_log,
        )
        turn.output_spec, turn.deps = spec, deps
        for m in turn.messages:
            self.window.append(message_from_dict(m))
        session = self.agent.session_state
        session.start()
        session.pause("resumed from a saved pause")
        live.turn = turn

    # -- outside the conversation ---------------------------------------------------------------

    async def direct_call(
        self, name: str, args: Mapping[str, Any] | str | None, *, approve: bool
    ) -> ToolCallResult:
        """``agent.call_tool``: one tool call through the loop's gates, outside the conversation
        (the Agent checked no turn runs)."""
        await self.exposure.load_capability_tools()
        raw = args if isinstance(args, str) else json.dumps(dict(args or {}), ensure_ascii=False)
        live = self.live
        record = live.new_record(f"[direct tool call] {name}")
        record.duplicates = DuplicateCallInterceptor(self.agent.options.duplicate_call_threshold)
        scratch = ContextWindow(self.agent.messages, summarise=False)
        deps = dataclasses.replace(self.turn_deps(record, model_turn=False), window=scratch)
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
            self.agent.session_state.finish("direct tool call")
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

    def checkpoint(self) -> Checkpoint:
        """``agent.checkpoint()``."""
        agent = self.agent
        state, live = agent.session_state, self.live
        turn = live.turn
        return Checkpoint(
            session_id=str(live.session_id),
            status=state.status,
            error=state.error,
            error_at=state.error_at,
            recovered=state.recovered,
            main_goal=state.main_goal,
            current_goal=state.current_goal,
            goal_change_seq=state.goal_change_seq,
            plan=agent.plan,
            plan_item_log=list(live.plan_log),
            pause_meta=turn.pause_meta if turn is not None and turn.paused is not None else None,
            completed_tool_calls=live.outbox.to_list(),
            last_heartbeat=state.heartbeat_at,
            paused_at=state.paused_at,
        )

    def context_usage(self) -> ContextOccupancy:
        """``agent.context_usage()``."""
        last = self.window.occupancy
        if last is not None:
            return last
        agent = self.agent
        chat = agent.router.for_task("chat")
        tools = self.exposure.for_turn(chat)
        return self.window.measure(
            self.prompts.system(chat, tools),
            self.window_of(chat),
            agent.effective_max_tokens() or 1024,
            self.prompts.plan_section(),
            tools.spec_tokens(),
        )

    async def append_message(self, role: str, content: str) -> None:
        """``agent.append_message``: the live window and the session store."""
        if role not in ("user", "assistant", "system"):
            raise InvalidInputError(
                f"append_message role must be user, assistant or system, not {role!r}"
            )
        message = self.window.append(Message(role, clean_text(content)))  # type: ignore[arg-type]
        await self.agent.runtime.session_store.append_messages(
            self.live.session_id, [message_to_dict(message)]
        )


def _window_of(packs: RolePackManager, agent: Agent, provider: Provider) -> int:
    """The context window a request to ``provider`` may fill."""
    window = min(provider.context_window, agent.options.max_context_tokens)
    return packs.strategy.effective_window(window)


async def _summarise_trimmed(agent: Agent, dropped: list[Message]) -> str:
    """An LLM summary of messages trimmed from the context, on the background provider."""
    labels = {"user": agent.messages.user_label, "assistant": agent.messages.assistant_label}
    transcript = "\n".join(
        f"{labels[m.role]}: {m.content[:2000]}"
        for m in dropped
        if m.role in labels and m.content.strip()
    )
    if not transcript:
        return ""
    request = LLMRequest(
        [Message.system(agent.messages.context_summary_prompt), Message.user(transcript)],
        temperature=0.2,
        max_tokens=400,
    )
    text = await complete_text(agent.router.for_task("background"), request)
    return f"{agent.messages.recent_conversation_label} (summary): {text.strip()}"


def _unhideable(folders: tuple[Path, ...]) -> str | None:
    """Why an isolated Agent's tools start no process: one of memora's folders holds the
    project, so a command working there could read memora's data (keys, tokens, other people's
    sessions), and hiding that folder would hide the project too."""
    if not folders:
        return None
    return (
        f"commands are refused: memora's folder {folders[0]} holds the project, so a command "
        "working in the project could read memora's data (keys, tokens, other people's "
        "sessions) and the folder cannot be hidden without hiding the project; keep memora's "
        "data and config folders apart from the project (docs/service.md)"
    )


def _executor(agent: Agent) -> Callable[..., Awaitable[ToolCallResult]]:
    """``agent.tools.execute``: the Agent's ``call_tool``, held weakly (the registry is the
    Agent's own)."""
    ref = weakref.ref(agent)

    async def execute(
        name: str, args: Mapping[str, Any] | str | None = None, *, approve: bool = False
    ) -> ToolCallResult:
        owner = ref()
        if owner is None:
            raise NotInitializedError("the Agent these tools belong to is gone")
        return await owner.call_tool(name, args, approve=approve)

    return execute


def _branch_rounds(live: LiveSession) -> Callable[[], list[str]]:
    """The rounds of the live session's branch, for ``memory_search(scope="branch")``; the
    session held weakly (it holds the tool context that holds this)."""
    ref = weakref.ref(live)

    def rounds() -> list[str]:
        current = ref()
        return list(current.round_ids) if current is not None else []

    return rounds
