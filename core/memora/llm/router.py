"""Route task types to providers: the main chat, round summaries, background work."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Literal

from ..errors import ErrorCode, MemoraError
from .provider import Provider

__all__ = ["TASK_TYPES", "ProviderRouter", "TaskType"]

TaskType = Literal["chat", "reasoning", "summary", "background"]
TASK_TYPES: tuple[TaskType, ...] = ("chat", "reasoning", "summary", "background")


class ProviderRouter:
    """Picks the provider for a task type.

    ``background`` and ``reasoning`` (the self-review pass) default to the chat provider;
    ``summary`` defaults to ``background``.  A ``resolver`` (the host's router callable) is asked
    first for every task and may answer ``None`` to keep the table's choice.  With
    ``fixed=True`` (the role pack's ``act.providerRouting = fixed``) every task goes to the chat
    provider.
    """

    __slots__ = ("_chat", "_resolver", "_routes", "chosen", "fixed")

    def __init__(
        self,
        chat: Provider,
        *,
        background: Provider | None = None,
        routes: Mapping[str, Provider] | None = None,
        fixed: bool = False,
        resolver: Callable[[str], Provider | None] | None = None,
        chosen: str = "",
    ) -> None:
        self._chat = chat
        self.chosen = chosen
        """How the chat provider was chosen, in words (``your provider 'fast' (openai at …;
        host option)``), for a person: ``memora run -v`` and the chat header say it."""
        self._resolver = resolver
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
        table.setdefault("reasoning", chat)
        self._routes = table
        self.fixed = fixed

    @property
    def chat(self) -> Provider:
        return self._chat

    def for_task(self, task: TaskType) -> Provider:
        if self.fixed:
            return self._chat
        if self._resolver is not None and task in self._routes:
            chosen = self._resolver(task)
            if chosen is not None:
                return chosen
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
        clone._resolver = self._resolver
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
