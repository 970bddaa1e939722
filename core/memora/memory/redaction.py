"""Forgetting a round's text in a session's log: which lines, and what is left of them.

``memora memory forget --everywhere`` takes a memory out of recall *and* the round it came from
out of the session's log (:func:`memora.memory.forgetting.forget_everywhere`).  Every session
store does the second part the same way, with these pure functions over its lines (dicts with a
``kind``, as every store keeps them):

- :func:`round_lines`: the round's line and the message lines of its turn — a finished turn is
  its messages followed by its round (one append), so the messages after the previous round (or
  the session's start) up to this round's line;
- :func:`redacted`: a line with the text gone and the structure kept — a message keeps its role
  and its tool-call ids (a provider refuses a history whose tool results match no call), its
  text becomes :data:`FORGOTTEN`; the round keeps its id, status, times, usage and model, loses
  its user text, answer, events and typed output, and gains ``forgotten``: who asked and when.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "FORGOTTEN",
    "redact_log_in_place",
    "redacted",
    "round_lines",
    "title_without",
]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)

FORGOTTEN = "[forgotten]"
"""What a forgotten message says instead of its text."""

_ROUND_KEEPS = ("round_id", "status", "started_at", "ended_at", "usage", "model")


def round_lines(lines: Sequence[dict[str, Any]], round_id: str) -> list[int]:
    """The indices of round ``round_id``'s line and of its turn's messages in ``lines``
    (oldest first); empty when the session has no such round."""
    for index, line in enumerate(lines):
        if line.get("kind") == "round" and line.get("round_id") == round_id:
            start = index
            while start > 0 and lines[start - 1].get("kind") == "message":
                start -= 1
            return list(range(start, index + 1))
    return []


def title_without(title: str, said: str) -> str | None:
    """``title`` without the forgotten request ``said`` — a session's default title is its
    first request, and a fork's is its source's with " (fork)" — or ``None`` when it does not
    hold it (a title a person chose stays)."""
    first = said.strip().splitlines()[0][:80].strip() if said.strip() else ""
    if not first or first not in title:
        return None
    return title.replace(first, FORGOTTEN)


def redacted(line: dict[str, Any], tombstone: dict[str, Any]) -> dict[str, Any]:
    """``line`` without its text (see the module docstring); ``tombstone`` (``by``, ``at``,
    ``memory``) goes on the round line."""
    kind = line.get("kind")
    if kind == "round":
        kept = {k: line[k] for k in _ROUND_KEEPS if k in line}
        return {"kind": "round", **kept, "user": "", "assistant": "", "events": [],
                "forgotten": dict(tombstone)}  # fmt: skip
    out: dict[str, Any] = {"kind": kind, "role": line.get("role")}
    if line.get("content") is not None:
        out["content"] = FORGOTTEN
    for key in ("tool_call_id", "name"):  # a tool result's call and tool: no user's words
        if line.get(key) is not None:
            out[key] = line[key]
    calls = line.get("tool_calls")
    if isinstance(calls, list):
        out["tool_calls"] = [_call(c) for c in calls]
    return {k: v for k, v in out.items() if v is not None}


def _call(call: Any) -> Any:
    if not isinstance(call, dict):
        return {}
    kept = {k: call[k] for k in ("id", "type", "name") if k in call}
    if isinstance(call.get("function"), dict):
        kept["function"] = {"name": call["function"].get("name", ""), "arguments": "{}"}
    if "arguments" in call:
        kept["arguments"] = {} if isinstance(call["arguments"], dict) else "{}"
    return kept


def redact_log_in_place(path: Path, round_id: str, tombstone: dict[str, Any]) -> str | None:
    """Forget round ``round_id`` in the JSONL log ``path`` (memora's session log), in place:
    each of its lines is overwritten by its :func:`redacted` form padded with spaces to the same
    length, at the same offset — so an append another process makes meanwhile (at the end) is
    never lost, and a reader's byte offsets stay true.  ``False`` when the log has no such
    round.  A link is refused (``O_NOFOLLOW``), as for every write of a log."""
    fd = os.open(path, os.O_RDWR | _NOFOLLOW | _CLOEXEC)
    try:
        data = b""
        while chunk := os.read(fd, 1 << 20):
            data += chunk
        parsed: list[tuple[int, bytes, dict[str, Any]]] = []
        offset = 0
        for raw in data.split(b"\n"):
            try:
                item = json.loads(raw) if raw.strip() else None
            except ValueError:
                item = None  # a torn line: not one of the round's
            if isinstance(item, dict):
                parsed.append((offset, raw, item))
            offset += len(raw) + 1
        targets = round_lines([item for _, _, item in parsed], round_id)
        for index in targets:
            at, raw, item = parsed[index]
            os.pwrite(fd, _fit(redacted(item, tombstone), len(raw)), at)
        if not targets:
            return None
        os.fsync(fd)
        return str(parsed[targets[-1]][2].get("user") or "")
    finally:
        os.close(fd)


def _fit(line: dict[str, Any], size: int) -> bytes:
    """``line`` as JSON of exactly ``size`` bytes (trailing spaces, which JSON ignores); what
    does not fit is cut down — a message's ``[forgotten]`` to nothing, the tombstone's ``by``,
    then the tombstone to ``{}``."""
    tries = [line]
    if line.get("content") == FORGOTTEN:
        tries.append({**line, "content": ""})
    if isinstance(line.get("forgotten"), dict):
        tries.append(
            {**line, "forgotten": {k: v for k, v in line["forgotten"].items() if k != "by"}}
        )
        tries.append({**line, "forgotten": {}})
    for attempt in tries:
        # compact, and ASCII: no text of anyone's is left to escape
        encoded = json.dumps(attempt, separators=(",", ":")).encode("ascii")
        if len(encoded) <= size:
            return encoded + b" " * (size - len(encoded))
    raise ValueError(f"a forgotten line of {size} bytes cannot hold its tombstone")
