"""Typed events for things outside the conversation stream.

Subscribe by event class: ``agent.events.on(MemoryAdded, handler)``.  Handlers run synchronously
in the order they were added; a handler that raises is logged and does not stop the others (nor
the kernel).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

__all__ = [
    "ArchiveFailed",
    "Event",
    "EventEmitter",
    "GoalDriftDetected",
    "MemoryAdded",
    "MemoryRecalled",
    "RolePackSwitched",
    "SessionForked",
]

logger = logging.getLogger("memora.events")


@dataclass(frozen=True, slots=True)
class Event:
    """Base class of every event."""


@dataclass(frozen=True, slots=True)
class RolePackSwitched(Event):
    """The active role pack changed (``activate``), or the same pack was read again."""

    from_pack: str | None
    to_pack: str
    reloaded: bool = False
    """The same pack, read again because its files changed on disk (or were edited)."""


@dataclass(frozen=True, slots=True)
class MemoryAdded(Event):
    """A memory was written (``source`` is its label: ``round_summary``, ``rule``...)."""

    memory_id: str
    source: str
    summary_type: str | None = None
    name: str = ""
    """The memory's name (the seed's handler prints ``source:name``); empty when it has none."""


@dataclass(frozen=True, slots=True)
class MemoryRecalled(Event):
    """A memory search ran: ``query`` and how many memories it returned."""

    query: str
    count: int


@dataclass(frozen=True, slots=True)
class SessionForked(Event):
    """A session was forked: the new session holds the first ``round_count`` rounds of the old."""

    from_session: str
    to_session: str
    round_count: int


@dataclass(frozen=True, slots=True)
class ArchiveFailed(Event):
    """Persisting a round or writing its summary failed; the turn itself went on."""

    session_id: str
    error: str
    stage: Literal["round", "summary"] = "round"
    """``round``: the round and its messages are not in the session's log (a later turn, or
    ``memora run -c``, will not see them); ``summary``: the round is saved, its memory is not."""


@dataclass(frozen=True, slots=True)
class GoalDriftDetected(Event):
    """The current request strayed from the session's main goal (``similarity`` below the
    threshold)."""

    main_goal: str
    current_goal: str
    similarity: float
    goal_change_seq: int = 0
    """How many times the session's current goal changed, this change included (the
    checkpoint's ``goal_change_seq``)."""


E = TypeVar("E", bound=Event)


class EventEmitter:
    __slots__ = ("_handlers",)

    def __init__(self) -> None:
        self._handlers: dict[type[Event], list[Callable[[Any], None]]] = {}

    def on(self, event_type: type[E], handler: Callable[[E], None]) -> Callable[[], None]:
        """Subscribe; returns a function that unsubscribes."""
        self._handlers.setdefault(event_type, []).append(handler)

        def off() -> None:
            handlers = self._handlers.get(event_type, [])
            if handler in handlers:
                handlers.remove(handler)

        return off

    def emit(self, event: Event) -> None:
        handlers = self._handlers.get(type(event))
        if not handlers:
            return
        for handler in list(handlers):
            try:
                handler(event)
            except Exception:
                logger.exception("event handler for %s raised", type(event).__name__)
