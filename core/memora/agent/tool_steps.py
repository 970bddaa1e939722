"""The ``tools`` step of a turn: the calls the model asked for, through the gates, to the tools.

:class:`ToolSteps` resolves a turn's pending calls in order — a batch of read-only calls at once,
each in a task of its own whose chunks leave through one channel in the order they happened —
runs each through the gates (:mod:`memora.agent.gates`: refuse, reuse a result, ask for
approval) and the tool, pauses the turn for an approval or a question, and records each result
in the history, the round's events and the outbox.  ``Agent.call_tool`` runs one call the same
way (:meth:`ToolSteps.run_call`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..chunks import (
    AgentChunk,
    ApprovalPendingChunk,
    PausedChunk,
    QuestionPendingChunk,
    StepBoundaryChunk,
    ToolProgressChunk,
    ToolResultChunk,
    ToolStartChunk,
)
from ..errors import ToolErrorCode, is_retryable
from ..llm.types import Message
from ..services import ROUND_ID
from ..tools.base import Tool, ToolRun, run_parsed
from ..tools.plan import AskUserSignal
from .durable import INTERRUPTED_CALL, Checkpoint
from .gates import Approve, GateCall, Refuse, Reuse, duplicate_warning, run_gates
from .record import ApprovalPause, PendingCall, PlanItemOutcome, QuestionPause
from .timing import start_task
from .transitions import Goto, Suspend, Transition

if TYPE_CHECKING:
    from pydantic import BaseModel

    from .loop import TurnEngine

__all__ = ["ToolSteps"]


class ToolSteps:
    """The ``tools`` step of ``engine``'s turn (see the module docstring)."""

    def __init__(self, engine: TurnEngine) -> None:
        # made for one step and dropped with it: the engine holds no reference back, so a
        # finished turn is freed without the cycle collector
        self.engine = engine
        self.deps = engine.deps
        self.record = engine.record

    async def run_call(self, call: PendingCall) -> AsyncIterator[AgentChunk]:
        """Resolve one tool call through the gates and the tool, as the ``tools`` step would
        (``Agent.call_tool``); a call left paused for approval resumes on the next call with
        the same id once ``record.approval`` is set."""
        if not any(c.id == call.id for c in self.record.pending_calls):
            self.record.pending_calls.append(call)
        async for chunk in self._run_batch([call]):
            if not isinstance(chunk, Checkpoint):  # a direct call is never a durable run
                yield chunk

    async def step(self) -> AsyncIterator[AgentChunk | Checkpoint | Transition]:
        """Resolve the pending calls in order; read-only runs of them run concurrently.  A
        durable run keeps each batch's results (a checkpoint) and, before a call that may not
        be repeated, the intent to make it."""
        record, engine = self.record, self.engine
        while record.pending_calls:
            batch = self._batch()
            if engine.checkpoints:
                left = self._left_by_a_dead_worker(batch)
                if left is not None:
                    yield left
                    continue
            async for chunk in self._run_batch(batch):
                yield chunk
            paused = record.paused
            if paused is not None and any(c.id == paused.tool_call_id for c in batch):
                yield Suspend()  # this call paused the turn
                return
            if engine.checkpoints and record.pending_calls:
                yield engine.checkpoint()
        self.deps.session.beat()
        self._log_step()
        yield StepBoundaryChunk(step_index=record.iteration, round_id=record.round_id)
        # the results are in: memora works them into the next request
        yield self.engine.thinking("processing")
        yield Goto("model")

    def _repeatable(self, call: PendingCall) -> bool:
        """The call's tool may run twice: read-only, or idempotent by its declaration."""
        tool = self.deps.tools.get(call.name)
        return tool is not None and tool.idempotency in ("read-only", "idempotent")

    def _left_by_a_dead_worker(self, batch: list[PendingCall]) -> ToolResultChunk | None:
        """A call this turn's state names ``in_flight`` that this engine did not start: the
        worker running it died before its result was kept.  A tool that may run twice runs
        again (``None``); another gets the interrupted result, never a second run."""
        record = self.record
        for call in batch:
            if call.id not in record.in_flight or call.id in self.engine.started_here:
                continue
            record.in_flight.remove(call.id)
            if self._repeatable(call):
                continue
            record.note("tool_interrupted", tool_call_id=call.id, name=call.name, worker=True)
            run = ToolRun(
                False,
                INTERRUPTED_CALL,
                "interrupted: the worker running it stopped; not run again",
                ToolErrorCode.EXECUTION_FAILED.value,
            )
            return self._result(call.id, call.name, run, blocked=True)
        return None

    def _log_step(self) -> None:
        """The step just finished, for the checkpoint's plan-item log."""
        record = self.record
        results = [e for e in record.events[-20:] if e.get("type") == "tool_result"]
        step = results[-len(self.engine.step_calls) :] if self.engine.step_calls else []
        item = record.plan.active()
        record.plan_log.append(
            PlanItemOutcome(
                record.round_id,
                record.iteration,
                item.id if item is not None else None,
                tuple(self.engine.step_calls),
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

    async def _run_batch(self, batch: list[PendingCall]) -> AsyncIterator[AgentChunk | Checkpoint]:
        """Run ``batch``, each call in a task of its own (its own context, its progress live
        while it runs); every chunk leaves through one channel in the order it happened.  A
        durable run's intent to make a call (:class:`_Intent`) leaves the same way, and the
        call waits until the checkpoint has been kept."""
        loop = asyncio.get_running_loop()
        chunks: deque[AgentChunk | _Intent | None] = deque()
        wake: asyncio.Future[None] | None = None

        def put(item: AgentChunk | _Intent | None) -> None:
            chunks.append(item)
            if wake is not None and not wake.done():
                wake.set_result(None)

        async def one(call: PendingCall) -> None:
            ROUND_ID.set(self.record.round_id)  # this task's context: services see the round
            try:
                await self._resolve(call, put)
            finally:
                put(None)

        tasks = [start_task(loop, one(call)) for call in batch]
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
                elif isinstance(chunk, _Intent):
                    yield chunk.checkpoint
                    chunk.kept.set()  # asked on: the executor kept it
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

    async def _resolve(
        self, call: PendingCall, emit: Callable[[AgentChunk | _Intent], None]
    ) -> None:
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
            self.engine.pause(ApprovalPause(call.id, call.name, gate.args, verdict.reason))
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

    async def _resume_paused(
        self, call: PendingCall, emit: Callable[[AgentChunk | _Intent], None]
    ) -> None:
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
        emit: Callable[[AgentChunk | _Intent], None],
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
        if self.engine.checkpoints and tool.idempotency not in ("read-only", "idempotent"):
            await self._keep_intent(call_id, emit)
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
            self.engine.pause(QuestionPause(call_id, list(signal.questions), name))
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

    async def _keep_intent(
        self, call_id: str, emit: Callable[[AgentChunk | _Intent], None]
    ) -> None:
        """A durable run: name the call in flight and wait until its executor has kept that,
        so a worker dying while the call runs leaves a state that says so."""
        self.record.in_flight.append(call_id)
        self.engine.started_here.add(call_id)
        intent = _Intent(self.engine.checkpoint("intent"), asyncio.Event())
        emit(intent)
        await intent.kept.wait()

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
        self.engine.append(Message.tool(call_id, name, content))
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


@dataclass(frozen=True, slots=True)
class _Intent:
    """A call's intent checkpoint on its way out of :meth:`ToolSteps._run_batch`; ``kept`` is
    set once the engine has been asked on past it."""

    checkpoint: Checkpoint
    kept: asyncio.Event


def _step_summary(results: list[dict[str, Any]]) -> str:
    """One line for a step: each call's tool and the first line of its result's summary."""
    parts = []
    for e in results:
        said = str(e.get("summary") or "").strip()
        first = said.splitlines()[0][:80] if said else ("ok" if e.get("ok") else "failed")
        parts.append(f"{e.get('name')}: {first}")
    return "; ".join(parts)[:300]
