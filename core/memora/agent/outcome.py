"""What a turn's last chunk means to a host that wants a value, not a stream.

``agent.chat_text()`` and ``agent.run()`` drive a turn to its end: ``done`` gives the answer (or
the typed result); any other chunk that ends the turn is raised as the :class:`MemoraError` of
its kind (:func:`chat_text_error`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from ..chunks import AbortedChunk, AgentChunk, DoneChunk, ErrorChunk
from ..errors import (
    AbortedError,
    BusyError,
    ErrorCode,
    MemoraError,
    OutputValidationError,
    ProviderError,
    TurnFailedError,
)

if TYPE_CHECKING:
    from .record import TurnRecord

__all__ = ["chat_text_error", "turn_result"]


async def turn_result(turn: AsyncIterator[AgentChunk], records: list[TurnRecord]) -> Any:
    """``agent.run()``: drive the turn to its end and return its typed result (or its answer's
    text); what ended it otherwise is raised as ``chat_text`` raises it, a result that did not
    validate as ``OutputValidationError`` with the last raw answer and its errors."""
    async with contextlib.aclosing(turn) as stream:  # type: ignore[type-var]
        async for chunk in stream:
            if isinstance(chunk, DoneChunk):
                record = records[0]
                return record.output_value if record.output_spec is not None else chunk.answer
            error = chat_text_error(chunk)
            if error is None:
                continue
            if error.code == ErrorCode.OUTPUT_INVALID and records:
                record = records[0]
                raise OutputValidationError(
                    error.message,
                    context={"raw": record.output_raw, "errors": record.output_errors},
                )
            raise error
    return None


def chat_text_error(chunk: AgentChunk) -> MemoraError | None:
    """What ``chat_text`` raises for a chunk that ends the turn without an answer."""
    if isinstance(chunk, ErrorChunk):
        code = chunk.code
        if code is not None and code in ErrorCode.__members__ and code != "PROVIDER_ERROR":
            return MemoraError(code, chunk.message)
        if chunk.code is not None or chunk.category != "unknown":
            return ProviderError(chunk.message, category=chunk.category)
        return TurnFailedError(chunk.message)
    if isinstance(chunk, AbortedChunk):
        return AbortedError(f"aborted: {chunk.reason}", context={"stop_reason": chunk.stop_reason})
    if chunk.type == "paused":
        return BusyError("the turn paused for the host; use chat() to handle pauses")
    return None
