"""`memora run --detach` and `memora runs`, tried as an attacker and a careless user would
(#71 item 3, hostile review H10): planted run folders, model text that wants to drive the
terminal, races between cancel and a run's end, a locale that is not UTF-8, a relative config
folder.  Real processes against a scripted OpenAI-compatible server on 127.0.0.1, as in
tests/core/test_detached_runs.py."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.core.test_chat_cli import Script, call, say, server  # noqa: F401 - the fixture
from tests.core.test_detached_runs import (
    MEMORA,
    _detach,
    _env,
    _events,
    _kill_mid_answer,
    _memora,
    _project,
    _runs,
    _state,
    _wait,
)
from tests.small_disk import fill, small_disk


def _texts(stdout: str) -> str:
    chunks = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    return "".join(c["content"] for c in chunks if c["type"] == "text")


def test_a_run_keeps_its_events_in_utf8_whatever_the_launching_locale(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    """Launched from a shell whose output encoding is not UTF-8 (a Latin-1 locale, or
    PYTHONIOENCODING set for some other tool), the run still writes its events as UTF-8 —
    its events file is memora's own data, read back as UTF-8 — so French, Chinese and an
    emoji reach `runs follow` as the model wrote them (the events file took the launching
    shell's encoding: é became a Latin-1 byte, read back as U+FFFD, and an emoji an
    escape that is no JSON, so its whole event was dropped)."""
    url, script = server
    answer = "café au lait, 你好世界 😀"
    script.answers = [say(answer)]
    project, env = _project(tmp_path), _env(tmp_path)
    launching = {**env, "PYTHONIOENCODING": "latin-1"}
    run_id = _detach(project, launching, url, "用中文打个招呼")
    followed = _memora(project, env, "runs", "follow", run_id, "--events", "jsonl")
    assert followed.returncode == 0, followed.stderr
    assert _texts(followed.stdout) == answer
    assert _runs(project, env)[run_id]["prompt"] == "用中文打个招呼"
    text = _memora(project, env, "runs", "follow", run_id)
    assert text.returncode == 0 and answer in text.stdout, text.stderr


def _plant(project: Path, run_id: str) -> Path:
    folder = project / ".memora" / "data" / "runs" / run_id
    folder.mkdir(parents=True)
    return folder


def test_a_cloned_projects_runs_tree_never_breaks_runs_list_follow_or_cancel(
    tmp_path: Path,
) -> None:
    """A cloned or unpacked project may bring any ``.memora/data/runs`` tree: a run.json
    nested deeper than the JSON parser recurses, a sparse file of 50 GB (free to ship in a
    tarball), binary bytes, fifos where files belong.  `runs list` names each run foreign
    and `follow`/`cancel` refuse it in one line — each used to end in a traceback
    (RecursionError, MemoryError), or read for ever."""
    project, env = _project(tmp_path), _env(tmp_path)
    (_plant(project, "000000000001") / "run.json").write_text("[" * 100_000 + "]" * 100_000)
    with (_plant(project, "000000000002") / "run.json").open("wb") as f:
        f.truncate(50 * 2**30)
    (_plant(project, "000000000003") / "run.json").write_bytes(bytes(range(256)) * 8)
    deep = '{"mac": "00", "sealed": ' + "[" * 100_000 + "]" * 100_000 + "}"
    (_plant(project, "000000000004") / "run.json").write_text(deep)
    fifos = _plant(project, "000000000005")
    (fifos / "run.json").write_text(json.dumps({"sealed": {"version": 1}, "mac": "00"}))
    for name in ("lock", "events.jsonl", "exit", "cancelled", "session", "pid"):
        os.mkfifo(fifos / name)
    os.mkfifo(project / ".memora" / "data" / "runs" / "000000000006")
    planted = [f"00000000000{i}" for i in range(1, 6)]
    listed = _memora(project, env, "runs", "list", timeout=60)
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
    for run_id in planted:
        assert f"{run_id}  foreign" in listed.stdout, listed.stdout
    for run_id in planted:
        for verb in ("follow", "cancel"):
            done = _memora(project, env, "runs", verb, run_id, timeout=60)
            assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
            assert "memora: error:" in done.stderr and run_id in done.stderr, done.stderr
    # the runs folder itself is a file: one line saying so, not a traceback
    other = tmp_path / "other"
    (other / ".memora" / "data").mkdir(parents=True)
    (other / ".memora" / "data" / "runs").write_text("not a folder")
    listed = _memora(other, env, "runs", "list", timeout=60)
    assert listed.returncode == 1 and "Traceback" not in listed.stderr, listed.stderr
    assert "runs cannot be listed (Not a directory)" in listed.stderr, listed.stderr


# A stand-in for a run's process that cannot be stopped by asking: it holds the run's lock,
# names itself in the pid file (its command line holds "memora" and the run's id, as a run's
# does), ignores SIGINT — and SIGTERM too when told "never" — and, told "done", ends on its
# own after a while as a run finishing its turn would (its exit file says 0).
HOLDER = """
import fcntl, os, signal, sys, time
run_id, folder, then = sys.argv[2:5]
signal.signal(signal.SIGINT, signal.SIG_IGN)
if then == "never":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
fd = os.open(os.path.join(folder, "lock"), os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)
with open(os.path.join(folder, "pid"), "w") as f:
    f.write(str(os.getpid()))
