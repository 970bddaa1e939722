"""Route task types to providers: the main chat, round summaries, background work."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from ..errors import ErrorCode, MemoraError
from .provider import Provider

__all__ = ["TASK_TYPES", "ProviderRouter", "TaskType"]

TaskType = Literal["chat", "summary", "background"]
TASK_TYPES: tuple[TaskType, ...] = ("chat", "summary", "background")


class ProviderRouter:
    """Picks the provider for a task type.

    ``background`` defaults to the chat provider; ``summary`` defaults to ``background``.  With
    ``fixed=True`` (the role pack's ``act.providerRouting = fixed``) every task goes to the chat
    provider.
    """

    __slots__ = ("_chat", "_routes", "fixed")

    def __init__(
        self,
        chat: Provider,
        *,
        background: Provider | None = None,
        routes: Mapping[str, Provider] | None = None,
        fixed: bool = False,
    ) -> None:
        self._chat = chat
        table: dict[str, Provider] = {"chat": chat, "background": background or chat}
        for task, provider in (routes or {}).items():
            if task not in TASK_TYPES:
                raise MemoraError(
                    ErrorCode.INVALID_CONFIG,
                    f"provider_router: unknown task type {task!r}; legal: {', '.join(TASK_TYPES)}",
                    context={"task": task},
                )
            table[task] = provider
        table.setdefault("summary", table["background"])
        self._routes = table
        self.fixed = fixed

    @property
    def chat(self) -> Provider:
        return self._chat

    def for_task(self, task: TaskType) -> Provider:
        if self.fixed:
            return self._chat
        try:
            return self._routes[task]
        except KeyError:
            raise MemoraError(
                ErrorCode.INVALID_INPUT,
                f"unknown task type {task!r}; legal: {', '.join(TASK_TYPES)}",
            ) from None

    def with_fixed(self, fixed: bool) -> ProviderRouter:
        """The same routes with ``fixed`` changed (used when a role pack is activated)."""
        clone = ProviderRouter.__new__(ProviderRouter)
        clone._chat = self._chat
        clone._routes = self._routes
        clone.fixed = fixed
        return clone

    def providers(self) -> list[Provider]:
        """Every distinct provider, chat first."""
        seen: list[Provider] = []
        for p in self._routes.values():
            if all(p is not q for q in seen):
                seen.append(p)
        return seen
