"""The task table tool and ask_user (which pauses the turn)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from .base import ControlSignal, ToolOutput, builtin_tool
from .context import ToolContext
from .task_table import PlanItem

if TYPE_CHECKING:  # the chunk types load with the first question, not with the tool list
    from ..chunks import QuestionSpec

__all__ = [
    "PLAN_TOOLS",
    "AskUserSignal",
    "PlanItemArg",
    "QuestionArg",
    "ask_user",
    "task_table_update",
]


class PlanItemArg(BaseModel):
    model_config = ConfigDict(defer_build=True)  # built on first use, not at import

    id: str = Field(min_length=1, max_length=64)
    description: str = Field(min_length=1, max_length=500)
    status: Literal["pending", "active", "done", "blocked"] = "pending"
    order: int = 0
    member: str | None = Field(default=None, description="Team member role pack for this item")


class QuestionArg(BaseModel):
    model_config = ConfigDict(defer_build=True)

    question: str = Field(min_length=1, max_length=1000)
    options: list[str] | None = Field(default=None, max_length=10)
    allow_custom: bool = Field(
        default=False, description="Accept an answer outside the options (free text)"
    )
    slot: str = Field(
        default="ask",
        min_length=1,
        max_length=64,
        description="Key of the answer; only needed to tell several questions apart",
    )


class AskUserSignal(ControlSignal):
    """Raised by ``ask_user``: the loop pauses the turn with ``question_pending``."""

    def __init__(self, questions: list[QuestionSpec]) -> None:
        super().__init__("ask_user")
        self.questions = questions


@builtin_tool(idempotency="idempotent", plans=True)
async def task_table_update(
    ctx: ToolContext,
    items: Annotated[list[PlanItemArg], Field(min_length=1, max_length=50)],
    replace: Annotated[
        bool, Field(description="Replace the whole table instead of updating items")
    ] = False,
) -> ToolOutput:
    """Create or update the task table (plan items with status pending/active/done/blocked)."""
    ctx.task_table.update(
        [PlanItem(i.id, i.description, i.status, i.order, i.member) for i in items], replace=replace
    )
    table = ctx.task_table.render()
    return ToolOutput(table, f"task table: {len(ctx.task_table.items())} items")


@builtin_tool(idempotency="read-only", pauses=True)
async def ask_user(
    ctx: ToolContext,
    questions: Annotated[list[QuestionArg], Field(min_length=1, max_length=5)],
) -> ToolOutput:
    """Ask the user one or more questions and wait for the answers (the turn pauses)."""
    from ..chunks import QuestionSpec

    specs: list[QuestionSpec] = []
    used: set[str] = set()
    for q in questions:
        slot, n = q.slot, 2
        while slot in used:  # several questions left on the default key: ask, ask_2, ...
            slot, n = f"{q.slot}_{n}", n + 1
        used.add(slot)
        # without options any answer is free text; with options, only when allow_custom
        specs.append(
            QuestionSpec(
                slot=slot,
                question=q.question,
                options=q.options,
                allow_custom=q.allow_custom or not q.options,
            )
        )
    raise AskUserSignal(specs)


PLAN_TOOLS = (task_table_update, ask_user)
