"""A hostile review (H11) of `memora run`'s SIGINT while its turn gets ready, and of `memora run
--resume` racing `memora runs cancel` of the same paused detached run (#71).  Real processes
against a scripted OpenAI-compatible server on 127.0.0.1, as in tests/core/test_detached_runs.py;
the window a race needs is widened by a ``sitecustomize`` that slows one step of the process
(``SLOW``: which, and how long)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
from pathlib import Path

from tests.core.test_chat_cli import Script, call, say, server  # noqa: F401 - the fixture
from tests.core.test_detached_runs import (
    MEMORA,
    _detach,
    _env,
    _memora,
    _project,
    _runs,
    _wait,
    dead_durable_run,
)

SLOWER = """
import asyncio, functools, os, pathlib
what, seconds = os.environ["H11_SLOW"].split("=")
marker = pathlib.Path(os.environ["H11_MARK"])

def slowed(module, name):
    import importlib
    owner = importlib.import_module(module)
    if "." in name:
        cls, attr = name.split(".")
        owner, name = getattr(owner, cls), attr
    real = getattr(owner, name)

    @functools.wraps(real)
    async def slow(*args, **kwargs):
        marker.write_text("in")
        await asyncio.sleep(float(seconds))
        return await real(*args, **kwargs)

    setattr(owner, name, slow)

module, name = what.rsplit(":", 1)
slowed(module, name)
"""


def _slowed(tmp_path: Path, env: dict[str, str], what: str, seconds: float) -> dict[str, str]:
    """``env`` for a process whose ``what`` (``module:function`` or ``module:Class.method``)
    waits ``seconds`` first, writing ``tmp_path/in`` as it starts waiting."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SLOWER)
    path = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH", "")) if p)
    mark = tmp_path / "in"
    mark.unlink(missing_ok=True)
    return {**env, "PYTHONPATH": path, "H11_SLOW": f"{what}={seconds}", "H11_MARK": str(mark)}


def _paused_run(tmp_path: Path, url: str, script: Script) -> tuple[Path, dict[str, str], str]:
    """A detached run paused on an approval of ``write_file`` (x.txt), nobody to give it."""
    script.answers = [call("write_file", {"path": "x.txt", "content": "hi"}), say("wrote it")]
    tmp_path.mkdir(exist_ok=True)
    project, env = _project(tmp_path), _env(tmp_path)
    run_id = _detach(project, env, url, "write a file")
    followed = _memora(project, env, "runs", "follow", run_id)
    assert followed.returncode == 3, followed.stderr
    return project, env, run_id


