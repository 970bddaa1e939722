"""Messages and tool specs in the OpenAI Chat Completions shape, which most providers (and
llama-cpp-python) accept; shared so every provider plugin encodes them the same way."""

from __future__ import annotations

from typing import Any

from .types import Message, ToolSpec

__all__ = ["message_to_openai", "tool_to_openai"]


def message_to_openai(m: Message) -> dict[str, Any]:
    d: dict[str, Any] = {"role": m.role}
    if m.role == "assistant" and m.tool_calls:
        d["content"] = m.content or None
        d["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments or "{}"},
            }
            for c in m.tool_calls
        ]
    else:
        d["content"] = m.content
    if m.role == "tool":
        d["tool_call_id"] = m.tool_call_id
        if m.name:
            d["name"] = m.name
    return d


def tool_to_openai(t: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
    }
