"""Tracing: spans around recall, LLM calls, tool execution and the response.

A tracer is any object with ``start_span(name, attributes) -> Span``.  Plugins hand tracers over
through the ``register_tracers`` hook; with none registered the agent uses :data:`NOOP_TRACER`,
whose spans are one shared object, so tracing costs nothing when nobody listens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = ["NOOP_TRACER", "SPAN_NAMES", "MultiTracer", "Span", "Tracer", "combine_tracers"]

SPAN_NAMES = ("recall", "llm_call", "tool_exec", "response")


@runtime_checkable
class Span(Protocol):
    def set_attribute(self, key: str, value: Any) -> None: ...

    def end(self, error: BaseException | None = None) -> None: ...


@runtime_checkable
class Tracer(Protocol):
    def start_span(self, name: str, attributes: Mapping[str, Any] | None = None) -> Span: ...


class _NoopSpan:
    __slots__ = ()

    def set_attribute(self, key: str, value: Any) -> None:
        return None

    def end(self, error: BaseException | None = None) -> None:
        return None


_NOOP_SPAN = _NoopSpan()


class _NoopTracer:
    __slots__ = ()

    def start_span(self, name: str, attributes: Mapping[str, Any] | None = None) -> Span:
        return _NOOP_SPAN


NOOP_TRACER: Tracer = _NoopTracer()


class _MultiSpan:
    __slots__ = ("_spans",)

    def __init__(self, spans: list[Span]) -> None:
        self._spans = spans

    def set_attribute(self, key: str, value: Any) -> None:
        for s in self._spans:
            s.set_attribute(key, value)

    def end(self, error: BaseException | None = None) -> None:
        for s in self._spans:
            s.end(error)


class MultiTracer:
    """Fans one span out to several tracers."""

    __slots__ = ("_tracers",)

    def __init__(self, tracers: Sequence[Tracer]) -> None:
        self._tracers = list(tracers)

    def start_span(self, name: str, attributes: Mapping[str, Any] | None = None) -> Span:
        return _MultiSpan([t.start_span(name, attributes) for t in self._tracers])


def combine_tracers(tracers: Sequence[Tracer]) -> Tracer:
    """No tracer → the no-op tracer; one → itself; several → a fan-out."""
    if not tracers:
        return NOOP_TRACER
    if len(tracers) == 1:
        return tracers[0]
    return MultiTracer(tracers)
