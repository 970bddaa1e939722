"""Run a snippet in a limited subprocess (Linux).

How a run is isolated, strongest first, decided once per sandbox and reported with every result:

- **user**: when memora runs as root, the snippet runs as a *dedicated user id* (a fresh,
  unused uid per run, no account needed): it cannot read the host user's files or signal its
  processes, ``max_processes`` counts exactly its own processes (a fork bomb stops there), and
  when the run ends every process of that uid is killed — daemons that ``setsid`` and fork twice
  included.  Otherwise the snippet runs as the host user under the kernel's reaper
  (:mod:`memora.tools.reaper`), which kills every descendant when it ends.
  In host-user mode memora makes its own process non-dumpable (so a snippet of the same user
  cannot read memora's ``/proc/PID/environ``, where API keys live) and, when memora runs as root,
  the snippet runs in a user namespace of its own, without root's powers over other processes.
- **network**: a new, empty network namespace (no interface but a downed loopback) when the
  platform allows it (root, or unprivileged user namespaces); otherwise reported as not isolated
  (``require_isolation=True`` refuses to run instead).  A network namespace does not cover
  Unix sockets in the file system (a local database's socket), so a seccomp filter refuses
  ``socket(AF_UNIX, ...)`` too (x86-64 and aarch64; reported otherwise).
- **limits** (``resource``): CPU seconds (the timeout + 1), address space (``memory_mb``), file
  size (``file_size_mb``), process count (``max_processes``), no core files; a wall-clock timeout
  kills the run; stdout and stderr are capped at ``max_output`` bytes each — past it the run is
  killed and the output marked truncated.  Where memora may create a pids cgroup, ``max_processes`` holds for
  the whole run too — the one limit that binds root in host-user mode (RLIMIT_NPROC does not);
  without one, root in host-user mode is reported as "processes NOT bounded".  Where memora may create a memory cgroup (root on
  cgroup v1 or a delegated v2 tree), ``memory_mb`` holds for the *whole* run — every process it
  forks counted together; elsewhere it holds per process, and the result says so.
- **environment**: only ``PATH``, ``HOME`` and ``TMPDIR`` (the run's temporary folder), ``LANG``
  and the ``env`` option's variables; nothing named like a secret passes, even from ``env``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import random
import shutil
import signal
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from memora.errors import ToolError, ToolErrorCode
from memora.services import ExecutionResult
from memora.tools.process import HIDE_FAILED, HIDE_MARK

__all__ = ["SubprocessSandbox"]

logger = logging.getLogger("memora.plugins.sandbox")

CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
_UID_BASE = 1_600_000_000
"""Dedicated uids are drawn above this (far from any real account)."""
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE")
_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
_LANGUAGES = {"python": "main.py", "py": "main.py", "shell": "main.sh", "sh": "main.sh"}
_in_use: set[int] = set()


def _looks_secret(name: str) -> bool:
    upper = name.upper()
    return any(word in upper for word in _SECRET_WORDS)


def _runnable_by_others(path: str) -> bool:
    """Whether a user without any of our permissions can execute ``path`` (every folder on the
    way searchable by others, the file executable by others)."""
    try:
        real = Path(os.path.realpath(path))
        if not real.stat().st_mode & stat.S_IXOTH:
            return False
        return all(p.stat().st_mode & stat.S_IXOTH for p in real.parents)
    except OSError:
        return False


def _refuse_shared(hide: Sequence[Path]) -> None:
    """A dedicated uid is kept out of ``hide`` by the folders' own permissions: each must be
    closed to other users (memora makes its folders 0700; an older one may not have)."""
    for folder in hide:
        try:
            mode = folder.stat().st_mode
        except OSError:
            continue  # not there: nothing to read
        if mode & 0o007:
            raise ToolError(
                ToolErrorCode.NOT_AVAILABLE,
                f"run_code is refused: {folder} is open to other users (mode "
                f"{oct(mode & 0o777)}), so a snippet's own uid could read it; make it private "
                f"(chmod -R go-rwx {folder})",
            )


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def _probe_network_isolation(flags: int) -> bool:
    """Fork a throw-away child that tries to enter a new network namespace."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            code = 0 if _libc().unshare(flags) == 0 else 1
        except Exception:
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


