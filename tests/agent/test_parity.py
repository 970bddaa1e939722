"""Seed parity (issue #16): questions, the checkpoint and pauses, the duplicate-call
interceptor contract, the `processing` phase."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from memora.agent import DuplicateCheckContext
from memora.errors import ErrorCode, MemoraError
from memora.llm.types import TextDelta
from memora.testing import ScriptedProvider, ScriptedResponse, text, tool_call

from .conftest import collect, types

ASK = {"reflect": {"userFollowup": "ask", "summary": "off"}}


def results(chunks: list[Any]) -> list[Any]:
    return [c for c in chunks if c.type == "tool_result"]


async def test_questions_follow_the_seed_defaults(make_agent: Any) -> None:
    questions = {
        "questions": [
            {"question": "Which database?", "options": ["PostgreSQL", "SQLite"]},
            {"question": "Anything else?"},
        ]
    }
    agent = await make_agent(
        ScriptedProvider([tool_call(("ask_user", questions)), text("ok")]), strategy=ASK
    )
    chunks = await collect(agent.chat("set it up"))
    (pending,) = [c for c in chunks if c.type == "question_pending"]
    first, second = pending.questions
    assert (first.slot, first.allow_custom) == ("ask", False)  # the seed: no free text
    assert (second.slot, second.allow_custom) == ("ask_2", True)  # no options: free text
    with pytest.raises(MemoraError, match="must be one of"):
        agent.answer_question({"ask": "MongoDB"})
    agent.answer_question({"ask": "SQLite", "ask_2": "no"})
    rest = await collect(agent.continue_after_pause())
    assert rest[-1].type == "done"


async def test_the_host_can_pause_a_running_turn_and_continue_it(make_agent: Any) -> None:
    slow_tool_step = ScriptedResponse(
        [TextDelta(""), *tool_call(("list_dir", {}, "l1")).deltas], delay=0.01
    )
    provider = ScriptedProvider([slow_tool_step, text("all done")])
    agent = await make_agent(provider)
    chunks = []
    async for c in agent.chat("list and answer"):
        chunks.append(c)
        if c.type == "tool_start":
            agent.request_pause("user stepped away")
    assert chunks[-1].type == "paused"
    assert len(provider.requests) == 1  # it stopped before the next model call
    cp = agent.checkpoint()
    assert cp.status == "paused" and cp.pause_meta is not None
    assert (cp.pause_meta.source, cp.pause_meta.reason) == ("user", "user stepped away")
    rest = await collect(agent.continue_after_pause())
    assert rest[-1].type == "done" and rest[-1].answer == "all done"
    cp = agent.checkpoint()
    assert cp.status == "idle" and cp.pause_meta is None
    assert cp.plan_item_log[-1].tools == ("list_dir",) and cp.plan_item_log[-1].ok
    with pytest.raises(MemoraError):
        agent.request_pause()  # nothing is running


async def test_pause_sources_and_the_pause_timeout(make_agent: Any) -> None:
    q = {"questions": [{"question": "Go?", "options": ["yes", "no"]}]}
    agent = await make_agent(
        ScriptedProvider([tool_call(("ask_user", q))], default=text("ok")),
        strategy=ASK,
        pause_timeout=0.2,
    )
    await collect(agent.chat("start"))
    meta = agent.checkpoint().pause_meta
    assert meta is not None and meta.source == "agent" and meta.reason == "Go?"
    await asyncio.sleep(0.3)
    with pytest.raises(MemoraError) as info:
        agent.answer_question({"ask": "yes"})
    assert info.value.code == ErrorCode.PAUSE_EXPIRED
    assert agent.paused_turn is None
    assert (await collect(agent.chat("again")))[-1].type == "done"


async def test_the_checkpoint_has_goals_plan_and_calls(make_agent: Any) -> None:
    plan = {"items": [{"id": "a", "description": "Read the notes", "status": "active"}]}
    agent = await make_agent(
        ScriptedProvider(
            [
                tool_call(("task_table_update", plan)),
                tool_call(("read_file", {"path": "notes.txt"})),
                text("read"),
            ]
        )
    )
    await collect(agent.chat("read my notes"))
    cp = agent.checkpoint()
    assert cp.main_goal == "read my notes" and cp.goal_change_seq == 1
    assert [i.id for i in cp.plan] == ["a"]
    assert [o.plan_item_id for o in cp.plan_item_log] == ["a", "a"]
    assert cp.to_dict()["plan_item_log"][1]["tools"] == ["read_file"]
    assert cp.last_heartbeat > 0


async def test_a_custom_duplicate_interceptor_gets_the_seed_context(make_agent: Any) -> None:
    seen: list[DuplicateCheckContext] = []

    class Strict:
        name = "strict"
        threshold = 2

        def check(self, ctx: DuplicateCheckContext) -> str:
            seen.append(ctx)
            return "block" if ctx.count >= 2 else "ok"

    same = ("list_dir", {"path": "."})
    provider = ScriptedProvider([tool_call(same), tool_call(same), text("ok")])
    agent = await make_agent(provider, duplicate_interceptor=Strict())
    chunks = await collect(agent.chat("list twice"))
    first, second = results(chunks)
    assert first.ok and second.blocked
    assert [c.count for c in seen] == [1, 2] and seen[1].iteration == 2
    assert "2" in provider.requests[2].messages[-1].content  # its own threshold in the text


async def test_the_default_interceptors_warning_names_its_own_threshold(make_agent: Any) -> None:
    from memora.agent import DuplicateCallInterceptor

    same = ("list_dir", {})
    provider = ScriptedProvider([tool_call(same), tool_call(same), text("ok")])
    agent = await make_agent(provider)
    agent.duplicate_interceptor = DuplicateCallInterceptor(threshold=2)
    await collect(agent.chat("list"))
    warned = provider.requests[2].messages[-1].content
    assert "2 times" in warned or " 2 " in warned, warned


async def test_processing_is_reported_between_tool_results_and_the_next_call(
    make_agent: Any,
) -> None:
    agent = await make_agent(ScriptedProvider([tool_call(("list_dir", {})), text("ok")]))
    chunks = await collect(agent.chat("list"))
    phases = [c.phase for c in chunks if c.type == "thinking"]
    assert phases == ["assembling", "llm_calling", "processing", "llm_calling", "archiving"]
    t = types(chunks)
    assert t.index("tool_result") < t.index("step_boundary") < len(t) - 1


def _packs(tmp_path: Any) -> None:
    from .conftest import write_pack

    config = tmp_path / "config"
    write_pack(config, "poet", {"reflect": {"summary": "off"}}, persona="You are the Poet.")
    write_pack(config, "critic", {"reflect": {"summary": "off"}}, persona="You are the Critic.")


async def test_a_meeting_lets_members_answer_in_turn_and_the_leader_sum_up(
    make_agent: Any, tmp_path: Any
) -> None:
    _packs(tmp_path)
    provider = ScriptedProvider(
        [text("Use autumn imagery."), text("Keep it short."), text("Short, autumnal: agreed.")]
    )
    agent = await make_agent(
        provider, role_pack_teams=[{"leader": "test", "members": ["poet", "critic"]}]
    )
    chunks = await collect(agent.meeting("How should the poem look?"))
    turns = [(c.member, c.role) for c in chunks if c.type == "meeting_turn"]
    assert turns == [("poet", "member"), ("critic", "member"), ("test", "chair")]
    spoken = [(c.speaker, c.stage, c.content) for c in chunks if c.type == "text"]
    assert spoken == [
        ("poet", "meeting", "Use autumn imagery."),
        ("critic", "meeting", "Keep it short."),
        ("test", "answer", "Short, autumnal: agreed."),
    ]
    assert chunks[-1].type == "done" and chunks[-1].answer == "Short, autumnal: agreed."
    first, second, chair = provider.requests
    assert "You are the Poet." in first.messages[0].content
    assert "You are the Critic." in second.messages[0].content
    assert "poet: Use autumn imagery." in second.messages[-1].content
    assert "critic: Keep it short." in chair.messages[-1].content and not chair.tools
    assert [m.role for m in agent.history] == ["user", "assistant"]
    (r,) = await agent.sessions.rounds()
    assert [e["member"] for e in r.events if e["type"] == "meeting_turn"] == [
        "poet",
        "critic",
        "test",
    ]
    with pytest.raises(MemoraError, match="must be members of team"):
        await collect(agent.meeting("again?", members=["stranger"]))


def test_teams_are_a_checked_list() -> None:
    from pathlib import Path

    from pydantic import ValidationError

    from memora.agent import AgentOptions

    base = {"project_path": Path("."), "data_dir": Path("d")}
    one = AgentOptions(**base, role_pack_teams={"leader": "a", "members": ["b"]})
    assert one.role_pack_teams is not None and one.role_pack_teams[0].leader == "a"
    assert one.active_role_pack == "a"
    two = AgentOptions(
        **base,
        role_pack_teams=[{"leader": "a", "members": ["b"]}, {"leader": "c", "members": ["d"]}],
    )
    assert [t.leader for t in two.role_pack_teams or []] == ["a", "c"]
    for bad in (
        {"leader": "a", "members": []},
        {"leader": "a", "members": ["a"]},
        {"leader": "a", "members": ["b", "b"]},
        [{"leader": "a", "members": ["b"]}, {"leader": "a", "members": ["c"]}],
    ):
        with pytest.raises(ValidationError):
            AgentOptions(**base, role_pack_teams=bad)


async def test_a_plan_member_outside_the_team_is_ignored_with_a_warning(
    make_agent: Any, tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    _packs(tmp_path)
    plan = {"items": [{"id": "1", "description": "Write", "status": "active", "member": "critic"}]}
    provider = ScriptedProvider([tool_call(("task_table_update", plan)), text("ok")])
    agent = await make_agent(provider, role_pack_teams={"leader": "test", "members": ["poet"]})
    with caplog.at_level("WARNING", logger="memora.agent"):
        await collect(agent.chat("plan"))
    assert "You are the Critic." not in provider.requests[-1].messages[0].content
    assert any("not in the active role pack's team" in r.getMessage() for r in caplog.records)
