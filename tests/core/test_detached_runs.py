"""`memora run --detach` and `memora runs list/follow/cancel` (#71 item 3), as a person at a
terminal uses them: real processes, a scripted OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.core.test_chat_cli import Script, call, say, server  # noqa: F401 - the fixture

MEMORA = [sys.executable, "-m", "memora"]


def _env(tmp_path: Path, **config: Any) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "config.json").write_text(json.dumps(config))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORA_")}
    env["MEMORA_HOME"] = str(home)
    return env


def _memora(
    project: Path, env: dict[str, str], *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*MEMORA, *args, "--project", str(project)],
        env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def _detach(project: Path, env: dict[str, str], url: str, prompt: str) -> str:
    done = _memora(project, env, "run", "--detach", "--base-url", url, "--model", "m", prompt)
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip()
    assert len(run_id) == 12 and int(run_id, 16) >= 0, done.stdout
    assert f"memora runs follow {run_id}" in done.stderr
    return run_id


def _runs(project: Path, env: dict[str, str]) -> dict[str, dict[str, Any]]:
    done = _memora(project, env, "runs", "list", "--json")
    assert done.returncode == 0, done.stderr
    return {row["id"]: row for row in json.loads(done.stdout)}


def _wait(what: Callable[[], bool], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not what():
        assert time.monotonic() < deadline, "waited too long"
        time.sleep(0.1)


def _events(project: Path, run_id: str) -> list[dict[str, Any]]:
    path = project / ".memora" / "data" / "runs" / run_id / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "proj"
    project.mkdir()
    return project


def test_a_detached_run_prints_its_id_and_is_followed_to_its_end(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    url, script = server
    script.answers = [say("hello from a run of its own", 0.05), say("and the next one")]
    project, env = _project(tmp_path), _env(tmp_path)
    run_id = _detach(project, env, url, "say hi")
    followed = _memora(project, env, "runs", "follow", run_id)
    assert followed.returncode == 0, followed.stderr
    assert "hello from a run of its own" in followed.stdout
    row = _runs(project, env)[run_id]
    assert row["status"] == "done" and row["prompt"] == "say hi" and row["session"]
    # re-attached later from any event: the same events again, as JSON lines
    again = _memora(project, env, "runs", "follow", run_id, "--from", "1", "--events", "jsonl")
    assert again.returncode == 0, again.stderr
    types = [json.loads(line)["type"] for line in again.stdout.splitlines()]
    assert types[-1] == "done" and len(types) == len(_events(project, run_id)) - 1
    # the run's session goes on in the foreground
    cont = _memora(project, env, "run", "--session", row["session"], "--base-url", url,
                   "--model", "m", "more")  # fmt: skip
    assert cont.returncode == 0 and "and the next one" in cont.stdout, cont.stderr
    folder = project / ".memora" / "data" / "runs" / run_id
    assert {p.name for p in folder.iterdir()} >= {"run.json", "events.jsonl", "exit", "lock"}
    assert all((p.stat().st_mode & 0o777) == 0o600 for p in folder.iterdir())
    assert (folder.stat().st_mode & 0o777) == 0o700


def test_cancelling_a_running_run_aborts_it_and_leaves_the_session_ready(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    url, script = server
    script.answers = [say("a b c d e f g h i j k l m n o p q r s t", 0.5), say("ready again")]
    project, env = _project(tmp_path), _env(tmp_path)
    run_id = _detach(project, env, url, "talk slowly")
    _wait(lambda: any(e["type"] == "text" for e in _events(project, run_id)))
    cancelled = _memora(project, env, "runs", "cancel", run_id)
    assert cancelled.returncode == 0 and "cancelled" in cancelled.stdout, cancelled.stderr
    followed = _memora(project, env, "runs", "follow", run_id)
    assert followed.returncode == 130, followed.stderr
    assert _runs(project, env)[run_id]["status"] == "cancelled"
    session = _runs(project, env)[run_id]["session"]
    cont = _memora(project, env, "run", "--session", session, "--base-url", url, "--model", "m",
                   "are you there")  # fmt: skip
    assert cont.returncode == 0 and "ready again" in cont.stdout, cont.stderr
    again = _memora(project, env, "runs", "cancel", run_id)
    assert again.returncode == 0 and "already ended (cancelled)" in again.stdout


def test_cancelling_a_run_that_waits_for_an_approval_drops_the_pause(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    """Detached, nobody can approve: the run pauses (exit 3, continued with `memora run
    --resume`).  Cancelled, its pause is dropped and the session takes the next message."""
    url, script = server
    script.answers = [call("write_file", {"path": "x.txt", "content": "hi"}), say("fresh start")]
    project, env = _project(tmp_path), _env(tmp_path)
    run_id = _detach(project, env, url, "write a file")
    followed = _memora(project, env, "runs", "follow", run_id)
    assert followed.returncode == 3, followed.stderr
    assert "memora run --resume" in followed.stderr
    assert _runs(project, env)[run_id]["status"] == "paused"
    paused = project / ".memora" / "data" / "paused-turn.json"
    assert paused.exists()
    cancelled = _memora(project, env, "runs", "cancel", run_id)
    assert cancelled.returncode == 0, cancelled.stderr
    assert not paused.exists() and not (project / "x.txt").exists()
    assert _runs(project, env)[run_id]["status"] == "cancelled"
    assert _memora(project, env, "runs", "follow", run_id).returncode == 130
    session = _runs(project, env)[run_id]["session"]
    cont = _memora(project, env, "run", "--session", session, "--base-url", url, "--model", "m",
                   "never mind")  # fmt: skip
    assert cont.returncode == 0 and "fresh start" in cont.stdout, cont.stderr


def dead_durable_run(tmp_path: Path, url: str, script: Script) -> tuple[Path, dict[str, str], str]:
    """A detached run with durable turns (dbos) whose process was SIGKILLed in its second LLM
    call, after its ``read_file`` step was kept: its project, environment and id."""
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "notes.txt").write_text("a note")
    script.answers = [
        call("read_file", {"path": "notes.txt"}),
        say("reading it now slowly one word after another", 0.5),
        say("it says a note"),
    ]
    project, env = tmp_path / "proj", _env(tmp_path, turn_executor="dbos")
    run_id = _detach(project, env, url, "read my notes")
    _kill_mid_answer(project, run_id)
    return project, env, run_id


def _kill_mid_answer(project: Path, run_id: str) -> None:
    _wait(lambda: any(e["type"] == "text" for e in _events(project, run_id)))
    pid = int((project / ".memora" / "data" / "runs" / run_id / "pid").read_text())
    os.kill(pid, 9)
    _wait(lambda: not Path(f"/proc/{pid}").exists() or "Z" in _state(pid))


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "Z"
    return stat[stat.rfind(")") + 2]


def test_a_run_whose_process_died_says_so_without_a_turn_executor(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    url, script = server
    script.answers = [say("one two three four five six seven eight", 0.5)]
    project, env = _project(tmp_path), _env(tmp_path)
    run_id = _detach(project, env, url, "talk slowly")
    _kill_mid_answer(project, run_id)
    assert _runs(project, env)[run_id]["status"] == "died"
    alone = _memora(project, env, "runs", "follow", run_id, "--no-take-over")
    assert alone.returncode == 1 and "died before its turn ended" in alone.stderr
    followed = _memora(project, env, "runs", "follow", run_id)
    assert followed.returncode == 1
    assert "no turn executor kept its turn" in followed.stderr + followed.stdout
    assert _runs(project, env)[run_id]["status"] == "error"


def test_a_durable_run_whose_process_died_goes_on_from_its_last_step(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    """With the DBOS turn executor, `memora runs follow` starts the dead run again: the tool
    call whose result was kept is not asked for again — the model is asked once more only
    for the answer the dead process was receiving."""
    pytest.importorskip("memora_plugin_dbos")
    url, script = server
    project, env, run_id = dead_durable_run(tmp_path, url, script)
    streamed = [r for r in script.requests if r.get("stream")]
    assert len(streamed) == 2
    followed = _memora(project, env, "runs", "follow", run_id, "--events", "jsonl")
    assert followed.returncode == 0, followed.stderr
    assert "going on with its turn" in followed.stderr
    types = [json.loads(line)["type"] for line in followed.stdout.splitlines()]
    assert types[-1] == "done" and types.count("tool_result") == 1, types
    streamed = [r for r in script.requests if r.get("stream")]
    assert len(streamed) == 3  # the first call's answer came from the journal
    assert _runs(project, env)[run_id]["status"] == "done"


def test_a_planted_run_is_never_run_or_signalled(tmp_path: Path) -> None:
    """A run folder in a cloned project (not sealed by this user's memora) is named, never
    run, resumed or cancelled — and its ``pid`` file makes nobody signal anything."""
    project, env = _project(tmp_path), _env(tmp_path)
    folder = project / ".memora" / "data" / "runs" / "0123456789ab"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"prompt": "rm -rf ~", "project": "/"}))
    (folder / "pid").write_text(str(os.getpid()))
    rows = _runs(project, env)
    assert "not your memora's run" in rows["0123456789ab"]["prompt"]
    assert rows["0123456789ab"]["status"] == "foreign"
    for verb in ("follow", "cancel"):
        done = _memora(project, env, "runs", verb, "0123456789ab")
        assert done.returncode == 1 and "was not written by your memora" in done.stderr
    # a run folder that is a link to somewhere else: nothing is read from it or written there
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "run.json").write_text("{}")
    (folder.parent / "ba9876543210").symlink_to(elsewhere)
    for verb in ("follow", "cancel"):
        done = _memora(project, env, "runs", verb, "ba9876543210")
        assert done.returncode == 1, done.stderr
    assert _runs(project, env)["ba9876543210"]["status"] == "foreign"
    assert sorted(p.name for p in elsewhere.iterdir()) == ["run.json"]
    for bad in ("../../etc", "0123456789AB", ""):
        done = _memora(project, env, "runs", "follow", bad)
        assert done.returncode == 1 and "12 hex digits" in done.stderr, done.stderr
