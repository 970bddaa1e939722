"""The turn record: everything a turn needs between two steps, in one typed, serialisable object.

A turn paused for a question or an approval is resumed from its record — in this process, or in
another one after ``agent.pause_state()`` / ``agent.resume(state)``.  The record holds the
position of the step machine (``step``), the unresolved tool calls, the pause and the host's
answer to it, the turn's messages and round events, and the per-turn state the gates and tools
keep: the idempotency outbox, the duplicate-call interceptor, the file stamps of
``file_consistency_check``, the per-turn counters (``web_search`` calls) and the plan.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

from ..chunks import QuestionSpec, Usage
from ..tools.task_table import PlanItem, TaskTable
from .state import DuplicateCallInterceptor, Outbox

__all__ = [
    "ApprovalDecision",
    "ApprovalPause",
    "HostPause",
    "PauseMeta",
    "PendingCall",
    "PlanItemOutcome",
    "QuestionPause",
    "Step",
    "TurnRecord",
]

Step = Literal["model", "tools", "review", "finish", "meeting"]
"""Where the step machine continues: call the model, resolve the pending tool calls, run the
self-review, or finish (persist, ``done``)."""

RECORD_VERSION = 2
PLAN_LOG_SIZE = 12
PLAN_LOG_SHOWN = 5
"""How many of the latest steps the model sees under the plan (the checkpoint keeps PLAN_LOG_SIZE)."""


@dataclass(slots=True)
class PendingCall:
    """A tool call of the current step that has no result yet."""

    id: str
    name: str
    arguments: str

    def to_dict(self) -> dict[str, str]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}


@dataclass(slots=True)
class QuestionPause:
    """``ask_user`` asked; the answers become the call's result."""

    tool_call_id: str
    questions: list[QuestionSpec]
    name: str = "ask_user"
    kind: Literal["question"] = "question"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "tool_call_id": self.tool_call_id,
            "name": self.name,
            "questions": [q.model_dump() for q in self.questions],
        }


@dataclass(slots=True)
class ApprovalPause:
    """A check answered ``Ask``: the call runs once the host approves it."""

    tool_call_id: str
    name: str
    args: dict[str, Any]
    reason: str = ""
    kind: Literal["approval"] = "approval"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "tool_call_id": self.tool_call_id,
            "name": self.name,
            "args": self.args,
            "reason": self.reason,
        }


@dataclass(slots=True)
class HostPause:
    """The host asked the turn to pause (``agent.request_pause()``): it stopped before its next
    model call and continues with ``continue_after_pause()``."""

    reason: str = ""
    tool_call_id: str = ""
    kind: Literal["host"] = "host"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "reason": self.reason}


Pause = QuestionPause | ApprovalPause | HostPause


@dataclass(frozen=True, slots=True)
class PauseMeta:
    """Why and by whom a turn paused: ``user`` (the host asked), ``agent`` (the model asked a
    question), ``system`` (a check asked for approval)."""

    reason: str
    source: Literal["user", "agent", "system"]
    at: float

    def to_dict(self) -> dict[str, Any]:
        return {"reason": self.reason, "source": self.source, "at": self.at}

    @staticmethod
    def of(pause: Pause) -> PauseMeta:
        if isinstance(pause, QuestionPause):
            return PauseMeta("; ".join(q.question for q in pause.questions), "agent", time.time())
        if isinstance(pause, ApprovalPause):
            return PauseMeta(pause.reason or f"approve {pause.name}", "system", time.time())
        return PauseMeta(pause.reason or "paused by the host", "user", time.time())


@dataclass(frozen=True, slots=True)
class PlanItemOutcome:
    """One step of the turn's timeline (the checkpoint's ``plan_item_log``, last 12 kept)."""

    round_id: str
    iteration: int
    plan_item_id: str | None
    tools: tuple[str, ...]
    ok: bool
    at: float
    summary: str = ""
    """What the step did, in one line: each call's tool and its result's summary (the seed's
    ``PlanItemOutcome.summary``)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "round_id": self.round_id,
            "iteration": self.iteration,
            "plan_item_id": self.plan_item_id,
            "tools": list(self.tools),
            "ok": self.ok,
            "at": self.at,
            "summary": self.summary,
        }


@dataclass(slots=True)
class ApprovalDecision:
    """The host's answer to an :class:`ApprovalPause`."""

    tool_call_id: str
    approved: bool
    args: dict[str, Any] | None = None
    """Edited (re-validated) arguments, or ``None`` to run the call as asked."""
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool_call_id": self.tool_call_id,
            "approved": self.approved,
            "args": self.args,
            "reason": self.reason,
        }


def _list(data: dict[str, Any], key: str) -> list[Any]:
    return list(data.get(key) or [])


def _dict(data: dict[str, Any], key: str) -> dict[str, Any]:
    return dict(data.get(key) or {})


def _ints(data: dict[str, Any]) -> dict[str, int]:
    return {str(k): int(v) for k, v in data.items()}


def _pending_from(c: dict[str, Any]) -> PendingCall:
    return PendingCall(str(c["id"]), str(c["name"]), str(c.get("arguments") or ""))


