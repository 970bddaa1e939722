"""Context window bookkeeping: token estimates kept per message, trimming of the oldest
messages, and the soft limit.

Estimates are incremental (one number per message, computed once), so the per-step cost does not
grow with the conversation.  CJK characters count as one token each, other text as one token per
four characters, plus a small per-message overhead.
"""

from __future__ import annotations

import re

from ..llm.types import Message

__all__ = ["estimate_tokens", "trim_history"]

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def estimate_tokens(m: Message) -> int:
    text = m.content
    for c in m.tool_calls:
        text += c.name + c.arguments
    cjk = len(_CJK.findall(text)) if not text.isascii() else 0
    return 4 + cjk + (len(text) - cjk + 3) // 4


def trim_history(history: list[Message], costs: list[int], budget: int) -> int:
    """How many of the oldest messages to drop so the rest fits ``budget``.

    Never drops the last message, and never splits an assistant tool-call message from the tool
    results that answer it (a cut never starts on a ``tool`` message).
    """
    total = sum(costs)
    drop = 0
    while total > budget and drop < len(history) - 1:
        total -= costs[drop]
        drop += 1
    while drop < len(history) - 1 and history[drop].role == "tool":
        total -= costs[drop]
        drop += 1
    return drop
