"""The context window: the live history of a session, its token budget, and the message list
sent to the provider.

:class:`ContextWindow` is the one owner of the conversation as the model sees it.  Every message
enters through :meth:`ContextWindow.append` (repaired so it can always be encoded); estimates are
kept per message and as a running total, computed once, so the per-step cost does not grow with
the conversation.  The list sent to the provider (:meth:`ContextWindow.wire`) is append-only
between rebuilds, which lets providers encode only what is new.  CJK characters count as one
token each, other text as one token per four characters, plus a small per-message overhead.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..llm.types import Message, ToolSpec, clean_message, clean_text, estimate_text_tokens

if TYPE_CHECKING:
    from ..messages import Messages

__all__ = [
    "ContextOccupancy",
    "ContextWindow",
    "estimate_spec_tokens",
    "estimate_tokens",
    "trim_history",
]

logger = logging.getLogger("memora.agent")

_DIGESTS_KEPT = 6


def no_background(coro: Coroutine[Any, Any, None]) -> None:
    """The default ``spawn``: no background work (the coroutine is closed unrun)."""
    coro.close()


def estimate_tokens(m: Message) -> int:
    text = m.content
    for c in m.tool_calls:
        text += c.name + c.arguments
    return 4 + estimate_text_tokens(text)


_SPEC_COSTS: dict[int, tuple[ToolSpec, int]] = {}
"""id(spec) -> (spec, its estimate).  A tool's spec object is made once and shared by every
Agent that exposes the tool; the entry keeps the spec alive, so its id is not reused."""


def estimate_spec_tokens(specs: Sequence[ToolSpec]) -> int:
    """What the tool schemas of a request cost in the context window (they are sent with
    every request, so the history budget must leave room for them)."""
    total = 0
    for spec in specs:
        found = _SPEC_COSTS.get(id(spec))
        if found is None or found[0] is not spec:
            import json

            text = spec.name + spec.description + json.dumps(spec.parameters, ensure_ascii=False)
            found = (spec, 10 + (len(text) + 2) // 3)  # JSON is dense: ~3 characters a token
            if len(_SPEC_COSTS) >= 4096:
                _SPEC_COSTS.clear()
            _SPEC_COSTS[id(spec)] = found
        total += found[1]
    return total


def trim_history(history: Sequence[Message], costs: Sequence[int], budget: int) -> int:
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


@dataclass(frozen=True, slots=True)
class ContextOccupancy:
    """How full the context window is, by part (the seed's occupancy snapshot): estimated
    tokens of each part of a request against the **effective window** — the provider's window,
    capped by ``max_context_tokens`` and the role pack's ``contextLimit``, as truncation and the
    soft limit count it.  ``agent.context_usage()`` gives the last request's (before the first,
    what one would hold now)."""

    window: int
    """The effective window, in tokens."""
    system: int
    """The system prompt: the role pack's persona, rules and skills, pinned memories, the
    typed result's instruction."""
    notice: int
    """The trim notice (with the digest of trimmed history), when history was trimmed."""
    plan: int
    """The task table shown to the model."""
    history: int
    """The conversation kept (after trimming)."""
    tools: int
    """The tool schemas sent with the request."""
    reserve: int
    """Room kept for the answer (the output budget)."""
    trimmed: int
    """Messages trimmed from this session's history so far."""

    @property
    def used(self) -> int:
        """Tokens the request's input takes."""
        return self.system + self.notice + self.plan + self.history + self.tools

    @property
    def free(self) -> int:
        """Tokens left beside the input and the answer's reserve (never below 0)."""
        return max(0, self.window - self.used - self.reserve)

    @property
    def share(self) -> float:
        """``used`` as a share of the window (0–1; more when estimates overshoot)."""
        return self.used / self.window if self.window else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "window": self.window,
            "used": self.used,
            "free": self.free,
            "share": round(self.share, 4),
            "parts": {
                "system": self.system,
                "notice": self.notice,
                "plan": self.plan,
                "history": self.history,
                "tools": self.tools,
                "reserve": self.reserve,
            },
            "trimmed": self.trimmed,
        }


