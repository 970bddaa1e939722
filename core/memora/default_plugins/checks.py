"""The built-in pre-execution check: the approval mode, then allow.

It runs last (``trylast``), so every other check has already answered; since decisions combine
with "any deny wins", a plugin's ``Deny`` always beats this default ``Allow``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_module
from ..hookspecs import hookimpl

if TYPE_CHECKING:
    from ..checks import Allow, Ask, CheckContext, CheckDecision, Deny, ToolCallInfo

_checks = lazy_module("memora.checks")
"""memora.checks, imported by the first check (not by `memora plugins`)."""


def _what(call: ToolCallInfo) -> str:
    if call.runs_code:
        return "runs a command or code"
    return "changes files" if call.capability is None else "changes things"


@hookimpl(trylast=True)
def pre_execution_check(call: ToolCallInfo, context: CheckContext) -> CheckDecision:
    checks = _checks()
    allow: type[Allow] = checks.Allow
    ask: type[Ask] = checks.Ask
    deny: type[Deny] = checks.Deny
    mode = context.approvals
    verdict = checks.approval_for(mode, call.name, writes=call.writes, runs_code=call.runs_code)
    if verdict == "refused":
        return deny(
            f"{call.name} {_what(call)}, and memora is in read-only mode: nothing that "
            "writes or runs is allowed (the user can allow it with approvals 'ask')"
        )
    if verdict == "asks":
        return ask(f"{call.name} {_what(call)} (approval mode {mode!r})")
    if context.confirm_scripts and call.runs_code:
        return ask(f"{call.name} runs a command or script; confirm_scripts asks for approval")
    if context.confirm_writes and call.writes:
        return ask(f"{call.name} changes files; confirm_writes asks for approval")
    return allow()
