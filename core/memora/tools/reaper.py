"""Run one command and take every process it leaves behind down with it (Linux).

``python reaper.py -- ARGV...`` makes itself a *child subreaper* (``prctl``): a descendant whose
parent exits — a daemon that forked twice, a ``setsid``/``nohup`` child — is re-parented to the
reaper instead of to init, so it stays findable.  When the command exits, or the reaper gets
SIGTERM/SIGINT/SIGHUP (memora's timeout or kill), every remaining descendant is killed with
SIGKILL, whatever session or process group it moved to.  The exit code is the command's.

Standard library only and run as a script (not imported from memora), so it starts fast and
works with any environment the child is given.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys

PR_SET_CHILD_SUBREAPER = 36


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1:
            kids.setdefault(int(fields[1]), []).append(int(entry))
    return kids


def _descendants(root: int) -> list[int]:
    kids = _children_map()
    out: list[int] = []
    todo = list(kids.get(root, []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, []))
    return out


def kill_descendants(root: int) -> None:
    """SIGKILL every descendant of ``root`` until none is left (a few rounds: a dying parent's
    children are re-parented to us while we work)."""
    for _ in range(100):
        pids = _descendants(root)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass


def main(argv: list[str]) -> int:
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        sys.stderr.write("usage: reaper.py -- COMMAND [ARGS...]\n")
        return 2
    command = argv[argv.index("--") + 1 :]
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    me = os.getpid()

    def stop(signum: int, _frame: object) -> None:
        kill_descendants(me)
        os._exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    try:
        child = subprocess.Popen(command)
    except OSError as exc:
        sys.stderr.write(f"cannot start {command[0]!r}: {exc.strerror}\n")
        return 127
    code = child.wait()
    kill_descendants(me)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
