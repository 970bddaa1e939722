"""A turn as server-sent events: ``id: TURN:N`` / ``data: <chunk JSON>``, keep-alive comments
while the model is quiet, and resumption from ``Last-Event-ID`` (on any worker)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import StreamingResponse

from memora.errors import ErrorCode

from .errors import ApiError
from .turns import RemoteTurnLog, TurnLog

__all__ = ["KEEPALIVE_SECONDS", "event_stream", "last_event"]

KEEPALIVE_SECONDS = 15.0
"""A comment line goes out after this long without an event, so proxies keep the stream."""


def last_event(request: Request, turn_id: str) -> int:
    raw = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
    if ":" in raw:
        prefix, _, raw = raw.rpartition(":")
        if prefix != turn_id:
            raise ApiError(
                400,
                ErrorCode.INVALID_INPUT.value,
                f"Last-Event-ID {prefix}:… is an event of another turn than {turn_id}",
            )
    try:
        return max(0, int(raw))
    except ValueError:
        raise ApiError(
            400, ErrorCode.INVALID_INPUT.value, "Last-Event-ID: TURN:N or N, N an integer"
        ) from None


def event_stream(
    log: TurnLog | RemoteTurnLog, after: int, project: str, session: str
) -> StreamingResponse:
    """The turn's events after number ``after`` as a ``text/event-stream`` response."""
    return StreamingResponse(
        _events(log, after),
        media_type="text/event-stream",
        headers={
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",  # nginx: pass events on as they come
            "X-Memora-Turn": log.id,
            "Content-Location": f"/v1/projects/{project}/sessions/{session}/turns/{log.id}/events",
        },
    )


async def _events(log: TurnLog | RemoteTurnLog, after: int) -> AsyncIterator[bytes]:
    yield f"retry: 1000\n: turn {log.id}\n\n".encode()
    prefix = f"id: {log.id}:"
    async for batch in log.batches(after, KEEPALIVE_SECONDS):
        if not batch:
            yield b": keep-alive\n\n"
            continue
        # every event already there in one write
        yield "".join(f"{prefix}{seq}\ndata: {data}\n\n" for seq, data in batch).encode()
