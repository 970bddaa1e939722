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

The steps live in rooms of their own: one LLM call (request, stream, failures) in
:mod:`memora.agent.model_call`, the ``tools`` step (gates, tools, pauses, results) in
:mod:`memora.agent.tool_steps`, the transitions in :mod:`memora.agent.transitions`; this module
drives them and holds the ``model``, ``review``, ``meeting`` and ``finish`` steps.

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
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..chunks import (
    AbortedChunk,
    AgentChunk,
    DoneChunk,
    ErrorChunk,
    MeetingTurnChunk,
    NarrateChunk,
    PausedChunk,
    PlanItemBoundaryChunk,
    SelfReviewChunk,
    StepBoundaryChunk,
    TextChunk,
    ThinkingChunk,
)
from ..errors import ErrorCode
from ..llm.retry import RetryPolicy
from ..llm.types import Message
from .durable import Checkpoint, journal_state
from .model_call import ModelCall, ModelOutput, PartialProgress, partial_chunk
from .output import FINAL_RESULT_TOOL, OutputCheck, OutputSpec
from .record import (
    HostPause,
    Pause,
    PauseMeta,
    PendingCall,
    Step,
    TurnRecord,
)
from .serialize import message_to_dict
from .tool_steps import ToolSteps
from .transitions import TRANSITIONS, Goto, Stop, Suspend, Transition

if TYPE_CHECKING:
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

__all__ = [
    "Goto",
    "PartialProgress",
    "Stop",
    "Suspend",
    "TurnDeps",
    "TurnEngine",
    "TurnState",
    "is_satisfied",
    "partial_chunk",
]

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


