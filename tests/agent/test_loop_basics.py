from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from memora.chunks import chunk_adapter
from memora.errors import ErrorCode, MemoraError
from memora.events import MemoryAdded, SessionForked
from memora.llm import LLMRequest, ProviderError
from memora.llm.types import FinishDelta, ReasoningDelta, TextDelta
from memora.testing import ScriptedProvider, ScriptedResponse, text, tool_call

from .conftest import collect, text_of, types


async def test_plain_turn_chunks_persistence_and_summary(make_agent: Any) -> None:
    provider = ScriptedProvider(
        # the scripted summary says only what the round said (a memory never says what the
        # round did not: a summary with other content words is replaced, see test_grounding)
        [text("Hello there, friend.", chunks=3), text("TYPE: fact\nThe user said hi to a friend.")]
    )
    agent = await make_agent(
        provider, strategy={"reflect": {"summary": "on"}}, summary_verbatim_tokens=0
    )
    added: list[MemoryAdded] = []
    agent.events.on(MemoryAdded, added.append)
    chunks = await collect(agent.chat("hi"))
    await agent.idle()  # the round summary is written after `done`
    assert types(chunks) == [
        "thinking",
        "thinking",
        "text",
        "text",
        "text",
        "step_boundary",
        "thinking",
        "done",
    ]
    assert [c.phase for c in chunks if c.type == "thinking"] == [
        "assembling",
        "llm_calling",
        "archiving",
    ]  # type: ignore[union-attr]
    round_ids = {c.round_id for c in chunks}
    assert len(round_ids) == 1 and None not in round_ids
    assert text_of(chunks) == "Hello there, friend."
    done = chunks[-1]
    assert done.usage is not None and done.usage.llm_calls == 1  # type: ignore[union-attr]
    for c in chunks:  # every chunk round-trips as JSON
        assert chunk_adapter.validate_json(c.model_dump_json()) == c
    rounds = await agent.sessions.rounds()
    assert (
        rounds[0].user == "hi"
        and rounds[0].assistant == "Hello there, friend."
        and rounds[0].status == "done"
    )
    assert added and added[0].summary_type == "fact"
    hits = await agent.memory.search("friend")
    assert hits and hits[0].record.round_id == rounds[0].round_id


async def test_summary_off_writes_nothing(make_agent: Any) -> None:
    agent = await make_agent(ScriptedProvider([text("ok")]))
    await collect(agent.chat("hi"))
    assert (await agent.memory.snapshot()).total == 0


async def test_tool_call_narrate_and_result(make_agent: Any, project: Path) -> None:
    provider = ScriptedProvider(
        [
            tool_call(
                ("read_file", {"path": "notes.txt"}), preface="Let me read it.", split_args=4
            ),
            text("It says alpha and beta."),
        ]
    )
    agent = await make_agent(provider)
    chunks = await collect(agent.chat("what is in notes?"))
    t = types(chunks)
    assert (
        t.index("tool_pending")
        < t.index("narrate")
        < t.index("tool_start")
        < t.index("tool_result")
    )
    narrate = next(c for c in chunks if c.type == "narrate")
    assert narrate.content == "Let me read it." and narrate.withdrawn == "Let me read it."  # type: ignore[union-attr]
    result = next(c for c in chunks if c.type == "tool_result")
    assert result.ok and not result.blocked  # type: ignore[union-attr]
    assert t.count("step_boundary") == 2
    # the second request carried the tool result
    second = provider.requests[1]
    assert second.messages[-1].role == "tool" and "alpha" in second.messages[-1].content
    rounds = await agent.sessions.rounds()
    assert rounds[0].assistant == "It says alpha and beta."
    assert [e["type"] for e in rounds[0].events if e["type"].startswith("tool")] == [
        "tool_start",
        "tool_result",
    ]


async def test_thought_from_reasoning(make_agent: Any) -> None:
    provider = ScriptedProvider(
        [ScriptedResponse([ReasoningDelta("think 想"), TextDelta("answer"), FinishDelta("stop")])]
    )
    agent = await make_agent(provider)
    chunks = await collect(agent.chat("q"))
    thought = next(c for c in chunks if c.type == "thought")
    assert thought.content == "think 想" and thought.step_index == 0  # type: ignore[union-attr]
    assert text_of(chunks) == "answer"
    history = [m for m in agent.history if m.role == "assistant"]
    assert history[-1].content == "answer" and history[-1].reasoning == "think 想"