def _resume(project: Path, env: dict[str, str], url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*MEMORA, "run", "--resume", "--yes", "--base-url", url, "--model", "m",
         "--project", str(project)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def _rounds(project: Path, env: dict[str, str], session: str) -> list[str]:
    shown = _memora(project, env, "sessions", "show", session, "--json")
    return (
        [r["status"] for r in json.loads(shown.stdout)["rounds"]] if shown.returncode == 0 else []
    )


def _workflows(tmp_path: Path) -> list[str]:
    """The statuses of the workflows in the user's journal."""
    with sqlite3.connect(tmp_path / "home" / "turns" / "journal.sqlite") as db:
        return [str(r[0]) for r in db.execute("SELECT status FROM workflow_status")]


def test_a_cancel_that_says_it_dropped_a_pause_is_never_followed_by_its_call(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    """Found: `memora run --resume --yes` and `memora runs cancel` of the same paused run, the
    cancel while the resume's Agent gets ready (widened here to 3 s; 0.1-0.2 s after the
    resume started hits it unslowed): cancel printed "run ...: cancelled" — no "continued
    already" — and the run says cancelled, while the resume ran the approved write_file,
    printed "wrote it", and the session keeps the round done.  One of the two must win: the
    resume that got the pause goes on (cancel says the pause was continued already), or the
    cancel that dropped it leaves nothing to resume."""
    url, script = server
    project, env, run_id = _paused_run(tmp_path, url, script)
    slow = _slowed(tmp_path, env, "memora.cli.run_cmd:start_agent", 3.0)
    resume = _resume(project, slow, url)
    _wait(lambda: (tmp_path / "in").exists())  # it read the paused turn
    cancelled = _memora(project, env, "runs", "cancel", run_id)
    out, err = resume.communicate(timeout=120)
    assert cancelled.returncode == 0, cancelled.stderr
    if cancelled.stdout.strip() == f"run {run_id}: cancelled":  # it dropped the pause
        assert not (project / "x.txt").exists() and "wrote it" not in out, err
        assert resume.returncode != 0
    else:  # the resume had it: the cancel says so
        assert "continued already" in cancelled.stdout, cancelled.stdout
        assert resume.returncode == 0 and "wrote it" in out, err


def test_a_sigint_before_a_resumed_turn_runs_never_runs_its_approved_call(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    """Found: Ctrl-C (or a script's SIGINT) while `memora run --resume --yes` gets its paused
    turn ready (the signal handler set, the turn not yet running) was remembered and the turn
    ended aborted at its first chunk — but a resumed turn's first step is the call it
    approved: write_file ran in 4 of 5 tries, then the turn said "aborted: Stopped by the
    user".  Three tries here (each a fresh paused run): none may write."""
    url, script = server
    for attempt in range(3):
        folder = tmp_path / f"try{attempt}"
        project, env, _run = _paused_run(folder, url, script)
        slow = _slowed(folder, env, "memora.agent.agent:Agent.resume", 2.0)
        resume = _resume(project, slow, url)
        _wait(lambda folder=folder: (folder / "in").exists())  # handler set: resuming
        resume.send_signal(signal.SIGINT)
        _out, err = resume.communicate(timeout=120)
        assert resume.returncode == 130, err
        assert not (project / "x.txt").exists(), f"try {attempt}: the approved call ran: {err}"


def test_a_take_over_cancelled_while_starting_leaves_no_turn_in_the_journal(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    """Found: `runs follow` starts a dead durable run again; a `runs cancel` while that
    process is still starting (before its turn took SIGINT over: DBOS, storage and role pack
    being opened) ends it through KeyboardInterrupt as ``aborted`` — and cancel, seeing
    ``aborted``, abandons nothing: the dead turn's workflow stays PENDING in the user's
    journal, its messages and tool results with it, for any later host of the session to
    take over and run on (`memora serve`'s take-over pass does, for a session it holds)."""
    url, script = server
    project, env, run_id = dead_durable_run(tmp_path, url, script)
    slow = _slowed(tmp_path, env, "memora.cli.run_cmd:start_agent", 3.0)
    follow = subprocess.Popen(
        [*MEMORA, "runs", "follow", run_id, "--project", str(project)],
        env=slow, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    _wait(lambda: (tmp_path / "in").exists())  # the run's process is starting again
    cancelled = _memora(project, env, "runs", "cancel", run_id)
    assert cancelled.returncode == 0, cancelled.stderr
    follow.communicate(timeout=120)
    assert _runs(project, env)[run_id]["status"] == "cancelled"
    assert len([q for q in script.requests if q.get("stream")]) == 2  # nothing asked again
    assert [s for s in _workflows(tmp_path) if s in ("PENDING", "ENQUEUED")] == []


def test_a_take_over_cancelled_as_it_gets_its_turn_ends_aborted_and_leaves_nothing(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    """Held: the same cancel once the restarted run set its SIGINT handler (looking for the
    dead process's turn): the taken-over turn ends aborted before any LLM call, the run
    says cancelled, the session keeps the round aborted, and the journal keeps nothing
    that may go on."""
    url, script = server
    project, env, run_id = dead_durable_run(tmp_path, url, script)
    slow = _slowed(tmp_path, env, "memora.cli.run_cmd:left_turn", 3.0)
    follow = subprocess.Popen(
        [*MEMORA, "runs", "follow", run_id, "--events", "jsonl", "--project", str(project)],
        env=slow, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    _wait(lambda: (tmp_path / "in").exists())
    cancelled = _memora(project, env, "runs", "cancel", run_id)
    assert cancelled.returncode == 0 and cancelled.stdout.strip().endswith("cancelled")
    out, err = follow.communicate(timeout=120)
    assert follow.returncode == 130, err
    assert json.loads(out.splitlines()[-1])["type"] == "aborted"
    run = _runs(project, env)[run_id]
    assert run["status"] == "cancelled"
    assert _rounds(project, env, run["session"]) == ["aborted"]
    assert len([q for q in script.requests if q.get("stream")]) == 2
    assert [s for s in _workflows(tmp_path) if s in ("PENDING", "ENQUEUED")] == []
