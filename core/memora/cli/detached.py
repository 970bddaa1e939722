"""Detached runs: ``memora run --detach`` and ``memora runs``.

A detached run is one ``memora run`` turn in a process of its own, started in a new session of
the operating system (closing the terminal does not stop it), with nobody attached.  Its
folder, ``<data>/runs/<id>/`` (0700), holds:

- ``run.json`` — what to run (the options ``memora run`` was given), sealed with the user's
  key: a run folder found in a cloned or copied project is never run or resumed (it would run
  what someone else chose, with this user's keys);
- ``events.jsonl`` — every chunk of the turn, one JSON line each, as ``memora run --events
  jsonl`` prints them; ``memora runs follow`` reads it from any line and waits for more;
- ``lock`` — held (``flock``) by the process running the turn for as long as it lives: the
  launcher takes it and hands it down, so a run is never seen dead between its launch and its
  start, and two resumes of a dead run cannot both start;
- ``pid``, ``session`` — written by the running process (what ``cancel`` signals; the
  session the turn runs in);
- ``exit`` — the exit code, written when the turn ends (0 done, 1 error, 3 paused, 130
  aborted); ``cancelled`` — written by ``memora runs cancel``.

A run with no ``exit`` whose lock nobody holds **died** (killed, the machine restarted).  With
a turn executor in the user's config (``"turn_executor": "dbos"``) its turn was kept step by
step, and ``memora runs follow`` starts it again from its last kept step (docs/durability.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ErrorCode, MemoraError
from ..security.atomic import atomic_write_text
from ..security.seal import seal, unseal, user_key
from ..security.state import (
    PRIVATE_FILE,
    check_state_path,
    ensure_state_dir,
    open_state_file,
    user_config_dir,
)

__all__ = ["EXIT_STATUS", "Run", "find_run", "launch", "list_runs", "runs_folder"]

RUN_ID = re.compile(r"[0-9a-f]{12}")
"""What a run's id looks like (12 hex digits, made by :func:`launch`)."""

EXIT_STATUS = {0: "done", 1: "error", 3: "paused", 130: "aborted"}
"""A run's exit code -> its status."""

RUN_SPEC_VERSION = 2
"""2: the seal covers the run's id and data folder (a copied run folder is not this run)."""

SPEC_LIMIT = 2**20
"""The largest ``run.json`` read (a sealed spec is a few KiB: its prompt came through argv,
at most 128 KiB on Linux, six times that JSON-escaped).  A planted one may be a sparse file of
any size, free to ship in a tarball: read whole, it was a MemoryError, or a read without end."""
SMALL_LIMIT = 4096
"""The largest ``exit``, ``pid``, ``session`` or ``cancelled`` file read."""


def runs_folder(data_dir: Path) -> Path:
    return data_dir / "runs"


