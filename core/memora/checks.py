"""Pre-execution check of tool calls: what a check sees and what it may answer.

Every ``pre_execution_check`` implementation (plugins and the host) runs for every tool call that
passed the kernel's own gates.  Each returns one decision (or ``None``, meaning "no opinion"):

=============  ===========================================================================
``Allow()``     run the call as it is
``Deny(r)``     do not run it; the model receives ``r`` and the host a blocked ``tool_result``
``Ask(r)``      pause the turn with an ``approval_pending`` chunk; the host decides
``Skip(res)``   do not run it; reuse ``res`` (or the previous result of the same call)
``Rewrite(a)``  run it with the arguments ``a`` instead
=============  ===========================================================================

Decisions combine by precedence: any ``Deny`` wins, then ``Ask``, then ``Skip``, then
``Rewrite``; two different rewrites of one call are a conflict and deny the call, naming both
plugins.  The built-in allow-all check runs last (``trylast``) so a host always has the last word.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "Allow",
    "Ask",
    "CheckContext",
    "CheckDecision",
    "CheckOutcome",
    "Deny",
    "Rewrite",
    "Skip",
    "ToolCallInfo",
    "combine_decisions",
]

Idempotency = Literal["idempotent", "idempotent-key", "non-idempotent", "read-only"]


@dataclass(frozen=True, slots=True)
class ToolCallInfo:
    """The call being checked."""

    tool_call_id: str
    name: str
    args: Mapping[str, Any]
    writes: bool = False
    """The tool changes files or state (``write_file``, ``run_command``...)."""
    runs_code: bool = False
    """The tool runs a command, script or code."""
    idempotency: Idempotency = "non-idempotent"


@dataclass(frozen=True, slots=True)
class CheckContext:
    """Where the call happens."""

    project_path: Path
    permission: Literal["owner", "guest"] = "owner"
    role_pack: str | None = None
    session_id: str | None = None
    round_id: str | None = None
    confirm_writes: bool = False
    confirm_scripts: bool = False
    previous_result: str | None = None
    """The result of the last identical call in this session, when the outbox has one."""


@dataclass(frozen=True, slots=True)
class Allow:
    """Run the call as it is."""

    kind: Literal["allow"] = "allow"


@dataclass(frozen=True, slots=True)
class Deny:
    """Do not run the call; the model receives ``reason`` and the host a blocked ``tool_result``."""

    reason: str
    kind: Literal["deny"] = "deny"


@dataclass(frozen=True, slots=True)
class Ask:
    """Pause the turn with an ``approval_pending`` chunk; the host approves or denies the call."""

    reason: str = ""
    kind: Literal["ask"] = "ask"


@dataclass(frozen=True, slots=True)
class Skip:
    """Do not run the call; hand the model ``result`` (or the previous result of the same call)."""

    result: str | None = None
    """The result to hand the model; ``None`` reuses ``CheckContext.previous_result``."""
    kind: Literal["skip"] = "skip"


@dataclass(frozen=True, slots=True)
class Rewrite:
    """Run the call with ``args`` instead of the model's arguments (validated like the model's)."""

    args: Mapping[str, Any] = field(default_factory=dict)
    reason: str = ""
    kind: Literal["rewrite"] = "rewrite"


CheckDecision = Allow | Deny | Ask | Skip | Rewrite

_RANK = {"deny": 4, "ask": 3, "skip": 2, "rewrite": 1, "allow": 0}


@dataclass(frozen=True, slots=True)
class CheckOutcome:
    """The combined decision and the plugin that made it (``None`` when all allowed)."""

    decision: CheckDecision
    plugin: str | None = None


def combine_decisions(results: Iterable[tuple[str, CheckDecision | None]]) -> CheckOutcome:
    """Combine every check's answer into one outcome (see the module docstring)."""
    best: CheckOutcome = CheckOutcome(Allow())
    rewrite: tuple[str, Rewrite] | None = None
    for plugin, decision in results:
        if decision is None:
            continue
        if isinstance(decision, Rewrite):
            if rewrite is not None and dict(rewrite[1].args) != dict(decision.args):
                return CheckOutcome(
                    Deny(
                        f"conflicting argument rewrites from plugins {rewrite[0]!r} and {plugin!r}"
                    ),
                    plugin,
                )
            rewrite = (plugin, decision)
        if _RANK[decision.kind] > _RANK[best.decision.kind]:
            best = CheckOutcome(decision, plugin)
    return best
