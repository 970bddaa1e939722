"""The built-in pre-execution check: the approval mode, then allow.

It runs last (``trylast``), so every other check has already answered; since decisions combine
with "any deny wins", a plugin's ``Deny`` always beats this default ``Allow``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..hookspecs import hookimpl

if TYPE_CHECKING:  # memora.checks is imported by the first check, not by `memora plugins`
    from ..checks import CheckContext, CheckDecision, ToolCallInfo


def _what(call: ToolCallInfo) -> str:
    if call.runs_code:
        return "runs a command or code"
    return "changes files" if call.capability is None else "changes things"


@hookimpl(trylast=True)
def pre_execution_check(call: ToolCallInfo, context: CheckContext) -> CheckDecision:
    from ..checks import Allow, Ask, Deny, approval_for

    mode = context.approvals
    verdict = approval_for(mode, call.name, writes=call.writes, runs_code=call.runs_code)
    if verdict == "refused":
        return Deny(
            f"{call.name} {_what(call)}, and memora is in read-only mode: nothing that "
            "writes or runs is allowed (the user can allow it with approvals 'ask')"
        )
    if verdict == "asks":
        return Ask(f"{call.name} {_what(call)} (approval mode {mode!r})")
    if context.confirm_scripts and call.runs_code:
        return Ask(f"{call.name} runs a command or script; confirm_scripts asks for approval")
    if context.confirm_writes and call.writes:
        return Ask(f"{call.name} changes files; confirm_writes asks for approval")
    return Allow()
