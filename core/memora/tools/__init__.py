"""Tools: the model, the resident and privileged built-ins, and their context."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

_LAZY: dict[str, str] = {
    "PlanItem": "memora.tools.task_table",
    "TaskTable": "memora.tools.task_table",
    "Tool": "memora.tools.base",
    "ToolContext": "memora.tools.context",
    "ToolOutput": "memora.tools.base",
    "ToolRegistry": "memora.tools.base",
    "tool": "memora.tools.base",
}

__all__ = [
    "PlanItem",
    "TaskTable",
    "Tool",
    "ToolContext",
    "ToolOutput",
    "ToolRegistry",
    "resident_tools",
    "tool",
]


def resident_tools() -> list[Tool]:
    """Every always-exposed built-in tool."""
    from .commands import COMMAND_TOOLS
    from .files import FILE_TOOLS
    from .knowledge import KNOWLEDGE_TOOLS
    from .plan import PLAN_TOOLS

    return [*FILE_TOOLS, *KNOWLEDGE_TOOLS, *COMMAND_TOOLS, *PLAN_TOOLS]


if TYPE_CHECKING:  # "X as X": explicit re-exports for type checkers
    from .base import (
        Tool as Tool,
        ToolOutput as ToolOutput,
        ToolRegistry as ToolRegistry,
        tool as tool,
    )
    from .context import (
        ToolContext as ToolContext,
    )
    from .task_table import (
        PlanItem as PlanItem,
        TaskTable as TaskTable,
    )

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