time.sleep(4 if then == "done" else 600)
with open(os.path.join(folder, "exit"), "w") as f:
    f.write("0")
"""


def _held(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
    then: str,
) -> tuple[Path, dict[str, str], str, subprocess.Popen[bytes]]:
    """A run of this user's that ended, whose process is then replaced by :data:`HOLDER`."""
    url, script = server
    script.answers = [say("all done")]
    project, env = _project(tmp_path), _env(tmp_path)
    run_id = _detach(project, env, url, "say it")
    assert _memora(project, env, "runs", "follow", run_id).returncode == 0
    folder = project / ".memora" / "data" / "runs" / run_id
    for name in ("exit", "pid"):
        (folder / name).unlink()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, "memora", run_id, str(folder), then],
        start_new_session=True,
    )
    _wait(lambda: (folder / "pid").exists() and (folder / "pid").read_text() == str(holder.pid))
    assert _runs(project, env)[run_id]["status"] == "running"
    return project, env, run_id, holder


def test_cancel_does_not_say_cancelled_when_the_run_ended_on_its_own_meanwhile(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    """The run ends done while `cancel` waits for it to stop (the SIGINT came as it was
    closing, or before its turn began, when there is nothing to abort): its turn happened,
    so cancel says it ended and the run stays done.  It said "cancelled", the run's status
    became cancelled and `follow` exited 130 — a script would run the turn's work again."""
    project, env, run_id, holder = _held(server, tmp_path, "done")
    try:
        cancelled = _memora(project, env, "runs", "cancel", run_id)
        assert cancelled.returncode == 0, cancelled.stderr
        assert "ended (done)" in cancelled.stdout and "cancelled" not in cancelled.stdout
        assert _runs(project, env)[run_id]["status"] == "done"
        assert _memora(project, env, "runs", "follow", run_id).returncode == 0
    finally:
        holder.kill()
        holder.wait()


def test_cancel_stops_a_run_that_ignores_sigint_and_sigterm(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    """A run's process that neither SIGINT nor SIGTERM stops (stopped, or a handler of its
    own) is killed: cancel means the run stops.  It said "did not stop; cancel it again",
    and again on every try.  Killed, the run wrote no end of its own: cancel adds the
    `aborted` event, so a follower's stream ends like any cancelled run's."""
    project, env, run_id, holder = _held(server, tmp_path, "never")
    try:
        cancelled = _memora(project, env, "runs", "cancel", run_id)
        assert cancelled.returncode == 0 and "cancelled" in cancelled.stdout, cancelled.stderr
        assert holder.wait(timeout=10) == -signal.SIGKILL
        assert _events(project, run_id)[-1]["type"] == "aborted"
        assert _runs(project, env)[run_id]["status"] == "cancelled"
        assert _memora(project, env, "runs", "follow", run_id).returncode == 130
    finally:
        holder.kill()
        holder.wait()


def test_a_take_over_reads_the_config_folder_the_follower_named(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    """`runs follow --config-dir cfg`, a relative folder, from another working folder than
    the run was started in: the process that takes the dead run over reads the same folder,
    not ``cfg`` under the run's working folder — there it found no key, made a new one
    (a stray folder in the user's project) and refused the user's own run as foreign."""
    url, script = server
    script.answers = [say("one two three four five six seven eight", 0.5)]
    project, env = _project(tmp_path), _env(tmp_path)
    started_in = tmp_path / "started-in"
    started_in.mkdir()
    config = ["--config-dir", str(tmp_path / "cfg")]
    launched = subprocess.run(
        [*MEMORA, "run", "--detach", "--base-url", url, "--model", "m", "talk slowly",
         "--project", str(project), *config],
        env=env, cwd=started_in, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    run_id = launched.stdout.strip()
    _kill_mid_answer(project, run_id)
    followed = subprocess.run(
        [*MEMORA, "runs", "follow", run_id, "--project", str(project), "--config-dir", "cfg"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert followed.returncode == 1, followed.stderr
    said = followed.stdout + followed.stderr
    assert "no turn executor kept its turn" in said and "not written by" not in said, said
    assert not (started_in / "cfg").exists()


def _ended_run(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
    answer: str = "one two three",
) -> tuple[Path, dict[str, str], str, Path]:
    url, script = server
    script.answers = [say(answer)]
    project, env = _project(tmp_path), _env(tmp_path)
    run_id = _detach(project, env, url, "count")
    assert _memora(project, env, "runs", "follow", run_id).returncode == 0
    return project, env, run_id, project / ".memora" / "data" / "runs" / run_id / "events.jsonl"


def test_follow_from_n_skips_n_events_not_n_lines(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    """`--from N` re-attaches after the N events a follower printed.  A line of the events
    file that is no event (a half line a killed process left, a blank line, anything else
    the run's process wrote on its stdout) is never printed, so it is not counted either:
    counted, a follower re-attaching got an event it had already printed (its text twice)."""
    project, env, run_id, events = _ended_run(server, tmp_path)
    lines = events.read_text().splitlines(keepends=True)
    events.write_text(lines[0] + "a line that is no event\n\n" + "".join(lines[1:]))
    every = _memora(project, env, "runs", "follow", run_id, "--events", "jsonl")
    printed = every.stdout.splitlines()
    assert len(printed) == len(lines) >= 3, every.stdout
    again = _memora(project, env, "runs", "follow", run_id, "--from", "2", "--events", "jsonl")
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == printed[2:]
    beyond = _memora(project, env, "runs", "follow", run_id, "--from", "1000", "--events", "jsonl")
    assert beyond.returncode == 0 and beyond.stdout == "", beyond.stderr
    negative = _memora(project, env, "runs", "follow", run_id, "--from", "-1")
    assert negative.returncode == 2 and "--from" in negative.stderr, negative.stderr


def test_an_event_added_after_a_half_written_line_is_kept_whole(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    """A run killed while it wrote an event leaves half a line: the `aborted` event cancel
    adds (or the first event of a process that takes the run over) starts on a line of its
    own, where it was glued to the half line and lost — the follower's stream had no end."""
    project, env, run_id, events = _ended_run(server, tmp_path)
    data = events.read_bytes()
    events.write_bytes(data[: len(data) - 10])  # the `done` line, half written
    (events.parent / "exit").unlink()  # as a killed process leaves its run: died
    assert _runs(project, env)[run_id]["status"] == "died"
    cancelled = _memora(project, env, "runs", "cancel", run_id)
    assert cancelled.returncode == 0 and "cancelled" in cancelled.stdout, cancelled.stderr
    followed = _memora(project, env, "runs", "follow", run_id, "--events", "jsonl")
    assert followed.returncode == 130, followed.stderr
    assert json.loads(followed.stdout.splitlines()[-1])["type"] == "aborted"


def test_following_a_huge_events_file_keeps_memory_flat(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    """A run's events file holding a line of 512 MiB (a runaway process's output; sparse
    here, so it costs no disk): `runs follow` reads it a block at a time and skips the line
    (no event is that long) — read whole, its follower held the file twice over in memory."""
    project, env, run_id, events = _ended_run(server, tmp_path)
    printed = _memora(project, env, "runs", "follow", run_id, "--events", "jsonl").stdout
    with events.open("r+b") as f:
        f.seek(0, os.SEEK_END)
        f.seek(512 * 2**20, os.SEEK_CUR)
        f.write(b"\n")
    # the follower's peak memory, as its parent (a small Python) sees it
    measure = (
        "import resource, subprocess, sys; done = subprocess.run(sys.argv[1:]); "
        "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss; "
        "print(peak, file=sys.stderr); sys.exit(done.returncode)"
    )
    followed = subprocess.run(
        [sys.executable, "-c", measure, *MEMORA, "runs", "follow", run_id, "--events", "jsonl",
         "--project", str(project)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert followed.returncode == 0, followed.stderr
    assert followed.stdout == printed
    peak_kib = int(followed.stderr.strip().splitlines()[-1])
    assert peak_kib < 256 * 1024, f"the follower peaked at {peak_kib // 1024} MiB"


def test_a_full_disk_never_makes_a_run_say_more_than_it_kept(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    """The data folder on a small disk.  Filled while a run streams, the run cannot write
    its events (nor its exit): it is not done — died, said without a traceback once there is
    room again — and the project works again.  Full when `run --detach` starts a run: one
    line saying so and no half-made run folder (it was a traceback)."""
    url, script = server
    words = " ".join(f"w{i}" * 50 for i in range(200))
    script.answers = [say(words, 0.02), say("back again")]
    project, env = _project(tmp_path), _env(tmp_path)
    with small_disk(tmp_path / "disk", size="2m") as disk:
        where = ["--project", str(project), "--data-dir", str(disk / "data")]

        def memora(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [*MEMORA, *args, *where], env=env, capture_output=True, text=True, timeout=120
            )

        started = memora("run", "--detach", "--base-url", url, "--model", "m", "talk")
        run_id = started.stdout.strip()
        events = disk / "data" / "runs" / run_id / "events.jsonl"
        _wait(lambda: events.exists() and b'"text"' in events.read_bytes())
        filler = fill(disk)
        _wait(lambda: not (events.parent / "pid").exists() or _gone(events.parent / "pid"))
        refused = memora("run", "--detach", "--base-url", url, "--model", "m", "more")
        assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
        assert "No space left on device" in refused.stderr, refused.stderr
        assert sorted(p.name for p in (disk / "data" / "runs").iterdir()) == [run_id]
        filler.unlink()
        listed = memora("runs", "list", "--json")
        assert json.loads(listed.stdout)[0]["status"] == "died", listed.stderr
        followed = memora("runs", "follow", run_id, "--no-take-over")
        assert followed.returncode == 1 and "Traceback" not in followed.stderr
        again = memora("run", "--detach", "--base-url", url, "--model", "m", "are you there")
        assert again.returncode == 0, again.stderr
        done = memora("runs", "follow", again.stdout.strip())
        assert done.returncode == 0 and "back again" in done.stdout, done.stderr


def _gone(pid_file: Path) -> bool:
    """The process a run's pid file names has ended (or is a zombie)."""
    pid = int(pid_file.read_text())
    return not Path(f"/proc/{pid}").exists() or _state(pid) == "Z"


def test_a_run_whose_pause_a_later_one_replaced_is_never_resumed_blindly(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    """Two detached runs wait for an approval: the project keeps one paused turn (what
    `memora run --resume` continues), the later one's.  Following the first run must not
    tell the user to continue it with `memora run --resume --yes` — that approved the other
    run's call, unseen — and cancelling it says its pause was no longer kept, and leaves the
    other run's pause alone."""
    url, script = server
    script.answers = [
        call("write_file", {"path": "first.txt", "content": "1"}),
        call("write_file", {"path": "second.txt", "content": "2"}),
    ]
    project, env = _project(tmp_path), _env(tmp_path)
    first = _detach(project, env, url, "write the first file")
    assert _memora(project, env, "runs", "follow", first).returncode == 3
    second = _detach(project, env, url, "write the second file")
    assert _memora(project, env, "runs", "follow", second).returncode == 3
    followed = _memora(project, env, "runs", "follow", first)
    assert followed.returncode == 3, followed.stderr
    assert "continue it with `memora run --resume`" not in followed.stderr, followed.stderr
    assert "no longer" in followed.stderr, followed.stderr
    own = _memora(project, env, "runs", "follow", second)
    assert own.returncode == 3 and "continue it with `memora run --resume`" in own.stderr
    cancelled = _memora(project, env, "runs", "cancel", first)
    assert cancelled.returncode == 0 and "no longer kept" in cancelled.stdout, cancelled.stdout
    assert (project / ".memora" / "data" / "paused-turn.json").exists()
    assert _runs(project, env)[second]["status"] == "paused"


HOSTILE_TEXT = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\x9b31m\u202eevil\x1b]0;title\x07"
"""Escape sequences that write the clipboard, clear the screen, an 8-bit CSI, a bidi
override and a window title — text from outside that wants to drive the terminal."""


def _controls(text: str) -> list[str]:
    return [c for c in text if c in "\x1b\x07\x9b\u202e"]


def test_model_text_never_drives_the_terminal_through_follow_or_list(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    """Whatever the model says — in its answer, in a tool's name — and whatever the user
    typed as a session id, `runs follow` (text) and `runs list` print it without a control
    sequence (`runs list` printed the session id as given)."""
    url, script = server
    script.answers = [
        call("read_file" + HOSTILE_TEXT, {"path": HOSTILE_TEXT}),
        say("plain " + HOSTILE_TEXT + " words"),
    ]
    project, env = _project(tmp_path), _env(tmp_path)
    run_id = _detach(project, env, url, "say " + HOSTILE_TEXT)
    followed = _memora(project, env, "runs", "follow", run_id)
    assert followed.returncode == 0, followed.stderr
    assert "plain" in followed.stdout and "evil" in followed.stdout, followed.stdout
    assert "read_file" in followed.stderr, followed.stderr
    assert _controls(followed.stdout + followed.stderr) == []
    odd = _memora(project, env, "run", "--detach", "--base-url", url, "--model", "m",
                  "--session", "s" + HOSTILE_TEXT, "hi")  # fmt: skip
    assert odd.returncode == 0, odd.stderr
    listed = _memora(project, env, "runs", "list")
    assert listed.returncode == 0 and run_id in listed.stdout, listed.stderr
    assert _controls(listed.stdout + listed.stderr) == [], listed.stdout


def test_a_run_outlives_its_terminals_hang_up_and_stays_private_under_umask_0(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    """Started from a shell whose umask gives everything away (000), which then hangs up
    (SIGHUP to its whole process group, as a closed terminal does): the run goes on to its
    end, and its folder is 0700 and every file 0600."""
    url, script = server
    script.answers = [say("still here after the hang up", 0.3)]
    project, env = _project(tmp_path), _env(tmp_path)
    command = [*MEMORA, "run", "--detach", "--base-url", url, "--model", "m", "talk slowly",
               "--project", str(project)]  # fmt: skip
    shell = subprocess.Popen(
        ["sh", "-c", 'umask 000; "$@" > run-id; exec sleep 60', "sh", *command],
        env=env, cwd=tmp_path, start_new_session=True,
    )  # fmt: skip
    try:
        id_file = tmp_path / "run-id"
        _wait(lambda: id_file.exists() and len(id_file.read_text().strip()) == 12, 120)
        run_id = id_file.read_text().strip()
        _wait(lambda: any(e["type"] == "text" for e in _events(project, run_id)))
        os.killpg(shell.pid, signal.SIGHUP)
        assert shell.wait(timeout=10) == -signal.SIGHUP
    finally:
        shell.kill()
        shell.wait()
    followed = _memora(project, env, "runs", "follow", run_id)
    assert followed.returncode == 0, followed.stderr
    assert "still here after the hang up" in followed.stdout
    runs = project / ".memora" / "data" / "runs"
    for folder in (runs, runs / run_id):
        assert folder.stat().st_mode & 0o777 == 0o700, folder
    files = list((runs / run_id).iterdir())
    assert {"run.json", "events.jsonl", "lock", "pid", "session", "exit", "stderr.log"} <= {
        p.name for p in files
    }
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in files} == {
        p.name: "0o600" for p in files
    }


def test_two_follows_of_a_dead_run_start_one_take_over(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    """Two `runs follow` of a dead run at once: one process takes it over, the other follows
    that one — the turn is never gone on with twice."""
    url, script = server
    script.answers = [say("one two three four five six seven eight", 0.5)]
    project, env = _project(tmp_path), _env(tmp_path)
    run_id = _detach(project, env, url, "talk slowly")
    _kill_mid_answer(project, run_id)
    follows = [
        subprocess.Popen(
            [*MEMORA, "runs", "follow", run_id, "--project", str(project)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    said = [f.communicate(timeout=120) for f in follows]
    assert [f.returncode for f in follows] == [1, 1], said
    assert sum(err.count("going on with its turn") for _, err in said) == 1, said
    assert all("no turn executor kept its turn" in out + err for out, err in said), said


def test_a_copied_projects_runs_are_never_taken_over_in_the_copy(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    """`cp -a proj proj-copy` copies a dead run sealed with the user's own key.  The copy's
    runs are foreign, as the docs promise of a copied project: following one there started
    a take-over of the original's turn — run in the original's folder (its spec names it)
    with the copy's sessions.  A run folder copied beside itself in one project is
    foreign too."""
    url, script = server
    script.answers = [say("one two three four five six seven eight", 0.5)]
    project, env = _project(tmp_path), _env(tmp_path)
    run_id = _detach(project, env, url, "talk slowly")
    _kill_mid_answer(project, run_id)
    copy = tmp_path / "proj-copy"
    subprocess.run(["cp", "-a", str(project), str(copy)], check=True)
    assert _runs(copy, env)[run_id]["status"] == "foreign"
    for verb in ("follow", "cancel"):
        done = _memora(copy, env, "runs", verb, run_id)
        assert done.returncode == 1 and "was not written by your memora" in done.stderr
        assert "going on with its turn" not in done.stderr, done.stderr
    runs = project / ".memora" / "data" / "runs"
    subprocess.run(["cp", "-a", str(runs / run_id), str(runs / "0123456789ab")], check=True)
    rows = _runs(project, env)
    assert rows["0123456789ab"]["status"] == "foreign" and rows[run_id]["status"] == "died"


def test_a_durable_run_cancel_had_to_kill_leaves_no_turn_to_take_over(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    """A durable run whose process is stopped (SIGSTOP: neither SIGINT nor SIGTERM reaches
    it) is killed by cancel, and its turn leaves the journal — a killed turn left there would
    be taken over by the next host that looks (`memora serve`), a cancelled turn running on."""
    dbos = pytest.importorskip("memora_plugin_dbos.executor")
    url, script = server
    script.answers = [say("one two three four five six seven eight nine ten", 0.5)]
    project, env = _project(tmp_path), _env(tmp_path, turn_executor="dbos")
    run_id = _detach(project, env, url, "talk slowly")
    _wait(lambda: any(e["type"] == "text" for e in _events(project, run_id)))
    folder = project / ".memora" / "data" / "runs" / run_id
    pid = int((folder / "pid").read_text())
    journal = dbos.journal_file({"path": folder.parent.parent, "user_dir": tmp_path / "home"})

    def kept() -> int:
        with contextlib.closing(sqlite3.connect(journal)) as db:
            return int(db.execute("SELECT count(*) FROM workflow_status").fetchone()[0])

    os.kill(pid, signal.SIGSTOP)
    try:
        assert kept() == 1
        cancelled = _memora(project, env, "runs", "cancel", run_id)
        assert cancelled.returncode == 0 and "cancelled" in cancelled.stdout, cancelled.stderr
        assert kept() == 0
        assert _events(project, run_id)[-1]["type"] == "aborted"
    finally:  # a failing test leaves no stopped process behind (only ever the run's own)
        with contextlib.suppress(OSError):
            if run_id.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)


def test_resume_refuses_a_paused_turn_file_that_is_a_fifo_or_too_deep(tmp_path: Path) -> None:
    """Found (H10): a cloned project's ``paused-turn.json`` that is a fifo made `memora run
    --resume` wait for ever; nested deeper than the JSON parser recurses, a traceback."""
    project, env = _project(tmp_path), _env(tmp_path)
    data = project / ".memora" / "data"
    data.mkdir(parents=True)
    os.mkfifo(data / "paused-turn.json")
    done = _memora(project, env, "run", "--resume", timeout=60)
    assert done.returncode == 1 and "not a regular file" in done.stderr, done.stderr
    (data / "paused-turn.json").unlink()
    (data / "paused-turn.json").write_text("[" * 100_000 + "]" * 100_000)
    done = _memora(project, env, "run", "--resume", timeout=60)
    assert done.returncode == 1 and "is not a paused turn" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


SLOW_MCP = """
import time
time.sleep(4)  # a server slow to start: the turn waits for its tools before its first chunk
from mcp.server.mcpserver import MCPServer

server = MCPServer("slow")

@server.tool(description="Does nothing.")
def noop() -> str:
    return "nothing done"

server.run("stdio")
"""


def test_a_cancel_that_comes_before_the_runs_turn_begins_still_stops_it(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    """Found: `runs cancel` while the run's turn was still getting ready (its role pack's MCP
    server starting) sent SIGINT to a process whose handler was set but whose turn was not
    running yet — `agent.abort()` had nothing to end, the SIGINT was lost, and the turn ran to
    its end anyway (its LLM called, `cancel` said "already ended (done)").  The run now
    remembers the ask and ends the turn aborted as soon as it runs, before any LLM call."""
    pytest.importorskip("mcp")
    url, script = server
    script.answers = [say("answered although cancelled")]
    project = _project(tmp_path)
    mcp_server = tmp_path / "slow_mcp.py"
    mcp_server.write_text(SLOW_MCP)
    env = _env(
        tmp_path,
        plugins={
            "mcp": {"servers": {"slow": {"command": sys.executable, "args": [str(mcp_server)]}}}
        },
        options={"active_role_pack": "slow"},
    )
    pack = tmp_path / "home" / "role-packs" / "slow"
    pack.mkdir(parents=True)
    manifest = {
        "name": "slow",
        "formatVersion": "1.0.0",
        "capabilities": [{"capability": "mcp:slow"}],
        "strategy": {"reflect": {"summary": "off"}},
    }
    (pack / "manifest.json").write_text(json.dumps(manifest))
    run_id = _detach(project, env, url, "hello")
    folder = project / ".memora" / "data" / "runs" / run_id
    _wait(lambda: (folder / "session").exists())  # its Agent is ready: the turn is starting
    cancelled = _memora(project, env, "runs", "cancel", run_id)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.strip() == f"run {run_id}: cancelled", cancelled.stdout
    assert [q for q in script.requests if q.get("stream")] == []  # no LLM call was made
    assert _events(project, run_id)[-1]["type"] == "aborted"
    assert _runs(project, env)[run_id]["status"] == "cancelled"
