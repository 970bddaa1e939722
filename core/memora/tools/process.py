"""Running commands and scripts: timeouts, output caps, whole-tree kills, background tasks.

Every command runs under a small *reaper* (``memora/tools/reaper.py``, Linux): a child
subreaper that, when the command ends, times out or is killed, kills every process the command
left — including daemons that called ``setsid`` or double-forked, which a process-group kill
misses.  The reaper leads its own session too, so a group kill remains the last resort.

Children get a scrubbed environment (:func:`child_environment`): a documented allow-list, never
a variable named like a secret, extendable by the host.

Output is streamed and capped: only the first and last parts are kept, however much the command
prints, and progress lines are handed to a callback as they arrive.

``hide=`` paths (memora's data, the user's config folder — in a server where several people's
tools run as one OS user) are empty, read-only folders for the command and everything it starts
(the reaper's ``--hide``); where that cannot be done the command is refused, never run unhidden.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import re
import signal
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ToolError, ToolErrorCode

__all__ = [
    "ENV_ALLOW",
    "HIDE_FAILED",
    "HIDE_MARK",
    "BackgroundTask",
    "BackgroundTasks",
    "CapturedOutput",
    "ProcessResult",
    "check_hiding",
    "child_environment",
    "run_process",
]

DEFAULT_MAX_OUTPUT = 64_000
_REAPER = Path(__file__).with_name("reaper.py")

ENV_ALLOW: tuple[str, ...] = (
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_*", "TERM", "COLORTERM",
    "TZ", "TMPDIR", "TMP", "TEMP", "PWD", "VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH",
    "PYTHONIOENCODING", "NODE_PATH", "JAVA_HOME", "GOPATH", "GOROOT", "CARGO_HOME",
    "RUSTUP_HOME", "SSL_CERT_FILE", "SSL_CERT_DIR", "XDG_*", "DISPLAY",
)  # fmt: skip
"""Variables a command inherits from memora's environment (``*`` ends a prefix)."""

_SECRET = re.compile(
    r"(KEY|TOKEN|SECRET|PASSW|PASSPHRASE|CREDENTIAL|AUTH|COOKIE|SESSION|DSN|PRIVATE)",
    re.IGNORECASE,
)


def _allowed(name: str, patterns: Sequence[str]) -> bool:
    return any(name.startswith(p[:-1]) if p.endswith("*") else name == p for p in patterns)


def child_environment(
    allow: Sequence[str] = (),
    values: dict[str, str] | None = None,
    base: dict[str, str] | None = None,
) -> dict[str, str]:
    """The environment a command gets: the variables of :data:`ENV_ALLOW` and ``allow`` that
    memora has (``LC_*``-style prefixes allowed), minus anything named like a secret (``*KEY*``,
    ``*TOKEN*``, ``*PASSWORD*``, ...) unless ``allow`` names it exactly, plus ``values``."""
    source = os.environ if base is None else base
    patterns = (*ENV_ALLOW, *allow)
    exact = {a for a in allow if not a.endswith("*")}
    env = {
        k: v
        for k, v in source.items()
        if _allowed(k, patterns) and (k in exact or not _SECRET.search(k))
    }
    env.update(values or {})
    return env


class CapturedOutput:
    """Keeps the head and the tail of a stream, counting everything."""

    def __init__(self, limit: int) -> None:
        self.head_limit = limit // 2
        self.tail_limit = limit - self.head_limit
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_size = 0
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head.extend(data[:room])
            data = data[room:]
        if data:
            self.tail.append(data)
            self.tail_size += len(data)
            while self.tail_size - len(self.tail[0]) >= self.tail_limit:
                self.tail_size -= len(self.tail.popleft())

    @property
    def truncated(self) -> bool:
        return self.total > len(self.head) + self.tail_size or self.tail_size > self.tail_limit

    def text(self) -> str:
        tail = b"".join(self.tail)
        if len(tail) > self.tail_limit:
            tail = tail[-self.tail_limit :]
        head = bytes(self.head).decode("utf-8", errors="replace")
        if self.total <= len(self.head) + len(tail):
            return head + tail.decode("utf-8", errors="replace")
        skipped = self.total - len(self.head) - len(tail)
        return (
            head
            + f"\n[... {skipped:,} bytes omitted; {self.total:,} bytes in all ...]\n"
            + tail.decode("utf-8", errors="replace")
        )


@dataclass(frozen=True, slots=True)
class ProcessResult:
    """The outcome of a command run to its end (or its timeout)."""

    exit_code: int | None
    output: str
    """stdout and stderr interleaved, capped (head + tail)."""
    total_bytes: int
    truncated: bool
    timed_out: bool
    duration: float


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """Ask the reaper to take the whole tree down (SIGTERM), then kill its group regardless."""
    if proc.returncode is None and sys.platform != "win32":
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), 3)
    _kill_tree(proc)


