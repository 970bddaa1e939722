"""Nothing changes the world without asking: the approval modes, in the kernel and at the
command line (a scripted OpenAI-compatible server on 127.0.0.1 plays the model)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memora import Agent
from memora.checks import approval_for, stricter
from memora.settings import resolve_settings
from memora.testing import ScriptedProvider, text, tool_call
from tests.core.test_chat_cli import Script, _chat, _env, call, pexpect, say, server  # noqa: F401
from tests.core.test_settings import _write

# -- the modes ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (None, {"read_file": "runs", "write_file": "runs", "run_command": "runs", "mcp": "runs"}),
        (
            "full-auto",
            {"read_file": "runs", "write_file": "runs", "run_command": "runs", "mcp": "runs"},
        ),
        (
            "auto-edit",
            {"read_file": "runs", "write_file": "runs", "run_command": "asks", "mcp": "asks"},
        ),
        ("ask", {"read_file": "runs", "write_file": "asks", "run_command": "asks", "mcp": "asks"}),
        (
            "read-only",
            {
                "read_file": "runs",
                "write_file": "refused",
                "run_command": "refused",
                "mcp": "refused",
            },
        ),
    ],
)
def test_what_each_mode_does(mode: Any, expected: dict[str, str]) -> None:
    tools = {
        "read_file": (False, False),
        "write_file": (True, False),
        "run_command": (True, True),
        "mcp": (True, False),  # a server's writing tool is no file edit
    }
    got = {
        name: approval_for(
            mode, "mcp_github_create_issue" if name == "mcp" else name, writes=w, runs_code=r
        )
        for name, (w, r) in tools.items()
    }
    assert got == expected


def test_stricter() -> None:
    assert stricter("ask", "full-auto") == "ask"
    assert stricter("auto-edit", "read-only") == "read-only"
    assert stricter(None, "ask") == "ask" and stricter("ask", None) == "ask"


async def _turn(tmp_path: Path, approvals: Any, calls: list[Any]) -> tuple[Agent, list[Any]]:
    project = tmp_path / "p"
    project.mkdir(parents=True, exist_ok=True)
    (project / "keep.txt").write_text("keep", encoding="utf-8")
    provider = ScriptedProvider([tool_call(*calls), text("done")])
    agent = Agent(
        project_path=project,
        data_dir=tmp_path / "d",
        provider=provider,
        approvals=approvals,
        load_entrypoints=False,
    )
    await agent.init()
    return agent, [c async for c in agent.chat("go")]


async def test_ask_pauses_a_write_and_read_only_refuses_it(tmp_path: Path) -> None:
    write = ("write_file", {"path": "new.txt", "content": "x"}, "w1")
    agent, chunks = await _turn(tmp_path / "ask", "ask", [write])
    try:
        assert [c.type for c in chunks][-2:] == ["approval_pending", "paused"]
        assert not (tmp_path / "ask" / "p" / "new.txt").exists()
    finally:
        await agent.close()
    agent, chunks = await _turn(tmp_path / "ro", "read-only", [write])
    try:
        result = next(c for c in chunks if c.type == "tool_result")
        assert result.blocked and "read-only" in result.summary
        assert chunks[-1].type == "done" and not (tmp_path / "ro" / "p" / "new.txt").exists()
    finally:
        await agent.close()


async def test_auto_edit_runs_edits_and_asks_for_commands(tmp_path: Path) -> None:
    write = ("write_file", {"path": "new.txt", "content": "x"}, "w1")
    remove = ("run_command", {"command": "rm -f keep.txt"}, "r1")
    agent, chunks = await _turn(tmp_path, "auto-edit", [write, remove])
    try:
        assert (tmp_path / "p" / "new.txt").read_text() == "x"  # the edit ran
        assert (tmp_path / "p" / "keep.txt").exists()  # the command waits for the user
        pending = next(c for c in chunks if c.type == "approval_pending")
        assert pending.name == "run_command"
    finally:
        await agent.close()


async def test_the_library_default_is_the_hosts_choice(tmp_path: Path) -> None:
    """``Agent()`` without ``approvals`` and without a configured mode: calls run (a host that
    wants approvals says so); documented in docs/agent.md."""
    remove = ("run_command", {"command": "rm -f keep.txt"}, "r1")
    agent, chunks = await _turn(tmp_path, None, [remove])
    try:
        assert agent.approvals is None and chunks[-1].type == "done"
        assert not (tmp_path / "p" / "keep.txt").exists()
    finally:
        await agent.close()


# -- the config: the user's mode, a project's only stricter ----------------------------------------


@pytest.mark.parametrize(
    ("user", "project", "effective", "ignored"),
    [
        ("auto-edit", "ask", "ask", {}),
        (None, "read-only", "read-only", {}),
        ("ask", "full-auto", "ask", {"approvals": "full-auto"}),
        (None, "full-auto", None, {"approvals": "full-auto"}),  # looser than the CLI's default
        ("full-auto", "auto-edit", "auto-edit", {}),
    ],
)
def test_a_project_may_only_make_approvals_stricter(
    dirs: tuple[Path, Path], user: Any, project: Any, effective: Any, ignored: Any
) -> None:
    project_dir, user_dir = dirs
    if user:
        _write(user_dir / "config.json", {"approvals": user})
    _write(project_dir / ".memora" / "config.json", {"approvals": project})
    s = resolve_settings(project_dir, config_dir=user_dir)
    assert s.config.approvals == effective and s.ignored == ignored


# -- memora run, as a script or a person uses it ------------------------------------------------


def _run(
    tmp_path: Path, url: str, *args: str, project: Path | None = None
) -> subprocess.CompletedProcess[str]:
    project = project or tmp_path / "p"
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "memora",
            "run",
            *args,
            "--project",
            str(project),
            "--base-url",
            url,
            "--model",
            "m",
        ],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    p = tmp_path / "p"
    p.mkdir()
    (p / "keep.txt").write_text("keep", encoding="utf-8")
    return p


def test_run_without_a_terminal_refuses_and_says_how_to_allow(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
    project: Path,
) -> None:
    url, script = server
    script.answers += [call("run_command", {"command": "rm -f keep.txt"}), say("removed")]
    r = _run(tmp_path, url, "tidy up")
    assert r.returncode == 3, r.stderr
    assert (project / "keep.txt").exists()
    assert "run_command needs approval" in r.stderr and "--yes" in r.stderr
    assert "memora run --resume" in r.stderr
    # the user allows it: the paused turn continues where it stopped
    r = _run(tmp_path, url, "--resume", "--yes")
    assert r.returncode == 0, r.stderr
    assert not (project / "keep.txt").exists() and "removed" in r.stdout


def test_a_paused_turn_not_sealed_by_this_user_is_never_resumed(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
    project: Path,
) -> None:
    """A project's folder is untrusted: a paused turn found in it (cloned, copied, edited) must
    not be resumed — with --yes its pending call would run, chosen by whoever wrote the file."""
    url, script = server
    script.answers += [call("run_command", {"command": "rm -f keep.txt"}), say("removed")]
    assert _run(tmp_path, url, "tidy up").returncode == 3
    state_file = project / ".memora" / "data" / "paused-turn.json"
    mine = json.loads(state_file.read_text(encoding="utf-8"))
    assert (tmp_path / "home" / "seal.key").stat().st_mode & 0o777 == 0o600
    victim = project / "victim.txt"
    victim.write_text("mine", encoding="utf-8")
    edited = json.loads(json.dumps(mine).replace("rm -f keep.txt", "rm -f victim.txt"))
    planted = [
        edited,  # the pending call changed after memora sealed it
        mine["sealed"],  # a pause as another memora (or someone) wrote it: no seal
        {"sealed": mine["sealed"], "mac": "0" * 64},  # someone else's seal
    ]
    for doc in planted:
        state_file.write_text(json.dumps(doc), encoding="utf-8")
        r = _run(tmp_path, url, "--resume", "--yes")
        assert r.returncode == 1, r.stderr
        assert "was not sealed by your memora" in r.stderr
        assert victim.exists() and (project / "keep.txt").exists()
    # the user's own pause, untouched, still resumes
    state_file.write_text(json.dumps(mine), encoding="utf-8")
    r = _run(tmp_path, url, "--resume", "--yes")
    assert r.returncode == 0, r.stderr
    assert not (project / "keep.txt").exists() and victim.exists()


def test_run_yes_and_read_only(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
    project: Path,
) -> None:
    url, script = server
    script.answers += [call("write_file", {"path": "a.txt", "content": "1"}), say("refused")]
    r = _run(tmp_path, url, "write", "--read-only")
    assert r.returncode == 0 and not (project / "a.txt").exists(), r.stderr
    assert "read-only" in r.stderr
    script.answers += [call("write_file", {"path": "a.txt", "content": "1"}), say("wrote")]
    r = _run(tmp_path, url, "write", "-y")
    assert r.returncode == 0 and (project / "a.txt").read_text() == "1", r.stderr
    r = _run(tmp_path, url, "x", "--yes", "--read-only")
    assert r.returncode == 2 and "choose one approval mode" in r.stderr


def test_the_user_config_sets_the_default_mode(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
    project: Path,
) -> None:
    url, script = server
    _write(tmp_path / "home" / "config.json", {"approvals": "auto-edit"})
    script.answers += [call("write_file", {"path": "a.txt", "content": "1"}), say("wrote")]
    r = _run(tmp_path, url, "write")
    assert r.returncode == 0 and (project / "a.txt").exists(), r.stderr


def test_run_starts_a_new_conversation_unless_told_to_continue(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
    project: Path,
) -> None:
    url, script = server
    script.answers += [say("one"), say("two"), say("three")]
    assert _run(tmp_path, url, "first").returncode == 0
    assert _run(tmp_path, url, "second").returncode == 0
    second = script.requests[-1]["messages"]
    assert not any("first" in str(m.get("content")) for m in second)  # a fresh conversation
    assert _run(tmp_path, url, "third", "-c").returncode == 0
    third = [m for m in script.requests[-1]["messages"] if m["role"] == "user"]
    assert [m["content"] for m in third][-2:] == ["second", "third"]


def test_tools_list_and_show_say_what_needs_approval(tmp_path: Path, project: Path) -> None:
    def memora(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "memora", "tools", *args, "--project", str(project)],
            capture_output=True,
            text=True,
            env=_env(tmp_path),
            timeout=120,
            check=False,
        )

    report = json.loads(memora("list", "--json").stdout)
    rows = {row["name"]: row for row in report["tools"]}
    assert report["approvals"] == "ask"
    assert rows["write_file"]["approval"] == "asks" and rows["read_file"]["approval"] == "runs"
    assert rows["write_file"]["parameters"]["required"] == ["path", "content"]
    report = json.loads(memora("list", "--json", "--approvals", "auto-edit").stdout)
    assert {r["name"]: r["approval"] for r in report["tools"]}["write_file"] == "runs"
    shown = memora("show", "run_command")
    assert shown.returncode == 0 and "approval (ask): asks first" in shown.stdout
    assert "command: string (required)" in shown.stdout
    missing = memora("show", "nope")
    assert missing.returncode == 1 and "no tool named 'nope'" in missing.stderr


# -- memora chat: y / n / a / e ------------------------------------------------------------------


def test_chat_asks_and_remembers_always_and_edits_in_the_editor(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
    project: Path,
) -> None:
    url, script = server
    env = _env(tmp_path)
    # an "editor" that changes the file name in the arguments it is given
    editor = tmp_path / "editor.py"
    editor.write_text(
        "import sys, pathlib\np = pathlib.Path(sys.argv[1])\n"
        "p.write_text(p.read_text().replace('b.txt', 'edited.txt'))\n",
        encoding="utf-8",
    )
    env["EDITOR"] = f"{sys.executable} {editor}"
    child = pexpect.spawn(
        sys.executable,
        ["-m", "memora", "chat", "--project", str(project), "--base-url", url, "--model", "m"],
        env=env,
        encoding="utf-8",
        timeout=60,
        dimensions=(40, 160),
    )
    child.expect("approvals")
    child.expect("/help")
    # n: refused, the file stays
    script.answers += [call("run_command", {"command": "rm -f keep.txt"}), say("ok, kept")]
    child.sendline("remove keep.txt")
    child.expect(r"\[a\]lways this session")
    child.sendline("n")
    child.expect("ok, kept")
    assert (project / "keep.txt").exists()
    # a: this tool runs without asking for the rest of the session
    script.answers += [call("write_file", {"path": "a.txt", "content": "1"}, "w1"), say("wrote a")]
    child.sendline("write a")
    child.expect(r"\[a\]lways this session")
    child.sendline("a")
    child.expect("write_file path=a.txt content=1")  # the line shows the arguments sent
    child.expect("wrote a")
    script.answers += [call("write_file", {"path": "c.txt", "content": "3"}, "w2"), say("wrote c")]
    child.sendline("write c")
    child.expect("always, this session")
    child.expect("wrote c")
    # e: the arguments open in $EDITOR; the edited call runs
    script.answers += [call("run_command", {"command": "touch b.txt"}, "r2"), say("touched")]
    child.sendline("touch b")
    child.expect(r"\[a\]lways this session")
    child.sendline("e")
    child.expect("touched")
    child.sendline("/quit")
    child.expect(pexpect.EOF)
    assert (project / "a.txt").exists() and (project / "c.txt").exists()
    assert (project / "edited.txt").exists() and not (project / "b.txt").exists()


def test_ctrl_c_at_an_approval_prompt_stops_the_turn_at_once(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
    project: Path,
) -> None:
    """#41: Ctrl-C at the chat's approval prompt showed nothing until the prompt was answered
    (the event loop held SIGINT); now the turn stops there and then, nothing runs."""
    url, script = server
    child = _chat(project, url, _env(tmp_path))  # up to its header's "/help"
    script.answers += [call("run_command", {"command": "rm -f keep.txt"}), say("removed")]
    child.sendline("remove keep.txt")
    child.expect(r"\[a\]lways this session")
    child.sendintr()
    child.expect("stopped", timeout=10)
    child.expect("› ")
    assert (project / "keep.txt").exists()
    # the session goes on: the next message is a new turn (the stopped turn's second answer
    # was never asked for)
    script.answers[:] = [say("still here")]
    child.sendline("hello")
    child.expect("still here")
    child.sendline("/quit")
    child.expect(pexpect.EOF)
