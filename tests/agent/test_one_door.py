"""The host's door: the runtime makes Agents and owns what hosts would rebuild; a host deadline
ends a turn as ``timeout``; leaving ``async for`` early does not leave the Agent busy; the
Agent's older pause verbs warn and still work."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from pathlib import Path
from typing import Any

import pytest

from memora import Agent, BusyError, ProjectRuntime
from memora.agent import ProjectResources
from memora.llm.types import FinishDelta, TextDelta
from memora.testing import ScriptedProvider, ScriptedResponse, text

from .conftest import collect, team_agent, types, write_pack


def _slow(words: int = 60, delay: float = 0.03) -> ScriptedResponse:
    return ScriptedResponse(
        [TextDelta(f"w{i} ") for i in range(words)] + [FinishDelta("stop")], delay=delay
    )


async def test_a_host_deadline_ends_the_turn_as_timeout(make_agent: Any) -> None:
    agent = await make_agent(ScriptedProvider([_slow(), text("after")]))
    asyncio.get_running_loop().call_later(0.2, agent.abort, "timeout")
    chunks = await collect(agent.chat("long"))
    last = chunks[-1]
    assert last.type == "aborted" and last.stop_reason == "timeout"  # type: ignore[union-attr]
    assert (await agent.sessions.rounds())[-1].status == "aborted"
    # the default is still the user's stop, and a wrong reason is refused by name
    assert types(await collect(agent.chat("again")))[-1] == "done"
    with pytest.raises(Exception, match="'user' or 'timeout'"):
        agent.abort("later")  # type: ignore[arg-type]


async def test_breaking_out_of_async_for_releases_the_agent(make_agent: Any) -> None:
    agent = await make_agent(ScriptedProvider([_slow(), text("second answer")]))
    async for chunk in agent.chat("long"):
        if chunk.type == "text":
            break  # the generator is dropped here; the event loop closes it later
    chunks = await collect(agent.chat("next"))  # no BusyError: the left turn closed first
    assert types(chunks)[-1] == "done"
    rounds = await agent.sessions.rounds()
    assert [r.status for r in rounds] == ["interrupted", "done"]


async def test_a_turn_still_held_by_the_host_keeps_the_agent_busy(make_agent: Any) -> None:
    agent = await make_agent(ScriptedProvider([_slow(), text("second")]))
    held = agent.chat("long")
    await held.__anext__()
    with pytest.raises(BusyError):
        await collect(agent.chat("next"))
    # aclosing is the documented way to leave it at once
    async with contextlib.aclosing(held):  # type: ignore[type-var]
        pass
    assert types(await collect(agent.chat("next")))[-1] == "done"


async def test_a_dropped_meeting_turn_also_releases_the_agent(
    tmp_path: Path, project: Path
) -> None:
    provider = ScriptedProvider([_slow()], default=text("said"))
    strategy = {"reflect": {"summary": "off"}}
    async with team_agent(tmp_path, project, provider, strategy) as agent:
        async for chunk in agent.chat("long"):
            if chunk.type == "text":
                break
        gc.collect()
        chunks = await collect(agent.meeting("which one?"))
        assert types(chunks)[-1] == "done"


async def test_the_runtime_is_the_hosts_door(tmp_path: Path, project: Path) -> None:
    config = tmp_path / "config"
    write_pack(config, "test", {"reflect": {"summary": "off"}})
    runtime = ProjectRuntime(
        project_path=project,
        data_dir=tmp_path / "data",
        provider=ScriptedProvider(default=text("ok")),
        config_dir=config,
        active_role_pack="test",
        storage="json",
        load_entrypoints=False,
    )
    # answered before anything opens: the one precedence of the settings
    assert runtime.storage_name() == "json"
    packs = runtime.role_packs()
    assert "test" in {p.name for p in packs.list_meta()}
    assert runtime.role_packs() is packs
    async with runtime:
        agent = await runtime.agent(session_id="s1")
        assert isinstance(agent, Agent) and agent.runtime is runtime
        assert agent.memory is runtime.memory
        await agent.close()
    # the one-session shorthand builds the resources for itself, not a second door
    own = Agent(project_path=project, data_dir=tmp_path / "own", load_entrypoints=False)
    assert type(own.runtime) is ProjectResources


_OLD_VERBS = """
import asyncio, sys, warnings
from memora import Agent
from memora.testing import ScriptedProvider, text, tool_call

async def main(project, data):
    provider = ScriptedProvider([
        tool_call(("write_file", {"path": "a.txt", "content": "x"}, "c1")), text("written"),
        tool_call(("write_file", {"path": "b.txt", "content": "y"}, "c2")), text("again"),
    ])
    async with Agent(project_path=project, data_dir=data, provider=provider,
                     confirm_writes=True, load_entrypoints=False) as agent:
        for name in ("a", "b"):
            chunks = [c async for c in agent.chat("write " + name)]
            assert chunks[-1].type == "paused", chunks[-1]
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                agent.approve("c1" if name == "a" else "c2")
                done = [c async for c in agent.continue_after_pause()]
            assert done[-1].type == "done", done[-1]
            print(name, sorted(str(w.message) for w in seen if w.category is DeprecationWarning))

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def test_the_older_pause_verbs_warn_once_and_still_work(tmp_path: Path, project: Path) -> None:
    """In a fresh interpreter: each older verb warns the first time, names its replacement,
    and keeps working; the second use is silent."""
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-c", _OLD_VERBS, str(project), str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    first, second = run.stdout.splitlines()
    assert "agent.approve() is deprecated; use agent.paused_turn.approve" in first
    assert "agent.continue_after_pause() is deprecated; use agent.paused_turn.resume()" in first
    assert second == "b []"
    assert (project / "a.txt").read_text() == "x" and (project / "b.txt").read_text() == "y"


def test_every_session_store_is_a_session_store(tmp_path: Path) -> None:
    """``runtime.session_store`` is typed by the SessionStore protocol; the built-in stores
    and PostgreSQL's meet it (methods and their async-ness)."""
    import inspect

    from memora.memory.sessions import InMemorySessionStore, JsonlSessionStore, SessionStore
    from memora_plugin_postgres.sessions import PostgresSessionStore

    wanted = [n for n in vars(SessionStore) if not n.startswith("_")]
    assert {"create", "rounds", "fork", "archive", "close"} <= set(wanted)
    assert isinstance(JsonlSessionStore(tmp_path / "s"), SessionStore)
    assert isinstance(InMemorySessionStore(), SessionStore)
    for cls in (JsonlSessionStore, InMemorySessionStore, PostgresSessionStore):
        for name in wanted:
            assert inspect.iscoroutinefunction(getattr(cls, name)), (cls.__name__, name)
