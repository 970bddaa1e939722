"""`memora runs`: the detached runs ``memora run --detach`` started (:mod:`.detached`)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import click

from ..errors import ErrorCode, MemoraError
from ..security.seal import user_key
from ..security.state import check_state_path, user_config_dir
from ..security.terminal import clean
from .base import emit_json
from .common import data_dir_for, location_options
from .detached import Run, find_run, list_runs, new_lines
from .paused import PAUSED_FILE, PauseClaim, read_paused
from .run_cmd import (
    EXIT_ABORTED,
    EXIT_DONE,
    EXIT_ERROR,
    EXIT_PAUSED,
    abandon_left_turns,
    emit,
    run_spec,
)

FOLLOW_POLL_SECONDS = 0.2
"""How often ``follow`` looks for new events while the run goes on."""
CANCEL_WAIT_SECONDS = 15.0
"""How long ``cancel`` waits for a running turn to end after asking it to stop (SIGINT: it
ends ``aborted`` with what it did saved) before it is terminated."""


def _data_dir(project: Path, data_dir: Path | None) -> Path:
    return data_dir_for(project.resolve(), data_dir)


@click.group("runs")
def runs_group() -> None:
    """The turns `memora run --detach` started: list them, follow one, cancel one."""


@runs_group.command("list")
@location_options
@click.option("--json", "as_json", is_flag=True, help="One JSON document.")
def list_cmd(project: Path, data_dir: Path | None, config_dir: Path | None, as_json: bool) -> None:
    """The project's detached runs, oldest first, with their status: running, done, error,
    paused (continue with memora run --resume), aborted, cancelled, or died (its process was
    killed: `memora runs follow ID` goes on with it when a turn executor kept it); foreign for
    a run folder your memora did not write (a cloned project's: never run)."""
    rows = [_row(run, config_dir) for run in list_runs(_data_dir(project, data_dir))]
    if as_json:
        emit_json(rows)
        return
    if not rows:
        click.echo("no detached runs (memora run --detach PROMPT starts one)")
        return
    for row in rows:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(row["created"]))
        prompt = clean(row["prompt"] or "", newlines=False)[:60]
        # the session id as given to `run --session` (the run refuses a bad one only later)
        session = clean(row["session"] or "-", newlines=False)
        click.echo(f"{row['id']}  {row['status']:<9}  {when}  {session}  {prompt}")


def _row(run: Run, config_dir: Path | None) -> dict[str, Any]:
    try:
        spec = run.spec(config_dir)
        status, session = run.status(), run.session() or spec.get("session")
    except MemoraError:  # planted, copied, a link: named, never run
        spec = {"prompt": "(not your memora's run: never run)"}
        status, session = "foreign", None
    return {
        "id": run.id,
        "status": status,
        "created": run.created(),
        "session": session,
        "prompt": spec.get("prompt"),
    }


@runs_group.command("follow")
@click.argument("run_id")
@location_options
@click.option(
    "--from",
    "start",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Skip the run's first N events (re-attach where you left off).",
)
@click.option(
    "--events",
    type=click.Choice(["text", "jsonl"]),
    default="text",
    show_default=True,
    help="jsonl: every chunk as one JSON line on stdout, as `memora run --events jsonl`.",
)
@click.option(
    "--no-take-over",
    is_flag=True,
    help="When the run's process died, only say so (default: go on with its turn from the "
    "last step a turn executor kept).",
)
def follow_cmd(
    run_id: str,
    project: Path,
    data_dir: Path | None,
    config_dir: Path | None,
    start: int,
    events: str,
    no_take_over: bool,
) -> None:
    """Print a run's events from the start (or --from N) and wait for the rest; exit as
    `memora run` would (0 done, 1 error, 3 paused, 130 aborted or cancelled)."""
    try:
        run = find_run(_data_dir(project, data_dir), run_id)
        spec = run.spec(config_dir)
        code = _follow(run, spec, config_dir, start, events, take_over=not no_take_over)
    except MemoraError as exc:
        click.secho(f"memora: error: {clean(str(exc))}", err=True, fg="red")
        code = EXIT_ERROR
    sys.exit(code)


