"""Assemble streamed tool-call fragments into complete calls (several per response, in index
order), and streamed text/reasoning into one assistant message."""

from __future__ import annotations

from dataclasses import dataclass, field

from .types import ToolCall, ToolCallDelta

__all__ = ["ToolCallAssembler"]


@dataclass
class _Partial:
    """The fragments received so far of one tool call."""

    index: int
    id: str | None = None
    name: str = ""
    parts: list[str] = field(default_factory=list)


class ToolCallAssembler:
    __slots__ = ("_calls", "_counter")

    def __init__(self) -> None:
        self._calls: dict[int, _Partial] = {}
        self._counter = 0

    def feed(self, delta: ToolCallDelta) -> str | None:
        """Add a fragment; returns the tool name the first time it becomes known."""
        call = self._calls.get(delta.index)
        if call is None:
            call = self._calls[delta.index] = _Partial(delta.index)
        announced = None
        if delta.id and not call.id:
            call.id = delta.id
        if delta.name:
            if not call.name:
                announced = delta.name
            call.name = (
                delta.name if not call.name or call.name == delta.name else call.name + delta.name
            )
        if delta.arguments:
            call.parts.append(delta.arguments)
        return announced

    def pending_id(self, index: int) -> str | None:
        call = self._calls.get(index)
        return call.id if call else None

    def __bool__(self) -> bool:
        return bool(self._calls)

    def calls(self) -> list[ToolCall]:
        """Complete calls in index order; calls without a name are dropped, missing ids made up."""
        out = []
        for index in sorted(self._calls):
            c = self._calls[index]
            if not c.name:
                continue
            if not c.id:
                self._counter += 1
                c.id = f"call_{index}_{self._counter}"
            out.append(ToolCall(c.id, c.name, "".join(c.parts)))
        return out
