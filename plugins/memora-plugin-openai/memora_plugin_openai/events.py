"""What one streamed Chat Completions event says: its deltas, read strictly.

A server's event is data: every field is checked for its type and range as it is read (a wrong
one raises ``TypeError``/``ValueError``, which the provider turns into a provider error naming
the field), and a burst of events read at once is coalesced into as few deltas as it holds.
"""

from __future__ import annotations

from typing import Any

from memora.llm.types import (
    Delta,
    FinishDelta,
    ReasoningDelta,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    UsageDelta,
)

__all__ = ["coalesce", "event_deltas"]


def coalesce(deltas: list[Delta]) -> list[Delta]:
    """``deltas`` with each run of text, of reasoning, or of one tool call's argument fragments
    joined into one delta (order kept; a fragment naming a call starts a new one)."""
    out: list[Delta] = []
    run: list[str] = []  # the pieces of the run that out[-1] starts

    def close() -> None:
        if len(run) > 1:
            head = out[-1]
            text = "".join(run)
            if isinstance(head, TextDelta):
                out[-1] = TextDelta(text)
            elif isinstance(head, ReasoningDelta):
                out[-1] = ReasoningDelta(text)
            elif isinstance(head, ToolCallDelta):
                out[-1] = ToolCallDelta(head.index, head.id, head.name, text)
        run.clear()

    for delta in deltas:
        head = out[-1] if out else None
        if head is not None and run:
            if isinstance(delta, TextDelta) and isinstance(head, TextDelta):
                run.append(delta.text)
                continue
            if isinstance(delta, ReasoningDelta) and isinstance(head, ReasoningDelta):
                run.append(delta.text)
                continue
            if (
                isinstance(delta, ToolCallDelta)
                and isinstance(head, ToolCallDelta)
                and delta.index == head.index
                and delta.id is None
                and delta.name is None
            ):
                run.append(delta.arguments)
                continue
        close()
        out.append(delta)
        if isinstance(delta, (TextDelta, ReasoningDelta)):
            run.append(delta.text)
        elif isinstance(delta, ToolCallDelta):
            run.append(delta.arguments)
    close()
    return out


def _count(value: Any, what: str) -> int:
    """A token count: a non-negative integer (NaN, strings, floats with a fraction refused)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} is {type(value).__name__}, not a number")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"{what} is {value!r}, not a whole number")
    return max(0, int(value))


def _text(value: Any, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError(f"{what} is {type(value).__name__}, not a string")
    return value


def event_deltas(obj: dict[str, Any]) -> list[Delta]:
    """The deltas of one event; a wrong type anywhere raises TypeError/ValueError."""
    choices = obj.get("choices")
    if type(choices) is list and len(choices) == 1 and not obj.get("usage"):
        # the usual event mid-answer, a choice whose delta is a piece of text and nothing else:
        # what the full reading below makes of it, with a fraction of its checks
        choice = choices[0]
        if type(choice) is dict and not choice.get("finish_reason"):
            delta = choice.get("delta")
            if type(delta) is dict and len(delta) == 1:
                content = delta.get("content")
                if type(content) is str:
                    return [TextDelta(content)] if content else []
    out: list[Delta] = []
    if choices:
        if not isinstance(choices, list) or not isinstance(choices[0], dict):
            raise TypeError("choices is not a list of objects")
        _choice_deltas(choices[0], out)
    usage = obj.get("usage")
    if usage:
        out.append(_usage_delta(usage))
    return out


def _choice_deltas(choice: dict[str, Any], out: list[Delta]) -> None:
    """The deltas of an event's choice: reasoning, text, tool calls, the finish reason."""
    delta = choice.get("delta") or choice.get("message") or {}
    if not isinstance(delta, dict):
        raise TypeError(f"delta is {type(delta).__name__}, not an object")
    reasoning = _text(delta.get("reasoning_content") or delta.get("reasoning"), "reasoning")
    if reasoning:
        out.append(ReasoningDelta(reasoning))
    content = _text(delta.get("content"), "content")
    if content:
        out.append(TextDelta(content))
    calls = delta.get("tool_calls")
    if calls:
        if not isinstance(calls, list):
            raise TypeError("tool_calls is not a list")
        out.extend(_tool_call_delta(pos, tc) for pos, tc in enumerate(calls))
    reason = choice.get("finish_reason")
    if reason:
        out.append(FinishDelta(_text(reason, "finish_reason")))


def _tool_call_delta(pos: int, tc: Any) -> ToolCallDelta:
    """One tool call's piece (``pos``: its place in the event, the index when it has none)."""
    if not isinstance(tc, dict):
        raise TypeError("a tool call is not an object")
    fn = tc.get("function") or {}
    if not isinstance(fn, dict):
        raise TypeError("a tool call's function is not an object")
    index = tc.get("index", pos)
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < 128:
        raise ValueError(f"tool call index {index!r} is not an integer in 0..127")
    return ToolCallDelta(
        index,
        _text(tc.get("id"), "tool call id") or None,
        _text(fn.get("name"), "tool name") or None,
        _text(fn.get("arguments"), "tool arguments"),
    )


def _usage_delta(usage: Any) -> UsageDelta:
    """An event's ``usage``: the token counts, each a non-negative integer."""
    if not isinstance(usage, dict):
        raise TypeError("usage is not an object")
    details = usage.get("completion_tokens_details") or {}
    if not isinstance(details, dict):
        raise TypeError("completion_tokens_details is not an object")
    return UsageDelta(
        TokenUsage(
            _count(usage.get("prompt_tokens"), "prompt_tokens"),
            _count(usage.get("completion_tokens"), "completion_tokens"),
            _count(details.get("reasoning_tokens"), "reasoning_tokens"),
        )
    )