def _approval_from(approval: dict[str, Any] | None) -> ApprovalDecision | None:
    if not approval:
        return None
    return ApprovalDecision(
        str(approval["tool_call_id"]),
        bool(approval.get("approved")),
        approval.get("args"),
        str(approval.get("reason") or ""),
    )


def _outcome_from(o: dict[str, Any]) -> PlanItemOutcome:
    return PlanItemOutcome(
        str(o["round_id"]),
        int(o["iteration"]),
        o.get("plan_item_id"),
        tuple(o.get("tools") or ()),
        bool(o.get("ok")),
        float(o.get("at") or 0),
        str(o.get("summary") or ""),
    )


def _pause_from(data: dict[str, Any] | None) -> Pause | None:
    if not data:
        return None
    if data.get("kind") == "host":
        return HostPause(str(data.get("reason") or ""))
    if data.get("kind") == "question":
        return QuestionPause(
            str(data["tool_call_id"]),
            [QuestionSpec(**q) for q in data.get("questions") or []],
            str(data.get("name") or "ask_user"),
        )
    return ApprovalPause(
        str(data["tool_call_id"]),
        str(data["name"]),
        dict(data.get("args") or {}),
        str(data.get("reason") or ""),
    )


@dataclass(slots=True)
class TurnRecord:
    """One turn's resumable state (see the module docstring)."""

    round_id: str
    user_text: str
    session_id: str
    started_at: float = field(default_factory=time.time)
    step: Step = "model"
    started: bool = False
    """The user message is in history (the first step has run)."""
    iteration: int = 0
    tool_steps: int = 0
    answer: str = ""
    review_text: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    questions_asked: int = 0
    pending_calls: list[PendingCall] = field(default_factory=list)
    step_batch: tuple[PendingCall, ...] = ()
    """Every call of the current model response (the batch a duplicate interceptor sees);
    not persisted with a paused turn: after a resume it holds the calls still pending."""
    paused: Pause | None = None
    answers: dict[str, str] = field(default_factory=dict)
    approval: ApprovalDecision | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    """This turn's messages so far (persisted to the session when the turn ends)."""
    soft_limit_sent: bool = False
    empty_attempts: int = 0
    model: str = ""
    """Which provider and model answered (:func:`~memora.llm.provider.model_label`); set each
    time the turn runs, so a turn resumed elsewhere records the model that finished it."""
    status: str = "running"
    # per-turn state of the gates and tools (shared with every call's ToolContext)
    outbox: Outbox = field(default_factory=Outbox)
    duplicates: DuplicateCallInterceptor = field(default_factory=DuplicateCallInterceptor)
    counters: dict[str, int] = field(default_factory=dict)
    file_stamps: dict[str, tuple[int, int]] = field(default_factory=dict)
    plan: TaskTable = field(default_factory=TaskTable)
    dup_key: str | None = None
    dup_count: int = 0
    """The ``duplicate_interceptor`` option's count of the same call in a row."""
    plan_log: deque[PlanItemOutcome] = field(default_factory=lambda: deque(maxlen=PLAN_LOG_SIZE))
    pause_meta: PauseMeta | None = None
    meeting: dict[str, Any] | None = None
    """A meeting's plan and progress: ``members``, ``chair``, ``spoken`` ([member, text])."""
    output_schema: dict[str, Any] | None = None
    """A typed turn: the JSON schema its result must follow (kept with a durable pause, so a
    resumed turn can check it is given the same type)."""
    output_failures: int = 0
    """Results that did not validate so far (``output_retries`` bounds them)."""
    output: Any = None
    """The validated result as JSON data (``done.output``; stored with the round)."""
    output_raw: str = ""
    """The last result that did not validate, as the model wrote it (in this process only)."""
    output_errors: list[dict[str, Any]] = field(default_factory=list)
    """What was wrong with it (in this process only)."""
    output_spec: Any = None
    """The turn's :class:`~memora.agent.output.OutputSpec` (in this process only)."""
    output_value: Any = None
    """The validated result as the host's type (in this process only)."""
    deps: Any = None
    """The host's dependencies for its tools (``ctx.deps``): never stored or sent."""
    in_flight: list[str] = field(default_factory=list)
    """A durable turn's calls that may not be repeated and were about to run when its state
    was kept (:mod:`memora.agent.durable`); a call leaves it with its result."""
    runs: int = 0
    """How many times the turn was started or continued after a pause (a durable turn's
    identity: each run is one workflow)."""

    # -- convenience ---------------------------------------------------------------------------

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

    def note(self, kind: str, **data: Any) -> None:
        """Add a round event (persisted with the round)."""
        data["type"] = kind
        self.events.append(data)

    def resolve(self, call_id: str) -> None:
        """The call has its result: it is no longer pending (nor in flight)."""
        if call_id in self.in_flight:
            self.in_flight.remove(call_id)
        for i, call in enumerate(self.pending_calls):
            if call.id == call_id:
                del self.pending_calls[i]
                return

    # -- serialisation -------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": RECORD_VERSION,
            "round_id": self.round_id,
            "user_text": self.user_text,
            "session_id": self.session_id,
            "started_at": self.started_at,
            "step": self.step,
            "started": self.started,
            "iteration": self.iteration,
            "tool_steps": self.tool_steps,
            "answer": self.answer,
            "review_text": self.review_text,
            "events": list(self.events),
            "usage": dict(self.usage),
            "questions_asked": self.questions_asked,
            "pending_calls": [c.to_dict() for c in self.pending_calls],
            "paused": self.paused.to_dict() if self.paused is not None else None,
            "answers": dict(self.answers),
            "approval": self.approval.to_dict() if self.approval is not None else None,
            "messages": list(self.messages),
            "soft_limit_sent": self.soft_limit_sent,
            "empty_attempts": self.empty_attempts,
            "status": self.status,
            "outbox": self.outbox.to_list(),
            "duplicates": self.duplicates.to_dict(),
            "counters": dict(self.counters),
            "dup_key": self.dup_key,
            "dup_count": self.dup_count,
            "file_stamps": {k: list(v) for k, v in self.file_stamps.items()},
            "plan": [i.to_dict() for i in self.plan.items()],
            "plan_log": [o.to_dict() for o in self.plan_log],
            "pause_meta": self.pause_meta.to_dict() if self.pause_meta else None,
            "meeting": self.meeting,
            "output_schema": self.output_schema,
            "output_failures": self.output_failures,
            "output": self.output,
            "model": self.model,
            "in_flight": list(self.in_flight),
            "runs": self.runs,
        }

    @staticmethod
    def from_dict(
        data: dict[str, Any],
        *,
        outbox: Outbox | None = None,
        duplicates: DuplicateCallInterceptor | None = None,
        file_stamps: dict[str, tuple[int, int]] | None = None,
        plan: TaskTable | None = None,
        plan_log: deque[PlanItemOutcome] | None = None,
    ) -> TurnRecord:
        """Rebuild a record; the outbox, interceptor, file stamps and plan are loaded into the
        given objects (the Agent's own, shared across the session's turns) when passed."""
        record = TurnRecord(
            round_id=str(data["round_id"]),
            user_text=str(data.get("user_text", "")),
            session_id=str(data["session_id"]),
            started_at=float(data.get("started_at") or time.time()),
            step=data.get("step") or ("tools" if data.get("pending_calls") else "model"),
            started=bool(data.get("started", bool(data.get("messages")))),
            iteration=int(data.get("iteration", 0)),
            tool_steps=int(data.get("tool_steps", 0)),
            answer=str(data.get("answer", "")),
            review_text=str(data.get("review_text", "")),
            events=_list(data, "events"),
            usage=_ints(_dict(data, "usage")),
            questions_asked=int(data.get("questions_asked", 0)),
            pending_calls=[_pending_from(c) for c in _list(data, "pending_calls")],
            paused=_pause_from(data.get("paused")),
            answers={str(k): str(v) for k, v in _dict(data, "answers").items()},
            approval=_approval_from(data.get("approval")),
            messages=_list(data, "messages"),
            soft_limit_sent=bool(data.get("soft_limit_sent", False)),
            empty_attempts=int(data.get("empty_attempts", 0)),
            status=str(data.get("status", "running")),
            counters=_ints(_dict(data, "counters")),
            dup_key=data.get("dup_key"),
            dup_count=int(data.get("dup_count") or 0),
            meeting=data.get("meeting"),
            output_schema=data.get("output_schema"),
            output_failures=int(data.get("output_failures") or 0),
            output=data.get("output"),
            model=str(data.get("model") or ""),
            in_flight=[str(c) for c in _list(data, "in_flight")],
            runs=int(data.get("runs") or 0),
        )
        record._load_shared(data, outbox, duplicates, file_stamps, plan, plan_log)
        return record

    def _load_shared(
        self,
        data: dict[str, Any],
        outbox: Outbox | None,
        duplicates: DuplicateCallInterceptor | None,
        file_stamps: dict[str, tuple[int, int]] | None,
        plan: TaskTable | None,
        plan_log: deque[PlanItemOutcome] | None,
    ) -> None:
        """Load what the turn shares with its session into the given objects (new ones when
        None): the file stamps, outbox, duplicate-call state, plan and its step log."""
        self.file_stamps = file_stamps if file_stamps is not None else {}
        self.file_stamps.update(
            {str(k): (int(v[0]), int(v[1])) for k, v in _dict(data, "file_stamps").items()}
        )
        self.outbox = outbox if outbox is not None else Outbox()
        self.outbox.load(_list(data, "outbox"))
        self.duplicates = duplicates if duplicates is not None else DuplicateCallInterceptor()
        self.duplicates.load(_dict(data, "duplicates"))
        self.plan = plan if plan is not None else TaskTable()
        self.plan.update([PlanItem(**i) for i in _list(data, "plan")], replace=True)
        self.plan_log = plan_log if plan_log is not None else deque(maxlen=PLAN_LOG_SIZE)
        self.plan_log.extend(_outcome_from(o) for o in _list(data, "plan_log"))
        meta = data.get("pause_meta")
        if meta:
            self.pause_meta = PauseMeta(str(meta["reason"]), meta["source"], float(meta["at"]))
