"""The turn step machine: each test reproduces a defect of the former loop (issue #11) and
checks the contract that replaced it, through public seams only."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from memora.checks import Ask, Skip
from memora.events import GoalDriftDetected
from memora.llm.provider import ProviderError
from memora.llm.types import FinishDelta, Message, TextDelta, ToolCallDelta
from memora.services import SearchHit
from memora.testing import ScriptedProvider, ScriptedResponse, text, tool_call
from memora.tools import ToolContext, tool

from .conftest import collect, types


def results(chunks: list[Any]) -> list[Any]:
    return [c for c in chunks if c.type == "tool_result"]


def assert_every_call_answered(messages: list[Message] | tuple[Message, ...]) -> None:
    """What OpenAI-compatible servers require: every assistant tool call is followed by a tool
    message answering it, before the next assistant or user message."""
    open_ids: set[str] = set()
    for m in messages:
        if m.role == "tool":
            open_ids.discard(m.tool_call_id or "")
            continue
        assert not open_ids, f"tool calls without a result before a {m.role} message: {open_ids}"
        if m.role == "assistant":
            open_ids = {c.id for c in m.tool_calls}
    assert not open_ids, f"tool calls without a result: {open_ids}"


@tool(idempotency="non-idempotent")
async def slow_job(ctx: ToolContext, seconds: float) -> str:
    """Work for a while."""
    await asyncio.sleep(seconds)
    return "finished"


async def test_abort_during_a_tool_run_leaves_a_valid_history(make_agent: Any) -> None:
    provider = ScriptedProvider(
        [tool_call(("slow_job", {"seconds": 5}, "j1")), text("next answer")]
    )
    agent = await make_agent(provider)
    agent.tools.register(slow_job)
    chunks = []
    async for c in agent.chat("work"):
        chunks.append(c)
        if c.type == "tool_start":
            agent.abort()
    assert chunks[-1].type == "aborted" and chunks[-1].stop_reason == "user"
    await collect(agent.chat("and now?"))
    assert_every_call_answered(provider.requests[-1].messages)
    assert_every_call_answered(agent.history)
    tool_msgs = [m for m in provider.requests[-1].messages if m.role == "tool"]
    assert "interrupted" in tool_msgs[-1].content
    rounds = await agent.sessions.rounds()
    assert rounds[0].status == "aborted"
    assert any(e["type"] == "tool_interrupted" for e in rounds[0].events)


async def test_discarded_pause_leaves_a_valid_history(make_agent: Any, project: Path) -> None:
    provider = ScriptedProvider(
        [tool_call(("write_file", {"path": "x.txt", "content": "x"}, "w1")), text("fine")]
    )
    agent = await make_agent(provider, confirm_writes=True)
    chunks = await collect(agent.chat("write it"))
    assert types(chunks)[-2:] == ["approval_pending", "paused"]
    agent.discard_paused_turn()
    chunks = await collect(agent.chat("never mind"))
    assert chunks[-1].type == "done"
    assert_every_call_answered(provider.requests[-1].messages)
    assert_every_call_answered(agent.history)
    assert not (project / "x.txt").exists()


async def test_skip_without_any_result_does_not_run_the_tool(make_agent: Any) -> None:
    runs = {"n": 0}

    @tool(idempotency="non-idempotent")
    async def launch(ctx: ToolContext) -> str:
        """Launch the rocket."""
        runs["n"] += 1
        return "launched"

    provider = ScriptedProvider([tool_call(("launch", {})), text("ok")])
    agent = await make_agent(provider, pre_execution_check=lambda call, ctx: Skip())
    agent.tools.register(launch)
    chunks = await collect(agent.chat("go"))
    (r,) = results(chunks)
    assert runs["n"] == 0, "Skip() means: do not run"
    assert r.blocked and not r.ok
    assert "tool_start" not in types(chunks)
    assert "did not run" in provider.requests[1].messages[-1].content


async def test_a_host_timeout_raises_timeout_error(make_agent: Any) -> None:
    slow = ScriptedResponse([TextDelta(f"w{i} ") for i in range(100)], delay=0.05)
    provider = ScriptedProvider([slow, text("later")])
    agent = await make_agent(provider)
    seen: list[Any] = []
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.4):
            async for c in agent.chat("long"):
                seen.append(c)
    assert seen[-1].type == "aborted"  # the turn was closed properly on the way out
    assert (await agent.sessions.rounds())[-1].status == "aborted"
    chunks = await collect(agent.chat("again"))  # and the agent is usable
    assert chunks[-1].type == "done"


async def test_agent_abort_does_not_raise(make_agent: Any) -> None:
    slow = ScriptedResponse([TextDelta(f"w{i} ") for i in range(100)], delay=0.02)
    agent = await make_agent(ScriptedProvider([slow]))

    async def run() -> list[Any]:
        out = []
        async for c in agent.chat("long"):
            out.append(c)
            if len(out) == 5:
                agent.abort()
        return out

    chunks = await asyncio.wait_for(run(), 10)  # no CancelledError reaches the host
    assert chunks[-1].type == "aborted" and chunks[-1].stop_reason == "user"


async def test_progress_of_parallel_calls_is_attributed_to_its_own_call(make_agent: Any) -> None:
    @tool(idempotency="read-only")
    async def probe(ctx: ToolContext, key: str) -> str:
        """Report progress while probing."""
        for i in range(3):
            assert ctx.progress is not None
            ctx.progress(f"{key}:{i}")
            await asyncio.sleep(0.01)
        return key

    provider = ScriptedProvider(
        [tool_call(("probe", {"key": "A"}, "ca"), ("probe", {"key": "B"}, "cb")), text("ok")]
    )
    agent = await make_agent(provider)
    agent.tools.register(probe)
    chunks = await collect(agent.chat("probe both"))
    progress = [c for c in chunks if c.type == "tool_progress"]
    assert len(progress) == 6
    owner = {"A": "ca", "B": "cb"}
    for c in progress:
        assert c.tool_call_id == owner[c.content.split(":")[0]], c


async def test_progress_reaches_the_host_while_the_tool_still_runs(make_agent: Any) -> None:
    """The tool waits for the host to have seen its progress: it finishes only if progress is
    delivered live, not held back until the result."""
    seen = asyncio.Event()

    @tool(idempotency="read-only")
    async def waits_for_host(ctx: ToolContext) -> str:
        """Report progress, then wait until the host saw it."""
        assert ctx.progress is not None
        ctx.progress("halfway")
        await asyncio.wait_for(seen.wait(), 5)
        return "done"

    provider = ScriptedProvider([tool_call(("waits_for_host", {})), text("ok")])
    agent = await make_agent(provider)
    agent.tools.register(waits_for_host)
    chunks = []
    async for chunk in agent.chat("go"):
        chunks.append(chunk)
        if chunk.type == "tool_progress":
            seen.set()
    kinds = [c.type for c in chunks]
    assert kinds.index("tool_progress") < kinds.index("tool_result") and kinds[-1] == "done"
    assert chunks[kinds.index("tool_result")].ok  # type: ignore[union-attr]


async def test_degrade_keeps_the_partial_answer_without_self_review(make_agent: Any) -> None:
    broken = ScriptedResponse(
        [TextDelta("Partial answer")],
        error=ProviderError("connection reset", category="connection"),
    )
    provider = ScriptedProvider(
        [tool_call(("list_dir", {})), broken, text("a review that must not happen")]
    )
    agent = await make_agent(
        provider,
        strategy={
            "global": {"errorHandling": "degrade"},
            "reflect": {"selfReview": 1, "summary": "off"},
        },
    )
    chunks = await collect(agent.chat("list"))
    assert "self_review" not in types(chunks)
    assert chunks[-1].type == "done" and chunks[-1].answer == "Partial answer"
    assert len(provider.requests) == 2


async def test_an_approved_write_resumes_in_a_new_agent_with_its_file_stamps(
    make_agent: Any, project: Path
) -> None:
    (project / "a.txt").write_text("old\n", encoding="utf-8")
    first = ScriptedProvider(
        [
            tool_call(("read_file", {"path": "a.txt"}, "r1")),
            tool_call(("write_file", {"path": "a.txt", "content": "new\n"}, "w1")),
        ]
    )
    agent = await make_agent(first, confirm_writes=True, file_consistency_check=True)
    chunks = await collect(agent.chat("update a.txt"))
    assert chunks[-2].type == "approval_pending"
    saved = json.loads(json.dumps(agent.pause_state()))
    await agent.close()

    again = await make_agent(
        ScriptedProvider([text("updated")]), confirm_writes=True, file_consistency_check=True
    )
    await again.resume(saved)
    again.approve("w1")
    rest = await collect(again.continue_after_pause())
    (r,) = results(rest)
    assert r.ok, r.summary
    assert (project / "a.txt").read_text(encoding="utf-8") == "new\n"


class FakeSearch:
    def __init__(self) -> None:
        self.calls = 0

    async def search(self, query: str, *, max_results: int = 5) -> list[SearchHit]:
        self.calls += 1
        return [SearchHit("T", "https://example.org", "snippet")]


async def test_a_web_search_over_the_cap_is_blocked_before_it_starts(make_agent: Any) -> None:
    search = FakeSearch()
    provider = ScriptedProvider(
        [
            tool_call(("web_search", {"query": "one"}, "s1")),
            tool_call(("web_search", {"query": "two"}, "s2")),
            text("ok"),
        ]
    )
    agent = await make_agent(
        provider,
        capabilities=["web:search"],
        web_search=search,
        strategy={"global": {"webSearchLimit": 1}, "reflect": {"summary": "off"}},
    )
    chunks = await collect(agent.chat("search twice"))
    first, second = results(chunks)
    assert first.ok and not first.blocked
    assert second.blocked and not second.ok and second.error_code == "PERMISSION_DENIED"
    started = [c.tool_call_id for c in chunks if c.type == "tool_start"]
    assert started == ["s1"]
    assert search.calls == 1


async def test_narrate_withdraws_only_what_was_streamed(make_agent: Any) -> None:
    mixed = ScriptedResponse(
        [
            TextDelta("Let me look. "),
            ToolCallDelta(0, id="c1", name="list_dir", arguments="{}"),
            TextDelta("(more words after the call)"),
            FinishDelta("tool_calls"),
        ]
    )
    agent = await make_agent(ScriptedProvider([mixed, text("done")]))
    chunks = await collect(agent.chat("look"))
    streamed = "".join(c.content for c in chunks if c.type == "text")
    (narrate,) = [c for c in chunks if c.type == "narrate"]
    assert narrate.withdrawn == "Let me look. "
    assert streamed.startswith(narrate.withdrawn)  # the host can take back what it showed
    assert chunks[-1].answer == "done"


async def test_provider_error_moves_the_session_to_error(make_agent: Any) -> None:
    broken = ScriptedResponse([], error=ProviderError("bad request", category="unknown"))
    agent = await make_agent(ScriptedProvider([broken, text("ok")]))
    chunks = await collect(agent.chat("q"))
    assert chunks[-1].type == "error"
    assert agent.session_state.status == "error"
    assert agent.session_state.error == "bad request"
    # a provider's failure is outside the session: the next turn may start without the host
    # marking it recovered (an exception inside the turn needs agent.mark_recovered())
    assert (await collect(agent.chat("again")))[-1].type == "done"
    assert agent.session_state.status == "idle"
    transition = agent.mark_recovered()
    assert (transition.from_, transition.to, transition.allowed) == ("idle", "idle", False)


async def test_goal_drift_is_judged_within_one_session(make_agent: Any) -> None:
    agent = await make_agent(ScriptedProvider(default=text("ok")))
    drift: list[GoalDriftDetected] = []
    agent.events.on(GoalDriftDetected, drift.append)
    await collect(agent.chat("design the order database schema"))
    await agent.new_session("poems")
    await collect(agent.chat("写一首关于秋天的诗"))
    assert drift == []  # another session has its own main goal
    await collect(agent.chat("now a limerick about the sea"))
    assert [d.current_goal for d in drift] == ["now a limerick about the sea"]


async def test_the_plan_persists_is_shown_to_the_model_and_readable(
    make_agent: Any, tmp_path: Path, project: Path
) -> None:
    plan = {
        "items": [
            {"id": "1", "description": "Collect the requirements", "status": "done"},
            {"id": "2", "description": "Draft the schema", "status": "active"},
        ]
    }
    provider = ScriptedProvider(
        [tool_call(("task_table_update", plan)), text("planned")], default=text("continuing")
    )
    agent = await make_agent(provider, session_id="s-plan")
    await collect(agent.chat("plan the work"))
    assert [(i.id, i.status) for i in agent.plan] == [("1", "done"), ("2", "active")]
    await collect(agent.chat("go on"))
    shown = [m.content for m in provider.requests[-1].messages if m.role == "system"]
    assert any("Draft the schema" in s and "[>]" in s for s in shown)
    await agent.close()

    again = await make_agent(ScriptedProvider([text("hello")]), session_id="s-plan")
    assert [i.description for i in again.plan] == ["Collect the requirements", "Draft the schema"]


async def test_history_is_read_only_and_providers_can_be_swapped(make_agent: Any) -> None:
    agent = await make_agent(ScriptedProvider([text("one")]))
    await collect(agent.chat("first"))
    history = agent.history
    assert isinstance(history, tuple) and [m.role for m in history] == ["user", "assistant"]
    other = ScriptedProvider([text("two")])
    with agent.override(provider=other):
        chunks = await collect(agent.chat("second"))
    assert chunks[-1].answer == "two" and len(other.requests) == 1


async def test_paused_state_is_typed_and_the_gates_run_in_the_documented_order(
    make_agent: Any,
) -> None:
    from memora.agent import ApprovalPause
    from memora.agent.gates import GATES

    assert [g.__name__ for g in GATES] == [
        "known",
        "tool_mode",
        "read_only",
        "capability",
        "permission",
        "arguments",
        "replay",
        "question_limit",
        "turn_cap",
        "duplicates",
        "checks",
    ]
    provider = ScriptedProvider([tool_call(("list_dir", {}, "l1"))])
    agent = await make_agent(provider, pre_execution_check=lambda call, ctx: Ask("sure?"))
    await collect(agent.chat("list"))
    turn = agent.paused_turn
    assert turn is not None and isinstance(turn.paused, ApprovalPause)
    assert turn.paused.name == "list_dir" and turn.paused.reason == "sure?"
