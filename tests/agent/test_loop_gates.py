"""Tool gates, checks, approvals, duplicates, reflection, self-review, ask_user, pauses."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import Field

from memora import hookimpl
from memora.checks import Allow, Ask, Deny, Rewrite, Skip
from memora.errors import MemoraError
from memora.llm.types import FinishDelta, TextDelta
from memora.services import SearchHit
from memora.testing import ScriptedProvider, ScriptedResponse, text, tool_call
from memora.tools import ToolContext, tool

from .conftest import collect, text_of, types


def results(chunks: list[Any]) -> list[Any]:
    return [c for c in chunks if c.type == "tool_result"]


async def test_tool_mode_block_hides_tools_and_blocks_calls(make_agent: Any, project: Path) -> None:
    provider = ScriptedProvider(
        [tool_call(("write_file", {"path": "x.txt", "content": "x"})), text("ok")]
    )
    agent = await make_agent(
        provider, strategy={"act": {"toolMode": "block"}, "reflect": {"summary": "off"}}
    )
    chunks = await collect(agent.chat("write"))
    assert provider.requests[0].tools == []
    (r,) = results(chunks)
    assert r.blocked and not r.ok and r.error_code == "NOT_AVAILABLE"
    assert not (project / "x.txt").exists()


async def test_readonly_refuses_writing_tools(make_agent: Any, project: Path) -> None:
    provider = ScriptedProvider(
        [tool_call(("write_file", {"path": "x.txt", "content": "x"})), text("ok")]
    )
    agent = await make_agent(
        provider, strategy={"act": {"toolReadonly": "readonly"}, "reflect": {"summary": "off"}}
    )
    chunks = await collect(agent.chat("write"))
    (r,) = results(chunks)
    assert r.blocked and r.error_code == "PERMISSION_DENIED"
    assert "read-only" in provider.requests[1].messages[-1].content
    assert not (project / "x.txt").exists()


async def test_guest_cannot_write_or_run(make_agent: Any, project: Path) -> None:
    provider = ScriptedProvider(
        [tool_call(("run_command", {"command": "touch pwned"})), text("ok")]
    )
    agent = await make_agent(provider, permission="guest")
    (r,) = results(await collect(agent.chat("run")))
    assert r.blocked and "guest" in provider.requests[1].messages[-1].content
    assert not (project / "pwned").exists()


class FakeSearch:
    async def search(self, query: str, *, max_results: int = 5) -> list[SearchHit]:
        return [SearchHit("T", "https://example.org", "snippet")]


async def test_capability_map_gates_privileged_tools(make_agent: Any) -> None:
    provider = ScriptedProvider(default=text("ok"))
    agent = await make_agent(provider, capabilities=["web:search"], web_search=FakeSearch())
    await collect(agent.chat("q"))
    names = {t.name for t in provider.requests[0].tools}
    assert "web_search" in names and "web_fetch" not in names and "run_code" not in names
    provider2 = ScriptedProvider(
        [tool_call(("web_fetch", {"url": "https://example.org"})), text("ok")]
    )
    agent.set_provider(provider2)
    (r,) = results(await collect(agent.chat("fetch")))
    assert r.blocked and r.error_code == "NOT_AVAILABLE"


async def test_web_search_limit(make_agent: Any) -> None:
    calls = [tool_call(("web_search", {"query": f"q{i}"})) for i in range(3)]
    provider = ScriptedProvider([*calls, text("ok")])
    agent = await make_agent(
        provider,
        capabilities=["web:search"],
        web_search=FakeSearch(),
        strategy={"global": {"webSearchLimit": 2}, "reflect": {"summary": "off"}},
    )
    chunks = await collect(agent.chat("search"))
    rs = results(chunks)
    assert [r.ok for r in rs] == [True, True, False]
    assert "limit" in provider.requests[3].messages[-1].content
    # the seed's contract: over the cap the call is blocked, and it never started
    assert [r.blocked for r in rs] == [False, False, True]
    assert len([c for c in chunks if c.type == "tool_start"]) == 2


class Checks:
    def __init__(self) -> None:
        self.answers: dict[str, Any] = {}
        self.seen: list[Any] = []

    @hookimpl
    def pre_execution_check(self, call: Any, context: Any) -> Any:
        self.seen.append((call.name, dict(call.args), context.role_pack))
        return self.answers.get(call.name)


async def test_pre_execution_check_deny_skip_rewrite(make_agent: Any, project: Path) -> None:
    checks = Checks()
    checks.answers = {
        "run_command": Deny("no commands in this project"),
        "list_dir": Rewrite({"path": "sub"}),
        "read_file": Skip("cached content 42"),
    }
    (project / "sub").mkdir()
    (project / "sub" / "inner.txt").write_text("x")
    provider = ScriptedProvider(
        [
            tool_call(
                ("run_command", {"command": "rm -rf /"}),
                ("list_dir", {"path": "."}),
                ("read_file", {"path": "notes.txt"}),
            ),
            text("ok"),
        ]
    )
    agent = await make_agent(provider, plugins=[checks])
    chunks = await collect(agent.chat("go"))
    rs = {r.name: r for r in results(chunks)}
    assert rs["run_command"].blocked and "no commands" in rs["run_command"].summary
    tool_msgs = {m.name: m.content for m in provider.requests[1].messages if m.role == "tool"}
    assert "checks" in tool_msgs["run_command"] or "no commands" in tool_msgs["run_command"]
    assert "inner.txt" in tool_msgs["list_dir"]  # the rewritten path ran
    assert tool_msgs["read_file"] == "cached content 42"
    start = next(c for c in chunks if c.type == "tool_start" and c.name == "list_dir")
    assert start.args["path"] == "sub"  # what ran is what the host sees
    assert checks.seen[0][2] == "test"


async def test_host_check_callable_and_fail_closed(make_agent: Any) -> None:
    def host_check(call: Any, context: Any) -> Any:
        if call.name == "list_dir":
            raise RuntimeError("check crashed")
        return Allow()

    provider = ScriptedProvider([tool_call(("list_dir", {})), text("ok")])
    agent = await make_agent(provider, pre_execution_check=host_check)
    (r,) = results(await collect(agent.chat("go")))
    assert r.blocked and "host-check" in r.summary


async def test_confirm_writes_pauses_for_approval_with_edited_args(
    make_agent: Any, project: Path
) -> None:
    provider = ScriptedProvider(
        [
            tool_call(("write_file", {"path": "draft.txt", "content": "model text"}, "w1")),
            text("written"),
        ]
    )
    agent = await make_agent(provider, confirm_writes=True)
    chunks = await collect(agent.chat("write it"))
    assert types(chunks)[-2:] == ["approval_pending", "paused"]
    pending = chunks[-2]
    assert pending.tool_call_id == "w1" and pending.args["content"] == "model text"
    assert not (project / "draft.txt").exists()
    with pytest.raises(MemoraError):
        await collect(agent.chat("another"))  # the paused turn must be resolved first
    agent.approve("w1", {"path": "draft.txt", "content": "edited by the host"})
    rest = await collect(agent.continue_after_pause())
    assert rest[0].round_id == chunks[0].round_id
    start = next(c for c in rest if c.type == "tool_start")
    assert start.args["content"] == "edited by the host"
    assert (project / "draft.txt").read_text() == "edited by the host"
    assert rest[-1].type == "done" and text_of(rest) == "written"


async def test_rejected_approval(make_agent: Any, project: Path) -> None:
    provider = ScriptedProvider(
        [tool_call(("run_command", {"command": "echo hi"}, "c1")), text("fine")]
    )
    agent = await make_agent(provider, confirm_scripts=True)
    chunks = await collect(agent.chat("run"))
    assert chunks[-2].type == "approval_pending"
    agent.reject("c1", "not now")
    rest = await collect(agent.continue_after_pause())
    (r,) = results(rest)
    assert r.blocked and "not now" in r.summary
    assert "rejected by the user: not now" in provider.requests[1].messages[-1].content


async def test_duplicate_calls_warn_then_block(make_agent: Any) -> None:
    same = tool_call(("list_dir", {"path": "."}))
    provider = ScriptedProvider([same, same, same, same, text("ok")])
    agent = await make_agent(provider)
    rs = results(await collect(agent.chat("loop")))
    assert [r.blocked for r in rs] == [False, False, False, True]
    tool_msgs = [m.content for m in provider.requests[4].messages if m.role == "tool"]
    assert "3 times in a row" in tool_msgs[2] and "3 times in a row" in tool_msgs[3]


async def test_reflection_hint_on_retryable_error(make_agent: Any) -> None:
    provider = ScriptedProvider([tool_call(("read_file", {"path": "missing.txt"})), text("sorry")])
    agent = await make_agent(
        provider, strategy={"act": {"toolStepLimit": 5}, "reflect": {"summary": "off"}}
    )
    (r,) = results(await collect(agent.chat("read")))
    assert not r.ok and r.error_code == "FILE_NOT_FOUND" and not r.blocked
    msg = provider.requests[1].messages[-1].content
    assert "Remaining tool steps: 4" in msg


async def test_invalid_args_reported_to_model(make_agent: Any) -> None:
    provider = ScriptedProvider([tool_call(("read_file", {"nope": 1})), text("ok")])
    agent = await make_agent(provider)
    (r,) = results(await collect(agent.chat("x")))
    assert r.error_code == "INVALID_ARGS" and "path" in provider.requests[1].messages[-1].content


async def test_self_review_only_after_tool_steps(make_agent: Any) -> None:
    provider = ScriptedProvider([text("plain answer")])
    agent = await make_agent(provider, strategy={"reflect": {"selfReview": 3, "summary": "off"}})
    chunks = await collect(agent.chat("q"))
    assert "self_review" not in types(chunks)

    provider = ScriptedProvider(
        [tool_call(("list_dir", {})), text("draft answer"), text("No changes needed.")]
    )
    agent.set_provider(provider)
    chunks = await collect(agent.chat("q2"))
    assert "self_review" in types(chunks)
    assert provider.requests[2].tools == []
    assert "No changes needed" in text_of(chunks, "self_review")
    assert (await agent.sessions.rounds())[-1].assistant == "draft answer"

    provider = ScriptedProvider(
        [tool_call(("list_dir", {})), text("draft"), text("Corrected final answer with details.")]
    )
    agent.set_provider(provider)
    chunks = await collect(agent.chat("q3"))
    assert (await agent.sessions.rounds())[-1].assistant == "Corrected final answer with details."
    provider = ScriptedProvider(
        [tool_call(("list_dir", {})), text("draft"), text("No changes needed.")]
    )
    agent.set_provider(provider)
    assert await agent.chat_text("q4") == "draft"  # the satisfied review keeps the draft


ASK = {"reflect": {"userFollowup": "ask", "summary": "off"}, "global": {"askLimit": 1}}


async def test_ask_user_pause_and_resume_same_turn(make_agent: Any) -> None:
    provider = ScriptedProvider(
        [
            tool_call(
                (
                    "ask_user",
                    {
                        "questions": [
                            {
                                "slot": "tone",
                                "question": "Which tone?",
                                "options": ["dark", "light"],
                            }
                        ]
                    },
                    "q1",
                )
            ),
            text("Writing it dark."),
        ]
    )
    agent = await make_agent(provider, strategy=ASK)
    chunks = await collect(agent.chat("write a poem"))
    assert "ask_user" in {t.name for t in provider.requests[0].tools}
    assert types(chunks)[-2:] == ["question_pending", "paused"]
    assert chunks[-2].questions[0].options == ["dark", "light"]
    with pytest.raises(MemoraError):
        await collect(agent.continue_after_pause())  # not answered yet
    agent.answer_question("tone", "dark")
    rest = await collect(agent.continue_after_pause())
    assert rest[0].round_id == chunks[0].round_id and rest[-1].type == "done"
    tool_msg = provider.requests[1].messages[-1]
    assert json.loads(tool_msg.content) == {"answers": {"tone": "dark"}}
    rounds = await agent.sessions.rounds()
    assert len(rounds) == 1 and rounds[0].assistant == "Writing it dark."


async def test_ask_limit_and_silent_mode(make_agent: Any) -> None:
    q = {"questions": [{"slot": "a", "question": "?"}]}
    provider = ScriptedProvider(
        [tool_call(("ask_user", q, "q1")), tool_call(("ask_user", q, "q2")), text("done")]
    )
    agent = await make_agent(provider, strategy=ASK)
    await collect(agent.chat("x"))
    agent.answer_question({"a": "yes"})
    rest = await collect(agent.continue_after_pause())
    r = results(rest)[-1]
    assert r.blocked and "question limit" in provider.requests[2].messages[-1].content
    assert "ask_user" not in {t.name for t in provider.requests[2].tools}

    silent = ScriptedProvider([tool_call(("ask_user", q)), text("ok")])
    agent2 = agent
    agent2.role_pack.strategy_override = {"reflect": {"userFollowup": "silent"}}
    agent2.role_pack.activate("test")
    agent2.set_provider(silent)
    (r,) = results(await collect(agent2.chat("y")))
    assert r.blocked and r.error_code == "NOT_AVAILABLE"


async def test_durable_pause_resumes_in_a_new_agent(
    make_agent: Any, tmp_path: Path, project: Path
) -> None:
    first = ScriptedProvider(
        [
            tool_call(
                ("write_file", {"path": "a.txt", "content": "one"}, "w1"),
                ("run_command", {"command": "echo two > b.txt"}, "c1"),
            ),
        ]
    )
    agent = await make_agent(first, confirm_scripts=True)
    chunks = await collect(agent.chat("do both"))
    assert chunks[-2].type == "approval_pending" and chunks[-2].tool_call_id == "c1"
    assert (project / "a.txt").read_text() == "one"
    saved = json.loads(json.dumps(agent.pause_state()))  # survives a trip through JSON
    await agent.close()

    second = ScriptedProvider([text("both done")])
    again = await make_agent(second, confirm_scripts=True)
    await again.resume(saved)
    again.approve("c1")
    rest = await collect(again.continue_after_pause())
    assert rest[-1].type == "done" and text_of(rest) == "both done"
    assert (project / "b.txt").read_text().strip() == "two"
    sent = second.requests[0].messages
    assert [m.role for m in sent[-4:]] == ["user", "assistant", "tool", "tool"]
    rounds = await again.sessions.rounds()
    assert rounds[-1].round_id == chunks[0].round_id and rounds[-1].assistant == "both done"


async def test_outbox_never_repeats_non_idempotent_work(make_agent: Any) -> None:
    count = {"n": 0}

    @tool(idempotency="non-idempotent", writes=True)
    async def charge_card(ctx: ToolContext, amount: int) -> str:
        """Charge the card."""
        count["n"] += 1
        return f"charged {amount}"

    provider = ScriptedProvider(
        [tool_call(("charge_card", {"amount": 5}, "pay1"), ("list_dir", {}, "l1")), text("paid")]
    )
    agent = await make_agent(
        provider,
        pre_execution_check=lambda call, ctx: Ask("confirm") if call.name == "list_dir" else None,
    )
    agent.tools.register(charge_card)
    await collect(agent.chat("pay"))
    assert count["n"] == 1
    state = agent.pause_state()
    # a crash after executing but before the step was recorded: the call is pending again
    state["turn"]["pending_calls"].insert(
        0, {"id": "pay1", "name": "charge_card", "arguments": '{"amount": 5}'}
    )
    agent.discard_paused_turn()
    await agent.resume(state)
    agent.approve("l1")
    rest = await collect(agent.continue_after_pause())
    assert count["n"] == 1 and rest[-1].type == "done", types(rest)
    assert any(r.name == "charge_card" and r.ok for r in results(rest))


async def test_parallel_read_only_calls(make_agent: Any) -> None:
    @tool(idempotency="read-only")
    async def slow_lookup(ctx: ToolContext, key: Annotated[str, Field()]) -> str:
        """Look something up slowly."""
        await asyncio.sleep(0.3)
        return f"value of {key}"

    calls = [("slow_lookup", {"key": f"k{i}"}) for i in range(4)]
    provider = ScriptedProvider([tool_call(*calls), text("ok")])
    agent = await make_agent(provider)
    agent.tools.register(slow_lookup)
    t = time.monotonic()
    chunks = await collect(agent.chat("look up"))
    assert time.monotonic() - t < 1.0  # 4 x 0.3 s ran concurrently
    tool_ids = [m.tool_call_id for m in provider.requests[1].messages if m.role == "tool"]
    assert len(tool_ids) == 4 and len(results(chunks)) == 4


async def test_tool_progress_chunks(make_agent: Any) -> None:
    provider = ScriptedProvider(
        [tool_call(("run_command", {"command": "echo one; sleep 0.2; echo two"})), text("ok")]
    )
    agent = await make_agent(provider)
    chunks = await collect(agent.chat("run"))
    progress = "".join(c.content for c in chunks if c.type == "tool_progress")
    assert "one" in progress and "two" in progress
    t = types(chunks)
    assert t.index("tool_start") < t.index("tool_progress") < t.index("tool_result")


async def test_task_table_plan_boundaries(make_agent: Any) -> None:
    plan = {
        "items": [
            {"id": "1", "description": "outline", "status": "active"},
            {"id": "2", "description": "draft", "order": 1},
        ]
    }
    done1 = {
        "items": [
            {"id": "1", "description": "outline", "status": "done"},
            {"id": "2", "description": "draft", "status": "active", "order": 1},
        ]
    }
    provider = ScriptedProvider(
        [
            tool_call(("task_table_update", plan)),
            tool_call(("task_table_update", done1)),
            text("ok"),
        ]
    )
    agent = await make_agent(provider)
    chunks = await collect(agent.chat("plan"))
    boundaries = [(c.plan_item_id, c.title) for c in chunks if c.type == "plan_item_boundary"]
    assert boundaries == [("1", "outline"), ("2", "draft")]
    t = types(chunks)
    first = t.index("plan_item_boundary")
    assert t[first + 1] == "thinking"  # emitted at iteration start


async def test_context_window_truncation(make_agent: Any) -> None:
    provider = ScriptedProvider(default=text("short reply"), context_window=2000)
    agent = await make_agent(provider)
    for i in range(12):
        await collect(agent.chat(f"message {i} " + "lorem ipsum dolor " * 60))
    last = provider.requests[-1].messages
    assert any(m.role == "system" and "context truncated" in m.content for m in last)
    total = sum(len(m.content) for m in last)
    assert total < 2000 * 4
    assert "message 11" in last[-1].content
    # enable_context_summary: the notice carries a digest of what was dropped
    note = next(m.content for m in last if m.role == "system" and "context truncated" in m.content)
    assert "earlier requests): message" in note and "lorem" in note.lower()


async def test_soft_limit_wrapup(make_agent: Any) -> None:
    provider = ScriptedProvider(default=text("ok"), context_window=3000)
    agent = await make_agent(provider, max_tokens=100)
    await collect(agent.chat("x " * 5000))
    sent = [m.content for m in provider.requests[-1].messages]
    assert any("close to the context limit" in c for c in sent)


async def test_multiple_agents_in_one_loop(tmp_path: Path) -> None:
    from memora import Agent

    agents = []
    for i in range(3):
        p = tmp_path / f"proj{i}"
        p.mkdir()
        # each answer takes 0.3 s to stream: three agents serialised would need 0.9 s
        slow = ScriptedProvider(
            [ScriptedResponse([TextDelta(f"answer {i}"), FinishDelta("stop")], delay=0.15)]
        )
        agents.append(
            Agent(
                project_path=p,
                data_dir=tmp_path / f"data{i}",
                provider=slow,
                load_entrypoints=False,
                strategy_override={"reflect": {"summary": "off"}},
            )
        )
    for a in agents:
        await a.init()
    try:
        started = time.monotonic()
        outs = await asyncio.gather(*(collect(a.chat("hi")) for a in agents))
        elapsed = time.monotonic() - started
        assert [text_of(o) for o in outs] == ["answer 0", "answer 1", "answer 2"]
        assert elapsed < 0.8, f"the agents ran one after another ({elapsed:.2f} s)"
    finally:
        for a in agents:
            await a.close()


async def test_team_member_assembles_plan_item(make_agent: Any, tmp_path: Path) -> None:
    from .conftest import write_pack

    write_pack(
        tmp_path / "config",
        "poet",
        {"reflect": {"summary": "off"}},
        persona="I AM THE POET MEMBER.",
    )
    plan = {
        "items": [
            {"id": "1", "description": "write the poem", "status": "active", "member": "poet"}
        ]
    }
    provider = ScriptedProvider([tool_call(("task_table_update", plan)), text("a poem")])
    agent = await make_agent(provider, role_pack_teams={"leader": "test", "members": ["poet"]})
    await collect(agent.chat("team work"))
    assert "POET MEMBER" not in provider.requests[0].messages[0].content
    assert "POET MEMBER" in provider.requests[1].messages[0].content


async def test_goal_drift_event(make_agent: Any) -> None:
    from memora.events import GoalDriftDetected

    agent = await make_agent(ScriptedProvider(default=text("ok")))
    seen: list[GoalDriftDetected] = []
    agent.events.on(GoalDriftDetected, seen.append)
    await collect(agent.chat("design the database schema for orders"))
    await collect(agent.chat("design the database schema for invoices"))
    assert seen == []
    await collect(agent.chat("写一首关于春天的诗"))
    assert len(seen) == 1 and seen[0].current_goal.startswith("写一首")
