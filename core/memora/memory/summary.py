"""Round summaries: after each round the background provider writes one memory.

The model is asked for a first line ``TYPE: <label>`` and the summary below it; a model that
ignores the format still yields a summary (labelled ``general``).

A round shorter than ``verbatim_tokens`` (estimated) is stored as it was said — the labelled
transcript, type ``general`` — without a model call: the summary asked for (at most five short
sentences) would be no shorter, and keyword recall finds the exact words.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..llm.provider import Provider, complete_text
from ..llm.types import LLMRequest, Message, estimate_text_tokens
from ..messages import Messages

__all__ = ["SUMMARY_TYPES", "parse_summary", "summarize_round"]

SUMMARY_TYPES: tuple[str, ...] = ("decision", "fact", "preference", "progress", "general")
_TYPE_LINE = re.compile(r"^\s*(?:type|类型)\s*[:：]\s*([A-Za-z_]+)\s*$", re.IGNORECASE)
MAX_TRANSCRIPT_CHARS = 12_000


def parse_summary(text: str) -> tuple[str, str]:
    """Split the model's output into ``(summary_type, summary)``."""
    lines = text.strip().splitlines()
    summary_type = "general"
    if lines:
        m = _TYPE_LINE.match(lines[0])
        if m:
            label = m.group(1).lower()
            summary_type = label if label in SUMMARY_TYPES else "general"
            lines = lines[1:]
    return summary_type, "\n".join(lines).strip()


def _transcript(user: str, assistant: str, tool_notes: Sequence[str], messages: Messages) -> str:
    parts = [f"{messages.user_label}: {user.strip()}"]
    if tool_notes:
        parts.append("Tools used: " + "; ".join(tool_notes))
    parts.append(f"{messages.assistant_label}: {assistant.strip()}")
    text = "\n".join(parts)
    if len(text) > MAX_TRANSCRIPT_CHARS:
        half = MAX_TRANSCRIPT_CHARS // 2
        text = text[:half] + "\n…\n" + text[-half:]
    return text


async def summarize_round(
    provider: Provider,
    *,
    user: str,
    assistant: str,
    tool_notes: Sequence[str] = (),
    focus: str | None = None,
    messages: Messages | None = None,
    max_tokens: int = 300,
    verbatim_tokens: int = 0,
) -> tuple[str, str]:
    """Ask ``provider`` for a summary of one round; returns ``(summary_type, text)``.

    A transcript of at most ``verbatim_tokens`` tokens is returned as it is (type ``general``),
    without calling the provider."""
    msgs = messages or Messages()
    transcript = _transcript(user, assistant, tool_notes, msgs)
    if estimate_text_tokens(transcript) <= verbatim_tokens:
        return "general", transcript
    lens = f" Focus on: {focus}." if focus else ""
    system = (
        msgs.render("summary_prompt", focus=lens)
        + " Start with one line 'TYPE: <label>' where label is one of "
        + ", ".join(SUMMARY_TYPES)
        + ", then the summary."
    )
    request = LLMRequest(
        [Message.system(system), Message.user(transcript)],
        temperature=0.2,
        max_tokens=max_tokens,
    )
    return parse_summary(await complete_text(provider, request))
