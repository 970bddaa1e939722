"""How an Agent's session is put together and what its turns are given.

The Agent (:mod:`memora.agent.agent`) is the facade a host holds; the machinery behind its
methods lives here, as functions of the Agent: the session's objects built at ``init()``, the
narrow :class:`~memora.agent.loop.TurnDeps` each turn is given, a host's direct tool call, the
checkpoint, and a paused turn restored from its saved state.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..chunks import (
    AbortedChunk,
    AgentChunk,
    DoneChunk,
    ErrorChunk,
    ToolProgressChunk,
    ToolResultChunk,
)
from ..errors import (
    AbortedError,
    BusyError,
    ErrorCode,
    InvalidInputError,
    MemoraError,
    NotInitializedError,
    OutputValidationError,
    ProviderError,
    TurnFailedError,
)
from ..llm.provider import complete_text, model_label
from ..llm.retry import RetryPolicy
from ..llm.types import LLMRequest, Message
from ..role_pack.manager import RolePackManager
from ..tools.base import ToolRegistry
from ..tools.context import ToolContext
from ..tools.process import child_environment
from ..tools.task_table import TaskTable
from .context_window import ContextWindow, no_background
from .exposure import ToolExposure
from .loop import TurnDeps, TurnEngine, new_round_id
from .output import OutputSpec
from .pause import PAUSE_STATE_VERSION
from .prompts import Prompts
from .record import ApprovalDecision, ApprovalPause, PendingCall, TurnRecord
from .results import Checkpoint, PolishManager, SessionManager, ToolCallResult
from .serialize import message_from_dict
from .session import LiveSession, SummaryPlan
from .state import DuplicateCallInterceptor

if TYPE_CHECKING:
    from ..llm.provider import Provider
    from .agent import Agent
    from .options import AgentOptions

logger = logging.getLogger("memora.agent")

__all__ = [
    "build_session",
    "chat_text_error",
    "checkpoint",
    "direct_call",
    "reload_config",
    "restore_pause",
    "role_packs_for",
    "summarise_trimmed",
    "sync_plugin_tools",
    "turn_deps",
    "turn_result",
    "upgrade_pause_state",
    "window_of",
]


def role_packs_for(opts: AgentOptions, **extra: Any) -> RolePackManager:
    """The role packs the options name (config folder, pack folders, the active one, the
    fallback, the project's); ``extra``: what a session adds (its skills, events, messages)."""
    return RolePackManager(
        opts.config_dir,
        pack_roots=opts.role_pack_dirs,
        active=opts.active_role_pack,
        fallback_role=opts.builtin_fallback_role,
        project_path=Path(opts.project_path),
        **extra,
    )


def build_session(agent: Agent) -> None:
    """The session's objects on the open runtime (``agent.init()``): role packs, tools, the live
    session, the tool context, exposure and prompts."""
    runtime = agent._runtime
    opts = agent.options
    agent.messages = opts.messages
    agent.approvals = agent._session_options.get("approvals", runtime.approvals)
    agent.retry_policy = RetryPolicy(
        max_attempts=opts.retry_attempts, base_delay=opts.retry_base_delay
    )
    project = Path(opts.project_path)
    agent._role_pack = role_packs_for(
        opts,
        disabled_skills=opts.disabled_skills,
        strategy_override=opts.strategy_override,
        events=agent.events,
        messages=agent.messages,
    )
    agent._role_pack.resolve_initial()
    agent._role_pack.edit_check = opts.role_pack_edit_check
    agent._tools = ToolRegistry()
    agent._tools.executor = _executor(agent)
    agent._plugin_tools = {}
    sync_plugin_tools(agent)
    table = TaskTable()
    agent._window = ContextWindow(agent.messages, summarise=opts.enable_context_summary)
    # the Agent's view of memory: its scope's and the project's unscoped (every read filtered
    # in the storage's own query; the round memories it writes go into its scope)
    agent._memory = runtime.memory.for_scope(opts.memory_scope)
    agent._live = LiveSession(
        runtime,
        agent._window,
        agent.session_state,
        DuplicateCallInterceptor(opts.duplicate_call_threshold),
        events=agent.events,
        memory=agent._memory,
    )
    agent._tool_context = ToolContext(
        project=project,
        guard=runtime.guard,
        permission=opts.permission,
        memory=agent._memory,
        role_packs=agent._role_pack,
        works=runtime.works,
        background=runtime.background.for_scope(opts.memory_scope),
        task_table=table,
        services=runtime.services,
        node_path=opts.node_path,
        env=child_environment(opts.command_env_allow, opts.command_env)
        if opts.command_env_allow or opts.command_env
        else None,
        branch_round_ids=_branch_rounds(agent._live),
        consistency_check=opts.file_consistency_check,
        # one of several people's Agents: what a tool starts finds memora's data empty
        hide=runtime.hidden
        if (opts.isolate_tools if opts.isolate_tools is not None else opts.memory_scope)
        else (),
    )
    agent._live.bind(agent._tool_context)
    agent._window.spawn = agent._live.spawn
    if runtime.router.for_task("background") is not runtime.router.chat:
        # a background provider is configured: trimmed history gets an LLM summary there
        agent._window.summariser = functools.partial(summarise_trimmed, agent)
    # the session's objects refer back to the Agent weakly where they can (they live only as
    # long as it does), and release_session() cuts the rest at close: a closed Agent is freed
    # when its last user lets go, not at the next full garbage collection
    me = weakref.proxy(agent)
    agent._exposure = ToolExposure(
        runtime, agent._tools, agent._role_pack, table, window=functools.partial(window_of, me)
    )
    agent._prompts = Prompts(
        agent._role_pack,
        agent.messages,
        table,
        agent._live.plan_log,
        project=project,
        teams=opts.role_pack_teams,
    )
    agent._polish = PolishManager(me)
    agent._sessions = SessionManager(me)


def release_session(agent: Agent) -> None:
    """At close: the hooks that only a running turn calls let go of the Agent and its live
    session (no turn runs once it is closed)."""
    agent.session_state.on_drift = None
    agent._window.spawn = no_background
    agent._window.summariser = None


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


def sync_plugin_tools(agent: Agent) -> None:
    """The plugins' tools on the Agent's registry: added, replaced and removed as plugins come
    and go; a tool the host registered on ``agent.tools`` under the same name wins."""
    wanted = agent._runtime.plugins.registered("tool")
    for name, old in list(agent._plugin_tools.items()):
        reg = wanted.get(name)
        if reg is None or reg.value is not old:
            if agent._tools.get(name) is old:
                agent._tools.unregister(name)
            del agent._plugin_tools[name]
    for name, reg in wanted.items():
        if name in agent._plugin_tools:
            continue
        if name in agent._tools:  # registered directly on agent.tools by the host: it wins
            logger.info("tool %r of plugin %r is shadowed by agent.tools", name, reg.plugin)
            continue
        agent._tools.register(reg.value, owner=reg.plugin)
        agent._plugin_tools[name] = reg.value


def window_of(agent: Agent, provider: Provider) -> int:
    """The context window a request to ``provider`` may fill."""
    window = min(provider.context_window, agent.options.max_context_tokens)
    return agent._role_pack.strategy.effective_window(window)


def reload_config(agent: Agent) -> list[str]:
    """``agent.reload_config()``: the settings resolved again and what follows from them."""
    agent._runtime.resolve()
    opts = agent.options
    if "approvals" not in agent._session_options:
        agent.approvals = agent._runtime.approvals
    agent._live.duplicates = DuplicateCallInterceptor(opts.duplicate_call_threshold)
    agent.retry_policy = RetryPolicy(
        max_attempts=opts.retry_attempts, base_delay=opts.retry_base_delay
    )
    changed = agent._role_pack.refresh()
    agent._exposure.invalidate()
    agent._window.summarise = opts.enable_context_summary
    return changed


def turn_deps(agent: Agent, record: TurnRecord, *, model_turn: bool = True) -> TurnDeps:
    """What the turn engine sees (built once per turn or resumption): values and objects,
    no callbacks into the Agent.  A model turn whose tools do not fit the window runs as
    ``toolMode: block``; a host's own ``call_tool`` (``model_turn=False``) is not."""
    opts = agent.options
    router = agent.router
    provider = router.for_task("chat")
    if model_turn:
        record.model = model_label(provider)
    tools = agent._exposure.for_turn(provider)
    strategy = agent._role_pack.strategy
    if model_turn and strategy.tool_mode != "block" and tools.withheld is not None:
        strategy = dataclasses.replace(strategy, tool_mode="block")
    base = agent._tool_context.derive(
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
        SummaryPlan(router, strategy.summary_focus, opts.summary_verbatim_tokens, agent.messages)
        if opts.archive_mode == "full" and strategy.summary
        else None
    )
    return TurnDeps(
        window=agent._window,
        tools=agent._tools,
        strategy=strategy,
        messages=agent.messages,
        tracer=agent._runtime.tracer,
        session=agent.session_state,
        provider=provider,
        review_provider=router.for_task("reasoning"),
        retry_policy=agent.retry_policy,
        check=agent._runtime.plugins.pre_execution_check,
        tool_context=base,
        exposure=tools,
        prompts=agent._prompts.for_turn(provider, tools),
        window_tokens=window_of(agent, provider),
        output_reserve=strategy.max_tokens(opts.max_tokens) or 1024,
        max_tokens=strategy.max_tokens(opts.max_tokens),
        history_key=agent._live.session_id,
        project_path=opts.project_path,
        permission=opts.permission,
        role_pack=agent._role_pack.active.name,
        confirm_writes=opts.confirm_writes,
        confirm_scripts=opts.confirm_scripts,
        approvals=agent.approvals,
        duplicate_threshold=opts.duplicate_call_threshold,
        duplicate_interceptor=opts.duplicate_interceptor,
        max_iterations=strategy.max_iterations(opts.max_iterations),
        stall_timeout=opts.llm_stall_timeout,
        journal=agent._live,
        summary=summary,
        control=agent._control,
        output=spec,
        # a typed turn with tools ends by calling final_result; without, its text is the result
        output_tool=spec is not None and strategy.tool_mode != "block" and bool(tools.specs()),
    )


async def summarise_trimmed(agent: Agent, dropped: list[Message]) -> str:
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


async def direct_call(
    agent: Agent, name: str, args: Mapping[str, Any] | str | None, *, approve: bool
) -> ToolCallResult:
    """``agent.call_tool``: one tool call through the loop's gates, outside the conversation."""
    agent._start()
    await agent._exposure.load_capability_tools()
    raw = args if isinstance(args, str) else json.dumps(dict(args or {}), ensure_ascii=False)
    live = agent._live
    record = live.new_record(f"[direct tool call] {name}")
    record.duplicates = DuplicateCallInterceptor(agent.options.duplicate_call_threshold)
    scratch = ContextWindow(agent.messages, summarise=False)
    deps = dataclasses.replace(turn_deps(agent, record, model_turn=False), window=scratch)
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
        agent.session_state.finish("direct tool call")
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


def checkpoint(agent: Agent) -> Checkpoint:
    """``agent.checkpoint()``."""
    session_id = agent.session_id
    state, live = agent.session_state, agent._live
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
        plan=agent.plan,
        plan_item_log=list(live.plan_log),
        pause_meta=turn.pause_meta if turn is not None and turn.paused is not None else None,
        completed_tool_calls=live.outbox.to_list(),
        last_heartbeat=state.heartbeat_at,
        paused_at=state.paused_at,
    )


