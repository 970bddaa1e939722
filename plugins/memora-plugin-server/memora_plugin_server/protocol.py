"""Read deadlines for `memora serve`'s connections: uvicorn's HTTP/1.1 protocol, with a limit on
how long a client may take to send a request's headers.

uvicorn bounds the idle time between requests (``timeout_keep_alive``) but not a request that
arrives a byte at a time: four hundred connections dribbling headers stayed open for as long as
their clients liked.  Here each connection must send a complete request head within
``header_seconds`` of opening (or of its previous response); a body is bounded the same way by
:class:`~.bodies.BodyLimits`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["HEADER_SECONDS", "with_deadlines"]

HEADER_SECONDS = 10.0
"""How long a connection may take to send a request's headers."""


class DeadlineH11Protocol(H11Protocol):
    """:class:`H11Protocol` that closes a connection whose request head is not complete
    within :attr:`header_seconds`."""

    header_seconds = HEADER_SECONDS
    _head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def _arm(self) -> None:
        self._disarm()
        self._head_deadline = self.loop.call_later(self.header_seconds, self._too_slow)

    def _disarm(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _too_slow(self) -> None:
        self._head_deadline = None
        cycle = self.cycle
        if cycle is None or cycle.response_complete:  # no request under way: only a slow head
            self.transport.close()

    def handle_events(self) -> None:
        super().handle_events()
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            self._disarm()  # the head arrived: the request is the app's now

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()  # the next request's head has the same deadline

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def with_deadlines(header_seconds: float = HEADER_SECONDS) -> type[Any]:
    """The protocol class to give uvicorn (``http=``), with its header deadline."""
    if header_seconds == HEADER_SECONDS:
        return DeadlineH11Protocol
    return type("DeadlineH11Protocol", (DeadlineH11Protocol,), {"header_seconds": header_seconds})
