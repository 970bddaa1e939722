"""The turn loop: context -> LLM (streaming) -> tool calls -> ... -> answer -> self-review ->
round summary, as one async generator of chunks.

The loop never raises out of the iterator: failures become ``error`` / ``aborted`` chunks.  Its
whole state between LLM iterations lives in :class:`TurnState`, a plain JSON-serialisable object,
so a turn paused for a question or an approval can be resumed — in this process or another.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..checks import Ask, CheckContext, Deny, Rewrite, Skip, ToolCallInfo
from ..chunks import (
    AbortedChunk,
    AgentChunk,
    ApprovalPendingChunk,
    DoneChunk,
    ErrorChunk,
    NarrateChunk,
    PausedChunk,
    PlanItemBoundaryChunk,
    QuestionPendingChunk,
    QuestionSpec,
    RetryChunk,
    SelfReviewChunk,
    StepBoundaryChunk,
    TextChunk,
    ThinkingChunk,
    ThoughtChunk,
    ToolPendingChunk,
    ToolProgressChunk,
    ToolResultChunk,
    ToolStartChunk,
    Usage,
)
from ..errors import ToolErrorCode, is_retryable
from ..llm.assemble import ToolCallAssembler
from ..llm.provider import ProviderError
from ..llm.retry import RetryNotice, RetryPolicy, stream_with_retries
from ..llm.types import Message, ToolCall, ToolCallDelta, ToolSpec, clean_delta
from ..tools.base import Tool, ToolRun, run_tool
from ..tools.plan import AskUserSignal

if TYPE_CHECKING:
    from .agent import Agent

__all__ = ["TurnEngine", "TurnState"]

logger = logging.getLogger("memora.agent")

_SATISFIED = (
    "no changes needed",
    "no change needed",
    "no changes are needed",
    "nothing to change",
    "lgtm",
    "无需修改",
    "不需要修改",
    "无需更改",
    "没有需要修改",
)
_MAX_EMPTY_ATTEMPTS = 2


def is_satisfied(text: str) -> bool:
    """A short reply saying the answer needs no changes ends the self-review at once."""
    t = " ".join(text.lower().split()).strip(" .。!！")
    return len(t) <= 80 and any(s in t for s in _SATISFIED)


@dataclass
class TurnState:
    """Everything a turn needs between two LLM iterations (JSON-serialisable)."""

    round_id: str
    user_text: str
    session_id: str
    started_at: float = field(default_factory=time.time)
    iteration: int = 0
    tool_steps: int = 0
    answer: str = ""
    review_text: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    questions_asked: int = 0
    pending_calls: list[dict[str, str]] = field(default_factory=list)
    """Tool calls of the current step not yet resolved ({id, name, arguments})."""
    paused: dict[str, Any] | None = None
    answers: dict[str, str] = field(default_factory=dict)
    approval: dict[str, Any] | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    """This turn's messages so far (persisted to the session when the turn ends)."""
    phase: Literal["loop", "review", "finish"] = "loop"
    soft_limit_sent: bool = False
    empty_attempts: int = 0
    status: str = "running"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(data: dict[str, Any]) -> TurnState:
        known = TurnState.__dataclass_fields__
        return TurnState(**{k: v for k, v in data.items() if k in known})

    def usage_model(self) -> Usage:
        return Usage(**{k: int(v) for k, v in self.usage.items() if k in Usage.model_fields})

    def add_usage(
        self, input_tokens: int, output_tokens: int, reasoning: int = 0, calls: int = 0
    ) -> None:
        u = self.usage
        u["input_tokens"] = u.get("input_tokens", 0) + input_tokens
        u["output_tokens"] = u.get("output_tokens", 0) + output_tokens
        u["reasoning_tokens"] = u.get("reasoning_tokens", 0) + reasoning
        u["llm_calls"] = u.get("llm_calls", 0) + calls


class _StepResult:
    __slots__ = ("calls", "finish_reason", "reasoning", "text")

    def __init__(self) -> None:
        self.text = ""
        self.reasoning = ""
        self.calls: list[ToolCall] = []
        self.finish_reason: str | None = None


class _Stop(Exception):
    def __init__(self, chunk: AgentChunk, status: str) -> None:
        self.chunk = chunk
        self.status = status


