"""memora-plugin-dbos: durable turns on DBOS Transact, its journal in a SQLite file (#71).

A process runs a turn whose worker is SIGKILLed in the middle of its second LLM call, after the
first tool's result was kept; this process then takes the turn over from DBOS's journal: the
first tool is not run again, the second runs once, the round is stored once and ends ``done``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from memora import ProjectRuntime, tool
from memora.errors import ErrorCode, MemoraError
from memora.testing import ScriptedProvider, text, tool_call

pytest.importorskip("dbos")

CHILD = textwrap.dedent(
    """
    import asyncio, json, os, signal, sys
    from pathlib import Path
    from memora import ProjectRuntime, tool
    from memora.testing import ScriptedProvider, text, tool_call

    root = Path(sys.argv[1])

    @tool(idempotency="non-idempotent")
    async def step_one(ctx) -> str:
        '''The first step.'''
        with open(root / "ran.log", "a") as fh:
            fh.write("step_one\\n")
        return "one done"

    def die(request):
        os.kill(os.getpid(), signal.SIGKILL)  # in the middle of the second LLM call

    async def main():
        provider = ScriptedProvider([tool_call(("step_one", {})), die])
        async with ProjectRuntime(
            project_path=root / "project", data_dir=root / "data", config_dir=root / "config",
            provider=provider, load_entrypoints=True, approvals="full-auto",
        ) as runtime:
            agent = await runtime.agent(session_id="s1")
            agent.tools.register(step_one)
            async for chunk in agent.chat("run both steps"):
                print(json.dumps({"type": chunk.type}), flush=True)

    asyncio.run(main())
    """
)


def _user_config(root: Path) -> None:
    config = root / "config"
    config.mkdir()
    (config / "config.json").write_text(json.dumps({"turn_executor": "dbos"}))


@tool(idempotency="non-idempotent")
async def step_one(ctx: Any) -> str:
    """The first step."""
    raise AssertionError("step_one ran again on the worker that took the turn over")


RAN: list[str] = []


@tool(idempotency="non-idempotent")
async def step_two(ctx: Any) -> str:
    """The second step."""
    RAN.append("step_two")
    return "two done"


async def test_a_turn_killed_between_two_tool_steps_ends_done_on_another_worker(
    tmp_path: Path,
) -> None:
    (tmp_path / "project").mkdir()
    _user_config(tmp_path)
    env = {**os.environ, "MEMORA_LOAD_PLUGINS": "dbos"}
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    assert (tmp_path / "ran.log").read_text() == "step_one\n"
    said = [json.loads(line)["type"] for line in child.stdout.splitlines()]
    assert "tool_result" in said and "done" not in said
    os.environ["MEMORA_LOAD_PLUGINS"] = "dbos"
    try:
        provider = ScriptedProvider([tool_call(("step_two", {})), text("both done")])
        async with ProjectRuntime(
            project_path=tmp_path / "project",
            data_dir=tmp_path / "data",
            config_dir=tmp_path / "config",
            provider=provider,
            approvals="full-auto",
        ) as runtime:
            executor = runtime.turn_executor
            assert executor is not None
            (left,) = await executor.unfinished("s1")
            agent = await runtime.agent(session_id="s1")
            agent.tools.register(step_one)
            agent.tools.register(step_two)
            chunks = [c async for c in agent.take_over(left.key)]
            assert chunks[-1].type == "done" and chunks[-1].answer == "both done"
            assert RAN == ["step_two"]
            # the LLM call the dead worker was in is made again; the first one is not
            assert len(provider.requests) == 2
            (stored,) = await runtime.session_store.rounds("s1")
            assert stored.status == "done"
            names = [e["name"] for e in stored.events if e["type"] == "tool_result"]
            assert names == ["step_one", "step_two"]
            assert await executor.unfinished() == []
            assert await executor.last_state(left.key) is None
    finally:
        del os.environ["MEMORA_LOAD_PLUGINS"]
    assert (tmp_path / "ran.log").read_text() == "step_one\n"  # once


async def test_a_journal_that_cannot_be_opened_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "project").mkdir()
    config = tmp_path / "config"
    config.mkdir()
    (config / "config.json").write_text(
        json.dumps(
            {
                "turn_executor": "dbos",
                "plugins": {"dbos": {"system_database_url": "postgresql://nobody@127.0.0.1:9/x"}},
            }
        )
    )
    os.environ["MEMORA_LOAD_PLUGINS"] = "dbos"
    try:
        runtime = ProjectRuntime(
            project_path=tmp_path / "project",
            data_dir=tmp_path / "data",
            config_dir=config,
            provider=ScriptedProvider([text("x")]),
        )
        with pytest.raises(MemoraError) as info:
            await runtime.open()
        assert info.value.code in (ErrorCode.NOT_AVAILABLE, ErrorCode.PLUGIN_HOOK_FAILED)
        assert "127.0.0.1:9" in info.value.message and "journal" in info.value.message
        assert not runtime.is_open
    finally:
        del os.environ["MEMORA_LOAD_PLUGINS"]


async def test_one_process_serves_two_projects_on_the_default_journal(tmp_path: Path) -> None:
    """The default journal is the user's one file (each turn tagged with its project): one
    process opens two projects with durable turns and runs a turn in each — before, each project
    had a journal of its own, and the second could not open (one DBOS per process, one journal)."""
    from memora_plugin_dbos import DbosTurnExecutor
    from memora_plugin_dbos.executor import JOURNAL

    _user_config(tmp_path)
    runtimes = []
    try:
        for name in ("alpha", "beta"):
            (tmp_path / name).mkdir()
            runtime = ProjectRuntime(
                project_path=tmp_path / name,
                data_dir=tmp_path / name / "data",
                config_dir=tmp_path / "config",
                provider=ScriptedProvider([text(f"{name} answered")]),
                load_entrypoints=True,
                approvals="full-auto",
            )
            await runtime.open()
            runtimes.append(runtime)
        executors = [r.turn_executor for r in runtimes]
        assert all(isinstance(e, DbosTurnExecutor) for e in executors)
        assert {e.url for e in executors} == {
            f"sqlite:///{tmp_path / 'config' / 'turns' / JOURNAL}"
        }  # type: ignore[union-attr]
        for runtime, name in zip(runtimes, ("alpha", "beta"), strict=True):
            agent = await runtime.agent(session_id="s1")
            chunks = [c async for c in agent.chat("hello")]
            assert chunks[-1].type == "done" and chunks[-1].answer == f"{name} answered"
            assert [r.status for r in await runtime.session_store.rounds("s1")] == ["done"]
    finally:
        for runtime in runtimes:
            await runtime.close()


@pytest.mark.parametrize("threads", [0, 257, 2.5, True, "4"])
def test_a_thread_pool_size_out_of_range_is_a_clear_error(tmp_path: Path, threads: Any) -> None:
    from memora_plugin_dbos import DbosTurnExecutor

    with pytest.raises(
        MemoraError, match=r"plugins\.dbos\.threads must be a whole number in 1\.\.256"
    ) as err:
        DbosTurnExecutor({"path": tmp_path, "user_dir": tmp_path, "threads": threads})
    assert err.value.code == ErrorCode.INVALID_CONFIG
