"""Messages to and from plain dicts (session store lines, pause states)."""

from __future__ import annotations

from typing import Any

from ..llm.types import Message, ToolCall

__all__ = ["message_from_dict", "message_to_dict"]


def message_to_dict(m: Message) -> dict[str, Any]:
    d: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        d["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in m.tool_calls
        ]
    if m.tool_call_id:
        d["tool_call_id"] = m.tool_call_id
    if m.name:
        d["name"] = m.name
    if m.reasoning:
        d["reasoning"] = m.reasoning
    return d


def message_from_dict(d: dict[str, Any]) -> Message:
    role = d.get("role")
    if role not in ("system", "user", "assistant", "tool"):
        raise ValueError(f"unknown message role {role!r}")
    return Message(
        role=role,
        content=str(d.get("content") or ""),
        tool_calls=tuple(
            ToolCall(str(c["id"]), str(c["name"]), str(c.get("arguments") or ""))
            for c in d.get("tool_calls") or ()
        ),
        tool_call_id=d.get("tool_call_id"),
        name=d.get("name"),
        reasoning=d.get("reasoning"),
    )