def _command(argv: Sequence[str] | str, hide: Sequence[Path] = ()) -> list[str]:
    cmd = ["/bin/sh", "-c", argv] if isinstance(argv, str) else list(argv)
    if sys.platform.startswith("linux") and _REAPER.is_file():
        # -I -S: the reaper needs only the standard library, and starts in a few milliseconds
        hidden = [a for p in hide for a in ("--hide", str(p))]
        return [sys.executable, "-I", "-S", str(_REAPER), *hidden, "--", *cmd]
    if hide:
        raise ToolError(
            ToolErrorCode.NOT_AVAILABLE,
            "commands cannot run here with memora's data hidden from them (that needs Linux "
            "namespaces), and this server hides it from every tool: refused",
        )
    return cmd


_hiding: dict[str, str] = {}
"""Whether the reaper can hide folders on this machine: ``"ok"`` or why not (asked once)."""

HIDE_FAILED = 125
HIDE_MARK = "memora-reaper: cannot hide "
"""The reaper's exit code and stderr prefix when hiding failed (see ``reaper.py``)."""


async def check_hiding() -> None:
    """``NOT_AVAILABLE`` when commands cannot run with folders hidden here (asked of the
    reaper once a process: a mount namespace, and a user namespace or the power to mount)."""
    if "ok" in _hiding:
        return
    if "no" not in _hiding:
        probe = Path(tempfile.mkdtemp(prefix="memora-hide-"))
        try:
            proc = await asyncio.create_subprocess_exec(
                *_command(["/bin/true"], [probe]),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
            )
            _, err = await proc.communicate()
        finally:
            probe.rmdir()  # noqa: ASYNC240 - once a process, an empty folder
        if proc.returncode == 0:
            _hiding["ok"] = "ok"
            return
        said = err.decode("utf-8", "replace").strip().removeprefix(HIDE_MARK)
        _hiding["no"] = said or f"the reaper exited with {proc.returncode}"
    raise ToolError(
        ToolErrorCode.NOT_AVAILABLE,
        "commands are refused: this server hides memora's data from every tool, and this "
        f"machine does not let memora do it ({_hiding['no']}); allow unprivileged user "
        "namespaces, or serve one user with tool isolation off (docs/service.md)",
    )


def _kill_tree(proc: asyncio.subprocess.Process, sig: int = signal.SIGKILL) -> None:
    """Kill the child's whole process group (it leads its own session), then the child."""
    if sys.platform != "win32":
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()


def _close_own_proc() -> None:
    """Make memora's process non-dumpable: its ``/proc/PID`` files — ``environ`` (API keys),
    ``fd/`` (the open memory database), ``mem`` — are then closed to processes of the same user
    that are not root in memora's own user namespace, which every hidden command is not."""
    if "undumpable" not in _hiding and sys.platform.startswith("linux"):
        import ctypes

        pr_set_dumpable = 4
        if ctypes.CDLL(None, use_errno=True).prctl(pr_set_dumpable, 0, 0, 0, 0) != 0:
            raise ToolError(
                ToolErrorCode.NOT_AVAILABLE,
                "commands are refused: memora's own process could not be closed to them",
            )
        _hiding["undumpable"] = "ok"


async def _spawn(
    argv: Sequence[str] | str, cwd: Path, env: dict[str, str] | None, hide: Sequence[Path] = ()
) -> asyncio.subprocess.Process:
    if hide:
        await check_hiding()
        _close_own_proc()
    kwargs: dict[str, object] = {
        "cwd": str(cwd),
        "stdin": asyncio.subprocess.DEVNULL,
        "stdout": asyncio.subprocess.PIPE,
        "stderr": asyncio.subprocess.STDOUT,
        "env": env if env is not None else child_environment(),
        "start_new_session": sys.platform != "win32",
    }
    try:
        if isinstance(argv, str) and sys.platform == "win32":  # pragma: no cover - Windows
            return await asyncio.create_subprocess_shell(argv, **kwargs)  # type: ignore[arg-type]
        return await asyncio.create_subprocess_exec(*_command(argv, hide), **kwargs)  # type: ignore[arg-type]
    except FileNotFoundError as exc:
        raise ToolError(
            ToolErrorCode.NOT_AVAILABLE, f"cannot start {argv!r}: {exc.strerror}"
        ) from exc
    except OSError as exc:
        raise ToolError(ToolErrorCode.EXECUTION_FAILED, f"cannot start {argv!r}: {exc}") from exc


async def _pump(
    proc: asyncio.subprocess.Process, out: CapturedOutput, progress: Callable[[str], None] | None
) -> None:
    assert proc.stdout is not None
    pending = b""
    while True:
        data = await proc.stdout.read(65536)
        if not data:
            break
        out.feed(data)
        if progress is not None:
            pending += data
            if b"\n" in pending:
                lines, _, pending = pending.rpartition(b"\n")
                text = lines.decode("utf-8", errors="replace")
                progress(text[-2000:])
            elif len(pending) > 8192:
                pending = pending[-8192:]
    if progress is not None and pending:
        progress(pending.decode("utf-8", errors="replace")[-2000:])


