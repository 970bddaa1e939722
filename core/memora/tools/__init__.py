"""Tools: the model, the resident and privileged built-ins, and their context."""

from .base import Tool, ToolOutput, ToolRegistry, tool
from .context import ToolContext
from .task_table import PlanItem, TaskTable

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