# -- a seccomp filter: socket(AF_UNIX, ...) fails with EACCES ----------------------------------

_AUDIT_ARCH = {"x86_64": (0xC000003E, 41), "aarch64": (0xC00000B7, 198)}
"""Machine -> (the seccomp audit arch, the number of the ``socket`` system call)."""


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _unix_socket_filter() -> tuple[Any, _SockFprog] | None:
    """A classic-BPF seccomp program (kept alive by the caller) that refuses ``socket`` for
    the ``AF_UNIX`` family, and every system call of a foreign ABI (x32, i386: their socket
    calls would slip past); None on a machine it does not know."""
    import platform
    import struct

    known = _AUDIT_ARCH.get(platform.machine())
    if known is None:
        return None
    arch, nr_socket = known
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, JMP|JEQ|K, JMP|JGE|K, RET|K
    errno, allow = 0x00050000, 0x7FFF0000  # SECCOMP_RET_ERRNO, SECCOMP_RET_ALLOW

    def op(code: int, jt: int, jf: int, k: int) -> bytes:
        return struct.pack("HBBI", code, jt, jf, k)

    program = b"".join(
        [
            op(ld, 0, 0, 4),  # seccomp_data.arch
            op(jeq, 1, 0, arch),
            op(ret, 0, 0, errno | 38),  # a foreign ABI: ENOSYS
            op(ld, 0, 0, 0),  # seccomp_data.nr
            op(jge, 0, 1, 0x40000000),  # the x32 ABI's numbers
            op(ret, 0, 0, errno | 38),
            op(jeq, 0, 3, nr_socket),
            op(ld, 0, 0, 16),  # args[0], low word: the address family
            op(jeq, 0, 1, 1),  # AF_UNIX
            op(ret, 0, 0, errno | 13),  # EACCES
            op(ret, 0, 0, allow),
        ]
    )
    buffer = ctypes.create_string_buffer(program, len(program))
    return buffer, _SockFprog(len(program) // 8, ctypes.addressof(buffer))


# -- a memory cgroup per run: the limit holds for every process of the run together --------------


class _MemoryCgroups:
    """Where runs get a memory cgroup of their own: a folder memora may create children in,
    with the limit file of cgroup v2 (``memory.max``) or v1 (``memory.limit_in_bytes``)."""

    CONTROLLER = "memory"
    LIMIT_V2 = "memory.max"
    LIMIT_V1 = "memory.limit_in_bytes"

    def __init__(self) -> None:
        self.base: Path | None = None
        self.limit_file = ""
        for base, limit in self._candidates():
            probe = base / f"memora-probe-{os.getpid()}"
            try:
                probe.mkdir()
            except OSError:
                continue
            try:
                if (probe / limit).exists():
                    self.base, self.limit_file = base, limit
                    break
            finally:
                with contextlib.suppress(OSError):
                    probe.rmdir()

    def _candidates(self) -> list[tuple[Path, str]]:
        try:
            lines = Path("/proc/self/cgroup").read_text().splitlines()
        except OSError:
            return []
        out: list[tuple[Path, str]] = []
        for line in lines:
            _, controllers, path = line.split(":", 2)
            rel = path.lstrip("/")
            if controllers == "" and Path("/sys/fs/cgroup/cgroup.controllers").exists():
                out.append((Path("/sys/fs/cgroup") / rel, self.LIMIT_V2))
            elif self.CONTROLLER in controllers.split(","):
                out.append((Path("/sys/fs/cgroup") / self.CONTROLLER / rel, self.LIMIT_V1))
        return out

    def limit(self, group: Path, limit: int) -> None:
        """Write ``limit`` into ``group`` (``OSError`` when it cannot be)."""
        (group / self.limit_file).write_text(str(limit))
        # swap must not stretch the limit: none in v2, memory+swap capped alike in v1
        swap, value = (
            ("memory.swap.max", "0")
            if self.limit_file == "memory.max"
            else ("memory.memsw.limit_in_bytes", str(limit))
        )
        with contextlib.suppress(OSError):  # absent where swap accounting is off
            (group / swap).write_text(value)

    def create(self, limit: int) -> Path | None:
        """A fresh cgroup limited to ``limit`` (bytes of memory, swap included where v1 counts
        it; processes for the pids controller)."""
        if self.base is None:
            return None
        group = self.base / f"memora-sandbox-{os.getpid()}-{random.randrange(1 << 30)}"
        try:
            group.mkdir()
            self.limit(group, limit)
        except OSError:
            with contextlib.suppress(OSError):
                group.rmdir()
            return None
        return group

    @staticmethod
    def remove(group: Path) -> None:
        """Kill what is left in ``group`` and remove it."""
        for _ in range(100):
            try:
                pids = [int(p) for p in (group / "cgroup.procs").read_text().split()]
            except (OSError, ValueError):
                pids = []
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            try:
                group.rmdir()
                return
            except OSError:
                time.sleep(0.01)


class _PidsCgroups(_MemoryCgroups):
    """Where runs get a pids cgroup of their own (``pids.max``, v1 or v2): the process limit
    for every process of the run together — the one that holds for root, whom RLIMIT_NPROC
    does not bind."""

    CONTROLLER = "pids"
    LIMIT_V2 = "pids.max"
    LIMIT_V1 = "pids.max"

    def limit(self, group: Path, limit: int) -> None:
        (group / self.limit_file).write_text(str(limit))


_cgroups: _MemoryCgroups | None = None
_pid_cgroups: _PidsCgroups | None = None


def _memory_cgroups() -> _MemoryCgroups:
    global _cgroups
    if _cgroups is None:
        _cgroups = _MemoryCgroups()
    return _cgroups


def _pids_cgroups() -> _PidsCgroups:
    global _pid_cgroups
    if _pid_cgroups is None:
        _pid_cgroups = _PidsCgroups()
    return _pid_cgroups


def _pids_of_uid(uid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", "rb") as fh:
                for line in fh:
                    if line.startswith(b"Uid:"):
                        if int(line.split()[1]) == uid:
                            pids.append(int(entry))
                        break
        except (OSError, ValueError):
            continue
    return pids


def _kill_uid(uid: int) -> None:
    """SIGKILL every process of ``uid`` until none is left (a fork bomb keeps spawning while we
    work: SIGSTOP first so nothing new appears, then SIGKILL)."""
    for _ in range(200):
        pids = _pids_of_uid(uid)
        if not pids:
            return
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
        time.sleep(0.01)


class SubprocessSandbox:
    """The ``code:execute`` service."""

    def __init__(
        self,
        *,
        memory_mb: int = 512,
        file_size_mb: int = 16,
        max_processes: int = 32,
        max_output: int = 64_000,
        network: str = "off",
        require_isolation: bool = False,
        python: str | None = None,
        env: dict[str, str] | None = None,
        user: str = "auto",
    ) -> None:
        if not sys.platform.startswith("linux"):
            raise RuntimeError(
                "memora-plugin-sandbox runs code on Linux only (it needs process limits and "
                "namespaces); run_code stays unavailable on this platform"
            )
        if user not in ("auto", "dedicated", "host"):
            raise ValueError('sandbox user must be "auto", "dedicated" or "host"')
        if user == "dedicated" and os.geteuid() != 0:
            raise ValueError('sandbox user="dedicated" needs memora to run as root')
        if network not in ("off", "on"):
            raise ValueError('sandbox network must be "off" or "on"')
        for name, value in (
            ("memory_mb", memory_mb),
            ("file_size_mb", file_size_mb),
            ("max_processes", max_processes),
            ("max_output", max_output),
        ):
            if int(value) <= 0:
                raise ValueError(f"sandbox {name} must be a positive number")
        secret = sorted(k for k in (env or {}) if _looks_secret(k))
        if secret:
            raise ValueError(
                f"sandbox env may not pass secret-named variables ({', '.join(secret)}): "
                "snippets are untrusted code"
            )
        self.memory = int(memory_mb) * 1024 * 1024
        self.file_size = int(file_size_mb) * 1024 * 1024
        self.max_processes = int(max_processes)
        self.max_output = int(max_output)
        self.network = network
        self.require_isolation = bool(require_isolation)
        self.extra_env = dict(env or {})
        self.root = os.geteuid() == 0
        self.dedicated = self.root and user != "host"
        self.python = python or self._find_python()
        self._net_flags: int | None = None
        self._seccomp = _unix_socket_filter() if network == "off" else None
        self._whole_run_memory: bool | None = None

    def _find_python(self) -> str:
        candidates = [sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"]
        if self.dedicated:  # the snippet runs as another uid: the interpreter must be reachable
            for c in candidates:
                if c and _runnable_by_others(c):
                    return c
            return ""
        return sys.executable

    def _network_flags(self) -> int:
        """0 when the network stays (``network="on"`` or not isolatable), else unshare flags."""
        if self._net_flags is None:
            flags = 0
            if self.network == "off":
                wanted = CLONE_NEWNET if self.root else CLONE_NEWUSER | CLONE_NEWNET
                flags = wanted if _probe_network_isolation(wanted) else 0
            self._net_flags = flags
        return self._net_flags

    def isolation(self, uid: int | None) -> str:
        """The isolation of a run, in words."""
        flags = self._network_flags()
        user = f"dedicated uid {uid}" if uid is not None else "host user (descendants reaped)"
        if self.network == "on":
            net = "network allowed (sandbox option network=on)"
        else:
            net = "no network (new network namespace)" if flags else "network NOT isolated"
            net += (
                ", no Unix sockets (seccomp)"
                if self._seccomp is not None
                else ", Unix sockets NOT blocked (no seccomp filter for this machine)"
            )
        if self._whole_run_memory is None:
            self._whole_run_memory = _memory_cgroups().base is not None
        scope = "for the whole run (cgroup)" if self._whole_run_memory else "per process"
        return (
            f"{user}; {net}; limits: memory {self.memory >> 20} MB {scope}, "
            f"files {self.file_size >> 20} MB, {self._process_limit(uid)}, "
            f"output {self.max_output} bytes per stream"
        )

    def _process_limit(self, uid: int | None) -> str:
        """How the process count is bounded, in words (as it really is)."""
        if _pids_cgroups().base is not None:
            return f"{self.max_processes} processes for the whole run (cgroup)"
        if uid is not None:
            return f"{self.max_processes} processes (its own uid)"
        if self.root:
            return "processes NOT bounded (root in host-user mode, no pids cgroup)"
        return f"{self.max_processes} processes more than the host user's"

    def _host_user_flags(self) -> int:
        """Host-user mode: memora's own /proc files closed to the snippet (non-dumpable), and a
        root snippet in a user namespace of its own (no CAP_SYS_PTRACE over memora)."""
        with contextlib.suppress(Exception):
            _libc().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        return CLONE_NEWUSER if self.root else 0

    # -- running ---------------------------------------------------------------------------------

    async def execute(
        self,
        code: str,
        *,
        language: str = "python",
        timeout: float = 30.0,
        hide: Sequence[Path] = (),
    ) -> ExecutionResult:
        """Run ``code``.  ``hide``: folders the snippet must not read (memora's data, the user's
        config folder, for one of several people's Agents): as the host user they are empty
        folders in a mount namespace of the run's own (memora's reaper); as a dedicated uid the
        files' own permissions keep them out — a folder others may read is refused."""
        lang = language.strip().lower()
        filename = _LANGUAGES.get(lang)
        if filename is None:
            raise ToolError(
                ToolErrorCode.NOT_AVAILABLE,
                f"language {language!r} is not supported here; supported: python, shell",
            )
        flags = await asyncio.to_thread(self._network_flags)
        if self.require_isolation and self.network == "off" and not flags:
            raise ToolError(
                ToolErrorCode.NOT_AVAILABLE,
                "run_code needs network isolation (require_isolation) and this platform cannot "
                "create a network namespace",
            )
        if filename == "main.py" and not self.python:
            raise ToolError(
                ToolErrorCode.NOT_AVAILABLE,
                "no Python interpreter is reachable by the sandbox user; set plugins.sandbox.python",
            )
        if self.dedicated and hide:
            _refuse_shared(hide)
        uid = self._take_uid() if self.dedicated else None
        if uid is None:
            flags |= self._host_user_flags()
            if self.root and self.require_isolation and _pids_cgroups().base is None:
                raise ToolError(
                    ToolErrorCode.NOT_AVAILABLE,
                    "run_code needs a process limit (require_isolation) and root in host-user "
                    "mode is bound by none here: no pids cgroup may be created",
                )
        group = await asyncio.to_thread(_memory_cgroups().create, self.memory)
        pids = await asyncio.to_thread(self._pids_group, group)
        workdir = Path(tempfile.mkdtemp(prefix="memora-sandbox-"))
        try:
            script = workdir / filename
            script.write_text(code, encoding="utf-8")
            if uid is not None:
                os.chown(workdir, uid, uid)
                os.chown(script, uid, uid)
            argv = (
                [self.python, "-I", "-B", str(script)]
                if filename == "main.py"
                else ["/bin/sh", str(script)]
            )
            if uid is None:  # the host user: the kernel's reaper takes every descendant down
                from memora.tools import reaper

                hidden = [a for p in hide for a in ("--hide", str(p))]
                argv = [sys.executable, "-I", reaper.__file__, *hidden, "--", *argv]
            groups = [g for g in (group, pids) if g is not None]
            return await self._run(argv, workdir, uid, flags, float(timeout), groups)
        finally:
            for made in (pids, group):
                if made is not None:
                    await asyncio.to_thread(_MemoryCgroups.remove, made)
            if uid is not None:
                await asyncio.to_thread(_kill_uid, uid)
                _in_use.discard(uid)
            await asyncio.to_thread(shutil.rmtree, workdir, True)

    def _pids_group(self, memory: Path | None) -> Path | None:
        """The run's pids cgroup: the memory group itself on cgroup v2 (a process is in one
        group of a hierarchy), a group of the pids hierarchy on v1; None where neither can."""
        made = _pids_cgroups()
        if made.base is None:
            return None
        if memory is not None and made.base == _memory_cgroups().base:
            with contextlib.suppress(OSError):
                made.limit(memory, self.max_processes)
            return None
        return made.create(self.max_processes)

    def _take_uid(self) -> int:
        while True:
            uid = _UID_BASE + random.randrange(1, 1 << 24)
            if uid not in _in_use and not _pids_of_uid(uid):
                _in_use.add(uid)
                return uid

    def _environment(self, workdir: Path) -> dict[str, str]:
        env = {
            "PATH": _SAFE_PATH,
            "HOME": str(workdir),
            "TMPDIR": str(workdir),
            "LANG": "C.UTF-8",
            "PYTHONIOENCODING": "utf-8",
        }
        env.update({k: v for k, v in self.extra_env.items() if not _looks_secret(k)})
        return env

    def _preexec(
        self, uid: int | None, flags: int, timeout: float, groups: Sequence[Path] = ()
    ) -> Callable[[], None]:
        import resource

        cpu = int(timeout) + 1
        limits = [
            (resource.RLIMIT_CPU, cpu),
            (resource.RLIMIT_AS, self.memory),
            (resource.RLIMIT_FSIZE, self.file_size),
            (resource.RLIMIT_CORE, 0),
        ]
        if uid is not None:
            limits.append((resource.RLIMIT_NPROC, self.max_processes))
        else:  # the host user's own processes count too: allow that many more
            limits.append(
                (resource.RLIMIT_NPROC, len(_pids_of_uid(os.getuid())) + self.max_processes)
            )

        seccomp = self._seccomp
        procs = [str(g / "cgroup.procs") for g in groups]

        def prepare() -> None:  # runs in the child, between fork and exec
            for path in procs:  # first: every process the run forks is counted with it
                fd = os.open(path, os.O_WRONLY)
                try:
                    os.write(fd, str(os.getpid()).encode())
                finally:
                    os.close(fd)
            for which, value in limits:
                resource.setrlimit(which, (value, value))
            if flags and _libc().unshare(flags) != 0:
                os._exit(121)
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            if seccomp is not None:
                libc = _libc()
                if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
                    os._exit(122)
                if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(seccomp[1])):
                    os._exit(122)

        return prepare

    async def _run(
        self,
        argv: list[str],
        workdir: Path,
        uid: int | None,
        flags: int,
        timeout: float,
        groups: Sequence[Path] = (),
    ) -> ExecutionResult:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=workdir,
            env=self._environment(workdir),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            preexec_fn=self._preexec(uid, flags, timeout, groups),
        )
        over = asyncio.Event()
        outputs: list[bytearray] = [bytearray(), bytearray()]

        async def drain(stream: asyncio.StreamReader | None, into: bytearray) -> None:
            if stream is None:
                return
            # read to the end even past the cap (discarding): a pipe left unread never reports
            # its end, and the process's exit is only complete once its pipes are
            while chunk := await stream.read(65536):
                room = self.max_output - len(into)
                if room > 0:
                    into.extend(chunk[:room])
                if len(chunk) > room:
                    over.set()

        readers = [
            asyncio.ensure_future(drain(proc.stdout, outputs[0])),
            asyncio.ensure_future(drain(proc.stderr, outputs[1])),
        ]
        waiter = asyncio.ensure_future(proc.wait())
        flood = asyncio.ensure_future(over.wait())
        timed_out = truncated = False
        try:
            done, _ = await asyncio.wait(
                {waiter, flood}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if waiter not in done:
                timed_out = flood not in done
                truncated = flood in done
                await self._stop(proc, uid)
            await asyncio.wait_for(asyncio.shield(waiter), 10)
            await asyncio.wait(readers, timeout=2)
        finally:
            flood.cancel()
            for r in readers:
                r.cancel()
            if proc.returncode is None:
                await self._stop(proc, uid)
        if flags and proc.returncode == 121 and not outputs[0] and not outputs[1]:
            raise ToolError(
                ToolErrorCode.EXECUTION_FAILED, "the sandbox could not enter its network namespace"
            )
        if proc.returncode == 122 and not outputs[0] and not outputs[1]:
            raise ToolError(
                ToolErrorCode.EXECUTION_FAILED, "the sandbox could not install its seccomp filter"
            )
        said = outputs[1].decode("utf-8", errors="replace")
        if proc.returncode == HIDE_FAILED and said.startswith(HIDE_MARK) and not outputs[0]:
            raise ToolError(  # the reaper could not hide memora's data: nothing ran
                ToolErrorCode.NOT_AVAILABLE, f"run_code is refused: {said.strip()}"
            )
        note = "\n[output limit reached: the run was stopped]" if truncated else ""
        return ExecutionResult(
            exit_code=proc.returncode if proc.returncode is not None else -9,
            stdout=outputs[0].decode("utf-8", errors="replace"),
            stderr=outputs[1].decode("utf-8", errors="replace") + note,
            timed_out=timed_out,
            truncated=truncated or over.is_set(),
            isolation=self.isolation(uid),
        )

    async def _stop(self, proc: asyncio.subprocess.Process, uid: int | None) -> None:
        if uid is not None:
            await asyncio.to_thread(_kill_uid, uid)
        else:
            # the reaper kills every descendant on SIGTERM, then the group for good measure
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            await asyncio.sleep(0.2)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
