"""memora's tracer protocol on top of OpenTelemetry (GenAI semantic conventions)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry import context as otel_context, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

__all__ = ["OtelTracer"]

_VERSION = "0.1.0"

# memora attribute -> semantic-convention attribute, per memora span name
_RENAME: dict[str, dict[str, str]] = {
    "response": {
        "session_id": "gen_ai.conversation.id",
        "role_pack": "gen_ai.agent.name",
        "round_id": "memora.round_id",
        "status": "memora.status",
        "input_tokens": "gen_ai.usage.input_tokens",
        "output_tokens": "gen_ai.usage.output_tokens",
    },
    "llm_call": {
        "model": "gen_ai.request.model",
        "round_id": "memora.round_id",
        "iteration": "memora.iteration",
        "stage": "memora.stage",
        "provider": "memora.provider",
        "input_tokens": "gen_ai.usage.input_tokens",
        "output_tokens": "gen_ai.usage.output_tokens",
    },
    "tool_exec": {
        "tool": "gen_ai.tool.name",
        "tool_call_id": "gen_ai.tool.call.id",
        "round_id": "memora.round_id",
        "ok": "memora.tool.ok",
        "error_code": "error.type",
    },
}
_RENAME["recall"] = _RENAME["tool_exec"]


class _Span:
    __slots__ = ("_kind", "_on_end", "_span")

    def __init__(self, span: Any, kind: str, on_end: Any = None) -> None:
        self._span = span
        self._kind = kind
        self._on_end = on_end

    def set_attribute(self, key: str, value: Any) -> None:
        if value is None:
            return
        if key == "finish_reason":
            self._span.set_attribute("gen_ai.response.finish_reasons", [str(value)])
            return
        name = _RENAME.get(self._kind, {}).get(key, f"memora.{key}")
        self._span.set_attribute(name, value)

    def end(self, error: BaseException | None = None) -> None:
        if error is not None:
            self._span.record_exception(error)
            self._span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
            self._span.set_attribute("error.type", type(error).__qualname__)
        self._span.end()
        if self._on_end is not None:
            self._on_end()


class OtelTracer:
    """A memora tracer (``start_span(name, attributes)``) creating OpenTelemetry spans."""

    def __init__(self, tracer_provider: Any = None) -> None:
        self._tracer = trace.get_tracer("memora", _VERSION, tracer_provider=tracer_provider)
        self._turns: dict[str, Any] = {}
        """round_id -> the turn's span, the parent of its LLM and tool spans."""

    def start_span(self, name: str, attributes: Mapping[str, Any] | None = None) -> _Span:
        attrs = dict(attributes or {})
        round_id = attrs.get("round_id")
        if name == "response":
            agent = attrs.get("role_pack") or "memora"
            span = self._tracer.start_span(
                f"invoke_agent {agent}",
                kind=SpanKind.INTERNAL,
                attributes={"gen_ai.operation.name": "invoke_agent"},
            )
            wrapped = _Span(span, name, lambda: self._turns.pop(str(round_id), None))
            if round_id is not None:
                self._turns[str(round_id)] = span
        else:
            parent = self._turns.get(str(round_id)) if round_id is not None else None
            ctx = (
                trace.set_span_in_context(parent)
                if parent is not None
                else otel_context.get_current()
            )
            if name == "llm_call":
                model = attrs.get("model") or "unknown"
                provider = str(attrs.get("provider") or "").split(":", 1)[0] or "memora"
                span = self._tracer.start_span(
                    f"chat {model}",
                    context=ctx,
                    kind=SpanKind.CLIENT,
                    attributes={
                        "gen_ai.operation.name": "chat",
                        "gen_ai.provider.name": provider,
                    },
                )
            elif name in ("tool_exec", "recall"):
                span = self._tracer.start_span(
                    f"execute_tool {attrs.get('tool') or 'tool'}",
                    context=ctx,
                    kind=SpanKind.INTERNAL,
                    attributes={
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.type": "function",
                    },
                )
            else:
                span = self._tracer.start_span(f"memora {name}", context=ctx)
            wrapped = _Span(span, name)
        for key, value in attrs.items():
            wrapped.set_attribute(key, value)
        return wrapped
