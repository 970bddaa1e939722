"""memora plugin sending memora's spans to OpenTelemetry, following the GenAI semantic conventions.

A turn becomes an ``invoke_agent`` span; each LLM call a ``chat`` span and each tool call an
``execute_tool`` span inside it (nested by the turn's ``round_id``, so parallel tool calls nest
correctly too); the turn's span is a child of whatever span is current where the host calls
``agent.chat()``.  Attributes: ``gen_ai.operation.name``, ``gen_ai.agent.name``,
``gen_ai.conversation.id``, ``gen_ai.provider.name``, ``gen_ai.request.model``,
``gen_ai.usage.input_tokens`` / ``output_tokens``, ``gen_ai.response.finish_reasons``,
``gen_ai.tool.name``, ``gen_ai.tool.call.id``, plus ``memora.*`` ones.  No message content is
recorded.

Options (``plugins.otel``; an Agent's ``plugin_options={"otel": {...}}`` may pass objects):
``tracer_provider`` (default: the global one, ``opentelemetry.trace.get_tracer_provider()``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memora import hookimpl
from memora.plugins import checked_factory

if TYPE_CHECKING:
    from .tracer import OtelTracer

__all__ = ["OtelTracer", "register_tracers"]

OPTIONS = frozenset(["tracer_provider"])


def _load() -> type[OtelTracer]:
    from .tracer import OtelTracer

    return OtelTracer


def __getattr__(name: str) -> Any:
    if name == "OtelTracer":
        return _load()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@hookimpl
def register_tracers(register: Any) -> None:
    register("otel", checked_factory("otel", OPTIONS, _load))
