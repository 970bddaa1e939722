"""How a step of the turn ends: go on with another step, stop the turn, or wait for the host.

Each step of :class:`~memora.agent.loop.TurnEngine` is an async generator that yields chunks and
ends with one of these values; :meth:`~memora.agent.loop.TurnEngine.run` acts on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..chunks import AgentChunk
from .record import Step

__all__ = ["TRANSITIONS", "Goto", "Stop", "Suspend", "Transition"]


@dataclass(frozen=True, slots=True)
class Goto:
    """Continue with ``step``."""

    step: Step


@dataclass(frozen=True, slots=True)
class Stop:
    """End the turn with ``status``: persist the round, then yield ``chunk``."""

    status: Literal["done", "aborted", "error"]
    chunk: AgentChunk
    summarise: bool = False


@dataclass(frozen=True, slots=True)
class Suspend:
    """A call paused the turn: it waits in the record for the host's answer."""


Transition = Goto | Stop | Suspend
TRANSITIONS = (Goto, Stop, Suspend)
"""For ``isinstance``: a step's item is a transition, not a chunk."""