class TurnEngine:
    """Runs (or resumes) one turn: ``async for chunk in TurnEngine(deps, record).run()``."""

    def __init__(self, deps: TurnDeps, record: TurnRecord) -> None:
        self.deps = deps
        self.record = record
        self.partial_text: list[str] = []
        """Text of the LLM call being streamed (kept with a marker if the turn ends in it)."""
        self.partial_stage = "answer"
        self.step_calls: list[str] = [c.name for c in record.pending_calls]
        """The tools of the step being run (for the plan-item log)."""
        self._phases: dict[str, ThinkingChunk] = {}
        self.checkpoints = False
        """A durable run (:meth:`run_durably`): a :class:`Checkpoint` between steps."""
        self.recovered = False
        """Rebuilt from a durable turn's kept state on another worker (or after a restart):
        the round is stored only if the worker that died had not stored it."""
        self.started_here: set[str] = set()
        """Calls named ``in_flight`` by this engine (a durable run): one named there before
        it was made was left by a worker that died while running it."""

    def thinking(self, phase: Literal["llm_calling", "processing"]) -> ThinkingChunk:
        """The turn's ``thinking`` chunk of ``phase`` (frozen: made once, sent every step)."""
        chunk = self._phases.get(phase)
        if chunk is None:
            chunk = self._phases[phase] = ThinkingChunk(phase=phase, round_id=self.record.round_id)
        return chunk

    # -- the driver ----------------------------------------------------------------------------

    def run(self) -> AsyncIterator[AgentChunk]:
        """The turn's chunks (see the module docstring)."""
        return self._run()  # type: ignore[return-value]  # no checkpoint without run_durably

    def run_durably(self) -> AsyncGenerator[AgentChunk | Checkpoint, None]:
        """The turn's chunks with a :class:`~memora.agent.durable.Checkpoint` after each step
        and before each call that may not be repeated (:mod:`memora.agent.durable`)."""
        self.checkpoints = True
        return self._run()

    def checkpoint(self, why: Literal["step", "intent"] = "step") -> Checkpoint:
        """The turn's state here, for a durable run's executor to keep."""
        return Checkpoint(why, journal_state(self.record))

    async def _run(self) -> AsyncGenerator[AgentChunk | Checkpoint, None]:
        deps, record = self.deps, self.record
        steps: dict[str, Callable[[], AsyncIterator[AgentChunk | Checkpoint | Transition]]] = {
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
                self.append(Message.user(record.user_text))
                record.started = True
            while True:
                transition: Transition | None = None
                async for item in steps[record.step]():
                    if isinstance(item, TRANSITIONS):
                        transition = item
                    else:
                        yield item
                if isinstance(transition, Goto):
                    record.step = transition.step
                    if self.checkpoints:
                        yield self.checkpoint()
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
            if deps.control.left:  # a durable turn's host stopped iterating it
                if task is not None:
                    task.uncancel()
                await self._end("interrupted", interrupted=True)
                return
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
            self.keep_partial()
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
        return await self.deps.journal.persist(
            record, self.deps.summary if summarise else None, once=self.recovered
        )

    def keep_partial(self, *, marker: bool = True) -> None:
        """An interrupted LLM call keeps its partial text in history (with the marker)."""
        text = "".join(self.partial_text)
        self.partial_text = []
        if not text:
            return
        suffix = f" {self.deps.messages.interrupted_marker}" if marker else ""
        self.append(Message.assistant(text + suffix))
        if self.partial_stage == "self_review":
            self.record.review_text = text

    def _close_open_calls(self) -> None:
        """Every tool call in history gets a result: providers refuse a call without one."""
        record = self.record
        for call in list(record.pending_calls):
            self.append(Message.tool(call.id, call.name, _INTERRUPTED_RESULT))
            record.note("tool_interrupted", tool_call_id=call.id, name=call.name)
        record.pending_calls.clear()
        record.paused = None

    def pause(self, pause: Pause) -> None:
        record = self.record
        if pause.tool_call_id in record.in_flight:  # it waits for the host: it did not run
            record.in_flight.remove(pause.tool_call_id)
        record.paused = pause
        record.pause_meta = PauseMeta.of(pause)
        self.deps.session.pause(record.pause_meta.reason)

    def append(self, message: Message) -> None:
        message = self.deps.window.append(message)
        self.record.messages.append(message_to_dict(message))

    # -- step: model -----------------------------------------------------------------------------

    async def _model(self) -> AsyncIterator[AgentChunk | Transition]:
        """The ``model`` step: a call of the model, unless the host asked for a pause or the
        turn's budget is spent; then what its answer leads to."""
        held = self._held()
        if held is not None:
            for said in held:
                yield said
            return
        record = self.record
        item = record.plan.advance()
        if item is not None:
            record.note("plan_item", id=item.id, title=item.description)
            yield PlanItemBoundaryChunk(
                plan_item_id=item.id, title=item.description, round_id=record.round_id
            )
        yield self.thinking("llm_calling")
        out = ModelOutput()
        transition: Transition | None = None
        async for chunk in ModelCall(self, out, tools=True, stage="answer").run():
            if isinstance(chunk, TRANSITIONS):
                transition = chunk
            else:
                yield chunk
        record.iteration += 1
        if transition is not None:
            yield transition
            return
        spec = self.deps.output
        if spec is not None:
            final = next((c for c in out.calls if c.name == FINAL_RESULT_TOOL), None)
            if final is not None or not out.calls:
                async for typed in self._typed_result(spec, out, final):
                    yield typed
                return
        if out.calls:
            for called in self._called(out):
                yield called
            return
        async for answered in self._answered(out):
            yield answered

    def _held(self) -> list[AgentChunk | Transition] | None:
        """What ends the ``model`` step before a call: the host's pause request (the turn
        waits, resumable as is), or the turn's iteration or tool-step budget reached (the
        answer so far, with the marker, is the answer); ``None`` to call the model."""
        deps, record = self.deps, self.record
        rid = record.round_id
        reason = deps.control.pause_reason
        if reason is not None:
            self.pause(HostPause(reason))
            return [PausedChunk(round_id=rid), Suspend()]
        limit = deps.strategy.tool_step_limit
        if record.iteration < deps.max_iterations and not (limit and record.tool_steps >= limit):
            return None
        marker = deps.messages.max_iterations_reached
        shown = TextChunk(content=("\n\n" if record.answer else "") + marker, round_id=rid)
        record.answer = (record.answer + "\n\n" + marker).strip()
        self.append(Message.assistant(record.answer))
        record.note("max_iterations_reached", iteration=record.iteration)
        return [shown, Goto("finish")]

    def _called(self, out: ModelOutput) -> list[AgentChunk | Transition]:
        """The model called tools: text before the calls is narration, not the answer (a UI
        takes back what streamed as ``text``); the calls go to the ``tools`` step."""
        record = self.record
        record.tool_steps += 1
        said: list[AgentChunk | Transition] = []
        if out.text:
            said.append(
                NarrateChunk(
                    content=out.text, withdrawn=out.streamed or None, round_id=record.round_id
                )
            )
            if out.streamed:
                record.answer = record.answer[: len(record.answer) - len(out.streamed)]
        self.append(
            Message("assistant", out.text, tuple(out.calls), reasoning=out.reasoning or None)
        )
        record.pending_calls = [PendingCall(c.id, c.name, c.arguments) for c in out.calls]
        record.step_batch = tuple(record.pending_calls)
        self.step_calls = [c.name for c in out.calls]
        return [*said, Goto("tools")]

    async def _answered(self, out: ModelOutput) -> AsyncIterator[AgentChunk | Transition]:
        """The model answered in text: an empty answer is asked again (once) or replaced by
        the fallback; then the self-review, or the end of the turn."""
        deps, record = self.deps, self.record
        rid = record.round_id
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
        self.append(Message("assistant", text, reasoning=out.reasoning or None))
        yield StepBoundaryChunk(step_index=record.iteration, round_id=rid)
        review = deps.strategy.self_review and record.tool_steps > 0
        yield Goto("review" if review else "finish")

    async def _typed_result(
        self, spec: OutputSpec, out: ModelOutput, final: Any, retry: Step = "model"
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
            self.append(Message("assistant", out.text, (final,), reasoning=out.reasoning or None))
            note = "accepted" if check.ok else spec.retry_message(check.message)
            self.append(Message.tool(final.id, FINAL_RESULT_TOOL, note))
        else:
            self.append(Message("assistant", out.text, reasoning=out.reasoning or None))
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
            self.append(Message.user(spec.retry_message(check.message)))
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

    def stalled(self) -> Stop:
        """The LLM stopped answering: keep the partial text, end with ``aborted(timeout)``."""
        self.keep_partial()
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
        out = ModelOutput()
        async for chunk in ModelCall(
            self,
            out,
            tools=False,
            stage="answer" if chair else "meeting",
            messages=messages,
            speaker=speaker,
        ).run():
            yield chunk
            if isinstance(chunk, TRANSITIONS):
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
        self.append(Message.assistant(out.text))
        yield StepBoundaryChunk(step_index=record.iteration, round_id=record.round_id)
        yield Goto("finish")

    # -- step: review and finish ---------------------------------------------------------------

    async def _review(self) -> AsyncIterator[AgentChunk | Transition]:
        deps, record = self.deps, self.record
        yield SelfReviewChunk(round_id=record.round_id)
        self.append(Message.user(deps.messages.self_review_prompt))
        out = ModelOutput()
        async for chunk in ModelCall(self, out, tools=False, stage="self_review").run():
            yield chunk
            if isinstance(chunk, TRANSITIONS):
                return
        record.iteration += 1
        review = out.text.strip()
        self.append(Message.assistant(out.text))
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

    # -- one call outside the model loop ---------------------------------------------------------

    async def run_call(self, call: PendingCall) -> AsyncIterator[AgentChunk]:
        """One tool call through the gates and the tool (``Agent.call_tool``): see
        :meth:`~memora.agent.tool_steps.ToolSteps.run_call`."""
        async for chunk in ToolSteps(self).run_call(call):
            yield chunk

    def _tools(self) -> AsyncIterator[AgentChunk | Checkpoint | Transition]:
        """The ``tools`` step (:mod:`memora.agent.tool_steps`)."""
        return ToolSteps(self).step()


def new_round_id() -> str:
    return f"r-{uuid.uuid4().hex[:12]}"
