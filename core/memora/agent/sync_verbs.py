"""The Agent for synchronous hosts: ``chat_sync`` and ``close_sync`` on an event loop of its own.

A script or a notebook cell without ``asyncio`` runs one turn with ``agent.chat_sync(text)``
(initialising the Agent first if needed) and lets go with ``agent.close_sync()``.  The loop is
the Agent's (an :class:`asyncio.Runner`): do not mix these with ``await agent.chat()``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..errors import BusyError

__all__ = ["SyncVerbs"]


class SyncVerbs:
    """``chat_sync``/``close_sync``; the Agent provides ``init``, ``close`` and ``chat_text``."""

    _sync_runner: asyncio.Runner | None = None
    _initialised: bool

    async def init(self) -> Any:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def chat_text(self, text: str) -> str:
        raise NotImplementedError

    def chat_sync(self, text: str) -> str:
        """Synchronous hosts: initialise if needed, run one turn, return the final answer.

        Runs on an event loop owned by this Agent; do not mix with ``await agent.chat()``.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise BusyError(
                "chat_sync() cannot run inside an event loop; use `async for ... in agent.chat()`"
            )
        runner = self._sync_runner
        if runner is None:
            runner = asyncio.Runner()
            self._sync_runner = runner
        if not self._initialised:
            runner.run(self.init())
        return runner.run(self.chat_text(text))

    def close_sync(self) -> None:
        runner = self._sync_runner
        if runner is not None:
            runner.run(self.close())
            runner.close()
            self._sync_runner = None