async def run_process(
    argv: Sequence[str] | str,
    *,
    cwd: Path,
    timeout: float,
    max_output: int = DEFAULT_MAX_OUTPUT,
    env: dict[str, str] | None = None,
    progress: Callable[[str], None] | None = None,
    hide: Sequence[Path] = (),
) -> ProcessResult:
    """Run to completion or ``timeout``; a string runs through the shell, a list does not.
    ``hide``: folders the command finds empty (see the module docstring)."""
    started = time.monotonic()
    proc = await _spawn(argv, cwd, env, hide)
    out = CapturedOutput(max_output)
    pump = asyncio.ensure_future(_pump(proc, out, progress))
    timed_out = False
    try:
        try:
            await asyncio.wait_for(asyncio.shield(pump), timeout)
            await asyncio.wait_for(proc.wait(), max(0.1, timeout - (time.monotonic() - started)))
        except TimeoutError:
            timed_out = True
            await _stop(proc)
        # anything still holding the pipe dies with the command (the reaper already saw to it)
        _kill_tree(proc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(pump, 5)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), 5)
    except BaseException:
        _kill_tree(proc)
        pump.cancel()
        raise
    if hide and proc.returncode == HIDE_FAILED and out.text().startswith(HIDE_MARK):
        raise ToolError(ToolErrorCode.NOT_AVAILABLE, f"the command was not run: {out.text()}")
    return ProcessResult(
        exit_code=None if timed_out else proc.returncode,
        output=out.text(),
        total_bytes=out.total,
        truncated=out.truncated,
        timed_out=timed_out,
        duration=time.monotonic() - started,
    )


@dataclass
class BackgroundTask:
    """A command started in the background, with the tail of its output."""

    id: str
    command: str
    started_at: float
    proc: asyncio.subprocess.Process
    output: CapturedOutput
    pump: asyncio.Future[None]
    ended_at: float | None = None
    tail_lines: deque[str] = field(default_factory=lambda: deque(maxlen=200))
    owner: str | None = None
    """The memory scope (user) whose tool started it: only that scope's tools see it."""

    @property
    def running(self) -> bool:
        return self.proc.returncode is None

    def info(self) -> dict[str, object]:
        return {
            "id": self.id,
            "command": self.command,
            "running": self.running,
            "exit_code": self.proc.returncode,
            "started_at": self.started_at,
            "output_bytes": self.output.total,
        }

    def tail(self, max_chars: int = 4000) -> str:
        return self.output.text()[-max_chars:]


class BackgroundTasks:
    """Background commands of a project's runtime: start, list, tail, kill; all killed on
    close.  Each task belongs to the scope (user) that started it, and the tools of a scope work
    through :meth:`for_scope`: another user's commands, their output and their ids are not
    there for them."""

    _ANYONE = object()

    def __init__(self, max_output: int = 256_000) -> None:
        self._tasks: dict[str, BackgroundTask] = {}
        self._ids = itertools.count(1)
        self._max_output = max_output
        self._owner: object = BackgroundTasks._ANYONE

    def for_scope(self, scope: str | None) -> BackgroundTasks:
        """The view of ``scope``'s tools: what they start is theirs, what they see is theirs."""
        view = object.__new__(BackgroundTasks)
        view.__dict__.update(self.__dict__)  # the same tasks and ids: one table, many views
        view._owner = scope
        return view

    def _mine(self) -> dict[str, BackgroundTask]:
        if self._owner is BackgroundTasks._ANYONE:
            return self._tasks
        return {k: t for k, t in self._tasks.items() if t.owner == self._owner}

    async def start(
        self,
        command: str,
        *,
        cwd: Path,
        env: dict[str, str] | None = None,
        hide: Sequence[Path] = (),
    ) -> BackgroundTask:
        proc = await _spawn(command, cwd, env, hide)
        out = CapturedOutput(self._max_output)
        pump = asyncio.ensure_future(_pump(proc, out, None))
        task = BackgroundTask(f"bg-{next(self._ids)}", command, time.time(), proc, out, pump)
        if self._owner is not BackgroundTasks._ANYONE:
            task.owner = self._owner  # type: ignore[assignment]
        self._tasks[task.id] = task
        return task

    def list(self) -> list[dict[str, object]]:
        return [t.info() for t in self._mine().values()]

    def get(self, task_id: str) -> BackgroundTask:
        mine = self._mine()
        task = mine.get(task_id)
        if task is None:
            raise ToolError(
                ToolErrorCode.FILE_NOT_FOUND,
                f"no background task {task_id!r}; running: {', '.join(mine) or 'none'}",
            )
        return task

    async def kill(self, task_id: str) -> bool:
        task = self.get(task_id)
        was_running = task.running
        await _stop(task.proc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(task.proc.wait(), 5)
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(task.pump, 2)
        return was_running

    async def close(self) -> None:
        for task_id in list(self._mine()):
            await self.kill(task_id)
