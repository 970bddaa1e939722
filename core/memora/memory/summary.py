"""Round summaries: after each round the background provider writes one memory.

The model is asked for a first line ``TYPE: <label>`` and the summary below it; a model that
ignores the format still yields a summary (labelled ``general``).

A round shorter than ``verbatim_tokens`` (estimated) is stored as it was said — the labelled
transcript, type ``general`` — without a model call: the summary asked for (at most five short
sentences) would be no shorter, and keyword recall finds the exact words.

A model's summary is checked against its round before it is stored (:func:`round_memory`,
:mod:`memora.memory.grounding`): one that says what the round did not is replaced by an
extractive summary of the round, one that passes keeps the user's request with it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..llm.provider import Provider, complete_text
from ..llm.types import LLMRequest, Message, estimate_text_tokens
from ..messages import Messages
from .grounding import extractive_summary, grounded, grounding, with_request

__all__ = ["SUMMARY_TYPES", "RoundMemory", "parse_summary", "round_memory", "summarize_round"]

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


def _said(label: str, text: str) -> list[str]:
    """``text`` under ``label``, every line: a line of the answer that begins ``User:`` reads
    ``Assistant: User: …`` — the memory never shows the user saying what the answer wrote (nor
    the answer what the user wrote)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return [f"{label}: {line}" for line in lines] or [f"{label}:"]


def _transcript(user: str, assistant: str, tool_notes: Sequence[str], messages: Messages) -> str:
    parts = _said(messages.user_label, user)
    if tool_notes:  # memora's own line: one line, whatever a tool's note holds
        parts.append("Tools used: " + " ".join("; ".join(tool_notes).split()))
    parts += _said(messages.assistant_label, assistant)
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


class RoundMemory:
    """What :func:`round_memory` stores for a round: its type, its text, and how it was made
    (``verbatim``, ``model`` — a model summary that passed the check — or ``extractive``), with
    the model summary's grounding (the share of its terms the round has)."""

    __slots__ = ("grounding", "how", "summary_type", "text")

    def __init__(self, summary_type: str, text: str, how: str, score: float | None) -> None:
        self.summary_type = summary_type
        self.text = text
        self.how = how
        self.grounding = score

    def meta(self) -> dict[str, object]:
        """What the stored memory's ``meta`` keeps of it (provenance a person can see)."""
        out: dict[str, object] = {"written": self.how}
        if self.grounding is not None:
            out["grounding"] = round(self.grounding, 3)
        return out


async def round_memory(
    provider: Provider,
    *,
    user: str,
    assistant: str,
    tool_notes: Sequence[str] = (),
    focus: str | None = None,
    messages: Messages | None = None,
    max_tokens: int = 300,
    verbatim_tokens: int = 0,
) -> RoundMemory:
    """The memory to store for a round: as it was said when short, else the model's summary
    if it is grounded in the round (with the user's request ahead of it when it lacks its
    words), else an extractive summary of the round."""
    msgs = messages or Messages()
    transcript = _transcript(user, assistant, tool_notes, msgs)
    if estimate_text_tokens(transcript) <= verbatim_tokens:
        return RoundMemory("general", transcript, "verbatim", None)
    summary_type, text = await summarize_round(
        provider,
        user=user,
        assistant=assistant,
        tool_notes=tool_notes,
        focus=focus,
        messages=msgs,
        max_tokens=max_tokens,
    )
    if not text:
        return RoundMemory(summary_type, "", "model", None)  # nothing written: nothing stored
    said = "\n".join([user, *tool_notes, assistant])
    score = grounding(text, said)
    if grounded(text, said, user=user, user_label=msgs.user_label, score=score):
        return RoundMemory(
            summary_type, with_request(text, user, label=msgs.user_label), "model", score
        )
    # the round's own words instead, chosen through the same lens (the role pack's summary
    # focus) and filed under the type the model gave the round
    fallback = extractive_summary(
        user,
        assistant,
        tool_notes,
        labels=(msgs.user_label, msgs.assistant_label),
        focus=focus,
    )
    return RoundMemory(summary_type, fallback, "extractive", score)
