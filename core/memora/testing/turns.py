"""An in-memory turn executor: durable turns in a dict, and a worker's death on demand.

:class:`InMemoryTurnExecutor` keeps every checkpoint of every turn it runs (``journal``) and
implements :class:`memora.TurnExecutor`, so a host's or a plugin's test can run a turn through
the durable path, make its worker "die" at a chosen checkpoint (``die_at``), and take the turn
over with another Agent from what was kept — without a database.  Nothing survives the process:
it is a fake for tests, not an executor to deploy (``memora-plugin-dbos`` is one).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from ..agent.durable import DurableTurn, Emit, UnfinishedTurn, run_elsewhere
from ..chunks import AgentChunk

__all__ = ["InMemoryTurnExecutor", "WorkerDied"]


class WorkerDied(Exception):
    """What :class:`InMemoryTurnExecutor` raises where it makes a turn's worker die: the
    engine stops where it stood, nothing of the turn's ending runs, and the Agent iterating the
    turn gets a :class:`~memora.agent.durable.JournalError` caused by this."""


class InMemoryTurnExecutor:
    """See the module docstring.  ``die_at(key, state)`` is asked after each checkpoint is
    kept: true stops the turn there as a dead worker would."""

    def __init__(self, die_at: Callable[[str, dict[str, Any]], bool] | None = None) -> None:
        self.die_at = die_at
        self.journal: dict[str, list[dict[str, Any]]] = {}
        """Every state kept, by turn key, in order (the first is the turn's start)."""
        self.ended: set[str] = set()
        self.updated: dict[str, float] = {}

    def execute(self, turn: DurableTurn) -> AsyncIterator[AgentChunk]:
        self.journal.setdefault(turn.key, [turn.state()])
        self.updated[turn.key] = time.time()
        return run_elsewhere(turn, lambda emit: self._run(turn, emit))

    def recover(self, turn: DurableTurn) -> AsyncIterator[AgentChunk]:
        return run_elsewhere(turn, lambda emit: self._run(turn, emit))

    async def _run(self, turn: DurableTurn, emit: Emit) -> None:
        while True:
            state = await turn.segment(emit)
            if state is None:
                self.ended.add(turn.key)
                return
            self.journal[turn.key].append(state)
            self.updated[turn.key] = time.time()
            if self.die_at is not None and self.die_at(turn.key, state):
                turn.vanish()
                raise WorkerDied(f"the worker running {turn.key} died")

    async def last_state(self, key: str) -> dict[str, Any] | None:
        if key in self.ended or key not in self.journal:
            return None
        return self.journal[key][-1]

    async def unfinished(self, session_id: str | None = None) -> list[UnfinishedTurn]:
        found = []
        for key, states in self.journal.items():
            last = states[-1]
            if key in self.ended or (session_id is not None and last["session_id"] != session_id):
                continue
            found.append(
                UnfinishedTurn(
                    key, str(last["session_id"]), str(last["round_id"]), self.updated[key]
                )
            )
        return sorted(found, key=lambda t: t.updated_at)

    async def abandon(self, key: str) -> None:
        self.ended.add(key)

    async def close(self) -> None:
        return None
