"""The task table: plan items the model keeps with ``task_table_update``."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

__all__ = ["PlanItem", "TaskTable"]

Status = Literal["pending", "active", "done", "blocked"]


@dataclass
class PlanItem:
    """One item of the task table (the model's plan for the turn)."""

    id: str
    description: str
    status: Status = "pending"
    order: int = 0
    member: str | None = None
    """A team member role pack that assembles this item's context (role_pack_teams)."""

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


class TaskTable:
    def __init__(self) -> None:
        self._items: dict[str, PlanItem] = {}
        self._announced: str | None = None

    def update(self, items: list[PlanItem], *, replace: bool = False) -> None:
        if replace:
            self._items = {}
        for item in items:
            self._items[item.id] = item

    def items(self) -> list[PlanItem]:
        if not self._items:  # no plan (most turns): asked several times a step
            return []
        return sorted(self._items.values(), key=lambda i: (i.order, i.id))

    def active(self) -> PlanItem | None:
        """The item being worked on: the first ``active`` one, else the first ``pending``."""
        ordered = self.items()
        for status in ("active", "pending"):
            for item in ordered:
                if item.status == status:
                    return item
        return None

    def advance(self) -> PlanItem | None:
        """The active item if it changed since the last call (drives ``plan_item_boundary``)."""
        item = self.active()
        key = f"{item.id}:{item.status}" if item else None
        if item is not None and item.id != (self._announced or "").split(":")[0]:
            self._announced = key
            return item
        return None

    def render(self) -> str:
        if not self._items:
            return "(no plan)"
        marks = {"pending": "[ ]", "active": "[>]", "done": "[x]", "blocked": "[!]"}
        return "\n".join(f"{marks[i.status]} {i.id}. {i.description}" for i in self.items())

    def clear(self) -> None:
        self._items = {}
        self._announced = None
