"""Hiding memora's data from what tools run (#68 item 2): the reaper's ``--hide``, its failure
(the command is refused, never run unhidden), the file tools' refusal of memora's folders,
background commands kept to the scope that started them, and a scoped Agent's tools isolated by
default."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memora import Agent
from memora.errors import ToolError, ToolErrorCode
from memora.security.paths import PathGuard
from memora.testing import ScriptedProvider, text, tool_call
from memora.tools.process import BackgroundTasks, run_process

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux namespaces")

SECRET = "otter-3141-secret"


def _folder(tmp_path: Path) -> Path:
    hidden = tmp_path / "data"
    hidden.mkdir()
    (hidden / "log.jsonl").write_text(f'{{"said": "{SECRET}"}}\n')
    return hidden


async def test_a_hidden_folder_is_empty_and_read_only_for_the_command(tmp_path: Path) -> None:
    hidden = _folder(tmp_path)
    result = await run_process(
        f"ls -A {hidden}; cat {hidden}/log.jsonl; touch {hidden}/x; echo end",
        cwd=tmp_path,
        timeout=30,
        hide=[hidden],
    )
    assert SECRET not in result.output
    assert "No such file" in result.output and "Read-only file system" in result.output
    assert result.output.rstrip().endswith("end")
    # nothing changed outside the command's own view
    assert (hidden / "log.jsonl").read_text().count(SECRET) == 1
    assert not (hidden / "x").exists()
    plain = await run_process(f"cat {hidden}/log.jsonl", cwd=tmp_path, timeout=30)
    assert SECRET in plain.output


async def test_background_commands_hide_it_too(tmp_path: Path) -> None:
    hidden = _folder(tmp_path)
    tasks = BackgroundTasks()
    task = await tasks.start(f"cat {hidden}/log.jsonl; echo end", cwd=tmp_path, hide=[hidden])
    await task.proc.wait()
    await task.pump
    assert "end" in task.tail() and SECRET not in task.tail()
    await tasks.close()


@pytest.mark.skipif(shutil.which("unshare") is None, reason="util-linux's unshare is missing")
def test_where_nothing_can_be_hidden_the_command_is_refused_not_run(tmp_path: Path) -> None:
    """In a user namespace where memora's uid has no mapping and no capability (what a
    machine without unprivileged user namespaces looks like from inside), hiding fails: the
    command must not run at all."""
    hidden = _folder(tmp_path)
    marker = tmp_path / "ran"
    program = textwrap.dedent(
        f"""
        import asyncio
        from pathlib import Path
        from memora.errors import ToolError
        from memora.tools.process import run_process

        async def main():
            try:
                await run_process("touch {marker}", cwd=Path("{tmp_path}"), timeout=30,
                                  hide=[Path("{hidden}")])
            except ToolError as exc:
                print("refused", exc.code, exc.message)
            else:
                print("ran")

        asyncio.run(main())
        """
    )
    done = subprocess.run(
        ["unshare", "--user", sys.executable, "-c", program],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stdout.startswith("refused NOT_AVAILABLE"), done.stdout + done.stderr
    assert "user namespace" in done.stdout
    assert not marker.exists()


def test_the_file_tools_refuse_memoras_folders(tmp_path: Path) -> None:
    project = tmp_path / "p"
    data = project / ".memora" / "data"
    data.mkdir(parents=True)
    guard = PathGuard(project, hidden=[data])
    for path in (".memora/data", ".memora/data/sessions/x.jsonl", str(data), "x/../.memora/data"):
        with pytest.raises(ToolError) as refused:
            guard.resolve(path, purpose="read")
        assert refused.value.code == ToolErrorCode.PATH_NOT_ALLOWED
        assert "memora's own data" in refused.value.message
    (project / "sneaky").symlink_to(data)
    with pytest.raises(ToolError):
        guard.resolve("sneaky/log", purpose="read")
    assert guard.resolve(".memora/config.json") == project.resolve() / ".memora" / "config.json"


async def test_background_commands_are_their_scopes_own(tmp_path: Path) -> None:
    tasks = BackgroundTasks()
    alice, bob = tasks.for_scope("alice"), tasks.for_scope("bob")
    started = await alice.start(f"echo {SECRET}; sleep 30", cwd=tmp_path)
    assert [t["id"] for t in alice.list()] == [started.id]
    assert bob.list() == []
    for act in (lambda: bob.get(started.id),):
        with pytest.raises(ToolError) as missing:
            act()
        assert missing.value.code == ToolErrorCode.FILE_NOT_FOUND
        assert started.id not in missing.value.message.split("running:")[1]
    with pytest.raises(ToolError):
        await bob.kill(started.id)
    assert started.running
    await tasks.close()  # the runtime's own view closes everyone's
    assert not started.running


@pytest.mark.parametrize("scope", ["alice", None])
async def test_a_scoped_agents_commands_do_not_see_memoras_data(
    tmp_path: Path, scope: str | None
) -> None:
    """One of several people's Agents (a memory scope) isolates its tools by default; the
    embedded single user's does not need to (its data is its own)."""
    project = tmp_path / "p"
    project.mkdir()
    data = tmp_path / "p" / ".memora" / "data"
    command = {"command": f"grep -r -c otter {data} || true", "timeout": 30}
    provider = ScriptedProvider(
        [
            text(f"noted {SECRET}"),
            tool_call(("run_command", command, "c1")),
            text("done"),
        ]
    )
    async with Agent(
        project_path=project,
        data_dir=data,
        config_dir=tmp_path / "user",
        provider=provider,
        memory_scope=scope,
        approvals="full-auto",
        load_entrypoints=False,
    ) as agent:
        await agent.chat_text(f"remember {SECRET}")
        await agent.chat_text("look")
    seen = provider.requests[-1].messages[-1].content
    if scope is None:
        assert ".jsonl:" in seen, seen  # its own session log, found
    else:
        assert ".jsonl" not in seen and "[ok]" in seen, seen


async def test_a_memora_folder_holding_the_project_refuses_an_isolated_agents_commands(
    tmp_path: Path,
) -> None:
    """The user's config folder holds the project (``config_dir=/srv/memora``, the project in
    it): it cannot be hidden from a command working in the project without hiding the project,
    so an isolated Agent's commands, background commands and ``run_code`` are refused, saying
    why; an Agent whose tools are not isolated runs them, as one person's would."""
    home = tmp_path / "memora-home"
    project = home / "projects" / "proj"
    project.mkdir(parents=True)
    (home / "keys.json").write_text(f'{{"shop": "sk-{SECRET}"}}')
    common = {
        "project_path": project,
        "data_dir": tmp_path / "data",
        "config_dir": home,
        "provider": ScriptedProvider([text("ok")]),
        "load_entrypoints": False,
    }
    async with Agent(**common, isolate_tools=True) as agent:
        for args in (
            {"command": f"cat {home}/keys.json"},
            {"command": f"cat {home}/keys.json", "background": True},
        ):
            result = await agent.call_tool("run_command", args, approve=True)
            assert not result.ok and result.error_code == "NOT_AVAILABLE", result
            assert "holds the project" in result.content and SECRET not in result.content
    async with Agent(**common, isolate_tools=False) as agent:
        result = await agent.call_tool("run_command", {"command": "echo ran"}, approve=True)
        assert result.ok and "ran" in result.content, result