async def test_step_budget_and_tool_step_limit(make_agent: Any) -> None:
    loop_call = tool_call(("list_dir", {"path": "."}))
    provider = ScriptedProvider(default=loop_call)
    agent = await make_agent(
        provider, strategy={"act": {"toolStepLimit": 3}, "reflect": {"summary": "off"}}
    )
    chunks = await collect(agent.chat("loop"))
    assert "max_iterations_reached" in text_of(chunks)
    assert len(provider.requests) == 3
    assert chunks[-1].type == "done"
    agent2_provider = ScriptedProvider(default=loop_call)
    agent.duplicate_interceptor.threshold = 100
    agent.role_pack.strategy_override = {"act": {"toolStepLimit": 0}, "global": {"stepBudget": 10}}
    agent.role_pack.activate("test")
    agent.set_provider(agent2_provider)
    chunks = await collect(agent.chat("loop again"))
    assert "max_iterations_reached" in text_of(chunks) and len(agent2_provider.requests) == 10


async def test_messages_are_overridable(make_agent: Any) -> None:
    provider = ScriptedProvider(default=tool_call(("list_dir", {})))
    agent = await make_agent(
        provider,
        strategy={"act": {"toolStepLimit": 1}, "reflect": {"summary": "off"}},
        messages={"max_iterations_reached": "预算用完了"},
    )
    chunks = await collect(agent.chat("x"))
    assert text_of(chunks).endswith("预算用完了")
    with pytest.raises(ValueError, match="unknown field"):
        from memora.messages import Messages

        Messages(reflection_hint="{nope}")


async def test_empty_response_fallbacks(make_agent: Any) -> None:
    agent = await make_agent(ScriptedProvider([text(""), text("")]))
    chunks = await collect(agent.chat("q"))
    assert text_of(chunks) == agent.messages.empty_response_fallback
    assert len(agent.router.chat.requests) == 2  # type: ignore[attr-defined]  # one retry of the empty answer


async def test_empty_with_length(make_agent: Any) -> None:
    agent = await make_agent(ScriptedProvider([ScriptedResponse([FinishDelta("length")])]))
    chunks = await collect(agent.chat("q"))
    assert "output budget" in text_of(chunks) and "1 attempts" in text_of(chunks)


async def test_error_handling_retry_degrade_stop(make_agent: Any) -> None:
    transient = ScriptedResponse([], error=ProviderError("HTTP 503", retryable=True, status=503))
    agent = await make_agent(ScriptedProvider([transient, transient, text("recovered")]))
    chunks = await collect(agent.chat("q"))
    retries = [c for c in chunks if c.type == "retry"]
    assert [r.attempt for r in retries] == [1, 2] and retries[0].max_attempts == 4  # type: ignore[union-attr]
    assert text_of(chunks) == "recovered" and chunks[-1].type == "done"


async def test_error_stop(make_agent: Any) -> None:
    transient = ScriptedResponse([], error=ProviderError("HTTP 503", retryable=True, status=503))
    agent = await make_agent(
        ScriptedProvider([transient, text("never")]),
        strategy={"global": {"errorHandling": "stop"}, "reflect": {"summary": "off"}},
    )
    chunks = await collect(agent.chat("q"))
    assert chunks[-1].type == "error" and "503" in chunks[-1].message  # type: ignore[union-attr]
    assert not any(c.type == "retry" for c in chunks)
    assert (await agent.sessions.rounds())[-1].status == "error"


async def test_error_degrade_keeps_partial(make_agent: Any) -> None:
    broken = ScriptedResponse(
        [TextDelta("partial answer")],
        error=ProviderError("connection reset", category="connection"),
    )
    agent = await make_agent(
        ScriptedProvider([broken]),
        strategy={"global": {"errorHandling": "degrade"}, "reflect": {"summary": "off"}},
    )
    chunks = await collect(agent.chat("q"))
    assert chunks[-1].type == "done" and text_of(chunks) == "partial answer"
    assert (await agent.sessions.rounds())[-1].assistant == "partial answer"