def upgrade_pause_state(state: Mapping[str, Any]) -> dict[str, Any]:
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


async def restore_pause(
    agent: Agent, state: Mapping[str, Any], spec: OutputSpec | None = None, deps: Any = None
) -> None:
    """``agent.resume(state)``: the paused turn saved by ``paused_turn.to_json()`` restored —
    typed again with ``spec`` when it was a typed turn (the same schema), with the host's
    ``deps``."""
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
    await agent.switch_session(str(state["session_id"]))
    if state.get("role_pack") and state["role_pack"] != agent._role_pack.active.name:
        agent._role_pack.activate(str(state["role_pack"]))
    live = agent._live
    turn = TurnRecord.from_dict(
        data,
        outbox=live.outbox,
        duplicates=live.duplicates,
        file_stamps=agent._tool_context.file_stamps,
        plan=agent._tool_context.task_table,
        plan_log=live.plan_log,
    )
    turn.output_spec, turn.deps = spec, deps
    for m in turn.messages:
        agent._window.append(message_from_dict(m))
    agent.session_state.start()
    agent.session_state.pause("resumed from a saved pause")
    live.turn = turn


async def turn_result(turn: AsyncIterator[AgentChunk], records: list[TurnRecord]) -> Any:
    """``agent.run()``: drive the turn to its end and return its typed result (or its answer's
    text); what ended it otherwise is raised as ``chat_text`` raises it, a result that did not
    validate as ``OutputValidationError`` with the last raw answer and its errors."""
    async with contextlib.aclosing(turn) as stream:  # type: ignore[type-var]
        async for chunk in stream:
            if isinstance(chunk, DoneChunk):
                record = records[0]
                return record.output_value if record.output_spec is not None else chunk.answer
            error = chat_text_error(chunk)
            if error is None:
                continue
            if error.code == ErrorCode.OUTPUT_INVALID and records:
                record = records[0]
                raise OutputValidationError(
                    error.message,
                    context={"raw": record.output_raw, "errors": record.output_errors},
                )
            raise error
    return None


def chat_text_error(chunk: AgentChunk) -> MemoraError | None:
    """What ``chat_text`` raises for a chunk that ends the turn without an answer."""
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