def _follow(
    run: Run,
    spec: dict[str, Any],
    config_dir: Path | None,
    start: int,
    events: str,
    *,
    take_over: bool,
) -> int:
    from ..chunks import chunk_adapter

    offset, seen, typed = 0, 0, bool(spec.get("output_schema"))
    took_over = False
    while True:
        for after, line in new_lines(run, offset):
            offset = after  # read on from here next time
            try:
                chunk = chunk_adapter.validate_json(line)
            except ValueError:
                continue  # not a chunk (a line an old or crashed process left half-made)
            seen += 1  # only what a follower is shown counts toward --from
            if seen > start:
                emit(chunk, events, typed=typed)
        status = run.status()
        if status == "running":
            time.sleep(FOLLOW_POLL_SECONDS)
            continue
        if any(True for _ in new_lines(run, offset)):
            continue  # written between the read and the look at its status
        if status == "died" and take_over and not took_over:
            took_over = _take_over(run, spec, config_dir)
            continue
        return _exit_of(run, status, config_dir)


def _take_over(run: Run, spec: dict[str, Any], config_dir: Path | None) -> bool:
    """Start a process that goes on with a dead run's turn; False when another one is
    (it holds the run's lock) or the run is no longer dead."""
    lock = run.claim()
    if lock is None:
        return False
    if run.status(held=True) != "died":
        # between the look that found it dead and the lock: another follow's take-over ran
        # and ended, or a cancel gave it up — never a second process for one turn
        os.close(lock)
        return False
    click.echo(f"memora: run {run.id}'s process died; going on with its turn", err=True)
    run.start(lock, config_dir, take_over=True, cwd=spec["cwd"])
    return True


def _exit_of(run: Run, status: str, config_dir: Path | None) -> int:
    if status == "died":
        click.echo(
            f"memora: run {run.id}'s process died before its turn ended (follow it without "
            "--no-take-over to go on with it)",
            err=True,
        )
        return EXIT_ERROR
    if status == "paused" and _own_pause(run, config_dir):
        click.echo(
            "memora: the run waits for an approval or an answer — continue it with "
            "`memora run --resume` (add --yes to approve), or `memora runs cancel "
            f"{run.id}`",
            err=True,
        )
    elif status == "paused":
        # the project keeps one paused turn: advising --resume (--yes) here approved another
        # run's call, unseen
        click.echo(
            "memora: the run paused, but its paused turn is no longer kept (continued "
            "already, or replaced by a later run's pause): `memora run --resume` would not "
            f"continue this run — `memora runs cancel {run.id}` closes it",
            err=True,
        )
    code = run.exit_code()
    return EXIT_ABORTED if status == "cancelled" else (code if code is not None else EXIT_ERROR)


@runs_group.command("cancel")
@click.argument("run_id")
@location_options
def cancel_cmd(run_id: str, project: Path, data_dir: Path | None, config_dir: Path | None) -> None:
    """Stop a run: a running turn ends aborted (what it did is saved), a paused one is
    dropped, a dead one is given up; the session is ready for the next message."""
    try:
        run = find_run(_data_dir(project, data_dir), run_id)
        spec = run.spec(config_dir)
        said = _cancel(run, spec, config_dir)
    except MemoraError as exc:
        click.secho(f"memora: error: {clean(str(exc))}", err=True, fg="red")
        sys.exit(EXIT_ERROR)
    click.echo(f"run {run.id}: {said}")


def _cancel(run: Run, spec: dict[str, Any], config_dir: Path | None) -> str:
    stopped = run.status() == "running"
    if stopped:
        _stop(run)
        if run.running():
            raise MemoraError(ErrorCode.BUSY, f"run {run.id} did not stop; cancel it again")
    # held from here on: no take-over starts, and no other cancel drops or adds the same
    lock = run.claim()
    if lock is None:
        raise MemoraError(
            ErrorCode.BUSY, f"run {run.id} is being taken over or cancelled; cancel it again"
        )
    said = "cancelled"
    try:
        # what the run's own files say now: a run asked to stop may have ended on its own
        # meanwhile (done: its turn happened, never called cancelled), or been killed
        status = run.status(held=True)
        if status in ("done", "error", "cancelled") or (status == "aborted" and not stopped):
            return f"already ended ({status})"
        if status == "paused" and not _drop_pause(run, config_dir):
            said = (
                "cancelled (its paused turn was no longer kept: continued already, or "
                "replaced by a later pause, which stays)"
            )
        elif status == "died" or (stopped and status == "aborted"):
            # found dead, or killed by _stop — or stopped before its turn took SIGINT over (a
            # take-over starting again): its durable turn goes too, never left to run on
            _abandon(run, spec, config_dir)
        run.write("cancelled", str(time.time()))
        if status != "aborted":  # a turn our SIGINT stopped wrote its own `aborted`
            line = {"type": "aborted", "reason": "cancelled (memora runs cancel)"}
            run.append_event(json.dumps({**line, "stop_reason": "user"}))
        return said
    finally:
        os.close(lock)


