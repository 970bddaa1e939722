"""The tool gates: what happens to a tool call between the model asking and the tool running.

Each gate is a small function of one :class:`GateCall`; the first one that answers decides.  The
order is the documented one (docs/agent.md):

1. the tool exists;
2. ``act.toolMode = block`` exposes no tools;
3. ``act.toolReadonly = readonly`` refuses every writing tool;
4. the capability map (privileged tools and any tool flagged with a ``capability`` need the
   role pack's declaration; ``pauses`` tools need ``reflect.userFollowup = ask``; tools left out
   with ``resident_tools``);
5. permission (``guest``: no writes, no commands);
6. the arguments are valid (``INVALID_ARGS``; the call is reported as started);
7. a call already executed before a restart returns its recorded result (the outbox);
8. the question limit (``global.askLimit``) for tools that pause;
9. per-turn caps from the privileged table (``global.webSearchLimit``);
10. the duplicate-call interceptor (warn, then block);
11. every ``pre_execution_check`` (plugins and host): ``Deny``, ``Skip``, ``Rewrite``, ``Ask``.

Refusals before step 6 and at steps 8-11 are ``tool_result(blocked=True)`` with no
``tool_start``: the tool never ran.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..capabilities import PRIVILEGED
from ..checks import Ask, CheckContext, Deny, Rewrite, Skip, ToolCallInfo
from ..errors import ToolErrorCode
from ..tools.base import Tool, ToolRun
from .state import DuplicateCallInterceptor, DuplicateCheckContext, args_key

if TYPE_CHECKING:
    from pydantic import BaseModel

    from .loop import TurnDeps
    from .record import TurnRecord

__all__ = ["GATES", "Approve", "GateCall", "Refuse", "Reuse", "run_gates"]


@dataclass(frozen=True, slots=True)
class Refuse:
    """The call does not run: ``tool_result(ok=False)``; ``content`` goes to the model."""

    code: str
    content: str
    summary: str
    blocked: bool = True
    started: bool = False
    """Report ``tool_start`` first (invalid arguments: the model's call was taken up)."""


@dataclass(frozen=True, slots=True)
class Reuse:
    """The call does not run; an earlier result stands in (outbox replay, ``Skip``)."""

    run: ToolRun


@dataclass(frozen=True, slots=True)
class Approve:
    """A check answered ``Ask``: the turn pauses until the host approves or rejects."""

    reason: str


Verdict = Refuse | Reuse | Approve


class GateCall:
    """One tool call on its way through the gates."""

    __slots__ = ("_key", "args", "deps", "id", "model", "name", "raw", "record", "tool", "warn")

    def __init__(
        self, deps: TurnDeps, record: TurnRecord, call_id: str, name: str, raw: str
    ) -> None:
        self.deps = deps
        self.record = record
        self.id = call_id
        self.name = name
        self.raw = raw
        self.tool: Tool | None = deps.tools.get(name)
        self.args: dict[str, Any] = {}
        self.model: BaseModel | None = None
        """The validated arguments, to run the tool without validating them again."""
        self.warn = False
        self._key: str | None = None

    def set_args(self, raw: str | Mapping[str, Any] | None) -> None:
        """Validate ``raw`` into ``args`` (and ``model``); ``INVALID_ARGS`` raises."""
        assert self.tool is not None
        self.args, self.model = self.tool.validated(raw)
        self._key = None

    def key(self) -> str:
        """The call's :func:`args_key`, computed once (the duplicate interceptor, the outbox
        and the checks all need it)."""
        if self._key is None:
            self._key = args_key(self.name, self.args)
        return self._key


def _denied(message: str, summary: str | None = None) -> Refuse:
    text = f"{ToolErrorCode.PERMISSION_DENIED}: {message}"
    return Refuse(ToolErrorCode.PERMISSION_DENIED.value, text, summary or text)


def _not_available(message: str) -> Refuse:
    text = f"{ToolErrorCode.NOT_AVAILABLE}: {message}"
    return Refuse(ToolErrorCode.NOT_AVAILABLE.value, text, text)


def known(c: GateCall) -> Verdict | None:
    if c.tool is None:
        return _not_available(f"there is no tool named {c.name!r} here")
    return None


def tool_mode(c: GateCall) -> Verdict | None:
    if c.deps.strategy.tool_mode == "block":
        return _not_available(f"tool {c.name!r} is not enabled for this role (toolMode = block)")
    return None


def read_only(c: GateCall) -> Verdict | None:
    assert c.tool is not None
    if c.deps.strategy.tool_readonly and c.tool.writes:
        return _denied(
            f"{c.name} changes files and this role is read-only (toolReadonly = readonly); "
            "describe the change instead"
        )
    return None


def capability(c: GateCall) -> Verdict | None:
    assert c.tool is not None
    if not c.deps.exposure.visible(c.tool):
        return _not_available(f"tool {c.name!r} is not enabled for this role")
    return None


def permission(c: GateCall) -> Verdict | None:
    assert c.tool is not None
    if c.deps.permission == "guest" and (c.tool.writes or c.tool.runs_code):
        return _denied(f"{c.name} is not available to a guest (no writes, no commands)")
    return None


def arguments(c: GateCall) -> Verdict | None:
    assert c.tool is not None
    try:
        c.set_args(c.raw)
    except Exception as exc:  # ToolError(INVALID_ARGS)
        code = getattr(exc, "code", ToolErrorCode.INVALID_ARGS)
        msg = f"{code}: {getattr(exc, 'message', str(exc))}"
        return Refuse(str(code), msg, msg, blocked=False, started=True)
    return None


def replay(c: GateCall) -> Verdict | None:
    done = c.record.outbox.by_id(f"{c.record.round_id}/{c.id}", c.name, key=c.key())
    if done is not None:
        return Reuse(ToolRun(done.ok, done.content, done.summary, done.error_code))
    return None


def question_limit(c: GateCall) -> Verdict | None:
    assert c.tool is not None
    limit = c.deps.strategy.ask_limit
    if c.tool.pauses and c.record.questions_asked >= limit:
        return _denied(
            f"the question limit of this turn ({limit}) is reached; decide with what you know"
        )
    return None


def turn_cap(c: GateCall) -> Verdict | None:
    assert c.tool is not None
    spec = PRIVILEGED.get(c.tool.capability or "")
    if spec is None or spec.turn_limit is None:
        return None
    limit = int(getattr(c.deps.strategy, spec.turn_limit))
    if c.record.counters.get(c.name, 0) >= limit:
        return _denied(
            f"{c.name} limit reached ({limit} per turn); answer with what you found",
            f"{c.name} limit of {limit} per turn reached",
        )
    return None


def duplicates(c: GateCall) -> Verdict | None:
    record = c.record
    custom = c.deps.duplicate_interceptor
    if custom is not None:
        key = c.key()
        last = record.dup_key
        record.dup_count = record.dup_count + 1 if key == last else 1
        record.dup_key = key
        threshold = getattr(custom, "threshold", None)
        ctx = DuplicateCheckContext(
            c.name,
            c.args,
            key,
            record.dup_count,
            record.iteration,
            record.round_id,
            record.session_id,
            last_key=last,
            threshold=threshold if isinstance(threshold, int) else c.deps.duplicate_threshold,
            batch=tuple((p.name, p.arguments) for p in record.step_batch),
        )
        verdict = custom.check(ctx)
    else:
        custom = record.duplicates
        if type(custom) is DuplicateCallInterceptor:
            verdict = custom.check_key(c.key())
        else:  # a host's interceptor: its documented check(name, args)
            verdict = custom.check(c.name, c.args)
    if verdict not in ("ok", "warn", "block"):
        raise ValueError(f"duplicate interceptor returned {verdict!r}; legal: ok, warn, block")
    if verdict == "block":
        msg = duplicate_warning(c.deps, custom)
        record.note("duplicate_blocked", tool_call_id=c.id, name=c.name)
        return Refuse(ToolErrorCode.PERMISSION_DENIED.value, msg, "duplicate call blocked")
    c.warn = verdict == "warn"
    return None


def duplicate_warning(deps: TurnDeps, interceptor: Any) -> str:
    """The warning text, with the threshold of the interceptor that decided."""
    threshold = getattr(interceptor, "threshold", None)
    if not isinstance(threshold, int):
        threshold = deps.duplicate_threshold
    return deps.messages.render("duplicate_tool_call_warning", threshold=threshold)


def checks(c: GateCall) -> Verdict | None:
    assert c.tool is not None
    deps, record = c.deps, c.record
    previous = record.outbox.previous(c.name, c.args, key=c.key())
    info = ToolCallInfo(
        c.id,
        c.name,
        c.args,
        writes=c.tool.writes,
        runs_code=c.tool.runs_code,
        idempotency=c.tool.idempotency,
        capability=c.tool.capability,
    )
    ctx = deps.check_context if previous is None else None
    if ctx is None:
        ctx = CheckContext(
            project_path=deps.project_path,
            permission=deps.permission,
            role_pack=deps.role_pack,
            session_id=record.session_id,
            round_id=record.round_id,
            confirm_writes=deps.confirm_writes,
            confirm_scripts=deps.confirm_scripts,
            approvals=deps.approvals,
            previous_result=previous.content if previous else None,
        )
        if previous is None:  # the same for every such call of the turn (it is frozen)
            deps.check_context = ctx
    outcome = deps.check(info, ctx)
    decision = outcome.decision
    who = f" (by {outcome.plugin})" if outcome.plugin else ""
    if isinstance(decision, Deny):
        record.note("tool_blocked", tool_call_id=c.id, name=c.name, reason=decision.reason)
        return _denied(f"refused{who}: {decision.reason}", f"blocked: {decision.reason}")
    if isinstance(decision, Skip):
        # Skip means "do not run": the check's result, else the previous one, else nothing
        reused = (
            decision.result
            if decision.result is not None
            else (previous.content if previous else None)
        )
        record.note("tool_skipped", tool_call_id=c.id, name=c.name, by=outcome.plugin)
        if reused is not None:
            return Reuse(ToolRun(True, reused, "reused the previous result"))
        return Refuse(
            ToolErrorCode.PERMISSION_DENIED.value,
            f"SKIPPED: a check{who} skipped this call and there is no earlier result to reuse; "
            "it did not run",
            "skipped: no earlier result",
        )
    if isinstance(decision, Rewrite):
        try:
            c.set_args(dict(decision.args))
        except Exception as exc:
            msg = (
                f"{ToolErrorCode.INVALID_ARGS}: a check rewrote the arguments into something "
                f"invalid: {exc}"
            )
            return Refuse(ToolErrorCode.INVALID_ARGS.value, msg, msg)
        record.note("tool_rewritten", tool_call_id=c.id, by=outcome.plugin)
    if isinstance(decision, Ask):
        return Approve(decision.reason)
    return None


GATES: tuple[Callable[[GateCall], Verdict | None], ...] = (
    known,
    tool_mode,
    read_only,
    capability,
    permission,
    arguments,
    replay,
    question_limit,
    turn_cap,
    duplicates,
    checks,
)
"""The gates in order (see the module docstring)."""


def run_gates(c: GateCall) -> Verdict | None:
    """The first gate's answer, or ``None``: run the call with ``c.args``."""
    for gate in GATES:
        verdict = gate(c)
        if verdict is not None:
            return verdict
    return None