class StallWatch:
    """Ends the surrounding ``asyncio.timeout`` when nothing arrived for ``stall`` seconds.

    The stream sets :attr:`last` on every delta (an attribute write); one timer checks it and
    re-arms itself, instead of rescheduling a timer per delta (a cancelled and a new timer handle
    for each of hundreds of tokens).  Armed from the start, so a server that never sends a
    first delta stalls out too.
    """

    __slots__ = ("_handle", "_loop", "_stall", "_timeout", "last")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, stall: float, timeout: asyncio.Timeout
    ) -> None:
        self._loop = loop
        self._stall = stall
        self._timeout = timeout
        self.last = loop.time()
        self._handle = loop.call_at(self.last + stall, self._check)

    def _check(self) -> None:
        now = self._loop.time()
        due = self.last + self._stall
        if now >= due:
            self._timeout.reschedule(now)  # expires: the task is cancelled -> TimeoutError
        else:
            self._handle = self._loop.call_at(due, self._check)

    def close(self) -> None:
        self._handle.cancel()


class TurnEngine:
    """Runs turns for one Agent.  Stateless between turns except through the Agent."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    # ------------------------------------------------------------------------------------------
    # entry points

    async def run(self, state: TurnState) -> AsyncIterator[AgentChunk]:
        """Run (or resume) the turn described by ``state`` until done, paused or stopped."""
        agent = self.agent
        rid = state.round_id
        span = agent.tracer.start_span("response", {"round_id": rid})
        error: BaseException | None = None
        try:
            if state.iteration == 0 and not state.messages and state.paused is None:
                yield ThinkingChunk(phase="assembling", round_id=rid)
                agent._append_message(state, Message.user(state.user_text))
                agent.session_state.set_goal(state.user_text)
            async for chunk in self._drive(state):
                yield chunk
        except asyncio.CancelledError:
            # the consuming task was cancelled, or the host called agent.abort()
            partial = state.answer
            agent._record_interrupted(state, partial)
            state.status = "aborted"
            await agent._finish_turn(state, summarise=False)
            yield AbortedChunk(
                reason=agent.messages.aborted_by_user,
                stop_reason="user",
                usage=state.usage_model(),
                round_id=rid,
            )
        except GeneratorExit:
            # the host stopped iterating without cancelling: keep what was generated
            if state.paused is None and state.status == "running":
                agent._record_interrupted(state, state.answer)
                state.status = "interrupted"
                await agent._finish_turn(state, summarise=False)
            raise
        except _Stop as stop:
            state.status = stop.status
            await agent._finish_turn(state, summarise=False)
            yield stop.chunk
        except Exception as exc:  # the iterator never raises
            logger.exception("turn %s failed", rid)
            error = exc
            state.status = "error"
            agent.session_state.fail(f"{type(exc).__name__}: {exc}")
            await agent._finish_turn(state, summarise=False)
            yield ErrorChunk(
                message=f"{type(exc).__name__}: {exc}", category="unknown", round_id=rid
            )
        finally:
            span.end(error)

    # ------------------------------------------------------------------------------------------

    async def _drive(self, state: TurnState) -> AsyncIterator[AgentChunk]:
        agent = self.agent
        rid = state.round_id
        strategy = agent.role_pack.strategy
        max_iterations = strategy.max_iterations(agent.options.max_iterations)

        # a resumed turn first resolves the call it paused on, then the rest of that step
        if state.pending_calls:
            async for chunk in self._run_calls(state):
                yield chunk
            if state.paused is not None:
                return
            yield StepBoundaryChunk(step_index=state.iteration, round_id=rid)

        while state.phase == "loop":
            if state.iteration >= max_iterations or (
                strategy.tool_step_limit and state.tool_steps >= strategy.tool_step_limit
            ):
                marker = agent.messages.max_iterations_reached
                yield TextChunk(content=("\n\n" if state.answer else "") + marker, round_id=rid)
                state.answer = (state.answer + "\n\n" + marker).strip()
                agent._append_message(state, Message.assistant(state.answer))
                state.events.append(
                    {"type": "max_iterations_reached", "iteration": state.iteration}
                )
                state.phase = "finish"
                break

            item = agent.tool_context.task_table.advance()
            if item is not None:
                state.events.append({"type": "plan_item", "id": item.id, "title": item.description})
                yield PlanItemBoundaryChunk(
                    plan_item_id=item.id, title=item.description, round_id=rid
                )

            yield ThinkingChunk(phase="llm_calling", round_id=rid)
            result = _StepResult()
            async for chunk in self._llm_step(state, result, tools=True):
                yield chunk
            state.iteration += 1

            if result.calls:
                state.tool_steps += 1
                streamed = result.text
                if streamed:
                    # text that turned out to precede tool calls is narration, not the answer
                    yield NarrateChunk(content=streamed, withdrawn=streamed, round_id=rid)
                    state.answer = state.answer[: len(state.answer) - len(streamed)]
                agent._append_message(
                    state,
                    Message(
                        "assistant",
                        streamed,
                        tuple(result.calls),
                        reasoning=result.reasoning or None,
                    ),
                )
                state.pending_calls = [
                    {"id": c.id, "name": c.name, "arguments": c.arguments} for c in result.calls
                ]
                async for chunk in self._run_calls(state):
                    yield chunk
                if state.paused is not None:
                    return
                yield StepBoundaryChunk(step_index=state.iteration, round_id=rid)
                continue

            text = result.text
            if not text.strip():
                state.empty_attempts += 1
                if state.empty_attempts < _MAX_EMPTY_ATTEMPTS and result.finish_reason != "length":
                    state.events.append({"type": "empty_response", "attempt": state.empty_attempts})
                    continue
                if result.finish_reason == "length":
                    text = agent.messages.render(
                        "empty_response_truncated", attempts=state.empty_attempts
                    )
                else:
                    text = agent.messages.empty_response_fallback
                yield TextChunk(content=text, round_id=rid)
                state.answer += text
            agent._append_message(
                state, Message("assistant", text, reasoning=result.reasoning or None)
            )
            yield StepBoundaryChunk(step_index=state.iteration, round_id=rid)
            state.phase = "review" if (strategy.self_review and state.tool_steps > 0) else "finish"

        if state.phase == "review":
            yield SelfReviewChunk(round_id=rid)
            agent._append_message(state, Message.user(agent.messages.self_review_prompt))
            result = _StepResult()
            async for chunk in self._llm_step(state, result, tools=False, stage="self_review"):
                yield chunk
            state.iteration += 1
            review = result.text.strip()
            agent._append_message(state, Message.assistant(result.text))
            state.events.append({"type": "self_review", "satisfied": is_satisfied(review)})
            if review and not is_satisfied(review):
                state.answer = review
            state.phase = "finish"

        state.status = "done"
        yield ThinkingChunk(phase="archiving", round_id=rid)
        await agent._finish_turn(state, summarise=True)
        yield DoneChunk(usage=state.usage_model(), round_id=rid)

    # ------------------------------------------------------------------------------------------
    # one LLM call

    async def _llm_step(
        self,
        state: TurnState,
        result: _StepResult,
        *,
        tools: bool,
        stage: Literal["answer", "self_review"] = "answer",
    ) -> AsyncIterator[AgentChunk]:
        agent = self.agent
        rid = state.round_id
        strategy = agent.role_pack.strategy
        request = agent._build_request(state, tools=tools)
        if request.messages and not state.soft_limit_sent and agent._near_soft_limit():
            state.soft_limit_sent = True
            agent._append_message(state, Message.user(agent.messages.soft_limit_wrapup))
            request = agent._build_request(state, tools=tools)
        provider = agent.router.for_task("chat")
        policy = (
            agent.retry_policy
            if strategy.error_handling == "retry"
            else RetryPolicy(max_attempts=1)
        )
        assembler = ToolCallAssembler()
        text_parts: list[str] = []
        reasoning_parts: list[str] = []
        step_index = state.iteration
        span = agent.tracer.start_span(
            "llm_call", {"round_id": rid, "iteration": step_index, "provider": provider.name}
        )
        loop = asyncio.get_running_loop()
        seen_tool = False
        err: BaseException | None = None
        try:
            async with asyncio.timeout(None) as deadline:
                watch = StallWatch(loop, agent.options.llm_stall_timeout, deadline)
                try:
                    async for raw in stream_with_retries(provider, request, policy):
                        watch.last = loop.time()
                        delta = clean_delta(raw)  # no lone surrogate enters the turn
                        kind = delta.kind
                        if kind == "text":
                            piece = delta.text  # type: ignore[union-attr]
                            text_parts.append(piece)
                            if not seen_tool:
                                if stage == "answer":
                                    state.answer += piece
                                yield TextChunk(content=piece, stage=stage, round_id=rid)
                        elif kind == "reasoning":
                            thought = delta.text  # type: ignore[union-attr]
                            reasoning_parts.append(thought)
                            yield ThoughtChunk(content=thought, step_index=step_index, round_id=rid)
                        elif kind == "tool_call":
                            seen_tool = True
                            fragment: ToolCallDelta = delta  # type: ignore[assignment]
                            announced = assembler.feed(fragment)
                            if announced:
                                yield ToolPendingChunk(
                                    tool_call_id=assembler.pending_id(fragment.index),
                                    name=announced,
                                    round_id=rid,
                                )
                        elif kind == "finish":
                            result.finish_reason = delta.reason  # type: ignore[union-attr]
                        elif kind == "usage":
                            u = delta.usage  # type: ignore[union-attr]
                            state.add_usage(u.input_tokens, u.output_tokens, u.reasoning_tokens)
                        elif kind == "retry":
                            notice: RetryNotice = delta  # type: ignore[assignment]
                            watch.last = loop.time() + notice.delay
                            state.events.append(
                                {
                                    "type": "retry",
                                    "attempt": notice.attempt,
                                    "error": str(notice.error),
                                }
                            )
                            yield RetryChunk(
                                attempt=notice.attempt,
                                max_attempts=notice.max_attempts,
                                delay_ms=int(notice.delay * 1000),
                                error=notice.error.message,
                                round_id=rid,
                            )
                finally:
                    watch.close()
        except TimeoutError as exc:
            err = exc
            state.events.append({"type": "error", "category": "timeout", "message": "LLM stalled"})
            raise self._stalled(state, text_parts, stage) from exc
        except ProviderError as exc:
            err = exc
            state.events.append({"type": "error", "category": exc.category, "message": exc.message})
            if exc.category == "timeout":
                raise self._stalled(state, text_parts, stage) from exc
            if strategy.error_handling == "degrade" and (state.answer or text_parts):
                self._keep_partial(state, text_parts, stage, marker=False)
                state.phase = "finish"
                state.events.append({"type": "degraded"})
                return
            self._keep_partial(state, text_parts, stage)
            raise _Stop(
                ErrorChunk(message=exc.message, category=exc.category, round_id=rid), "error"
            ) from exc
        finally:
            span.end(err)
        state.add_usage(0, 0, 0, 1)
        result.text = "".join(text_parts)
        result.reasoning = "".join(reasoning_parts)
        result.calls = assembler.calls()
        if result.reasoning:
            state.events.append(
                {"type": "thought", "content": result.reasoning, "step_index": step_index}
            )

    def _stalled(self, state: TurnState, parts: list[str], stage: str) -> _Stop:
        """The LLM stopped answering: keep the partial text, end with ``aborted(timeout)``."""
        self._keep_partial(state, parts, stage)
        chunk = AbortedChunk(
            reason=self.agent.messages.aborted_by_timeout,
            stop_reason="timeout",
            usage=state.usage_model(),
            round_id=state.round_id,
        )
        return _Stop(chunk, "aborted")

    def _keep_partial(
        self, state: TurnState, parts: list[str], stage: str, *, marker: bool = True
    ) -> None:
        """An interrupted LLM call keeps its partial text in history, with the marker."""
        text = "".join(parts)
        if text:
            suffix = f" {self.agent.messages.interrupted_marker}" if marker else ""
            self.agent._append_message(state, Message.assistant(text + suffix))
            if stage == "self_review":
                state.review_text = text

    # ------------------------------------------------------------------------------------------
    # tool calls

    async def _run_calls(self, state: TurnState) -> AsyncIterator[AgentChunk]:
        """Resolve ``state.pending_calls`` in order (read-only batches in parallel)."""
        agent = self.agent
        while state.pending_calls:
            batch = self._parallel_batch(state.pending_calls)
            if len(batch) > 1:
                async for chunk in self._run_parallel(state, batch):
                    yield chunk
                del state.pending_calls[: len(batch)]
                continue
            call = state.pending_calls[0]
            async for chunk in self._run_one(state, call):
                yield chunk
            if state.paused is not None and state.paused.get("tool_call_id") == call["id"]:
                return  # this call paused the turn (or is still waiting for its answer)
            state.pending_calls.pop(0)
        agent.session_state.beat()

    def _parallel_batch(self, calls: list[dict[str, str]]) -> list[dict[str, str]]:
        batch = []
        for call in calls:
            t = self.agent.tools.get(call["name"])
            if t is None or t.idempotency != "read-only" or t.name == "ask_user":
                break
            batch.append(call)
        return batch if len(batch) == len(calls) else batch[:1] if batch else []

    async def _run_parallel(
        self, state: TurnState, batch: list[dict[str, str]]
    ) -> AsyncIterator[AgentChunk]:
        queue: asyncio.Queue[AgentChunk | None] = asyncio.Queue()

        async def one(call: dict[str, str]) -> None:
            async for chunk in self._run_one(state, call):
                await queue.put(chunk)

        async def all_calls() -> None:
            try:
                await asyncio.gather(*(one(c) for c in batch))
            finally:
                await queue.put(None)

        runner = asyncio.create_task(all_calls())
        try:
            while True:
                chunk = await queue.get()
                if chunk is None:
                    break
                yield chunk
            await runner
        finally:
            if not runner.done():
                runner.cancel()

    async def _run_one(self, state: TurnState, call: dict[str, str]) -> AsyncIterator[AgentChunk]:
        agent = self.agent
        rid = state.round_id
        call_id, name, raw_args = call["id"], call["name"], call["arguments"]
        tool = agent.tools.get(name)

        # --- a call resumed after a pause ------------------------------------------------------
        if state.paused is not None and state.paused.get("tool_call_id") == call_id:
            paused = state.paused
            if paused["kind"] == "question":
                if not state.answers:
                    return  # still waiting
                answers = dict(state.answers)
                state.answers = {}
                state.paused = None
                content = json.dumps({"answers": answers}, ensure_ascii=False)
                yield self._result_chunk(
                    state, call_id, name, ToolRun(True, content, f"{len(answers)} answers")
                )
                return
            decision = state.approval
            if decision is None or decision.get("tool_call_id") != call_id:
                return  # still waiting
            state.paused = None
            state.approval = None
            if not decision.get("approved"):
                reason = decision.get("reason") or "the user rejected this call"
                run = ToolRun(
                    False,
                    f"{ToolErrorCode.PERMISSION_DENIED}: rejected by the user: {reason}",
                    f"rejected: {reason}",
                    ToolErrorCode.PERMISSION_DENIED.value,
                )
                yield self._result_chunk(state, call_id, name, run, blocked=True)
                return
            args = decision.get("args")
            if args is None:
                args = paused.get("args") or {}
            assert tool is not None
            async for chunk in self._execute(state, tool, call_id, args, approved=True):
                yield chunk
            return

        # --- gates -------------------------------------------------------------------------------
        strategy = agent.role_pack.strategy
        if tool is None or not agent._tool_visible(tool, state):
            why = (
                f"{ToolErrorCode.NOT_AVAILABLE}: there is no tool named {name!r} here"
                if tool is None
                else f"{ToolErrorCode.NOT_AVAILABLE}: tool {name!r} is not enabled for this role"
            )
            yield self._blocked(state, call_id, name, ToolErrorCode.NOT_AVAILABLE.value, why, why)
            return
        try:
            args = tool.parse_args(raw_args)
        except Exception as exc:  # ToolError(INVALID_ARGS)
            code = getattr(exc, "code", ToolErrorCode.INVALID_ARGS)
            msg = f"{code}: {getattr(exc, 'message', str(exc))}"
            yield ToolStartChunk(
                tool_call_id=call_id, name=name, args={}, step_index=state.iteration, round_id=rid
            )
            yield self._result_chunk(state, call_id, name, ToolRun(False, msg, msg, str(code)))
            return
        # --- a call already executed before a restart (the outbox) ------------------------------
        done = agent.outbox.by_id(f"{rid}/{call_id}", name, args)
        if done is not None:
            yield self._result_chunk(
                state, call_id, name, ToolRun(done.ok, done.content, done.summary, done.error_code)
            )
            return
        if strategy.tool_readonly and tool.writes:
            msg = (
                f"{ToolErrorCode.PERMISSION_DENIED}: {name} changes files and this role is read-only "
                "(toolReadonly = readonly); describe the change instead"
            )
            yield self._blocked(
                state, call_id, name, ToolErrorCode.PERMISSION_DENIED.value, msg, msg
            )
            return
        if agent.options.permission == "guest" and (tool.writes or tool.runs_code):
            msg = f"{ToolErrorCode.PERMISSION_DENIED}: {name} is not available to a guest (no writes, no commands)"
            yield self._blocked(
                state, call_id, name, ToolErrorCode.PERMISSION_DENIED.value, msg, msg
            )
            return
        if name == "ask_user" and state.questions_asked >= strategy.ask_limit:
            msg = f"{ToolErrorCode.PERMISSION_DENIED}: the question limit of this turn ({strategy.ask_limit}) is reached; decide with what you know"
            yield self._blocked(
                state, call_id, name, ToolErrorCode.PERMISSION_DENIED.value, msg, msg
            )
            return
        verdict = agent.duplicate_interceptor.check(name, args)
        if verdict == "block":
            msg = agent.messages.render(
                "duplicate_tool_call_warning", threshold=agent.options.duplicate_call_threshold
            )
            yield self._blocked(
                state,
                call_id,
                name,
                ToolErrorCode.PERMISSION_DENIED.value,
                msg,
                "duplicate call blocked",
            )
            return

        # --- pre-execution checks (plugins + host) ------------------------------------------------
        previous = agent.outbox.previous(name, args)
        info = ToolCallInfo(
            call_id,
            name,
            args,
            writes=tool.writes,
            runs_code=tool.runs_code,
            idempotency=tool.idempotency,
        )
        ctx = CheckContext(
            project_path=agent.options.project_path,
            permission=agent.options.permission,
            role_pack=agent.role_pack.active.name,
            session_id=state.session_id,
            round_id=rid,
            confirm_writes=agent.options.confirm_writes,
            confirm_scripts=agent.options.confirm_scripts,
            previous_result=previous.content if previous else None,
        )
        outcome = agent.plugins.pre_execution_check(info, ctx)
        verdict_ = outcome.decision
        if isinstance(verdict_, Deny):
            who = f" (by {outcome.plugin})" if outcome.plugin else ""
            msg = f"{ToolErrorCode.PERMISSION_DENIED}: refused{who}: {verdict_.reason}"
            state.events.append(
                {
                    "type": "tool_blocked",
                    "tool_call_id": call_id,
                    "name": name,
                    "reason": verdict_.reason,
                }
            )
            yield self._blocked(
                state,
                call_id,
                name,
                ToolErrorCode.PERMISSION_DENIED.value,
                msg,
                f"blocked: {verdict_.reason}",
            )
            return
        if isinstance(verdict_, Skip):
            reused = (
                verdict_.result
                if verdict_.result is not None
                else (previous.content if previous else None)
            )
            if reused is not None:
                yield self._result_chunk(
                    state, call_id, name, ToolRun(True, reused, "reused the previous result")
                )
                return
        if isinstance(verdict_, Rewrite):
            try:
                args = tool.parse_args(dict(verdict_.args))
            except Exception as exc:
                msg = f"{ToolErrorCode.INVALID_ARGS}: a check rewrote the arguments into something invalid: {exc}"
                yield self._blocked(
                    state, call_id, name, ToolErrorCode.INVALID_ARGS.value, msg, msg
                )
                return
            state.events.append(
                {"type": "tool_rewritten", "tool_call_id": call_id, "by": outcome.plugin}
            )
        if isinstance(verdict_, Ask):
            state.paused = {
                "kind": "approval",
                "tool_call_id": call_id,
                "name": name,
                "args": args,
                "reason": verdict_.reason,
            }
            agent.session_state.pause()
            state.events.append(
                {"type": "approval_pending", "tool_call_id": call_id, "name": name, "args": args}
            )
            yield ApprovalPendingChunk(
                tool_call_id=call_id, name=name, args=args, reason=verdict_.reason, round_id=rid
            )
            yield PausedChunk(round_id=rid)
            return
        async for chunk in self._execute(state, tool, call_id, args, warn=verdict == "warn"):
            yield chunk

    async def _execute(
        self,
        state: TurnState,
        tool: Tool,
        call_id: str,
        args: dict[str, Any],
        *,
        warn: bool = False,
        approved: bool = False,
    ) -> AsyncIterator[AgentChunk]:
        agent = self.agent
        rid = state.round_id
        name = tool.name
        yield ToolStartChunk(
            tool_call_id=call_id, name=name, args=args, step_index=state.iteration, round_id=rid
        )
        state.events.append(
            {"type": "tool_start", "tool_call_id": call_id, "name": name, "args": args}
        )
        queue: asyncio.Queue[str] = asyncio.Queue()
        ctx = agent._tool_context_for(state, queue.put_nowait)
        span = agent.tracer.start_span(
            "recall" if name == "memory_search" else "tool_exec", {"tool": name, "round_id": rid}
        )
        task = asyncio.ensure_future(run_tool(tool, ctx, args))
        err: BaseException | None = None
        try:
            while not task.done():
                getter = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait({task, getter}, return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    yield ToolProgressChunk(
                        tool_call_id=call_id, name=name, content=getter.result(), round_id=rid
                    )
                else:
                    getter.cancel()
            while not queue.empty():
                yield ToolProgressChunk(
                    tool_call_id=call_id, name=name, content=queue.get_nowait(), round_id=rid
                )
            run = task.result()
        except AskUserSignal as signal:
            err = None
            async for chunk in self._pause_for_questions(state, call_id, signal.questions):
                yield chunk
            return
        except BaseException as exc:
            err = exc
            task.cancel()
            raise
        finally:
            span.end(err)
        if warn:
            note = agent.messages.render(
                "duplicate_tool_call_warning", threshold=agent.options.duplicate_call_threshold
            )
            run = ToolRun(
                run.ok, f"{run.content}\n\n[{note}]", run.summary, run.error_code, run.data
            )
        if tool.idempotency != "read-only":
            agent.outbox.record(
                f"{rid}/{call_id}", name, args, run.ok, run.content, run.summary, run.error_code
            )
        yield self._result_chunk(state, call_id, name, run)

    async def _pause_for_questions(
        self, state: TurnState, call_id: str, questions: list[QuestionSpec]
    ) -> AsyncIterator[AgentChunk]:
        state.questions_asked += len(questions)
        state.paused = {
            "kind": "question",
            "tool_call_id": call_id,
            "name": "ask_user",
            "questions": [q.model_dump() for q in questions],
        }
        self.agent.session_state.pause()
        state.events.append(
            {"type": "question_pending", "questions": [q.model_dump() for q in questions]}
        )
        yield QuestionPendingChunk(questions=questions, round_id=state.round_id)
        yield PausedChunk(round_id=state.round_id)

    def _blocked(
        self, state: TurnState, call_id: str, name: str, code: str, content: str, summary: str
    ) -> ToolResultChunk:
        """A call refused before it ran: ``tool_result(blocked=True)``; the model gets ``content``."""
        return self._result_chunk(
            state, call_id, name, ToolRun(False, content, summary, code), blocked=True
        )

    def _result_chunk(
        self, state: TurnState, call_id: str, name: str, run: ToolRun, *, blocked: bool = False
    ) -> ToolResultChunk:
        agent = self.agent
        content = run.content
        if not run.ok and run.error_code and is_retryable(run.error_code) and not blocked:
            limit = agent.role_pack.strategy.tool_step_limit
            remaining = max(limit - state.tool_steps, 0) if limit else "unlimited"
            content += "\n\n" + agent.messages.render("reflection_hint", remaining=remaining)
        agent._append_message(state, Message.tool(call_id, name, content))
        state.events.append(
            {
                "type": "tool_result",
                "tool_call_id": call_id,
                "name": name,
                "ok": run.ok,
                "summary": run.summary,
                "blocked": blocked,
                "error_code": run.error_code,
            }
        )
        return ToolResultChunk(
            tool_call_id=call_id,
            name=name,
            ok=run.ok,
            summary=run.summary,
            blocked=blocked,
            error_code=run.error_code,
            round_id=state.round_id,
        )


def new_round_id() -> str:
    return f"r-{uuid.uuid4().hex[:12]}"


def visible_specs(tools: list[Tool]) -> list[ToolSpec]:
    return [t.spec() for t in tools]
