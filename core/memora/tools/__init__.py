"""Tools: the model, the resident and privileged built-ins, and their context."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
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
    "builtin_tools",
    "resident_tools",
    "tool",
]

# The kernel's built-in tools by name and module, in the order the model sees them (resident,
# then privileged): the built-in plugin registers them by name, so listing plugins or resolving
# settings imports no tool module (they bring pydantic's schema machinery, about a third of the
# floor); a test checks this table against resident_tools() and PRIVILEGED_TOOLS.
_BUILTIN: dict[str, tuple[str, ...]] = {
    "memora.tools.files": ("read_file", "write_file", "edit_file", "list_dir"),
    "memora.tools.knowledge": (
        "search_project",
        "memory_search",
        "register_work",
        "read_skill",
        "read_resource",
    ),
    "memora.tools.commands": (
        "run_command",
        "list_background_tasks",
        "background_task_output",
        "kill_background_task",
        "run_skill_script",
        "run_project_script",
    ),
    "memora.tools.plan": ("task_table_update", "ask_user"),
    "memora.tools.privileged": ("web_search", "web_fetch", "run_code"),
}


@dataclass(frozen=True, slots=True)
class DeferredTool:
    """A built-in tool registered by its name; :meth:`load` imports its module and returns the
    :class:`Tool` (the module's own object, so every load gives the same one).  The plugin
    manager loads it when the tool is first looked up (``Plugins.registered("tool")``/``get``)."""

    name: str
    module: str

    def load(self) -> Tool:
        tool: Tool = getattr(importlib.import_module(self.module), self.name)
        return tool


def resident_tools() -> list[Tool]:
    """Every always-exposed built-in tool."""
    from .commands import COMMAND_TOOLS
    from .files import FILE_TOOLS
    from .knowledge import KNOWLEDGE_TOOLS
    from .plan import PLAN_TOOLS

    return [*FILE_TOOLS, *KNOWLEDGE_TOOLS, *COMMAND_TOOLS, *PLAN_TOOLS]


def builtin_tools() -> list[DeferredTool]:
    """Every built-in tool (resident and privileged) as a :class:`DeferredTool`, in order."""
    return [DeferredTool(name, module) for module, names in _BUILTIN.items() for name in names]


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
