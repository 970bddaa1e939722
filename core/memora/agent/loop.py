"""The turn as an explicit step machine.

A turn is a :class:`~memora.agent.record.TurnRecord` moved through four steps::

    model  --(tool calls)--> tools --(all resolved)--> model
      |  \\--(empty answer, retried)--> model               \\--(a call paused)--> [paused]
      |--(answer, tools were used, selfReview on)--> review --> finish
      \\--(answer / budget reached / degraded)--------------> finish --> done

Each step is an async generator that yields chunks and ends with one transition value
(:class:`Goto`, :class:`Stop` or :class:`Suspend`); :meth:`TurnEngine.run` is the one path
chunks leave by.  The engine sees the Agent only through :class:`TurnDeps`, a narrow typed
object the Agent builds per turn.  Everything resumable lives in the record, so a turn paused
for a question or an approval is resumed from it — in this process or another.

The iterator never raises for a failure of the turn: failures become ``error`` / ``aborted``
chunks.  ``agent.abort()`` ends the turn with ``aborted(stop_reason="user")``; a cancellation
from outside (a host's ``asyncio.timeout``, a task group, ``task.cancel()``) ends it the same way
and then propagates, so the host's timeout raises ``TimeoutError`` as it should.  Every way out
leaves a history every provider accepts: a tool call that has no result gets an
``[interrupted]`` one.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..chunks import (
    AbortedChunk,
    AgentChunk,
    ApprovalPendingChunk,
    DoneChunk,
    ErrorChunk,
    MeetingTurnChunk,
    NarrateChunk,
    OutputPartialChunk,
    PausedChunk,
    PlanItemBoundaryChunk,
    QuestionPendingChunk,
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
    text_chunk,
)
from ..errors import ErrorCode, ToolErrorCode, is_retryable
from ..llm.assemble import ToolCallAssembler
from ..llm.provider import ProviderError
from ..llm.retry import RetryNotice, RetryPolicy, stream_with_retries
from ..llm.types import LLMRequest, Message, ToolCallDelta, clean_delta, clean_text
from ..services import _ROUND
from ..tools.base import Tool, ToolRun, run_parsed
from ..tools.plan import AskUserSignal
from .gates import Approve, GateCall, Refuse, Reuse, duplicate_warning, run_gates
from .output import FINAL_RESULT_TOOL, OutputCheck, OutputSpec
from .record import (
    ApprovalPause,
    HostPause,
    Pause,
    PauseMeta,
    PendingCall,
    PlanItemOutcome,
    QuestionPause,
    Step,
    TurnRecord,
)
from .serialize import message_to_dict
from .timing import StallWatch, _start_task

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ..checks import ApprovalMode, CheckContext, CheckOutcome, ToolCallInfo
    from ..llm.provider import Provider
    from ..messages import Messages
    from ..role_pack.strategy import EffectiveStrategy
    from ..security.permissions import Permission
    from ..tools.base import ToolRegistry
    from ..tools.context import ToolContext
    from ..tracing import Tracer
    from .context_window import ContextWindow
    from .exposure import TurnTools
    from .pause import TurnControl
    from .prompts import TurnPrompts
    from .session import LiveSession, SummaryPlan
    from .state import SessionState

__all__ = ["Goto", "Stop", "Suspend", "TurnDeps", "TurnEngine", "TurnState", "is_satisfied"]

logger = logging.getLogger("memora.agent")

TurnState = TurnRecord
"""The former name of :class:`~memora.agent.record.TurnRecord`."""

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
_INTERRUPTED_RESULT = "[interrupted: the turn ended before this call finished; it may not have run]"


def is_satisfied(text: str) -> bool:
    """A short reply saying the answer needs no changes ends the self-review at once."""
    t = " ".join(text.lower().split()).strip(" .。!！")
    return len(t) <= 80 and any(s in t for s in _SATISFIED)


_PARTIAL_EVERY = 24
"""A typed answer's partial result is parsed again once it has grown by this many characters
(or a value closed): parsing the whole prefix at every token would be quadratic."""


class PartialProgress:
    """How far one model call's typed answer has been read for partial results: its length
    now, its length at the last parse, and what that parse gave.  The call's own — never the
    host's :class:`OutputSpec`, which one host may pass to many Agents and turns at once."""

    __slots__ = ("parsed_at", "size", "value")

    def __init__(self) -> None:
        self.size = 0
        self.parsed_at = 0
        self.value: Any = None


def partial_chunk(
    spec: OutputSpec, progress: PartialProgress, parts: list[str], round_id: str
) -> OutputPartialChunk | None:
    """The ``output_partial`` chunk for the answer's text so far, when it has grown enough
    since the last one and says something new; ``None`` otherwise."""
    last = parts[-1]
    size = progress.size + len(last)  # the answer's length so far, kept instead of summed again
    progress.size = size
    if size - progress.parsed_at < _PARTIAL_EVERY and not any(c in last for c in ",}]"):
        return None
    value = spec.partial("".join(parts))
    if value is None or value == progress.value:
        progress.parsed_at = size
        return None
    progress.parsed_at, progress.value = size, value
    return OutputPartialChunk(output=value, round_id=round_id)


