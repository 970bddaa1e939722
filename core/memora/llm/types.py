"""Message, request and delta types shared by the loop and every provider.

These sit on the hot path (one delta per streamed token), so they are plain slotted dataclasses,
not pydantic models.  Providers translate them to their wire format; a provider may cache that
translation per message object because messages are immutable once appended to history.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, cast

__all__ = [
    "Delta",
    "FinishDelta",
    "LLMRequest",
    "Message",
    "OutputFormat",
    "ReasoningDelta",
    "Role",
    "TextDelta",
    "TokenUsage",
    "ToolCall",
    "ToolCallDelta",
    "ToolSpec",
    "UsageDelta",
    "estimate_text_tokens",
]

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A complete tool call as the model issued it.  ``arguments`` is the raw JSON text."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Message:
    """One message of a conversation.  Immutable: history only ever appends."""

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    reasoning: str | None = None
    """Model reasoning kept for display and replay; providers do not send it back."""

    @staticmethod
    def system(content: str) -> Message:
        return Message("system", content)

    @staticmethod
    def user(content: str) -> Message:
        return Message("user", content)

    @staticmethod
    def assistant(content: str, tool_calls: tuple[ToolCall, ...] = ()) -> Message:
        return Message("assistant", content, tool_calls)

    @staticmethod
    def tool(tool_call_id: str, name: str, content: str) -> Message:
        return Message("tool", content, tool_call_id=tool_call_id, name=name)


@functools.cache
def _cjk_re() -> re.Pattern[str]:
    # compiled on first use (the first non-ASCII text), not at import
    return re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def estimate_text_tokens(text: str) -> int:
    """Tokens ``text`` takes, estimated without a tokenizer: a CJK character is one token,
    other text one token per four characters."""
    cjk = len(_cjk_re().findall(text)) if not text.isascii() else 0
    return cjk + (len(text) - cjk + 3) // 4


def clean_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD.

    A lone surrogate (from a JSON ``"\\ud800"`` escape, or a file name decoded with
    ``surrogateescape``) cannot be encoded as UTF-8: once in the history, every later request
    would fail.  Valid text is returned as is (one encode to check).
    """
    if text.isascii():  # most deltas: a flag read, no copy
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


_D = TypeVar("_D")


def clean_delta(item: _D) -> _D:
    """A text, reasoning or tool-call delta with :func:`clean_text` applied (others as is)."""
    delta: Any = item
    kind = delta.kind
    if kind == "text" or kind == "reasoning":
        text = clean_text(delta.text)
        return item if text is delta.text else cast(_D, type(delta)(text))
    if kind == "tool_call":
        args = clean_text(delta.arguments)
        name = clean_text(delta.name) if delta.name else delta.name
        call_id = clean_text(delta.id) if delta.id else delta.id
        if args is delta.arguments and name is delta.name and call_id is delta.id:
            return item
        return cast(_D, ToolCallDelta(delta.index, call_id, name, args))
    return item


def clean_message(message: Message) -> Message:
    """The message with :func:`clean_text` applied to every string it carries."""
    try:
        for value in (message.content, message.tool_call_id, message.name, message.reasoning):
            if value:
                value.encode("utf-8")
        for call in message.tool_calls:
            (call.id + call.name + call.arguments).encode("utf-8")
        return message  # the common case: nothing to repair, nothing copied
    except UnicodeEncodeError:
        pass
    calls = tuple(
        ToolCall(clean_text(c.id), clean_text(c.name), clean_text(c.arguments))
        for c in message.tool_calls
    )
    fixed = Message(
        message.role,
        clean_text(message.content),
        calls,
        clean_text(message.tool_call_id) if message.tool_call_id else message.tool_call_id,
        clean_text(message.name) if message.name else message.name,
        clean_text(message.reasoning) if message.reasoning else message.reasoning,
    )
    return fixed


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as the model sees it: a name, a description and a JSON schema for arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class OutputFormat:
    """The shape a typed turn's answer must have (``LLMRequest.output``): a JSON schema of an
    object.  A provider that can constrain its text to a schema (``structured_output = True``:
    OpenAI-compatible ``response_format: json_schema``, a llama.cpp grammar) does so; the
    others are told in the prompt, and memora validates either way.  ``strict``: the schema
    meets a strict mode's rules (every property required, no additional ones)."""

    name: str
    schema: dict[str, Any]
    strict: bool = False


@dataclass(slots=True)
class LLMRequest:
    """One call to a provider.

    ``max_tokens`` and ``temperature`` are only sent when set (``None`` = provider default).
    ``history_key`` lets a provider reuse what it serialised for the previous request of the same
    conversation: ``messages`` of a later request extend those of an earlier one with the same key.
    """

    messages: list[Message]
    tools: list[ToolSpec] = field(default_factory=list)
    temperature: float | None = None
    max_tokens: int | None = None
    model: str | None = None
    history_key: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    output: OutputFormat | None = None
    """The schema the answer must follow (a typed turn without tools); ``None``: free text."""


@dataclass(slots=True)
class TokenUsage:
    """Tokens one LLM call used, as the provider reports them."""

    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the answer's text."""

    text: str
    kind: Literal["text"] = "text"


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """A piece of the model's reasoning (thinking) text."""

    text: str
    kind: Literal["reasoning"] = "reasoning"


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A fragment of a tool call.  Fragments with the same ``index`` belong to one call; ``id`` and
    ``name`` usually arrive with the first fragment, ``arguments`` piece by piece."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""
    kind: Literal["tool_call"] = "tool_call"


@dataclass(frozen=True, slots=True)
class FinishDelta:
    """The model stopped: ``stop``, ``tool_calls``, ``length``, ``content_filter`` or another
    provider-specific reason."""

    reason: str
    kind: Literal["finish"] = "finish"


@dataclass(frozen=True, slots=True)
class UsageDelta:
    """The call's token usage, usually with the last delta."""

    usage: TokenUsage
    kind: Literal["usage"] = "usage"


Delta = TextDelta | ReasoningDelta | ToolCallDelta | FinishDelta | UsageDelta
"""What a provider's ``stream()`` yields."""
