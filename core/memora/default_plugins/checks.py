"""The built-in pre-execution check: allow by default, ask for confirmation where configured.

It runs last (``trylast``), so every other check has already answered; since decisions combine
with "any deny wins", a plugin's ``Deny`` always beats this default ``Allow``.
"""

from __future__ import annotations

from ..checks import Allow, Ask, CheckContext, CheckDecision, ToolCallInfo
from ..hookspecs import hookimpl


@hookimpl(trylast=True)
def pre_execution_check(call: ToolCallInfo, context: CheckContext) -> CheckDecision:
    if context.confirm_scripts and call.runs_code:
        return Ask(f"{call.name} runs a command or script; confirm_scripts asks for approval")
    if context.confirm_writes and call.writes:
        return Ask(f"{call.name} changes files; confirm_writes asks for approval")
    return Allow()
