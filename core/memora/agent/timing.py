"""Timing helpers of the turn engine: the stall watch of a streamed LLM call, and tasks that
start at once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["StallWatch"]


class StallWatch:
    """Ends the surrounding ``asyncio.timeout`` when nothing arrived for ``stall`` seconds.

    The stream sets :attr:`last` to ``time.monotonic()`` on every delta (one clock read and an
    attribute write); one timer checks it and re-arms itself, instead of rescheduling a timer
    per delta (a cancelled and a new timer handle for each of hundreds of tokens).  Armed from
    the start, so a server that never sends a first delta stalls out too.  The timer is set
    with ``call_later``, so the watch works with any event loop's clock.
    """

    __slots__ = ("_handle", "_loop", "_stall", "_timeout", "last")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, stall: float, timeout: asyncio.Timeout
    ) -> None:
        self._loop = loop
        self._stall = stall
        self._timeout = timeout
        self.last = time.monotonic()
        self._handle = loop.call_later(stall, self._check)

    def _check(self) -> None:
        wait = self.last + self._stall - time.monotonic()
        if wait <= 0:
            self._timeout.reschedule(self._loop.time())  # expires: the task is cancelled
        else:
            self._handle = self._loop.call_later(wait, self._check)

    def close(self) -> None:
        self._handle.cancel()


_eager: Callable[..., asyncio.Task[None]] | None = getattr(asyncio, "eager_task_factory", None)


def start_task(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, None]
) -> asyncio.Task[None]:
    """A task that runs at once until it first waits (Python 3.12+; before, on the next trip
    round the event loop)."""
    if _eager is not None:
        return _eager(loop, coro)
    return loop.create_task(coro)
