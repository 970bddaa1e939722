"""What a turn costs: `done` does not wait for the round summary, one append per turn (and what
a killed process keeps), an in-memory session store, choosing resident tools."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import AfterValidator

from memora import Agent
from memora.errors import MemoraError
from memora.events import ArchiveFailed, MemoryAdded
from memora.llm.types import TextDelta
from memora.memory import InMemorySessionStore, JsonlSessionStore, RoundRecord
from memora.testing import ScriptedProvider, ScriptedResponse, text, tool_call
from memora.tools import ToolContext, tool
from tests.agent.conftest import collect
from tests.conftest import REPO

SUMMARY_ON = {"reflect": {"summary": "on"}}


async def test_done_does_not_wait_for_the_round_summary(make_agent: Any) -> None:
    slow_summary = ScriptedResponse([TextDelta("TYPE: fact\nthe user said hi")], delay=1.5)
    provider = ScriptedProvider([text("hello"), slow_summary])
    agent = await make_agent(provider, strategy=SUMMARY_ON, summary_verbatim_tokens=0)
    added: list[Any] = []
    agent.events.on(MemoryAdded, added.append)
    started = time.monotonic()
    chunks = await collect(agent.chat("hi"))
    assert chunks[-1].type == "done"
    assert time.monotonic() - started < 1.0  # the 1.5 s summary runs after `done`
    assert added == []
    await agent.idle()
    assert [a.summary_type for a in added] == ["fact"]


async def test_a_failed_summary_is_an_event_and_close_waits(make_agent: Any) -> None:
    from memora.llm import ProviderError

    broken = ScriptedResponse([], error=ProviderError("summary model down", category="unknown"))
    provider = ScriptedProvider([text("hello"), broken])
    agent = await make_agent(
        provider, strategy=SUMMARY_ON, retry_attempts=1, summary_verbatim_tokens=0
    )
    failed: list[Any] = []
    agent.events.on(ArchiveFailed, failed.append)
    chunks = await collect(agent.chat("hi"))
    assert chunks[-1].type == "done"
    await agent.close()  # waits for the summary task, which fails quietly
    assert failed and "summary model down" in failed[0].error
    assert failed[0].stage == "summary"  # the round itself is saved: only its memory is missing
    assert chunks[-1].saved is True


async def test_a_short_round_is_stored_as_said_without_a_model_call(make_agent: Any) -> None:
    long_answer = "The migration plan has three stages. " * 20
    provider = ScriptedProvider(
        [text("SQLite, in WAL mode."), text(long_answer), text("TYPE: decision\nThree stages.")]
    )
    agent = await make_agent(provider, strategy=SUMMARY_ON)
    added: list[Any] = []
    agent.events.on(MemoryAdded, added.append)
    await collect(agent.chat("Which database do we use?"))
    await agent.idle()
    assert len(provider.requests) == 1  # the answer only: no summary call for a short round
    (hit,) = await agent.memory.search("WAL")
    assert hit.record.summary_type == "general"
    assert "Which database do we use?" in hit.record.content
    assert "SQLite, in WAL mode." in hit.record.content
    # a round longer than the summary would be is summarised by the model
    await collect(agent.chat("And the migration?"))
    await agent.idle()
    assert len(provider.requests) == 3
    assert [a.summary_type for a in added] == ["general", "decision"]


async def test_short_chinese_rounds_count_by_characters(make_agent: Any) -> None:
    provider = ScriptedProvider(
        [text("好的，我们使用 SQLite 数据库。"), text("数据库" * 60), text("TYPE: fact\n很长。")]
    )
    agent = await make_agent(provider, strategy=SUMMARY_ON, summary_verbatim_tokens=50)
    await collect(agent.chat("我们用什么数据库？"))
    await agent.idle()
    assert len(provider.requests) == 1
    assert (await agent.memory.search("数据库"))[0].record.content.endswith("SQLite 数据库。")
    await collect(agent.chat("详细说说"))  # 180 CJK characters: over 50 tokens
    await agent.idle()
    assert len(provider.requests) == 3


async def test_one_append_per_turn(make_agent: Any, tmp_path: Path) -> None:
    provider = ScriptedProvider([tool_call(("list_dir", {})), text("done"), text("again")])
    agent = await make_agent(provider)
    await collect(agent.chat("first"))
    await collect(agent.chat("second"))
    folder = tmp_path / "data" / "sessions" / agent.session_id
    (log,) = folder.glob("*.jsonl")
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    kinds = [line["kind"] for line in lines]
    # the session (written with its first turn); turn 1: user, assistant(call), tool,
    # assistant, round; turn 2: user, assistant, round
    assert kinds == ["session"] + ["message"] * 4 + ["round"] + ["message"] * 2 + ["round"]
    meta = lines[0]
    assert "round_count" not in meta  # derived from the log, never written beside it
    assert not (folder / "meta.json").exists()  # written only when a host changes the session
    info = await agent.sessions.store.get(agent.session_id)
    assert info.round_count == 2 and info.title == "first"


async def test_a_session_read_again_goes_on_from_the_same_request(make_agent: Any) -> None:
    """``switch_session`` to the session the Agent is in (what a server worker does when the
    other worker moved it on) reads on from its last read: the next request carries the whole
    history once, after the very system message of the last one — a provider that encodes the
    history incrementally (by message identity) finds its prefix."""
    provider = ScriptedProvider([], default=text("noted"))
    agent = await make_agent(provider)
    for words in ("first", "second"):
        await collect(agent.chat(words))
        await agent.switch_session(agent.session_id)
    await collect(agent.chat("third"))
    before, after = provider.requests[-2], provider.requests[-1]
    assert after.messages[0] is before.messages[0]
    assert [m.content for m in after.messages if m.role == "user"] == ["first", "second", "third"]
    assert [m.content for m in after.messages if m.role == "assistant"] == ["noted", "noted"]


class _StoreWithoutLoad:
    """A host's session store with only the protocol's required methods (no ``load``), as a
    plugin author writes one from docs/plugin_hooks.md."""

    def __init__(self, inner: InMemorySessionStore) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name in ("load", "append_turn"):
            raise AttributeError(name)
        return getattr(self._inner, name)


async def test_a_store_without_load_opens_sessions_as_before(make_agent: Any) -> None:
    store = _StoreWithoutLoad(InMemorySessionStore())
    provider = ScriptedProvider([], default=text("noted"))
    agent = await make_agent(provider, session_store=store)
    await collect(agent.chat("first"))
    await agent.switch_session(agent.session_id)
    await collect(agent.chat("second"))
    asked = [m.content for m in provider.requests[-1].messages if m.role == "user"]
    assert asked == ["first", "second"]
    assert [r.user for r in await store.rounds(agent.session_id)] == ["first", "second"]


async def test_derived_counts_follow_the_log(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    s = await store.create()
    for i in range(3):
        await store.append_turn(
            s.id, [{"role": "user", "content": f"q{i}"}], RoundRecord(f"r{i}", f"q{i}", "a")
        )
    assert (await store.get(s.id)).round_count == 3
    index = tmp_path / "sessions" / s.id / "index.json"
    assert index.is_file()
    # another writer appends: the cached derivation notices the new bytes
    other = JsonlSessionStore(tmp_path)
    await other.append_round(s.id, RoundRecord("r3", "q3", "a", ended_at=2e9))
    info = await store.get(s.id)
    assert info.round_count == 4 and info.updated_at == 2e9
    index.write_text("{not json")  # a broken cache is rebuilt, never trusted
    assert (await store.get(s.id)).round_count == 4
    assert [i.round_count for i in await store.list()] == [4]


KILLED_HOST = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from memora import Agent
    from memora.llm.types import TextDelta
    from memora.testing import ScriptedProvider, ScriptedResponse, text

    async def main():
        project = Path(sys.argv[1])
        hang = ScriptedResponse([TextDelta("partial")] * 1000, delay=0.01)
        provider = ScriptedProvider([text("complete answer"), hang])
        async with Agent(project_path=project, data_dir=project / "data", provider=provider,
                         strategy_override={"reflect": {"summary": "off"}},
                         load_entrypoints=False) as agent:
            async for _ in agent.chat("first question"):
                pass
            print(agent.session_id, flush=True)
            async for _ in agent.chat("second question"):
                pass

    asyncio.run(main())
    """
)