# -- transitions ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Goto:
    """Continue with ``step``."""

    step: Step


@dataclass(frozen=True, slots=True)
class Stop:
    """End the turn with ``status``: persist the round, then yield ``chunk``."""

    status: Literal["done", "aborted", "error"]
    chunk: AgentChunk
    summarise: bool = False


@dataclass(frozen=True, slots=True)
class Suspend:
    """A call paused the turn: it waits in the record for the host's answer."""


Transition = Goto | Stop | Suspend
_TRANSITIONS = (Goto, Stop, Suspend)


# -- what the engine needs from the Agent ------------------------------------------------------


@dataclass(slots=True)
class TurnDeps:
    """The narrow, typed view of the Agent a turn runs against (built per turn)."""

    window: ContextWindow
    tools: ToolRegistry
    strategy: EffectiveStrategy
    messages: Messages
    tracer: Tracer
    session: SessionState
    provider: Provider
    review_provider: Provider
    """The self-review pass (task type ``reasoning``; the chat provider unless routed)."""
    retry_policy: RetryPolicy
    check: Callable[[ToolCallInfo, CheckContext], CheckOutcome]
    tool_context: ToolContext
    """The turn's base context; each call gets its own copy."""
    exposure: TurnTools
    """Which tools the model sees this turn and their schemas (``visible``, ``specs``,
    ``spec_tokens``)."""
    prompts: TurnPrompts
    """The system prompt, a team member's prompt (meetings), the plan section."""
    window_tokens: int
    output_reserve: int
    max_tokens: int | None
    history_key: str
    project_path: Path
    permission: Permission
    role_pack: str
    confirm_writes: bool
    confirm_scripts: bool
    approvals: ApprovalMode | None
    duplicate_threshold: int
    duplicate_interceptor: Any
    """The ``duplicate_interceptor`` option (``check(DuplicateCheckContext)``), or ``None``."""
    max_iterations: int
    stall_timeout: float
    journal: LiveSession
    """Where the finished turn is stored (``persist``: the round and the turn's messages in
    one append)."""
    summary: SummaryPlan | None
    """How the round summary is written when the turn asks for one (``None``: never)."""
    control: TurnControl
    """The host's abort and pause requests."""
    check_context: CheckContext | None = None
    """Where this turn's calls happen, for the checks (made by the first call's check; a call
    with a previous identical result gets its own)."""
    output: OutputSpec | None = None
    """A typed turn: the result it must end with (``None``: a text turn)."""
    output_tool: bool = False
    """The typed result comes as the ``final_result`` tool's arguments (the turn has tools);
    otherwise as the answer's text, constrained by the provider where it can."""


class _Model:
    """What one LLM call produced."""

    __slots__ = ("calls", "finish_reason", "reasoning", "streamed", "text")

    def __init__(self) -> None:
        self.text = ""
        self.streamed = ""
        self.reasoning = ""
        self.calls: list[Any] = []
        self.finish_reason: str | None = None