@dataclass(frozen=True)
class Run:
    """One detached run's folder (see the module docstring)."""

    id: str
    folder: Path
    data_dir: Path

    @property
    def events(self) -> Path:
        return self.folder / "events.jsonl"

    def spec(self, config_dir: Path | None) -> dict[str, Any]:
        """What the run runs, when this user's memora sealed it; refused otherwise."""
        path = self.folder / "run.json"
        try:
            doc = json.loads(self._read("run.json", SPEC_LIMIT) or "null")
            data = unseal(doc, user_key(user_config_dir(config_dir)))
        except (ValueError, RecursionError) as exc:
            # RecursionError: JSON nested deeper than the parser (or the seal's canonical
            # dump) recurses — a planted file, named like any other that is not a run
            raise MemoraError(
                ErrorCode.INVALID_INPUT, f"{path} is not a run: {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(data, dict) or data.get("version") != RUN_SPEC_VERSION:
            data = None
        elif (data.get("run_id"), data.get("data_dir")) != (self.id, str(self.data_dir)):
            # sealed by this user for another folder: a copied (or moved) project's run, or a
            # run folder copied beside itself — going on with it here would run the original
            # project's turn with this folder's sessions
            data = None
        if data is None:
            raise MemoraError(
                ErrorCode.INVALID_INPUT,
                f"{path} was not written by your memora for this folder (a run from another "
                "user or machine, a copied, moved or cloned project, or a file changed since "
                f"is never run): remove {self.folder}",
                context={"path": str(path)},
            )
        return data

    def running(self) -> bool:
        """Whether a process runs the turn (it holds the run's lock)."""
        fd = self._open_lock()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # closing the descriptor releases a lock taken through it
        return False

    def claim(self) -> int | None:
        """The run's lock, taken for a process about to run it (its descriptor, to hand down);
        None when a process runs it already."""
        fd = self._open_lock()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd

    def exit_code(self) -> int | None:
        text = self._read("exit")
        try:
            return int(text) if text is not None else None
        except ValueError:
            return None

    def status(self, *, held: bool = False) -> str:
        """``running``, ``done``, ``error``, ``paused``, ``aborted``, ``cancelled`` or ``died``;
        ``held``: the caller holds the run's lock (:meth:`claim`), so no process runs it — what
        its files say."""
        if self._read("cancelled") is not None:
            return "cancelled"
        if not held and self.running():
            return "running"
        code = self.exit_code()
        if code is not None:
            return EXIT_STATUS.get(code, "error")
        return "died"

    def session(self) -> str | None:
        return self._read("session")

    def pid(self) -> int | None:
        """The running process, when its command line names this run (a stale or planted
        ``pid`` file never makes ``cancel`` signal another program)."""
        text = self._read("pid")
        if text is None or not text.isdigit():
            return None
        pid = int(text)
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return None
        return pid if self.id.encode() in argv and b"memora" in argv else None

    def created(self) -> float:
        with contextlib.suppress(OSError):
            return (self.folder / "run.json").stat().st_mtime
        return 0.0

    def write(self, name: str, text: str) -> None:
        """A small file of the run (``exit``, ``pid``, ``session``, ``cancelled``), whole or
        not at all, 0600."""
        path = self.folder / name
        check_state_path(path, self.data_dir)  # a run folder that is a link writes nowhere
        atomic_write_text(path, text)
        os.chmod(path, PRIVATE_FILE)

    def append_event(self, line: str) -> None:
        fd = open_state_file(self.events, os.O_RDWR | os.O_APPEND | os.O_CREAT, self.data_dir)
        end_line(fd)
        with os.fdopen(fd, "a", encoding="utf-8") as out:
            out.write(line.rstrip("\n") + "\n")

    def start(self, lock_fd: int, config_dir: Path | None, *, take_over: bool, cwd: str) -> None:
        """Start the process that runs (or, ``take_over``, goes on with) the turn, handing it
        the run's lock; returns at once."""
        events = open_state_file(self.events, os.O_RDWR | os.O_APPEND | os.O_CREAT, self.data_dir)
        end_line(events)  # a dead process's half line: the new process starts a line of its own
        errors = open_state_file(
            self.folder / "stderr.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, self.data_dir
        )
        argv = [sys.executable, "-m", "memora", "runs", "exec", self.id]
        argv += ["--data-dir", str(self.data_dir), "--lock-fd", str(lock_fd)]
        if config_dir is not None:
            # absolute: the child starts in the run's working folder, not necessarily this one
            argv += ["--config-dir", str(Path(config_dir).absolute())]
        if take_over:
            argv.append("--take-over")
        try:
            subprocess.Popen(  # this Python, memora's own command, no shell
                argv,
                stdin=subprocess.DEVNULL,
                stdout=events,
                stderr=errors,
                pass_fds=(lock_fd,),
                start_new_session=True,  # a closed terminal's hang-up does not reach it
                cwd=cwd if os.path.isdir(cwd) else str(self.data_dir),  # where it was asked
            )
        finally:
            for fd in (events, errors, lock_fd):  # the child holds its own copies
                os.close(fd)

    def _open_lock(self) -> int:
        return open_state_file(self.folder / "lock", os.O_RDWR | os.O_CREAT, self.data_dir)

    def _read(self, name: str, limit: int = SMALL_LIMIT) -> str | None:
        """The run's file ``name``, None when missing; refused when larger than ``limit``
        (see :data:`SPEC_LIMIT`).  Bytes that are not UTF-8 read as U+FFFD: a run's own
        files are UTF-8, and anything else is then not a run, never a traceback."""
        path = self.folder / name
        try:
            fd = open_state_file(path, os.O_RDONLY, self.data_dir)
        except FileNotFoundError:
            return None
        with os.fdopen(fd, "rb") as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            raise MemoraError(
                ErrorCode.INVALID_INPUT,
                f"{path} is larger than any run's {name} ({limit} bytes): not a run's",
                context={"path": str(path)},
            )
        return data.decode("utf-8", errors="replace").strip()


def launch(spec: dict[str, Any], data_dir: Path, config_dir: Path | None) -> Run:
    """A new detached run of ``spec`` (``memora run``'s options), started; returns at once."""
    run_id = secrets.token_hex(6)
    run = Run(run_id, runs_folder(data_dir) / run_id, data_dir)
    try:
        ensure_state_dir(run.folder, data_dir)
        whose = {"version": RUN_SPEC_VERSION, "run_id": run_id, "data_dir": str(data_dir)}
        sealed = seal({**spec, **whose}, user_key(user_config_dir(config_dir)))
        run.write("run.json", json.dumps(sealed, ensure_ascii=False))
        lock = run.claim()
        assert lock is not None  # a folder made just now: nobody else holds its lock
        run.start(lock, config_dir, take_over=False, cwd=spec["cwd"])
    except OSError as exc:
        # a full disk, a folder that cannot be written: one line saying so (it was a
        # traceback), and no half-made run folder left behind (its name is ours, made now)
        shutil.rmtree(run.folder, ignore_errors=True)
        raise MemoraError(
            ErrorCode.STORAGE_ERROR,
            f"no detached run started: {exc.filename or run.folder}: {exc.strerror or exc}",
            context={"path": str(run.folder)},
        ) from exc
    return run


def find_run(data_dir: Path, run_id: str) -> Run:
    """The run ``run_id`` of this data folder; a clear error for anything else."""
    if not RUN_ID.fullmatch(run_id):
        raise MemoraError(
            ErrorCode.INVALID_INPUT,
            f"run id {run_id!r} is not one: a run's id is 12 hex digits (memora runs list)",
            context={"field": "run_id"},
        )
    folder = runs_folder(data_dir) / run_id
    if not (folder / "run.json").is_file():
        raise MemoraError(
            ErrorCode.NOT_FOUND,
            f"no run {run_id} in {runs_folder(data_dir)} (memora runs list names them)",
            context={"run_id": run_id},
        )
    return Run(run_id, folder, data_dir)


def list_runs(data_dir: Path) -> list[Run]:
    """This data folder's runs, oldest first."""
    folder = runs_folder(data_dir)
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    except OSError as exc:  # a cloned project's `runs` may be a file, or a folder not ours
        raise MemoraError(
            ErrorCode.STORAGE_ERROR,
            f"{folder} cannot be listed ({exc.strerror or exc}): memora keeps its detached "
            "runs there; remove or rename it",
            context={"path": str(folder)},
        ) from exc
    runs = [Run(n, folder / n, data_dir) for n in names if RUN_ID.fullmatch(n)]
    return sorted((r for r in runs if (r.folder / "run.json").is_file()), key=Run.created)


READ_BLOCK = 2**20
"""How much of the events file :func:`new_lines` reads at a time."""
LINE_LIMIT = 64 * 2**20
"""The longest events line read as one (an event is a few KiB; a tool call's arguments the
model wrote may be a few MiB).  A longer one is no event: skipped without being held."""


def new_lines(run: Run, offset: int) -> Iterator[tuple[int, str]]:
    """The complete lines of the run's events from byte ``offset``, each with the offset after
    it (a line still being written is left for the next read); a line longer than
    :data:`LINE_LIMIT` is given as ``""``.  Read a block at a time: memory stays flat
    whatever the file holds (read whole, a long run's file was held twice over)."""
    try:
        fd = open_state_file(run.events, os.O_RDONLY, run.data_dir)
    except FileNotFoundError:
        return
    with os.fdopen(fd, "rb") as f:
        f.seek(offset)
        at, line, length = offset, bytearray(), 0  # the line being read and its length
        while block := f.read(READ_BLOCK):
            *ended, rest = block.split(b"\n")
            for piece in ended:
                length += len(piece) + 1
                at += length
                whole = line + piece if length <= LINE_LIMIT else b""
                yield at, whole.decode("utf-8", errors="replace").strip()
                line, length = bytearray(), 0
            length += len(rest)
            if length <= LINE_LIMIT:
                line += rest
            else:
                line = bytearray()  # too long to be an event: only its end is looked for


def end_line(fd: int) -> None:
    """End the half line a killed process may have left at the end of the events file open
    on ``fd`` (read and write): a line appended after it would be glued to it and lost."""
    size = os.fstat(fd).st_size
    if size and os.pread(fd, 1, size - 1) != b"\n":
        os.write(fd, b"\n")