@pytest.mark.slow
async def test_a_killed_process_loses_only_the_running_turn(tmp_path: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    script = tmp_path / "host.py"
    script.write_text(KILLED_HOST, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, str(script), str(project)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None
    session_id = proc.stdout.readline().strip()
    await asyncio.sleep(0.5)  # the second turn is streaming
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)

    store = JsonlSessionStore(project / "data")
    rounds = await store.rounds(session_id)
    messages = await store.messages(session_id)
    assert [r.user for r in rounds] == ["first question"]
    assert [m["content"] for m in messages] == ["first question", "complete answer"]
    assert (await store.get(session_id)).round_count == 1
    # and the next process continues that session
    provider = ScriptedProvider([text("third answer")])
    async with Agent(
        project_path=project,
        data_dir=project / "data",
        provider=provider,
        session_id=session_id,
        strategy_override={"reflect": {"summary": "off"}},
        load_entrypoints=False,
    ) as agent:
        assert (await collect(agent.chat("third question")))[-1].type == "done"
        contents = [m.content for m in provider.requests[0].messages[1:]]
        assert contents == ["first question", "complete answer", "third question"]


async def test_in_memory_session_store_writes_nothing(make_agent: Any, tmp_path: Path) -> None:
    provider = ScriptedProvider([text("one"), text("two")])
    agent = await make_agent(provider, session_store="memory")
    await collect(agent.chat("a"))
    await collect(agent.chat("b"))
    assert isinstance(agent.sessions.store, InMemorySessionStore)
    assert not (tmp_path / "data" / "sessions").exists()
    rounds = await agent.sessions.rounds()
    assert [r.user for r in rounds] == ["a", "b"]
    other = await agent.fork_session(rounds[0].round_id)
    assert (await agent.sessions.store.get(other)).round_count == 1


async def test_resident_tools_choose_what_the_model_sees(make_agent: Any) -> None:
    @tool(idempotency="read-only")
    async def host_tool(ctx: ToolContext, n: int) -> str:
        """The host's one tool."""
        return str(n)

    provider = ScriptedProvider(
        [tool_call(("list_dir", {}), ("read_file", {"path": "notes.txt"})), text("ok")]
    )
    agent = await make_agent(provider, resident_tools=["read_file"])
    agent.tools.register(host_tool)
    chunks = await collect(agent.chat("go"))
    assert sorted(s.name for s in provider.requests[0].tools) == ["host_tool", "read_file"]
    results = {c.name: c for c in chunks if c.type == "tool_result"}  # type: ignore[union-attr]
    assert results["list_dir"].blocked and results["list_dir"].error_code == "NOT_AVAILABLE"
    assert results["read_file"].ok

    await agent.close()  # one Agent per project at a time
    none = ScriptedProvider([text("ok")])
    bare = await make_agent(none, resident_tools=[])
    bare.tools.register(host_tool)
    await collect(bare.chat("go"))
    assert [s.name for s in none.requests[0].tools] == ["host_tool"]


async def test_the_prompt_names_only_the_tools_sent(make_agent: Any) -> None:
    provider = ScriptedProvider([text("ok"), text("ok")])
    agent = await make_agent(provider, resident_tools=["read_file"])
    await collect(agent.chat("go"))
    prompt = provider.requests[0].messages[0].content
    assert "task_table_update" not in prompt and "ask_user" not in prompt
    assert [s.name for s in provider.requests[0].tools] == ["read_file"]
    await agent.close()
    full = ScriptedProvider([text("ok")])
    everything = await make_agent(full)
    await collect(everything.chat("go"))
    assert "task_table_update" in full.requests[0].messages[0].content


async def test_tools_that_crowd_a_small_window_are_withheld(
    make_agent: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A small local model: the 17 resident schemas would take most of a 4096-token window,
    so the turn runs without tools (and says so) instead of overflowing."""
    provider = ScriptedProvider(
        [tool_call(("write_file", {"path": "x.txt", "content": "no"})), text("fine")],
        context_window=4096,
    )
    agent = await make_agent(provider)
    with caplog.at_level("WARNING", logger="memora.agent"):
        chunks = await collect(agent.chat("hello"))
    assert provider.requests[0].tools == []
    assert agent.tools_withheld is not None and "resident_tools" in agent.tools_withheld
    assert any("no tools are sent" in r.getMessage() for r in caplog.records)
    prompt = provider.requests[0].messages[0].content
    assert "No tools are available" in prompt and "task_table_update" not in prompt
    # a call the model makes anyway is refused, not run
    (result,) = [c for c in chunks if c.type == "tool_result"]
    assert result.blocked  # type: ignore[union-attr]
    assert not (agent.options.project_path / "x.txt").exists()
    assert agent.exposed_tools() == []
    # the host can still run a tool itself
    listed = await agent.call_tool("list_dir", {})
    assert listed.ok
    await agent.close()
    # with the tools a small model can use chosen, they are sent
    small = ScriptedProvider([text("ok")], context_window=4096)
    chosen = await make_agent(small, resident_tools=["read_file"])
    await collect(chosen.chat("hello"))
    assert [s.name for s in small.requests[0].tools] == ["read_file"]
    assert chosen.tools_withheld is None


async def test_a_provider_whose_model_uses_no_tools_gets_none(
    make_agent: Any, caplog: pytest.LogCaptureFixture
) -> None:
    class TinyModel(ScriptedProvider):
        supports_tools = False

    provider = TinyModel([text("hello")])
    agent = await make_agent(provider)
    with caplog.at_level("INFO", logger="memora.agent"):
        await collect(agent.chat("hi"))
    assert provider.requests[0].tools == []
    assert "does not use tools" in (agent.tools_withheld or "")
    assert not any(r.levelname == "WARNING" for r in caplog.records)
    assert "No tools are available" in provider.requests[0].messages[0].content
    agent.set_provider(ScriptedProvider([text("again")]))  # another model: tools again
    assert agent.tools_withheld is None and agent.exposed_tools()


async def test_unknown_resident_tool_is_an_error(tmp_path: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    agent = Agent(
        project_path=project,
        data_dir=tmp_path / "d",
        provider=ScriptedProvider([]),
        resident_tools=["read_fiel"],
        load_entrypoints=False,
    )
    with pytest.raises(MemoraError, match="'read_fiel' is not a resident tool") as info:
        await agent.init()
    assert info.value.code == "INVALID_CONFIG" and "read_file" in str(info.value)


async def test_lone_surrogates_are_repaired_at_the_door(make_agent: Any) -> None:
    """A user message or a model answer holding a lone surrogate cannot brick the session."""
    from memora.llm.types import TextDelta as TD

    evil = ScriptedResponse([TD("bad \ud800 answer"), *text("").deltas])
    provider = ScriptedProvider([evil, text("fine")])
    agent = await make_agent(provider)
    first = await collect(agent.chat("hello \udc80 there"))
    assert first[-1].type == "done"
    second = await collect(agent.chat("next"))
    assert second[-1].type == "done"
    sent = provider.requests[1].messages
    assert all(m.content.encode("utf-8") for m in sent)  # everything sent is encodable
    assert "hello \ufffd there" in [m.content for m in sent]
    rounds = await agent.sessions.rounds()
    assert rounds[0].user == "hello \ufffd there"


async def test_memory_refuses_unencodable_text(tmp_path: Path) -> None:
    from memora.memory import NewMemory
    from memora.memory.sqlite_store import SqliteStorage

    store = SqliteStorage(tmp_path / "m.db")
    try:
        with pytest.raises(MemoraError, match="lone surrogate") as info:
            await store.add(NewMemory("broken \ud800 text"))
        assert info.value.code == "INVALID_INPUT"
        assert await store.count() == 0
    finally:
        await store.close()


async def test_agent_command_environment_options(
    make_agent: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_TOOL_HOME", "/opt/tool")
    monkeypatch.setenv("DEPLOY_TOKEN", "s3cr3t")
    provider = ScriptedProvider([tool_call(("run_command", {"command": "env"})), text("done")])
    agent = await make_agent(
        provider, command_env_allow=["MY_TOOL_HOME"], command_env={"FOO": "bar"}
    )
    await collect(agent.chat("show the environment"))
    told = next(m.content for m in provider.requests[1].messages if m.role == "tool")
    assert "MY_TOOL_HOME=/opt/tool" in told and "FOO=bar" in told
    assert "s3cr3t" not in told


async def test_team_members_prompts_name_only_the_tools_sent(
    make_agent: Any, tmp_path: Path
) -> None:
    """A plan item assembled by a team member, and a meeting (whose requests carry no tools):
    the member's prompt follows the tool set like the active pack's does."""
    from .conftest import write_pack

    write_pack(tmp_path / "config", "poet", {"reflect": {"summary": "off"}}, persona="POET.")
    skill = tmp_path / "config" / "role-packs" / "poet" / "skills" / "rhyme"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(
        "---\nname: rhyme\ndescription: Rhyming help.\n---\nRhyme.", encoding="utf-8"
    )
    plan = {"items": [{"id": "1", "description": "write", "status": "active", "member": "poet"}]}
    provider = ScriptedProvider([tool_call(("task_table_update", plan)), text("a poem")])
    agent = await make_agent(
        provider,
        role_pack_teams={"leader": "test", "members": ["poet"]},
        resident_tools=["task_table_update"],
    )
    await collect(agent.chat("team work"))
    member_prompt = provider.requests[1].messages[0].content
    assert "POET." in member_prompt
    assert [s.name for s in provider.requests[1].tools] == ["task_table_update"]
    assert "rhyme" not in member_prompt  # no read_skill sent: no skills list
    assert "ask_user" not in member_prompt
    await agent.close()

    everything = ScriptedProvider([tool_call(("task_table_update", plan)), text("a poem")])
    full = await make_agent(everything, role_pack_teams={"leader": "test", "members": ["poet"]})
    await collect(full.chat("team work"))
    assert "rhyme" in everything.requests[1].messages[0].content  # read_skill is sent here

    meeting = ScriptedProvider([text("Rhyme it."), text("Agreed.")])
    await full.close()
    chair = await make_agent(meeting, role_pack_teams={"leader": "test", "members": ["poet"]})
    await collect(chair.meeting("How?"))
    for request in meeting.requests:
        prompt = request.messages[0].content
        assert not request.tools and "No tools are available" in prompt
        assert "rhyme" not in prompt and "task_table_update" not in prompt


_validations: list[int] = []
_seen_args: list[tuple[int, Path]] = []


def _counted(n: int) -> int:
    _validations.append(n)
    return n


@tool(idempotency="read-only")
async def typed_tool(ctx: ToolContext, n: Annotated[int, AfterValidator(_counted)], p: Path) -> str:
    """Counts its validations."""
    _seen_args.append((n, p))
    return "ok"


async def test_a_tool_call_is_validated_once(make_agent: Any) -> None:
    """The gates validate the arguments and the tool runs on what they validated (pydantic
    once per call, not twice); a typed argument still reaches the handler typed."""
    _validations.clear()
    _seen_args.clear()
    provider = ScriptedProvider(
        [
            tool_call(("typed_tool", {"n": 1, "p": "a/b"}), ("typed_tool", {"n": 2, "p": "c"})),
            text("done"),
        ]
    )
    agent = await make_agent(provider, resident_tools=[])
    agent.tools.register(typed_tool)
    chunks = await collect(agent.chat("go"))
    assert [c.ok for c in chunks if c.type == "tool_result"] == [True, True]  # type: ignore[union-attr]
    assert _validations == [1, 2]
    assert _seen_args == [(1, Path("a/b")), (2, Path("c"))]
