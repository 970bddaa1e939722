"""memora-plugin-otel: a turn with LLM and tool calls, recorded by the OpenTelemetry SDK's
in-memory exporter."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from memora import Agent
from memora.errors import PluginError
from memora.plugins import create_plugin_manager
from memora.testing import ScriptedProvider, ScriptedResponse, tool_call
from memora.tools import ToolContext, tool

pytest.importorskip("opentelemetry.sdk")
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from memora.llm.types import (
    FinishDelta,
    TextDelta,
    TokenUsage,
    UsageDelta,
)


@tool(idempotency="read-only")
async def lookup(ctx: ToolContext, key: str) -> str:
    """Look a key up."""
    await asyncio.sleep(0.05)
    return f"value of {key}"


def answer_with_usage(content: str, prompt: int, completion: int) -> ScriptedResponse:
    return ScriptedResponse(
        [TextDelta(content), UsageDelta(TokenUsage(prompt, completion)), FinishDelta("stop")]
    )


@pytest.fixture
def exporter() -> tuple[InMemorySpanExporter, TracerProvider]:
    exp = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exp))
    return exp, provider


async def test_a_turn_is_nested_spans_with_genai_attributes(
    exporter: tuple[InMemorySpanExporter, TracerProvider], tmp_path: Path
) -> None:
    exp, tracer_provider = exporter
    project = tmp_path / "p"
    project.mkdir()
    scripted = ScriptedProvider(
        [
            tool_call(("lookup", {"key": "a"}, "call-a"), ("lookup", {"key": "b"}, "call-b")),
            answer_with_usage("done", 120, 7),
        ],
        name="openai:gpt-test",
    )
    host_tracer = tracer_provider.get_tracer("host")
    async with Agent(
        project_path=project,
        data_dir=tmp_path / "d",
        provider=scripted,
        load_entrypoints=True,
        plugin_options={"otel": {"tracer_provider": tracer_provider}},
        strategy_override={"reflect": {"summary": "off"}},
    ) as agent:
        agent.tools.register(lookup)
        with host_tracer.start_as_current_span("host request"):
            chunks = [c async for c in agent.chat("look both up")]
    assert chunks[-1].type == "done"
    spans = {s.name: s for s in exp.get_finished_spans()}
    host = spans["host request"]
    turn = next(s for s in exp.get_finished_spans() if s.name.startswith("invoke_agent"))
    chats = [s for s in exp.get_finished_spans() if s.name.startswith("chat ")]
    tools = [s for s in exp.get_finished_spans() if s.name.startswith("execute_tool ")]
    assert len(chats) == 2 and len(tools) == 2
    # nesting: host -> turn -> (each LLM call, each tool call)
    assert turn.parent is not None and turn.parent.span_id == host.context.span_id
    for s in chats + tools:
        assert s.parent is not None and s.parent.span_id == turn.context.span_id
        assert s.context.trace_id == host.context.trace_id
    attrs = turn.attributes or {}
    assert attrs["gen_ai.operation.name"] == "invoke_agent"
    assert attrs["gen_ai.conversation.id"] == agent.session_id
    assert attrs["gen_ai.usage.input_tokens"] == sum(
        (s.attributes or {})["gen_ai.usage.input_tokens"]
        for s in chats  # type: ignore[misc]
    )
    last = chats[-1].attributes or {}
    assert last["gen_ai.operation.name"] == "chat"
    assert last["gen_ai.request.model"] == "gpt-test"
    assert last["gen_ai.provider.name"] == "openai"
    assert last["gen_ai.usage.output_tokens"] >= 7  # type: ignore[operator]
    assert attrs["gen_ai.usage.output_tokens"] == sum(
        (s.attributes or {})["gen_ai.usage.output_tokens"]
        for s in chats  # type: ignore[misc]
    )
    assert list(last["gen_ai.response.finish_reasons"]) == ["stop"]  # type: ignore[arg-type]
    assert {(s.attributes or {})["gen_ai.tool.call.id"] for s in tools} == {"call-a", "call-b"}
    for s in tools:
        a = s.attributes or {}
        assert a["gen_ai.operation.name"] == "execute_tool" and a["gen_ai.tool.name"] == "lookup"
        assert a["memora.tool.ok"] is True


async def test_a_failed_llm_call_marks_its_span(
    exporter: tuple[InMemorySpanExporter, TracerProvider], tmp_path: Path
) -> None:
    from memora.llm.provider import ProviderError

    exp, tracer_provider = exporter
    project = tmp_path / "p"
    project.mkdir()
    broken = ScriptedResponse([], error=ProviderError("server exploded", category="connection"))
    async with Agent(
        project_path=project,
        data_dir=tmp_path / "d",
        provider=ScriptedProvider([broken]),
        load_entrypoints=True,
        retry_attempts=1,
        plugin_options={"otel": {"tracer_provider": tracer_provider}},
    ) as agent:
        chunks = [c async for c in agent.chat("q")]
    assert chunks[-1].type == "error"
    (chat,) = [s for s in exp.get_finished_spans() if s.name.startswith("chat ")]
    assert chat.status.status_code == trace.StatusCode.ERROR
    assert (chat.attributes or {})["error.type"] == "ProviderError"


def test_options_are_checked() -> None:
    with pytest.raises(PluginError, match="unknown otel option"):
        create_plugin_manager().create("tracer", "otel", {"endpoint": "x"})