async def test_connection_error_category(make_agent: Any) -> None:
    broken = ScriptedResponse([], error=ProviderError("refused", category="connection"))
    agent = await make_agent(ScriptedProvider([broken]))
    chunks = await collect(agent.chat("q"))
    assert chunks[-1].type == "error" and chunks[-1].category == "connection"  # type: ignore[union-attr]


async def test_stall_aborts_with_timeout(make_agent: Any) -> None:
    slow = ScriptedResponse([TextDelta("first "), TextDelta("never")], delay=0.5)
    agent = await make_agent(ScriptedProvider([slow]), llm_stall_timeout=0.3)
    chunks = await collect(agent.chat("q"))
    assert chunks[-1].type == "aborted" and chunks[-1].stop_reason == "timeout"  # type: ignore[union-attr]
    assert chunks[-1].usage is not None  # type: ignore[union-attr]


async def test_stall_before_the_first_delta_times_out(make_agent: Any) -> None:
    """A server that accepts the request and then sends nothing: the stall timer is armed from
    the start, not only after a first delta."""

    class Silent(ScriptedProvider):
        async def stream(self, request: Any) -> Any:
            await asyncio.sleep(30)
            yield TextDelta("too late")

    agent = await make_agent(Silent(), llm_stall_timeout=0.3)
    started = time.monotonic()
    chunks = await asyncio.wait_for(collect(agent.chat("q")), 10)
    assert chunks[-1].type == "aborted" and chunks[-1].stop_reason == "timeout"  # type: ignore[union-attr]
    assert time.monotonic() - started < 5


async def test_cancel_consumer_keeps_partial_text(make_agent: Any) -> None:
    slow = ScriptedResponse(
        [TextDelta(f"w{i} ") for i in range(50)] + [FinishDelta("stop")], delay=0.05
    )
    agent = await make_agent(ScriptedProvider([slow, text("next answer")]))
    seen: list[Any] = []

    async def consume() -> None:
        async for c in agent.chat("long"):
            seen.append(c)

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.3)
    task.cancel()
    # the turn ends with an aborted chunk, then the cancellation propagates (a host's
    # asyncio.timeout must still raise TimeoutError); agent.abort() ends without raising
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen[-1].type == "aborted" and seen[-1].stop_reason == "user"
    last = agent.history[-1]
    assert (
        last.role == "assistant"
        and last.content.startswith("w0")
        and last.content.endswith("[interrupted]")
    )
    assert (await agent.sessions.rounds())[-1].status == "aborted"
    chunks = await collect(agent.chat("continue"))  # the agent is usable again
    assert text_of(chunks) == "next answer"


async def test_host_abort(make_agent: Any) -> None:
    slow = ScriptedResponse(
        [TextDelta(f"w{i} ") for i in range(50)] + [FinishDelta("stop")], delay=0.05
    )
    agent = await make_agent(ScriptedProvider([slow]))
    chunks = []
    async for c in agent.chat("long"):
        chunks.append(c)
        if c.type == "text" and len(chunks) > 4:
            agent.abort()
    assert chunks[-1].type == "aborted" and chunks[-1].stop_reason == "user"  # type: ignore[union-attr]


async def test_busy_and_not_initialised(make_agent: Any, tmp_path: Path, project: Path) -> None:
    from memora import Agent

    fresh = Agent(
        project_path=project,
        data_dir=tmp_path / "x",
        provider=ScriptedProvider(),
        load_entrypoints=False,
    )
    with pytest.raises(MemoraError) as info:
        _ = fresh.memory
    assert info.value.code == ErrorCode.NOT_INITIALIZED
    slow = ScriptedResponse([TextDelta("a"), TextDelta("b"), FinishDelta("stop")], delay=0.2)
    agent = await make_agent(ScriptedProvider([slow]))
    it = agent.chat("first")
    await it.__anext__()
    with pytest.raises(MemoraError) as info:
        await collect(agent.chat("second"))
    assert info.value.code == ErrorCode.BUSY
    await collect(it)


async def test_project_lock_between_agents(make_agent: Any, tmp_path: Path, project: Path) -> None:
    await make_agent(ScriptedProvider())
    from memora import Agent

    other = Agent(
        project_path=project,
        data_dir=tmp_path / "other",
        provider=ScriptedProvider(),
        load_entrypoints=False,
    )
    with pytest.raises(MemoraError) as info:
        await other.init()
    assert info.value.code == ErrorCode.PROJECT_LOCKED