def _stop(run: Run) -> None:
    """Ask the running turn to stop (SIGINT: ``memora run`` aborts its turn, saving what it
    did); terminate it when it does not within :data:`CANCEL_WAIT_SECONDS`, and kill it when
    that does not end it either (a stopped process, a handler of its own)."""
    pid = run.pid()
    if pid is None:  # between the lock and its pid file: a moment
        time.sleep(1.0)
        pid = run.pid()
    if pid is None:
        return
    steps = ((signal.SIGINT, CANCEL_WAIT_SECONDS), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0))
    for sig, wait in steps:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not run.running():
                return
            time.sleep(0.1)


def _own_pause(run: Run, config_dir: Path | None) -> bool:
    """Whether the paused turn ``memora run --resume`` continues is this run's: the project
    keeps one, and a later pause (another run's, a foreground run's) replaces it."""
    state_file = run.data_dir / PAUSED_FILE
    try:
        check_state_path(state_file, run.data_dir)  # a link or a fifo is never read
        state = read_paused(state_file, user_key(user_config_dir(config_dir)))
    except MemoraError:
        return False  # none, or not this user's
    return state.get("session_id") == run.session()


def _drop_pause(run: Run, config_dir: Path | None) -> bool:
    """Remove the paused turn this run left (``memora run --resume``'s file), when it is
    still this run's; another's is left alone.  Whether it was there to remove.  Taken as
    `--resume` takes it (:class:`PauseClaim`): a resume at the same moment has it or this
    does, never both."""
    try:
        claim = PauseClaim(run.data_dir / PAUSED_FILE, user_key(user_config_dir(config_dir)))
    except MemoraError:
        return False  # none (resumed meanwhile), or not this user's
    with claim:
        if claim.state.get("session_id") != run.session():
            return False  # a later run's pause: given back
        claim.use()
        return True


def _abandon(run: Run, spec: dict[str, Any], config_dir: Path | None) -> None:
    """A dead run's durable turn is given up: its executor stops keeping it, so nobody goes
    on with it (the caller holds the run's lock: nobody takes it over meanwhile)."""
    import asyncio

    session = run.session() or spec["session"]
    asyncio.run(abandon_left_turns({**spec, "session": session}, run.data_dir, config_dir))


@runs_group.command("exec", hidden=True)
@click.argument("run_id")
@click.option("--data-dir", type=click.Path(path_type=Path), required=True)
@click.option("--config-dir", type=click.Path(path_type=Path), default=None)
@click.option("--lock-fd", type=int, required=True)
@click.option("--take-over", is_flag=True)
def exec_cmd(
    run_id: str, data_dir: Path, config_dir: Path | None, lock_fd: int, take_over: bool
) -> None:
    """The process of a detached run (started by memora run --detach or runs follow)."""
    # stdout is the run's events file, memora's own data, read back as UTF-8: never in the
    # launching shell's encoding (a Latin-1 locale turned é into a byte read back as U+FFFD,
    # and an emoji into an escape that is no JSON, dropping its whole event)
    sys.stdout.reconfigure(encoding="utf-8", errors="backslashreplace")  # type: ignore[union-attr]
    # the lock is this process's alone: a program a tool or a plugin starts never inherits
    # it (one started with close_fds=False would keep a dead run "running" for its life)
    os.set_inheritable(lock_fd, False)
    run = find_run(data_dir, run_id)
    run.write("pid", str(os.getpid()))
    code = EXIT_ERROR
    try:
        spec = run.spec(config_dir)
        if take_over and run.session() is not None:
            spec["session"] = run.session()
        code = run_spec(
            spec,
            events="jsonl",
            data_dir=data_dir,
            config_dir=config_dir,
            take_over=take_over,
            on_start=lambda session: run.write("session", session),
        )
    except MemoraError as exc:
        sys.stdout.write(
            json.dumps({"type": "error", "message": str(exc), "category": "unknown"}) + "\n"
        )
    except KeyboardInterrupt:
        # `runs cancel`'s SIGINT before the turn took the signal over (it was starting): the
        # run is aborted, as a turn stopped by it would be — not an error
        code = EXIT_ABORTED
        line = {"type": "aborted", "reason": "cancelled before its turn began"}
        sys.stdout.write(json.dumps({**line, "stop_reason": "user"}) + "\n")
    finally:
        sys.stdout.flush()
        run.write("exit", str(code))
        os.close(lock_fd)  # the run is over: its lock goes with it
    sys.exit(code if code in (EXIT_DONE, EXIT_PAUSED, EXIT_ABORTED) else EXIT_ERROR)
