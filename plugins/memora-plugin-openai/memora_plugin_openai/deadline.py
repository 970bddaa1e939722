"""One deadline for a whole streamed answer, from connect to the last byte, at one timer a call.

``asyncio.timeout_at`` around each read would bound a streamed answer too, but it schedules and
cancels a timer per read: 4 µs a wait in isolation against 0.4 µs for :class:`Deadline`, and
with one SSE event a read, 100–127 µs of client CPU a token against 87–106 µs for this class and
86–98 µs for the code before either (five runs each, alternated).  Nor can one
``asyncio.timeout`` span the reads: the stream is an async generator that yields between them,
and a timeout that fires while the consumer runs cancels the consumer's code, where no
``__aexit__`` of the generator turns the cancellation back into a timeout.

:class:`Deadline` arms one timer for the call.  Each wait of the call is marked (``with
deadline:`` around one ``await``).  When the timer fires during a marked wait, it cancels the
task, and the wait raises :class:`DeadlineExceeded` instead of ``CancelledError``.  When it fires
while the consumer runs, nothing is cancelled, and the next marked wait raises at once.  A
cancellation from elsewhere (the host, a turn's own timeout) passes through as it came: the
cancel counts are kept as ``asyncio.timeout`` keeps them (``Task.uncancel``).

The bound holds whatever network backend httpx2 uses, since it cancels the provider's own
awaits, not a socket's reads.  An upstream per-request deadline in httpx2/httpcore2 (a total
``timeout`` extension honoured by every read, so that connection setup, a head that trickles and
the body share one clock) would let it go.
"""

from __future__ import annotations

import asyncio
from types import TracebackType

__all__ = ["Deadline", "DeadlineExceeded"]


class DeadlineExceeded(Exception):
    """A wait began or ended past its :class:`Deadline`.  Not a ``TimeoutError``: the callers
    use ``asyncio.timeout`` for shorter waits of their own, and the two must not be confused."""


class Deadline:
    """``seconds`` from now for every wait marked with ``with deadline:``; :meth:`cancel` when
    the call ends (its timer is the only resource it holds)."""

    __slots__ = ("_cancelling", "_fired", "_handle", "_loop", "_waiting", "expired", "when")

    def __init__(self, seconds: float) -> None:
        self._loop = asyncio.get_running_loop()
        self.when = self._loop.time() + seconds
        self.expired = False
        self._waiting: asyncio.Task[object] | None = None  # the task inside a marked wait
        self._cancelling = 0
        self._fired = False  # the timer cancelled the waiting task
        self._handle = self._loop.call_at(self.when, self._expire)

    def _expire(self) -> None:
        self.expired = True
        task = self._waiting
        if task is not None:
            self._fired = True
            task.cancel()

    def __enter__(self) -> None:
        # the clock as well as the flag: a server that sends faster than the answer is read never
        # lets a read wait, and the timer's callback may not have run yet
        if self.expired or self._loop.time() >= self.when:
            raise DeadlineExceeded
        task = asyncio.current_task(self._loop)  # the loop given: a third of the cost on 3.11
        if task is not None:
            self._cancelling = task.cancelling()
        self._waiting = task

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        task, self._waiting = self._waiting, None
        if not self._fired or task is None:
            return
        self._fired = False
        if task.uncancel() > self._cancelling and exc_type is asyncio.CancelledError:
            return  # cancelled from elsewhere as well: that cancellation goes on
        # the wait ended by the timer's cancellation, or (a library that swallowed it, or turned
        # it into an error of its own) some other way, past the deadline all the same
        raise DeadlineExceeded from exc

    def cancel(self) -> None:
        """The call is over: its timer is dropped."""
        self._handle.cancel()
