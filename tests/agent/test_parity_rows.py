"""Seed parity (issue #16): the remaining rows of ../shared/CONFORMANCE.md, each through the
Agent's public API."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path
from typing import Any

import pytest

from memora.agent import Outbox
from memora.events import ArchiveFailed
from memora.memory.sessions import InMemorySessionStore
from memora.services import ProjectMatch
from memora.testing import ScriptedProvider, text, tool_call

from .conftest import collect, write_pack

ROOT = Path(__file__).resolve().parents[2]


async def test_persona_traits_reach_the_prompt(make_agent: Any, tmp_path: Path) -> None:
    provider = ScriptedProvider(default=text("ok"))
    write_pack(
        tmp_path / "config",
        "warm",
        {"reflect": {"summary": "off"}},
        persona="---\ntraits:\n  warmth: 0.9\n  humor: 3\n---\nYou are kind.",
    )
    agent = await make_agent(provider, active_role_pack="warm")
    await collect(agent.chat("hi"))
    prompt = provider.requests[0].messages[0].content
    assert "warmth 0.9" in prompt and "humor 1" in prompt  # clamped to 0–1


async def test_manual_multi_step_reasoning_offers_the_plan_only_when_asked(
    make_agent: Any,
) -> None:
    provider = ScriptedProvider(default=text("ok"))
    agent = await make_agent(
        provider, strategy={"act": {"multiStepReasoning": "manual"}, "reflect": {"summary": "off"}}
    )
    await collect(agent.chat("what is in notes.txt?"))
    assert "task_table_update" not in {t.name for t in provider.requests[-1].tools}
    await collect(agent.chat("make a plan for the migration, step by step"))
    assert "task_table_update" in {t.name for t in provider.requests[-1].tools}
    await collect(agent.chat("请给我一个计划"))
    assert "task_table_update" in {t.name for t in provider.requests[-1].tools}


async def test_the_self_review_goes_to_the_reasoning_route(make_agent: Any) -> None:
    chat = ScriptedProvider([tool_call(("list_dir", {})), text("draft answer")])
    reviewer = ScriptedProvider([text("No changes needed")])
    agent = await make_agent(
        chat,
        strategy={"reflect": {"selfReview": 1, "summary": "off"}},
        provider_router={"reasoning": reviewer},
    )
    chunks = await collect(agent.chat("list"))
    assert chunks[-1].answer == "draft answer"
    assert len(chat.requests) == 2 and len(reviewer.requests) == 1


async def test_a_router_callable_is_asked_first(make_agent: Any) -> None:
    chat = ScriptedProvider(default=text("from chat"))
    special = ScriptedProvider(default=text("from special"))
    asked: list[str] = []

    def route(task: str) -> Any:
        asked.append(task)
        return special if task == "chat" else None

    agent = await make_agent(chat, provider_router=route)
    chunks = await collect(agent.chat("q"))
    assert chunks[-1].answer == "from special" and "chat" in asked and not chat.requests


async def test_trimmed_history_is_summarised_by_the_background_provider(make_agent: Any) -> None:
    chat = ScriptedProvider(default=text("short reply"), context_window=2000)
    background = ScriptedProvider(default=text("They discussed twelve lorem messages."))
    agent = await make_agent(chat, background_provider=background)
    for i in range(10):
        await collect(agent.chat(f"message {i} " + "lorem ipsum dolor " * 60))
    await agent.idle()  # the summary is written off the hot path
    await collect(agent.chat("and now?"))
    note = next(
        m.content
        for m in chat.requests[-1].messages
        if m.role == "system" and "context truncated" in m.content
    )
    assert "They discussed twelve lorem messages." in note
    assert background.requests and "User:" in background.requests[0].messages[-1].content


def test_the_outbox_keeps_non_idempotent_records_longest() -> None:
    box = Outbox(limit=3)
    box.record("r/pay", "charge", {"n": 1}, True, "charged", "", None, "non-idempotent")
    for i in range(5):
        box.record(f"r/read{i}", "read", {"i": i}, True, "x", "", None, "idempotent")
    assert box.by_id("r/pay") is not None  # the idempotent ones went first
    assert len(box.to_list()) == 3


async def test_max_context_tokens_caps_the_window(make_agent: Any) -> None:
    provider = ScriptedProvider(default=text("ok"))  # a 128k-token provider
    agent = await make_agent(provider, max_context_tokens=2000)
    for i in range(8):
        await collect(agent.chat(f"message {i} " + "lorem ipsum dolor " * 60))
    sent = provider.requests[-1].messages
    assert any(m.role == "system" and "context truncated" in m.content for m in sent)


async def test_injected_session_and_round_stores(make_agent: Any) -> None:
    sessions, rounds = InMemorySessionStore(), InMemorySessionStore()
    agent = await make_agent(
        ScriptedProvider(default=text("ok")), session_store=sessions, round_store=rounds
    )
    await collect(agent.chat("hello"))
    sid = agent.session_id
    assert [m["content"] for m in await sessions.messages(sid)] == ["hello", "ok"]
    assert [r.user for r in await rounds.rounds(sid)] == ["hello"]


async def test_a_failed_archive_is_an_event_and_the_turn_still_ends(make_agent: Any) -> None:
    class Broken(InMemorySessionStore):
        async def append_turn(self, *args: Any, **kwargs: Any) -> None:
            raise OSError("disk full")

    failures: list[ArchiveFailed] = []
    agent = await make_agent(ScriptedProvider(default=text("ok")), session_store=Broken())
    agent.events.on(ArchiveFailed, failures.append)
    chunks = await collect(agent.chat("hello"))
    assert chunks[-1].type == "done"
    assert len(failures) == 1 and "disk full" in failures[0].error
    assert failures[0].stage == "round"
    assert chunks[-1].saved is False  # the client is told on the stream itself
    assert chunks[-1].answer == "ok"  # the answer is complete all the same


async def test_a_saved_round_says_so_on_done(make_agent: Any) -> None:
    agent = await make_agent(ScriptedProvider(default=text("ok")))
    chunks = await collect(agent.chat("hello"))
    assert chunks[-1].type == "done" and chunks[-1].saved is True
    assert [r.user for r in await agent.sessions.rounds()] == ["hello"]


async def test_archive_mode_manual_writes_no_summary(make_agent: Any) -> None:
    provider = ScriptedProvider(default=text("ok"))
    agent = await make_agent(
        provider, archive_mode="manual", strategy={"reflect": {"summary": "on"}}
    )
    await collect(agent.chat("hello"))
    await agent.idle()
    assert len(provider.requests) == 1  # no summary call


async def test_a_host_project_search_replaces_the_built_in(make_agent: Any) -> None:
    class Index:
        def __init__(self) -> None:
            self.patterns: list[str] = []

        async def search(self, root: Path, pattern: str, **kwargs: Any) -> list[ProjectMatch]:
            self.patterns.append(pattern)
            return [ProjectMatch("src/indexed.py", 7, f"found {pattern}")]

    index = Index()
    agent = await make_agent(ScriptedProvider(default=text("ok")), project_search=index)
    result = await agent.tools.execute("search_project", {"pattern": "needle"})
    assert result.ok and "src/indexed.py" in result.content and index.patterns == ["needle"]


async def test_project_scripts_run_by_extension(make_agent: Any, project: Path) -> None:
    scripts = project / "scripts"
    scripts.mkdir()
    (scripts / "hello.sh").write_text('echo "sh says $1"\n', encoding="utf-8")
    (scripts / "hello.py").write_text("import sys\nprint('py says', sys.argv[1])\n")
    agent = await make_agent(ScriptedProvider(default=text("ok")))
    for name, expected in (("hello.sh", "sh says hi"), ("hello.py", "py says hi")):
        r = await agent.call_tool("run_project_script", {"path": f"scripts/{name}", "args": ["hi"]})
        assert r.ok and expected in r.content, r
    if shutil.which("node"):
        (scripts / "hello.mjs").write_text("console.log('js says', process.argv[2]);\n")
        r = await agent.call_tool(
            "run_project_script", {"path": "scripts/hello.mjs", "args": ["hi"]}
        )
        assert r.ok and "js says hi" in r.content, r


async def test_polish_security_and_skills_at_agent_level(
    make_agent: Any, tmp_path: Path, project: Path
) -> None:
    from memora.errors import ToolError

    provider = ScriptedProvider(default=text("A polished sentence."))
    agent = await make_agent(provider)
    assert await agent.polish.rewrite("a sentence", "make it polished") == "A polished sentence."
    assert "make it polished" in provider.requests[-1].messages[0].content
    assert agent.security.check_path("notes.txt") == (project / "notes.txt").resolve()
    with pytest.raises(ToolError):
        agent.security.check_path("../outside.txt")
    agent.role_pack.update_skill("summarise", "Summarise a file", "Read it, then summarise.")
    assert agent.skills["summarise"].description == "Summarise a file"


def test_library_code_never_prints() -> None:
    """One logger (``memora``), no print: checked over every module of the kernel and plugins
    (the command line, whose job is printing, excepted)."""
    offenders = []
    for folder in (ROOT / "core" / "memora", ROOT / "plugins"):
        for path in folder.rglob("*.py"):
            if "cli" in path.parts or "build" in path.parts:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id == "print"
                ):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


async def test_the_history_budget_leaves_room_for_the_tool_schemas(make_agent: Any) -> None:
    """A small model's window holds the tools too: every request (history + schemas + the
    output reserve) fits, as the local model's hard limit requires."""
    from memora.agent.context_window import estimate_spec_tokens, estimate_tokens

    provider = ScriptedProvider(default=text("ok"), context_window=8192)
    agent = await make_agent(provider)
    for i in range(24):
        await collect(agent.chat(f"message {i} " + "lorem ipsum dolor " * 60))
    reserve = agent.effective_max_tokens() or 1024
    trimmed = False
    for request in provider.requests:
        used = sum(estimate_tokens(m) for m in request.messages)
        schemas = estimate_spec_tokens(request.tools)
        assert schemas > 1000  # the resident tools are a large part of a small window
        assert used + schemas + reserve <= 8192, (used, schemas)
        trimmed = trimmed or any("context truncated" in m.content for m in request.messages)
    assert trimmed