class TurnEngine:
    """Runs (or resumes) one turn: ``async for chunk in TurnEngine(deps, record).run()``."""

    def __init__(self, deps: TurnDeps, record: TurnRecord) -> None:
        self.deps = deps
        self.record = record
        self._partial: list[str] = []
        """Text of the LLM call being streamed (kept with a marker if the turn ends in it)."""
        self._partial_stage = "answer"
        self._step_calls: list[str] = [c.name for c in record.pending_calls]
        self._phases: dict[str, ThinkingChunk] = {}

    def _thinking(self, phase: Literal["llm_calling", "processing"]) -> ThinkingChunk:
        """The turn's ``thinking`` chunk of ``phase`` (frozen: made once, sent every step)."""
        chunk = self._phases.get(phase)
        if chunk is None:
            chunk = self._phases[phase] = ThinkingChunk(phase=phase, round_id=self.record.round_id)
        return chunk

    # -- the driver ----------------------------------------------------------------------------

    async def run(self) -> AsyncIterator[AgentChunk]:
        deps, record = self.deps, self.record
        steps: dict[str, Callable[[], AsyncIterator[AgentChunk | Transition]]] = {
            "model": self._model,
            "tools": self._tools,
            "review": self._review,
            "finish": self._finish,
            "meeting": self._meeting,
        }
        span = deps.tracer.start_span(
            "response",
            {
                "round_id": record.round_id,
                "session_id": record.session_id,
                "role_pack": deps.role_pack,
            },
        )
        error: BaseException | None = None
        try:
            if not record.started:
                yield ThinkingChunk(phase="assembling", round_id=record.round_id)
                self._append(Message.user(record.user_text))
                record.started = True
            while True:
                transition: Transition | None = None
                async for item in steps[record.step]():
                    if isinstance(item, _TRANSITIONS):
                        transition = item
                    else:
                        yield item
                if isinstance(transition, Goto):
                    record.step = transition.step
                    continue
                if isinstance(transition, Stop):
                    cause = getattr(transition.chunk, "message", None)
                    saved = await self._end(
                        transition.status, summarise=transition.summarise, cause=cause
                    )
                    chunk = transition.chunk
                    if not saved and isinstance(chunk, DoneChunk):
                        chunk = chunk.model_copy(update={"saved": False})
                    yield chunk
                return  # Suspend (or a step that ended the turn itself)
        except asyncio.CancelledError:
            ours = deps.control.abort
            task = asyncio.current_task()
            if ours and task is not None:
                task.uncancel()  # the Agent's own abort ends here; an outside one propagates
            await self._end("aborted", interrupted=True)
            timeout = ours and deps.control.abort_reason == "timeout"  # the host's deadline
            yield AbortedChunk(
                reason=deps.messages.aborted_by_timeout
                if timeout
                else deps.messages.aborted_by_user,
                stop_reason="timeout" if timeout else "user",
                usage=record.usage_model(),
                round_id=record.round_id,
            )
            if not ours:
                raise
        except GeneratorExit:
            # the host stopped iterating without cancelling: keep what was generated
            if record.paused is None and record.status == "running":
                await self._end("interrupted", interrupted=True)
            raise
        except Exception as exc:  # the iterator never raises for a failure of the turn
            logger.exception("turn %s failed", record.round_id)
            error = exc
            await self._end("error", cause=f"{type(exc).__name__}: {exc}", interrupted=True)
            yield ErrorChunk(
                message=f"{type(exc).__name__}: {exc}", category="unknown", round_id=record.round_id
            )
        finally:
            usage = record.usage
            span.set_attribute("status", record.status)
            span.set_attribute("input_tokens", usage.get("input_tokens", 0))
            span.set_attribute("output_tokens", usage.get("output_tokens", 0))
            span.end(error)

    async def _end(
        self,
        status: str,
        *,
        summarise: bool = False,
        interrupted: bool = False,
        cause: str | None = None,
    ) -> bool:
        """Close the turn: keep partial text, answer every open call, move the session state,
        persist the round (False when its log did not take it)."""
        record = self.record
        if interrupted:
            self._keep_partial()
            record.note("interrupted")
        self._close_open_calls()
        record.status = status
        session = self.deps.session
        if status == "error":
            # a provider's failure (a Stop) does not need the host to mark it recovered; a
            # failure of the turn itself (an exception) does
            session.fail(cause or "the turn failed", recovered=not interrupted)
        else:
            session.finish()
        return await self.deps.journal.persist(record, self.deps.summary if summarise else None)

    def _keep_partial(self, *, marker: bool = True) -> None:
        """An interrupted LLM call keeps its partial text in history (with the marker)."""
        text = "".join(self._partial)
        self._partial = []
        if not text:
            return
        suffix = f" {self.deps.messages.interrupted_marker}" if marker else ""
        self._append(Message.assistant(text + suffix))
        if self._partial_stage == "self_review":
            self.record.review_text = text

    def _close_open_calls(self) -> None:
        """Every tool call in history gets a result: providers refuse a call without one."""
        record = self.record
        for call in list(record.pending_calls):
            self._append(Message.tool(call.id, call.name, _INTERRUPTED_RESULT))
            record.note("tool_interrupted", tool_call_id=call.id, name=call.name)
        record.pending_calls.clear()
        record.paused = None

    def _pause(self, pause: Pause) -> None:
        record = self.record
        record.paused = pause
        record.pause_meta = PauseMeta.of(pause)
        self.deps.session.pause(record.pause_meta.reason)

    def _append(self, message: Message) -> None:
        message = self.deps.window.append(message)
        self.record.messages.append(message_to_dict(message))

    # -- step: model -----------------------------------------------------------------------------

    async def _model(self) -> AsyncIterator[AgentChunk | Transition]:
        deps, record = self.deps, self.record
        rid = record.round_id
        strategy = deps.strategy
        reason = deps.control.pause_reason
        if reason is not None:
            # the host asked to pause: stop before the next model call, resumable as is
            self._pause(HostPause(reason))
            yield PausedChunk(round_id=rid)
            yield Suspend()
            return
        if record.iteration >= deps.max_iterations or (
            strategy.tool_step_limit and record.tool_steps >= strategy.tool_step_limit
        ):
            marker = deps.messages.max_iterations_reached
            yield TextChunk(content=("\n\n" if record.answer else "") + marker, round_id=rid)
            record.answer = (record.answer + "\n\n" + marker).strip()
            self._append(Message.assistant(record.answer))
            record.note("max_iterations_reached", iteration=record.iteration)
            yield Goto("finish")
            return

        item = record.plan.advance()
        if item is not None:
            record.note("plan_item", id=item.id, title=item.description)
            yield PlanItemBoundaryChunk(plan_item_id=item.id, title=item.description, round_id=rid)

        yield self._thinking("llm_calling")
        out = _Model()
        transition: Transition | None = None
        async for chunk in self._call_model(out, tools=True, stage="answer"):
            if isinstance(chunk, _TRANSITIONS):
                transition = chunk
            else:
                yield chunk
        record.iteration += 1
        if transition is not None:
            yield transition
            return

        spec = deps.output
        if spec is not None:
            final = next((c for c in out.calls if c.name == FINAL_RESULT_TOOL), None)
            if final is not None or not out.calls:
                async for typed in self._typed_result(spec, out, final):
                    yield typed
                return

        if out.calls:
            record.tool_steps += 1
            if out.text:
                # text before the tool calls is narration, not the answer; `withdrawn` names
                # only what was streamed as `text`
                yield NarrateChunk(content=out.text, withdrawn=out.streamed or None, round_id=rid)
                if out.streamed:
                    record.answer = record.answer[: len(record.answer) - len(out.streamed)]
            self._append(
                Message("assistant", out.text, tuple(out.calls), reasoning=out.reasoning or None)
            )
            record.pending_calls = [PendingCall(c.id, c.name, c.arguments) for c in out.calls]
            record.step_batch = tuple(record.pending_calls)
            self._step_calls = [c.name for c in out.calls]
            yield Goto("tools")
            return

        text = out.text
        if not text.strip():
            record.empty_attempts += 1
            if record.empty_attempts < _MAX_EMPTY_ATTEMPTS and out.finish_reason != "length":
                record.note("empty_response", attempt=record.empty_attempts)
                yield Goto("model")
                return
            if out.finish_reason == "length":
                text = deps.messages.render(
                    "empty_response_truncated", attempts=record.empty_attempts
                )
            else:
                text = deps.messages.empty_response_fallback
            yield TextChunk(content=text, round_id=rid)
            record.answer += text
        self._append(Message("assistant", text, reasoning=out.reasoning or None))
        yield StepBoundaryChunk(step_index=record.iteration, round_id=rid)
        yield Goto("review" if (strategy.self_review and record.tool_steps > 0) else "finish")

    async def _typed_result(
        self, spec: OutputSpec, out: _Model, final: Any, retry: Step = "model"
    ) -> AsyncIterator[AgentChunk | Transition]:
        """A typed turn's answer (its text, or the ``final_result`` call): checked, then
        accepted, or sent back to the model with what was wrong, or — past ``output_retries``
        — the end of the turn with ``OUTPUT_INVALID``.  Other calls of the same response are
        dropped: the result ends the turn."""
        record = self.record
        rid = record.round_id
        raw = final.arguments if final is not None else out.text
        check = await spec.validate(raw)
        if final is not None:
            self._append(Message("assistant", out.text, (final,), reasoning=out.reasoning or None))
            note = "accepted" if check.ok else spec.retry_message(check.message)
            self._append(Message.tool(final.id, FINAL_RESULT_TOOL, note))
        else:
            self._append(Message("assistant", out.text, reasoning=out.reasoning or None))
        if check.ok:
            record.output_value = check.value
            record.output = spec.dump(check.value)
            if final is not None or not record.answer.strip():
                record.answer = json.dumps(record.output, ensure_ascii=False)
            record.note("output", ok=True, failures=record.output_failures)
            yield StepBoundaryChunk(step_index=record.iteration, round_id=rid)
            yield Goto("finish")
            return
        record.output_failures += 1
        record.output_raw, record.output_errors = raw, check.errors
        record.note("output", ok=False, failures=record.output_failures, problem=check.message)
        if out.streamed:  # the streamed text was not the answer: a UI takes it back
            yield NarrateChunk(content=out.text, withdrawn=out.streamed, round_id=rid)
        if record.output_failures > spec.retries:
            yield self._output_invalid(spec, raw, check)
            return
        if final is None:
            self._append(Message.user(spec.retry_message(check.message)))
        record.answer = ""  # the next try's text is the answer
        yield StepBoundaryChunk(step_index=record.iteration, round_id=rid)
        yield Goto(retry)

    def _output_invalid(self, spec: OutputSpec, raw: str, check: OutputCheck) -> Stop:
        record = self.record
        tries = record.output_failures
        return Stop(
            "error",
            ErrorChunk(
                message=f"the result is not a valid {spec.name} after {tries} "
                f"{'try' if tries == 1 else 'tries'}: {check.message}",
                code=ErrorCode.OUTPUT_INVALID.value,
                round_id=record.round_id,
            ),
        )

    async def _call_model(
        self,
        out: _Model,
        *,
        tools: bool,
        stage: Literal["answer", "self_review", "meeting"],
        messages: list[Message] | None = None,
        speaker: str | None = None,
    ) -> AsyncIterator[AgentChunk | Transition]:
        """One streaming LLM call; ends with a transition only when the turn cannot go on.

        Kept as one function on purpose (radon rates it D): its inner loop runs once per token,
        and each helper call there would be paid per delta; ``bench/bench_loop.py`` measures
        that path (first text bytes -> first chunk out: ~15 µs p50).  The branches are the
        delta kinds and the failure kinds, each a few lines.
        ``messages`` replaces the conversation (a meeting member's own view of it)."""
        deps, record = self.deps, self.record
        rid = record.round_id
        window = deps.window
        asks_exhausted = record.questions_asked >= deps.strategy.ask_limit
        spec = deps.output if stage == "answer" else None
        if messages is not None:
            request_messages = messages
        else:
            prompt = deps.prompts.system()
            if spec is not None:  # the result's shape, as the model must give it
                prompt = f"{prompt}\n\n{spec.instruction(tool=deps.output_tool and tools)}"
            # the tool schemas go with every request: the history gets what they leave, and
            # 10% stays free for the estimates' error (a local model's window is a hard limit)
            schemas = deps.exposure.spec_tokens(asks_exhausted) if tools else 0
            room = deps.window_tokens * 9 // 10 - schemas
            request_messages = window.wire(
                prompt,
                room,
                deps.output_reserve,
                deps.prompts.plan_section(),
                effective=deps.window_tokens,
                tools=schemas,
            )
            if not record.soft_limit_sent and window.near_soft_limit(
                prompt, deps.window_tokens, deps.output_reserve
            ):
                # still near the limit after trimming: ask the model to converge (the message
                # is appended to the list being sent)
                record.soft_limit_sent = True
                self._append(Message.user(deps.messages.soft_limit_wrapup))
        request = LLMRequest(
            messages=request_messages,
            tools=deps.exposure.specs(asks_exhausted) if tools else [],
            temperature=deps.strategy.temperature,
            max_tokens=deps.max_tokens,
            history_key=deps.history_key if messages is None else None,
        )
        partial: OutputSpec | None = None
        progress = PartialProgress()  # this call's, not the spec's
        if spec is not None:
            if deps.output_tool and tools:
                request.tools = [*request.tools, spec.tool()]
            else:
                request.output = spec.format
                partial = spec  # the result streams as the answer's text
        provider = deps.review_provider if stage == "self_review" else deps.provider
        policy = (
            deps.retry_policy
            if deps.strategy.error_handling == "retry"
            else RetryPolicy(max_attempts=1)
        )
        assembler = ToolCallAssembler()
        parts = self._partial = []
        self._partial_stage = stage
        streamed: list[str] = []
        reasoning: list[str] = []
        step_index = record.iteration
        span = deps.tracer.start_span(
            "llm_call",
            {
                "round_id": rid,
                "iteration": step_index,
                "provider": provider.name,
                "model": getattr(provider, "model", None) or provider.name.split(":", 1)[-1],
                "stage": stage,
            },
        )
        used_in = used_out = 0
        loop = asyncio.get_running_loop()
        now = time.monotonic
        began = now()
        seen_tool = False
        err: BaseException | None = None
        try:
            async with asyncio.timeout(None) as deadline:
                watch = StallWatch(loop, deps.stall_timeout, deadline)
                try:
                    async for raw in stream_with_retries(provider, request, policy):
                        watch.last = now()
                        kind = raw.kind
                        if kind == "text":
                            # no lone surrogate enters the turn (clean_delta's check, inline:
                            # most text is ASCII, one flag read a token)
                            piece = raw.text  # type: ignore[union-attr]
                            if not piece.isascii():
                                piece = clean_text(piece)
                            parts.append(piece)
                            if not seen_tool:
                                streamed.append(piece)
                                yield text_chunk(piece, stage, rid, speaker)
                                if partial is not None:
                                    grown = partial_chunk(partial, progress, parts, rid)
                                    if grown is not None:
                                        yield grown
                            continue
                        delta = clean_delta(raw)  # no lone surrogate enters the turn
                        if kind == "reasoning":
                            thought = delta.text  # type: ignore[union-attr]
                            reasoning.append(thought)
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
                            out.finish_reason = delta.reason  # type: ignore[union-attr]
                        elif kind == "usage":
                            u = delta.usage  # type: ignore[union-attr]
                            record.add_usage(u.input_tokens, u.output_tokens, u.reasoning_tokens)
                            used_in += u.input_tokens
                            used_out += u.output_tokens
                        elif kind == "retry":
                            notice: RetryNotice = delta  # type: ignore[assignment]
                            watch.last = now() + notice.delay
                            record.note("retry", attempt=notice.attempt, error=str(notice.error))
                            yield RetryChunk(
                                attempt=notice.attempt,
                                max_attempts=notice.max_attempts,
                                delay_ms=int(notice.delay * 1000),
                                error=notice.error.message,
                                round_id=rid,
                            )
                finally:
                    watch.close()
                    if stage == "answer" and streamed:
                        # once per call, not per delta (a str grown by += on an attribute is
                        # copied each time); here, so an interrupted call keeps its text too
                        record.answer += "".join(streamed)
        except TimeoutError as exc:
            err = exc
            record.note("error", category="timeout", message="LLM stalled")
            yield self._stalled()
            return
        except ProviderError as exc:
            err = exc
            record.note("error", category=exc.category, message=exc.message)
            if exc.category == "timeout":
                yield self._stalled()
                return
            if deps.strategy.error_handling == "degrade" and (record.answer or parts):
                # fall back to the answer so far: the turn ends here, no self-review
                self._keep_partial(marker=False)
                record.note("degraded")
                yield Goto("finish")
                return
            self._keep_partial()
            chunk = ErrorChunk(
                message=exc.message, category=exc.category, code=str(exc.code), round_id=rid
            )
            yield Stop("error", chunk)
            return
        finally:
            span.set_attribute("input_tokens", used_in)
            span.set_attribute("output_tokens", used_out)
            if out.finish_reason:
                span.set_attribute("finish_reason", out.finish_reason)
            span.end(err)
        self._partial = []
        record.add_usage(0, 0, 0, 1)
        # the turn's trace: each LLM call with its tokens and time (the page's trace view)
        record.note(
            "llm_call",
            step=step_index,
            stage=stage,
            input_tokens=used_in,
            output_tokens=used_out,
            ms=round((now() - began) * 1000),
            finish=out.finish_reason,
        )
        out.text = "".join(parts)
        out.streamed = "".join(streamed)
        out.reasoning = "".join(reasoning)
        out.calls = assembler.calls()
        if out.reasoning:
            record.note("thought", content=out.reasoning, step_index=step_index)

    def _stalled(self) -> Stop:
        """The LLM stopped answering: keep the partial text, end with ``aborted(timeout)``."""
        self._keep_partial()
        record = self.record
        return Stop(
            "aborted",
            AbortedChunk(
                reason=self.deps.messages.aborted_by_timeout,
                stop_reason="timeout",
                usage=record.usage_model(),
                round_id=record.round_id,
            ),
        )

    # -- step: meeting ---------------------------------------------------------------------------

    async def _meeting(self) -> AsyncIterator[AgentChunk | Transition]:
        """One speaker of a meeting: the next member, or, when all have spoken, the chair."""
        deps, record = self.deps, self.record
        meeting = record.meeting
        assert meeting is not None
        members: list[str] = meeting["members"]
        spoken: list[list[str]] = meeting.setdefault("spoken", [])
        said = "\n".join(f"- {m}: {t}" for m, t in spoken) or deps.messages.meeting_nothing_yet
        chair = len(spoken) >= len(members)
        speaker = meeting["chair"] if chair else members[len(spoken)]
        yield MeetingTurnChunk(
            member=speaker, role="chair" if chair else "member", round_id=record.round_id
        )
        instruction = (
            deps.messages.render("meeting_chair_prompt", contributions=said)
            if chair
            else deps.messages.render("meeting_member_prompt", member=speaker, contributions=said)
        )
        conversation = [m for m in deps.window.messages if m.role != "system"]
        system = deps.prompts.for_member(speaker)
        if chair and deps.output is not None:  # a typed meeting: the chair gives the result
            system = f"{system}\n\n{deps.output.instruction(tool=False)}"
        messages = [
            Message.system(system),
            *conversation,
            Message.user(instruction),
        ]
        out = _Model()
        async for chunk in self._call_model(
            out,
            tools=False,
            stage="answer" if chair else "meeting",
            messages=messages,
            speaker=speaker,
        ):
            yield chunk
            if isinstance(chunk, _TRANSITIONS):
                return
        record.iteration += 1
        text = out.text.strip()
        record.note("meeting_turn", member=speaker, role="chair" if chair else "member", text=text)
        if not chair:
            spoken.append([speaker, text])
            yield Goto("meeting")
            return
        if deps.output is not None:
            async for typed in self._typed_result(deps.output, out, None, retry="meeting"):
                yield typed
            return
        self._append(Message.assistant(out.text))
        yield StepBoundaryChunk(step_index=record.iteration, round_id=record.round_id)
        yield Goto("finish")

    # -- step: review and finish ---------------------------------------------------------------

    async def _review(self) -> AsyncIterator[AgentChunk | Transition]:
        deps, record = self.deps, self.record
        yield SelfReviewChunk(round_id=record.round_id)
        self._append(Message.user(deps.messages.self_review_prompt))
        out = _Model()
        async for chunk in self._call_model(out, tools=False, stage="self_review"):
            yield chunk
            if isinstance(chunk, _TRANSITIONS):
                return
        record.iteration += 1
        review = out.text.strip()
        self._append(Message.assistant(out.text))
        satisfied = is_satisfied(review)
        record.note("self_review", satisfied=satisfied)
        if review and not satisfied:
            record.answer = review
        yield Goto("finish")

    async def _finish(self) -> AsyncIterator[AgentChunk | Transition]:
        record = self.record
        yield ThinkingChunk(phase="archiving", round_id=record.round_id)
        yield Stop(
            "done",
            DoneChunk(
                usage=record.usage_model(),
                answer=record.answer,
                output=record.output,
                round_id=record.round_id,
            ),
            summarise=True,
        )

    # -- one call outside the model loop -----------------------------------------------------------

    async def run_call(self, call: PendingCall) -> AsyncIterator[AgentChunk]:
        """Resolve one tool call through the gates and the tool, as the ``tools`` step would
        (``Agent.call_tool``); a call left paused for approval resumes on the next call with
        the same id once ``record.approval`` is set."""
        if not any(c.id == call.id for c in self.record.pending_calls):
            self.record.pending_calls.append(call)
        async for chunk in self._run_batch([call]):
            yield chunk

    # -- step: tools -------------------------------------------------------------------------------

    async def _tools(self) -> AsyncIterator[AgentChunk | Transition]:
        """Resolve the pending calls in order; read-only runs of them run concurrently."""
        record = self.record
        while record.pending_calls:
            batch = self._batch()
            async for chunk in self._run_batch(batch):
                yield chunk
            paused = record.paused
            if paused is not None and any(c.id == paused.tool_call_id for c in batch):
                yield Suspend()  # this call paused the turn
                return
        self.deps.session.beat()
        self._log_step()
        yield StepBoundaryChunk(step_index=record.iteration, round_id=record.round_id)
        # the results are in: memora works them into the next request
        yield self._thinking("processing")
        yield Goto("model")

    def _log_step(self) -> None:
        """The step just finished, for the checkpoint's plan-item log."""
        record = self.record
        results = [e for e in record.events[-20:] if e.get("type") == "tool_result"]
        step = results[-len(self._step_calls) :] if self._step_calls else []
        item = record.plan.active()
        record.plan_log.append(
            PlanItemOutcome(
                record.round_id,
                record.iteration,
                item.id if item is not None else None,
                tuple(self._step_calls),
                all(e.get("ok") for e in step),
                time.time(),
                _step_summary(step),
            )
        )

    def _batch(self) -> list[PendingCall]:
        """The next calls to run together: every pending call when all are read-only and none
        pauses, else the first one."""
        calls = self.record.pending_calls
        if len(calls) > 1 and self.record.paused is None:
            tools = self.deps.tools
            for call in calls:
                t = tools.get(call.name)
                if t is None or t.idempotency != "read-only" or t.pauses:
                    break
            else:
                return list(calls)
        return calls[:1]

    async def _run_batch(self, batch: list[PendingCall]) -> AsyncIterator[AgentChunk]:
        """Run ``batch``, each call in a task of its own (its own context, its progress live
        while it runs); every chunk leaves through one channel in the order it happened."""
        loop = asyncio.get_running_loop()
        chunks: deque[AgentChunk | None] = deque()
        wake: asyncio.Future[None] | None = None

        def put(item: AgentChunk | None) -> None:
            chunks.append(item)
            if wake is not None and not wake.done():
                wake.set_result(None)

        async def one(call: PendingCall) -> None:
            _ROUND.set(self.record.round_id)  # this task's context: services see the round
            try:
                await self._resolve(call, put)
            finally:
                put(None)

        tasks = [_start_task(loop, one(call)) for call in batch]
        remaining = len(tasks)
        try:
            if not all(t.done() for t in tasks):
                # let the calls take their first step: one that does not wait (most do not) is
                # done now, and its chunks are read without another trip round the event loop
                await asyncio.sleep(0)
            while remaining:
                if not chunks:
                    wake = loop.create_future()
                    await wake
                    wake = None
                    continue
                chunk = chunks.popleft()
                if chunk is None:
                    remaining -= 1
                else:
                    yield chunk
            for t in tasks:
                t.result()  # a bug in the engine surfaces here
        finally:
            pending = [t for t in tasks if not t.done()]
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.wait(pending, timeout=5)

    async def _resolve(self, call: PendingCall, emit: Callable[[AgentChunk], None]) -> None:
        """One call: a resumed pause, else the gates, then the tool; each chunk goes to
        ``emit`` as it happens (coroutines, not async generators: no generator to create,
        register with the event loop and resume per chunk, on every tool call)."""
        record = self.record
        if record.paused is not None and record.paused.tool_call_id == call.id:
            await self._resume_paused(call, emit)
            return
        gate = GateCall(self.deps, record, call.id, call.name, call.arguments)
        verdict = run_gates(gate)
        if verdict is None:
            assert gate.tool is not None
            await self._execute(
                gate.tool, call.id, gate.args, emit, warn=gate.warn, model=gate.model, key=gate.key
            )
        elif isinstance(verdict, Refuse):
            if verdict.started:
                emit(self._start_chunk(call.id, call.name, {}))
            run = ToolRun(False, verdict.content, verdict.summary, verdict.code)
            emit(self._result(call.id, call.name, run, blocked=verdict.blocked))
        elif isinstance(verdict, Reuse):
            emit(self._result(call.id, call.name, verdict.run))
        elif isinstance(verdict, Approve):
            self._pause(ApprovalPause(call.id, call.name, gate.args, verdict.reason))
            record.note("approval_pending", tool_call_id=call.id, name=call.name, args=gate.args)
            emit(
                ApprovalPendingChunk(
                    tool_call_id=call.id,
                    name=call.name,
                    args=gate.args,
                    reason=verdict.reason,
                    round_id=record.round_id,
                )
            )
            emit(PausedChunk(round_id=record.round_id))

    async def _resume_paused(self, call: PendingCall, emit: Callable[[AgentChunk], None]) -> None:
        record = self.record
        paused = record.paused
        if isinstance(paused, QuestionPause):
            answers = dict(record.answers)
            record.answers = {}
            record.paused = None
            content = json.dumps({"answers": answers}, ensure_ascii=False)
            emit(
                self._result(call.id, call.name, ToolRun(True, content, f"{len(answers)} answers"))
            )
            return
        assert isinstance(paused, ApprovalPause)
        decision = record.approval
        assert decision is not None and decision.tool_call_id == call.id
        record.paused = None
        record.approval = None
        record.note(
            "approval",
            tool_call_id=call.id,
            name=call.name,
            approved=decision.approved,
            edited=decision.args is not None,
            reason=decision.reason,
        )
        if not decision.approved:
            reason = decision.reason or "the user rejected this call"
            run = ToolRun(
                False,
                f"{ToolErrorCode.PERMISSION_DENIED}: rejected by the user: {reason}",
                f"rejected: {reason}",
                ToolErrorCode.PERMISSION_DENIED.value,
            )
            emit(self._result(call.id, call.name, run, blocked=True))
            return
        tool = self.deps.tools.get(call.name)
        if tool is None:
            msg = f"{ToolErrorCode.NOT_AVAILABLE}: there is no tool named {call.name!r} here"
            run = ToolRun(False, msg, msg, ToolErrorCode.NOT_AVAILABLE.value)
            emit(self._result(call.id, call.name, run, blocked=True))
            return
        args = decision.args if decision.args is not None else paused.args
        await self._execute(tool, call.id, args, emit)

    async def _execute(
        self,
        tool: Tool,
        call_id: str,
        args: dict[str, Any],
        emit: Callable[[AgentChunk], None],
        *,
        warn: bool = False,
        model: BaseModel | None = None,
        key: Callable[[], str] | None = None,
    ) -> None:
        """Run the tool; ``model``: the validated ``args`` (the gates made it), ``key``: gives
        their :func:`args_key` for the outbox."""
        deps, record = self.deps, self.record
        rid = record.round_id
        name = tool.name
        emit(self._start_chunk(call_id, name, args))
        record.note(
            "tool_start", tool_call_id=call_id, name=name, args=args, at=round(time.time(), 3)
        )

        def progress(text: str) -> None:
            emit(ToolProgressChunk(tool_call_id=call_id, name=name, content=text, round_id=rid))

        # one context per call: progress (and anything else set per call) is never shared
        ctx = deps.tool_context.derive(progress=progress)
        span = deps.tracer.start_span(
            "recall" if name == "memory_search" else "tool_exec",
            {"tool": name, "round_id": rid, "tool_call_id": call_id},
        )
        err: BaseException | None = None
        try:
            run = await run_parsed(tool, ctx, args, model=model)
            span.set_attribute("ok", run.ok)
            if run.error_code:
                span.set_attribute("error_code", run.error_code)
        except AskUserSignal as signal:
            record.questions_asked += len(signal.questions)
            self._pause(QuestionPause(call_id, list(signal.questions), name))
            record.note("question_pending", questions=[q.model_dump() for q in signal.questions])
            emit(QuestionPendingChunk(questions=signal.questions, round_id=rid))
            emit(PausedChunk(round_id=rid))
            return
        except BaseException as exc:
            err = exc
            raise
        finally:
            span.end(err)
        if warn:
            note = duplicate_warning(deps, deps.duplicate_interceptor or record.duplicates)
            run = ToolRun(
                run.ok, f"{run.content}\n\n[{note}]", run.summary, run.error_code, run.data
            )
        if tool.idempotency != "read-only":
            record.outbox.record(
                f"{rid}/{call_id}",
                name,
                args,
                run.ok,
                run.content,
                run.summary,
                run.error_code,
                tool.idempotency,
                key=key() if key is not None else None,
            )
        emit(self._result(call_id, name, run))

    def _start_chunk(self, call_id: str, name: str, args: dict[str, Any]) -> ToolStartChunk:
        record = self.record
        return ToolStartChunk(
            tool_call_id=call_id,
            name=name,
            args=args,
            step_index=record.iteration,
            round_id=record.round_id,
        )

    def _result(
        self, call_id: str, name: str, run: ToolRun, *, blocked: bool = False
    ) -> ToolResultChunk:
        """Record a call's result (history, round event) and make its chunk."""
        record = self.record
        content = run.content
        if not run.ok and run.error_code and is_retryable(run.error_code) and not blocked:
            limit = self.deps.strategy.tool_step_limit
            remaining = max(limit - record.tool_steps, 0) if limit else "unlimited"
            content += "\n\n" + self.deps.messages.render("reflection_hint", remaining=remaining)
        self._append(Message.tool(call_id, name, content))
        record.resolve(call_id)
        record.note(
            "tool_result",
            tool_call_id=call_id,
            name=name,
            ok=run.ok,
            summary=run.summary,
            blocked=blocked,
            error_code=run.error_code,
            at=round(time.time(), 3),
        )
        return ToolResultChunk(
            tool_call_id=call_id,
            name=name,
            ok=run.ok,
            summary=run.summary,
            blocked=blocked,
            error_code=run.error_code,
            round_id=record.round_id,
        )


def new_round_id() -> str:
    return f"r-{uuid.uuid4().hex[:12]}"


def _step_summary(results: list[dict[str, Any]]) -> str:
    """One line for a step: each call's tool and the first line of its result's summary."""
    parts = []
    for e in results:
        said = str(e.get("summary") or "").strip()
        first = said.splitlines()[0][:80] if said else ("ok" if e.get("ok") else "failed")
        parts.append(f"{e.get('name')}: {first}")
    return "; ".join(parts)[:300]
