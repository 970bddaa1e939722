"""A scripted LLM provider for deterministic tests (like pydantic-ai's ``FunctionModel``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..llm.provider import ProviderError
from ..llm.types import (
    Delta,
    FinishDelta,
    LLMRequest,
    ReasoningDelta,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    UsageDelta,
)

__all__ = ["ScriptedProvider", "ScriptedResponse", "reasoning", "text", "tool_call"]


@dataclass
class ScriptedResponse:
    """One scripted LLM answer: the deltas to stream, in order.

    ``error`` raises after the deltas (a :class:`ProviderError` simulates a transient failure);
    ``delay`` sleeps before each delta (to test cancellation and stalls).
    """

    deltas: list[Delta] = field(default_factory=list)
    error: BaseException | None = None
    delay: float = 0.0


def text(content: str, *, chunks: int = 1, finish: str = "stop") -> ScriptedResponse:
    """A plain text answer split into ``chunks`` pieces."""
    size = max(1, -(-len(content) // max(1, chunks)))
    parts = [content[i : i + size] for i in range(0, len(content), size)] or [""]
    deltas: list[Delta] = [TextDelta(p) for p in parts if p]
    deltas.append(FinishDelta(finish))
    return ScriptedResponse(deltas)


def reasoning(thought: str, answer: str) -> ScriptedResponse:
    """Reasoning content followed by an answer."""
    return ScriptedResponse([ReasoningDelta(thought), TextDelta(answer), FinishDelta("stop")])


def tool_call(
    *calls: tuple[str, dict[str, Any]] | tuple[str, dict[str, Any], str],
    preface: str = "",
    split_args: int = 1,
) -> ScriptedResponse:
    """One response calling one or more tools: ``tool_call(("read_file", {"path": "a"}))``.

    ``preface`` is text streamed before the calls; ``split_args`` splits each call's JSON
    arguments into that many fragments, as real providers stream them.
    """
    deltas: list[Delta] = [TextDelta(preface)] if preface else []
    for index, call in enumerate(calls):
        name, args = call[0], call[1]
        call_id = call[2] if len(call) > 2 else f"call_{index}_{name}"
        raw = json.dumps(args, ensure_ascii=False)
        size = max(1, -(-len(raw) // max(1, split_args)))
        pieces = [raw[i : i + size] for i in range(0, len(raw), size)] or [""]
        deltas.append(ToolCallDelta(index, id=call_id, name=name, arguments=pieces[0]))
        deltas.extend(ToolCallDelta(index, arguments=p) for p in pieces[1:])
    deltas.append(FinishDelta("tool_calls"))
    return ScriptedResponse(deltas)


Script = ScriptedResponse | Callable[[LLMRequest], ScriptedResponse]


class ScriptedProvider:
    """Replays scripted responses, one per request, and records the requests.

    Items may be :class:`ScriptedResponse` values or functions ``request -> ScriptedResponse``.
    When the script runs out, ``default`` answers (or a :class:`ProviderError` if none is set).
    Each response reports usage: 1 input token per 4 characters of prompt, 1 output token per
    streamed delta.
    """

    def __init__(
        self,
        script: Iterable[Script] = (),
        *,
        default: Script | None = None,
        context_window: int = 128_000,
        name: str = "scripted",
    ) -> None:
        self._script: list[Script] = list(script)
        self._default = default
        self._context_window = context_window
        self._name = name
        self.requests: list[LLMRequest] = []
        self.closed = False

    @property
    def name(self) -> str:
        return self._name

    @property
    def context_window(self) -> int:
        return self._context_window

    def extend(self, items: Sequence[Script]) -> None:
        self._script.extend(items)

    @property
    def remaining(self) -> int:
        return len(self._script)

    def _next(self, request: LLMRequest) -> ScriptedResponse:
        if self._script:
            item = self._script.pop(0)
        elif self._default is not None:
            item = self._default
        else:
            raise ProviderError(
                f"ScriptedProvider ran out of responses after {len(self.requests)} requests",
                category="unknown",
            )
        return item(request) if callable(item) else item

    async def stream(self, request: LLMRequest) -> AsyncIterator[Delta]:
        # callers may keep appending to the same message list: record what was sent
        request = replace(request, messages=list(request.messages), tools=list(request.tools))
        self.requests.append(request)
        response = self._next(request)
        prompt_chars = sum(len(m.content) for m in request.messages)
        produced = 0
        for delta in response.deltas:
            if response.delay:
                await asyncio.sleep(response.delay)
            produced += 1
            yield delta
        if response.error is not None:
            raise response.error
        yield UsageDelta(TokenUsage(input_tokens=prompt_chars // 4, output_tokens=produced))

    async def aclose(self) -> None:
        self.closed = True
