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
    "APPROVAL_MODES",
    "FILE_EDIT_TOOLS",
    "Allow",
    "ApprovalMode",
    "Ask",
    "CheckContext",
    "CheckDecision",
    "CheckOutcome",
    "Deny",
    "Rewrite",
    "Skip",
    "ToolCallInfo",
    "approval_for",
    "combine_decisions",
]

Idempotency = Literal["idempotent", "idempotent-key", "non-idempotent", "read-only"]

ApprovalMode = Literal["read-only", "ask", "auto-edit", "full-auto"]
"""Which tool calls run without the user's word, in the spirit of the coding agents people use:

- ``read-only``: nothing that writes, edits, deletes or runs a command or code runs at all;
- ``ask``: each such call pauses the turn for approval (``approval_pending``);
- ``auto-edit``: the kernel's file edits (:data:`FILE_EDIT_TOOLS`) run; every other such call asks;
- ``full-auto``: every call runs (the other checks still apply).
"""

APPROVAL_MODES: tuple[ApprovalMode, ...] = ("full-auto", "auto-edit", "ask", "read-only")
"""The modes from the most permissive to the strictest (a project's config may only move right)."""

FILE_EDIT_TOOLS = frozenset({"write_file", "edit_file"})
"""The calls ``auto-edit`` lets run: the kernel's own edits of files inside the allowed paths."""


def approval_for(
    mode: ApprovalMode | None, name: str, *, writes: bool, runs_code: bool
) -> Literal["runs", "asks", "refused"]:
    """What the approval ``mode`` does with a call of the tool ``name``: it runs, it asks the
    user first, or it is refused (``memora tools list`` shows this; the built-in check acts on
    it)."""
    if mode in (None, "full-auto") or not (writes or runs_code):
        return "runs"
    if mode == "read-only":
        return "refused"
    if mode == "ask" or runs_code or name not in FILE_EDIT_TOOLS:
        return "asks"
    return "runs"


def stricter(a: ApprovalMode | None, b: ApprovalMode | None) -> ApprovalMode | None:
    """The stricter of two modes (None counts as no opinion)."""
    if a is None or b is None:
        return a or b
    return a if APPROVAL_MODES.index(a) >= APPROVAL_MODES.index(b) else b


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
    capability: str | None = None
    """The capability that brought the tool (``mcp:github``, ``code:execute``), None for the
    kernel's resident tools and a host's own."""

    @property
    def changes_things(self) -> bool:
        """Whether the call writes, edits, deletes or runs something (what approvals are for)."""
        return self.writes or self.runs_code


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
    approvals: ApprovalMode | None = None
    """The approval mode in force (None: only ``confirm_writes``/``confirm_scripts`` ask)."""
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
