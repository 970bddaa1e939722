"""The LLM provider protocol.

A provider is any object with a ``name``, a ``context_window`` and an async ``stream(request)``
that yields :data:`~memora.llm.types.Delta` values.  Providers raise :class:`ProviderError` for
failures they could not recover from; ``category`` tells the loop whether it was the connection,
a timeout or something else, and ``retryable`` whether trying again may help.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

from ..errors import ErrorCategory, ProviderError
from .types import Delta, LLMRequest, TextDelta

__all__ = ["ErrorCategory", "Provider", "ProviderError", "complete_text", "model_label"]


@runtime_checkable
class Provider(Protocol):
    """What the agent loop needs from an LLM.

    A provider may also have a ``compact_prompt`` attribute: ``True`` for a small local model
    that does better with one short system paragraph than with the role pack's full prompt (the
    embedded model sets it).  A provider may also have a ``supports_tools`` attribute: ``False`` when its model cannot
    use tools (a tiny local model), so the Agent sends none (absent means ``True``).  A provider
    may also have a ``structured_output`` attribute: ``True`` when it constrains its answer to
    ``request.output``'s JSON schema (a native schema mode or a grammar); absent means it does
    not, and a typed turn then relies on the prompt and memora's validation alone."""

    @property
    def name(self) -> str:
        """A short id shown in logs and traces (``openai:gpt-4o-mini``)."""
        ...

    @property
    def context_window(self) -> int:
        """The model's context window in tokens."""
        ...

    def stream(self, request: LLMRequest) -> AsyncIterator[Delta]:
        """Stream the model's answer to ``request`` as deltas.

        Cancelling the consuming task must stop generation promptly and release connections.
        """
        ...

    async def aclose(self) -> None:
        """Release connections, threads and models."""
        ...


def model_label(provider: object) -> str:
    """Which provider and model answer, in one short string: the provider's ``name``, with the
    file or model name of its ``model``/``model_path`` attribute when the name does not hold it
    already (``openai:gpt-4o-mini``; ``llamacpp smollm2.gguf``).  Rounds record it and the CLI
    shows it."""
    model = getattr(provider, "model", None) or getattr(provider, "model_path", None)
    model_name = str(model).replace("\\", "/").rsplit("/", 1)[-1] if model else ""
    name = str(getattr(provider, "name", "") or type(provider).__name__)
    return name if not model_name or model_name in name else f"{name} {model_name}"


async def complete_text(provider: Provider, request: LLMRequest) -> str:
    """The whole answer to ``request`` as text: the provider's non-streamed ``complete()`` when
    it has one (nobody watches a summary being written), else its stream joined."""
    complete = getattr(provider, "complete", None)
    if complete is not None:
        return str((await complete(request)).text)
    parts: list[str] = []
    async for delta in provider.stream(request):
        if isinstance(delta, TextDelta):
            parts.append(delta.text)
    return "".join(parts)
