"""Seed parity (issue #28): the last open rows of ../shared/CONFORMANCE.md, each through the
Agent's public API, with a test that fails when the row regresses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memora.agent import DuplicateCheckContext
from memora.events import GoalDriftDetected, MemoryAdded
from memora.memory import InMemoryStorage, NewMemory
from memora.memory.sessions import InMemorySessionStore
from memora.testing import ScriptedProvider, text, tool_call

from .conftest import collect, write_pack


async def test_c4_the_interceptor_sees_the_batch_the_last_call_and_the_threshold(
    make_agent: Any,
) -> None:
    seen: list[DuplicateCheckContext] = []

    class Semantic:
        """The seed's example: a semantic duplicate compares with the previous call."""

        name = "semantic"
        threshold = 2

        def check(self, ctx: DuplicateCheckContext) -> str:
            seen.append(ctx)
            return "ok"

    provider = ScriptedProvider(
        [
            tool_call(("list_dir", {"path": "."}, "a"), ("read_file", {"path": "notes.txt"}, "b")),
            text("ok"),
        ]
    )
    agent = await make_agent(provider, duplicate_interceptor=Semantic())
    await collect(agent.chat("look"))
    first, second = seen
    assert first.last_key is None and second.last_key == first.key  # the seed's lastHash
    assert first.threshold == 2 == second.threshold
    assert [name for name, _ in first.batch] == ["list_dir", "read_file"]
    assert json.loads(first.batch[1][1]) == {"path": "notes.txt"}
    assert second.batch == first.batch  # the whole response, for every call of it


async def test_f10_goal_drift_carries_the_goal_change_seq(make_agent: Any) -> None:
    agent = await make_agent(ScriptedProvider(default=text("ok")))
    drifts: list[GoalDriftDetected] = []
    agent.events.on(GoalDriftDetected, drifts.append)
    await collect(agent.chat("design the database schema for orders"))
    await collect(agent.chat("写一首关于春天的诗"))
    assert drifts and drifts[-1].goal_change_seq == agent.checkpoint().goal_change_seq == 2


async def test_i1_memory_added_names_the_memory(make_agent: Any) -> None:
    agent = await make_agent(ScriptedProvider(default=text("ok")))
    added: list[MemoryAdded] = []
    agent.events.on(MemoryAdded, added.append)
    await agent.memory.write(NewMemory("the deploy is on Mondays", name="deploy-day"))
    assert [(e.source, e.name) for e in added] == [("round_summary", "deploy-day")]


async def test_b10_allowed_paths_with_two_roots(make_agent: Any, tmp_path: Path) -> None:
    other = tmp_path / "shared-docs"
    other.mkdir()
    (other / "guide.md").write_text("shared guide", encoding="utf-8")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "secret.txt").write_text("no", encoding="utf-8")
    project = tmp_path / "project"
    agent = await make_agent(ScriptedProvider(default=text("ok")), allowed_paths=[project, other])
    in_project = await agent.call_tool("read_file", {"path": "notes.txt"})
    in_second = await agent.call_tool("read_file", {"path": str(other / "guide.md")})
    outside_both = await agent.call_tool("read_file", {"path": str(outside / "secret.txt")})
    assert in_project.ok and "alpha" in in_project.content
    assert in_second.ok and "shared guide" in in_second.content
    assert not outside_both.ok and outside_both.error_code == "PATH_NOT_ALLOWED"


async def test_h7_the_replayed_error_event_has_the_live_chunks_category(
    make_agent: Any,
) -> None:
    from memora.llm import ProviderError

    def refuse(request: Any) -> Any:
        raise ProviderError("connection refused by 127.0.0.1:9", category="connection")

    agent = await make_agent(ScriptedProvider(default=refuse), retry_attempts=1)
    chunks = await collect(agent.chat("hi"))
    live = next(c for c in chunks if c.type == "error")
    (round_,) = await agent.sessions.rounds()
    replayed = [e for e in round_.events if e.get("type") == "error"]
    assert live.category == "connection"
    assert replayed and replayed[0]["category"] == live.category


async def test_k10_with_storage_and_sessions_injected_nothing_is_written_in_data_dir(
    make_agent: Any, tmp_path: Path
) -> None:
    agent = await make_agent(
        ScriptedProvider([text("hello"), text("TYPE: fact\nthe user said hello")]),
        storage=InMemoryStorage(),
        session_store=InMemorySessionStore(),
        strategy={"reflect": {"summary": "on"}},
        summary_verbatim_tokens=0,
    )
    await collect(agent.chat("hi"))
    await agent.idle()
    assert (await agent.memory.snapshot()).total == 1  # the summary went to the injected store
    data = tmp_path / "data"
    written = [p for p in data.rglob("*") if p.is_file()] if data.exists() else []
    # the project lock lives in the project's .memora, not in data_dir
    assert written == [], written


async def test_k11_role_pack_settings_never_enter_memory(make_agent: Any, tmp_path: Path) -> None:
    config = tmp_path / "config"
    write_pack(config, "full", {"reflect": {"summary": "off"}}, persona="You are Ada, precise.")
    pack = config / "role-packs" / "full"
    (pack / "rules.md").write_text("# Rules\n- Cite the file you read.\n", encoding="utf-8")
    (pack / "skills").mkdir()
    (pack / "skills" / "write-tests.md").write_text(
        "---\nname: write-tests\ndescription: How to write tests\n---\nWrite a failing test first.",
        encoding="utf-8",
    )
    provider = ScriptedProvider(default=text("ok"))
    agent = await make_agent(provider, active_role_pack="full")
    await collect(agent.chat("hi"))
    await agent.idle()
    prompt = provider.requests[0].messages[0].content
    # the pack's settings are in force (so this test can fail) ...
    assert "You are Ada" in prompt and "Cite the file you read" in prompt
    assert "write-tests" in prompt
    # ... and none of them is in memory
    assert (await agent.memory.snapshot()).total == 0
    for word in ("Ada", "Cite", "failing test"):
        assert await agent.memory.search(word) == []


async def test_f11_a_step_has_a_summary_and_the_model_sees_the_log_as_history(
    make_agent: Any,
) -> None:
    plan = {"items": [{"id": "a", "description": "Read the notes", "status": "active"}]}
    provider = ScriptedProvider(
        [
            tool_call(("task_table_update", plan)),
            tool_call(("read_file", {"path": "notes.txt"})),
            text("read"),
        ]
    )
    agent = await make_agent(provider)
    await collect(agent.chat("read my notes"))
    log = agent.checkpoint().to_dict()["plan_item_log"]
    assert log[1]["tools"] == ["read_file"] and log[1]["summary"].startswith("read_file: ")
    seen = "\n".join(str(m.content) for m in provider.requests[2].messages if m.role == "system")
    assert "not the current instruction" in seen
    assert "- a ok: read_file: " in seen