async def test_sessions_switch_and_fork(make_agent: Any) -> None:
    agent = await make_agent(ScriptedProvider(default=text("ok")))
    await collect(agent.chat("one"))
    await collect(agent.chat("two"))
    rounds = await agent.sessions.rounds()
    forked: list[SessionForked] = []
    agent.events.on(SessionForked, forked.append)
    original = agent.session_id
    new_id = await agent.fork_session(rounds[0].round_id)
    assert forked == [SessionForked(original, new_id, 1)]
    assert agent.session_id == new_id
    assert [m.content for m in agent.history if m.role == "user"] == ["one"]
    await agent.switch_session(original)
    assert [m.content for m in agent.history if m.role == "user"] == ["one", "two"]
    fresh = await agent.new_session("blank")
    assert agent.session_id == fresh and agent.history == ()


async def test_history_persists_across_agents(
    make_agent: Any, tmp_path: Path, project: Path
) -> None:
    agent = await make_agent(ScriptedProvider(default=text("noted")))
    await collect(agent.chat("remember 42"))
    session = agent.session_id
    await agent.close()
    provider = ScriptedProvider(default=text("it was 42"))
    again = await make_agent(provider, session_id=session)
    await collect(again.chat("what number?"))
    contents = [m.content for m in provider.requests[0].messages]
    assert "remember 42" in contents and "noted" in contents


def test_chat_sync_in_plain_code(tmp_path: Path, project: Path) -> None:
    from memora import Agent

    agent = Agent(
        project_path=project,
        data_dir=tmp_path / "d",
        provider=ScriptedProvider([text("sync answer")]),
        load_entrypoints=False,
        strategy_override={"reflect": {"summary": "off"}},
    )
    try:
        assert agent.chat_sync("hi") == "sync answer"
    finally:
        agent.close_sync()


async def test_options_validation(tmp_path: Path) -> None:
    from memora import Agent

    with pytest.raises(ValueError, match="data_dir"):
        Agent(project_path=tmp_path)
    with pytest.raises(ValueError, match="contextLimit"):
        Agent(
            project_path=tmp_path,
            data_dir=tmp_path,
            strategy_override={"global": {"contextLimit": 5}},
        )
    with pytest.raises(ValueError, match="bogus"):
        Agent(project_path=tmp_path, data_dir=tmp_path, bogus=1)


async def test_tracing_spans(make_agent: Any) -> None:
    spans: list[tuple[str, dict[str, Any], Any]] = []

    class Span:
        def __init__(self, name: str, attrs: dict[str, Any]) -> None:
            self.name, self.attrs = name, attrs

        def set_attribute(self, key: str, value: Any) -> None:
            self.attrs[key] = value

        def end(self, error: BaseException | None = None) -> None:
            spans.append((self.name, self.attrs, error))

    class Tracer:
        def start_span(self, name: str, attributes: dict[str, Any] | None = None) -> Span:
            return Span(name, dict(attributes or {}))

    provider = ScriptedProvider(
        [tool_call(("memory_search", {"query": "x"}), ("list_dir", {})), text("done")]
    )
    agent = await make_agent(provider, tracer=Tracer())
    await collect(agent.chat("q"))
    names = [s[0] for s in spans]
    assert (
        names.count("llm_call") == 2
        and "recall" in names
        and "tool_exec" in names
        and names[-1] == "response"
    )


async def test_request_parameters_from_strategy(make_agent: Any) -> None:
    provider = ScriptedProvider([text("ok")])
    agent = await make_agent(
        provider,
        strategy={"act": {"temperature": 0.2, "outputLimit": 500}, "reflect": {"summary": "off"}},
        max_tokens=300,
    )
    await collect(agent.chat("q"))
    req: LLMRequest = provider.requests[0]
    assert req.temperature == 0.2 and req.max_tokens == 300
    assert req.messages[0].role == "system" and req.history_key == agent.session_id
    names = {t.name for t in req.tools}
    assert {"read_file", "write_file", "memory_search", "task_table_update"} <= names
    assert not names & {"web_search", "web_fetch", "run_code", "ask_user"}
    json.dumps([t.parameters for t in req.tools])