class ContextWindow:
    """History, per-message token estimates, the trim notice and the provider-bound list."""

    __slots__ = (
        "_costs",
        "_digests",
        "_head",
        "_heads",
        "_history",
        "_last",
        "_messages",
        "_note",
        "_prompt",
        "_section",
        "_total",
        "_wire",
        "spawn",
        "summarise",
        "summariser",
        "trimmed",
    )

    def __init__(self, messages: Messages, *, summarise: bool = True) -> None:
        self._messages = messages
        self.summarise = summarise
        self._history: list[Message] = []
        self._costs: list[int] = []
        self._total = 0
        self._wire: list[Message] = []
        self._prompt: str | None = None
        self._section: str | None = None
        self._note: str | None = None
        self._digests: list[list[str]] = []
        self.trimmed = 0
        """How many messages have been trimmed from this session's live history so far."""
        self.summariser: Callable[[list[Message]], Awaitable[str]] | None = None
        """Writes an LLM summary of trimmed messages (the Agent sets it when a background
        provider is configured); it replaces their local digest once written."""
        self._head = ""
        self._heads: dict[str, Message] = {}
        """The system messages of the last request, by text: a rebuilt request reuses them, so
        a provider that encodes the history incrementally (it compares messages by identity)
        still finds the request's prefix after a session is read again."""
        self.spawn: Callable[[Coroutine[Any, Any, None]], None] = no_background
        """Runs the summariser's coroutine in the background (the Agent tracks it)."""
        self._last: tuple[Any, ...] | None = None
        """What :meth:`wire` last built a request of (measured only when asked: no cost on the
        request's path)."""

    # -- the history -------------------------------------------------------------------------

    @property
    def messages(self) -> tuple[Message, ...]:
        """The live history (oldest first), without system messages; a read-only copy."""
        return tuple(self._history)

    def __len__(self) -> int:
        return len(self._history)

    @property
    def last(self) -> Message | None:
        return self._history[-1] if self._history else None

    @property
    def tokens(self) -> int:
        """The estimated tokens of the live history."""
        return self._total

    def reset(self, history: Sequence[Message]) -> None:
        """Start over with ``history`` (a session switch)."""
        self._history = list(history)
        self._costs = [estimate_tokens(m) for m in self._history]
        self._total = sum(self._costs)
        self._wire = []
        self._note = None
        self._digests = []
        self._head = ""
        self.trimmed = 0

    def append(self, message: Message) -> Message:
        """The one door into history: nothing that cannot be encoded gets in."""
        message = clean_message(message)
        cost = estimate_tokens(message)
        self._history.append(message)
        self._costs.append(cost)
        self._total += cost
        if self._wire:
            self._wire.append(message)
        return message

    def rollback(self, count: int) -> None:
        """Remove the last ``count`` messages (a discarded turn)."""
        count = min(count, len(self._history))
        if count <= 0:
            return
        self._total -= sum(self._costs[-count:])
        del self._history[-count:]
        del self._costs[-count:]
        self._wire = []

    # -- what the provider receives ------------------------------------------------------------

    def near_soft_limit(self, prompt: str, window: int, reserve: int) -> bool:
        used = self._total + estimate_tokens(Message.system(prompt))
        return used > 0.8 * (window - reserve)

    def wire(
        self,
        prompt: str,
        window: int,
        reserve: int,
        section: str | None = None,
        *,
        effective: int | None = None,
        tools: int = 0,
    ) -> list[Message]:
        """The messages for the next request: the system prompt, the trim notice, ``section``
        (the plan), then the history; the oldest messages are trimmed to fit ``window - reserve``.
        ``effective`` (the effective window) and ``tools`` (the tool schemas' tokens) go into
        :attr:`occupancy`, the request's snapshot.

        The same list object is returned (and appended to) until something above the history
        changes, so providers can encode it incrementally.
        """
        budget = window - reserve - estimate_tokens(Message.system(prompt))
        if section:
            budget -= estimate_tokens(Message.system(section))
        for _ in range(3):  # the trim notice takes room too: trim again if it does not fit
            room = budget - (estimate_tokens(Message.system(self._note)) if self._note else 0)
            if self._total <= room:
                break
            self._trim(max(room - 200, 0))
        if not self._wire or prompt != self._prompt or section != self._section:
            # a persona or skill holding a lone surrogate must not make every request fail
            texts = [clean_text(prompt)]
            if self._note:
                texts.append(self._note)
            if section:
                texts.append(clean_text(section))
            heads = self._heads
            head = [heads.get(text) or Message.system(text) for text in texts]
            self._heads = {m.content: m for m in head}
            self._wire = [*head, *self._history]
            self._prompt = prompt
            self._section = section
        self._last = (prompt, effective or window, reserve, section, tools, self._note,
                      self._total, self.trimmed)  # fmt: skip
        return self._wire

    @property
    def occupancy(self) -> ContextOccupancy | None:
        """The last request's :class:`ContextOccupancy` (``None`` before the first)."""
        if self._last is None:
            return None
        prompt, window, reserve, section, tools, note, history, trimmed = self._last
        return self._occupancy(prompt, window, reserve, section, tools, note, history, trimmed)

    def measure(
        self, prompt: str, window: int, reserve: int, section: str | None = None, tools: int = 0
    ) -> ContextOccupancy:
        """The :class:`ContextOccupancy` of a request with ``prompt``, ``section`` and this
        history now, in a window of ``window`` tokens."""
        return self._occupancy(
            prompt, window, reserve, section, tools, self._note, self._total, self.trimmed
        )

    @staticmethod
    def _occupancy(
        prompt: str,
        window: int,
        reserve: int,
        section: str | None,
        tools: int,
        note: str | None,
        history: int,
        trimmed: int,
    ) -> ContextOccupancy:
        return ContextOccupancy(
            window=window,
            system=estimate_tokens(Message.system(prompt)),
            notice=estimate_tokens(Message.system(note)) if note else 0,
            plan=estimate_tokens(Message.system(section)) if section else 0,
            history=history,
            tools=tools,
            reserve=reserve,
            trimmed=trimmed,
        )

    def _trim(self, budget: int) -> None:
        drop = trim_history(self._history, self._costs, budget)
        if not drop:
            return
        dropped = self._history[:drop]
        self._total -= sum(self._costs[:drop])
        del self._history[:drop]
        del self._costs[:drop]
        self.trimmed += drop
        self._head = self._messages.render(
            "context_truncated", skipped=self.trimmed, kept=len(self._history)
        )
        if self.summarise:
            # cumulative: each trim adds its digest; the oldest digests go first when many pile up
            digest = self._digest(dropped)
            if digest:
                holder = [digest]
                self._digests.append(holder)
                del self._digests[:-_DIGESTS_KEPT]
                if self.summariser is not None:
                    self._summarise_later(holder, dropped)
        self._compose()

    def _compose(self) -> None:
        note = self._head
        if self._digests:
            note += "\n" + "\n".join(d[0] for d in self._digests)
        self._note = note
        self._wire = []

    def _summarise_later(self, holder: list[str], dropped: list[Message]) -> None:
        """Ask the summariser off the hot path; its text replaces the local digest when it
        arrives (the next request carries it).  A failure keeps the digest."""
        summariser = self.summariser
        assert summariser is not None

        async def run() -> None:
            try:
                text = (await summariser(dropped)).strip()
            except Exception as exc:  # the local digest stays
                logger.warning("summarising trimmed context failed: %s", exc)
                return
            if text:
                holder[0] = text
                self._compose()

        self.spawn(run())

    def _digest(self, dropped: Sequence[Message]) -> str:
        """A short digest of trimmed messages, built locally (no extra LLM call on the hot path)."""
        from ..memory.keywords import extract_keywords

        user_lines = [
            m.content.strip().splitlines()[0][:120]
            for m in dropped
            if m.role == "user" and m.content.strip()
        ]
        keywords = extract_keywords(" ".join(m.content for m in dropped), limit=12)
        parts = []
        if user_lines:
            parts.append(
                f"{self._messages.recent_conversation_label} (earlier requests): "
                + " | ".join(user_lines[-5:])
            )
        if keywords:
            parts.append("Topics: " + ", ".join(keywords))
        return "\n".join(parts)
