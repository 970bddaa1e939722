"""Run one command and take every process it leaves behind down with it (Linux).

``python reaper.py -- ARGV...`` makes itself a *child subreaper* (``prctl``): a descendant whose
parent exits — a daemon that forked twice, a ``setsid``/``nohup`` child — is re-parented to the
reaper instead of to init, so it stays findable.  When the command exits, or the reaper gets
SIGTERM/SIGINT/SIGHUP (memora's timeout or kill), every remaining descendant is killed with
SIGKILL, whatever session or process group it moved to.  The exit code is the command's.

With ``--hide PATH`` (repeatable, before ``--``) the command runs in a mount namespace of its
own where each PATH is an empty, read-only folder: memora's data and the user's config folder,
in a server where several people's tools run as one OS user (see :func:`hide`).  When that
cannot be done the command does not run: the reaper exits with :data:`HIDE_FAILED` and says why
on stderr, after :data:`HIDE_MARK`.

Standard library only and run as a script (not imported from memora), so it starts fast and
works with any environment the child is given.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import signal
import subprocess
import sys

PR_SET_CHILD_SUBREAPER = 36
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REC, MS_PRIVATE = 0x4000, 0x40000
PR_CAPBSET_DROP = 24
HIDE_FAILED = 125
"""The reaper's exit code when it could not hide what it was asked to: the command never ran."""
HIDE_MARK = "memora-reaper: cannot hide "


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


def _own_namespace(libc: ctypes.CDLL) -> None:
    """Enter a mount namespace where this process may mount.  First a user namespace too, with
    only our own uid and gid mapped: root there has no power over files of other users (a
    database's files owned by ``postgres``), and an unprivileged user may mount in it.  Inside
    a user namespace already (the sandbox's), where a nested one cannot map our ids, a mount
    namespace alone."""
    uid, gid = os.geteuid(), os.getegid()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) == 0:
        for name, text in (
            ("setgroups", "deny"),
            ("uid_map", f"{uid} {uid} 1"),
            ("gid_map", f"{gid} {gid} 1"),
        ):
            with open(f"/proc/self/{name}", "w") as fh:
                fh.write(text)
        return
    first = ctypes.get_errno()
    if libc.unshare(CLONE_NEWNS) != 0:
        raise OSError(
            first,
            f"no user namespace ({os.strerror(first)}) nor mount namespace "
            f"({os.strerror(ctypes.get_errno())}) may be made here",
        )


def hide(paths: list[str]) -> None:
    """Put an empty read-only folder over each of ``paths`` (existing folders), in a mount
    namespace of this process's own — nothing changes outside it — and give up the power to
    take them off; raise ``OSError`` when any of it cannot be done."""
    libc = ctypes.CDLL(None, use_errno=True)
    _own_namespace(libc)
    # private first: the mounts below must not propagate back to the host's namespace
    if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "the mounts cannot be made private")
    for path in paths:
        if not os.path.isdir(path):
            continue  # nothing there to hide (a file path is hidden by its folder)
        flags = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
        if libc.mount(b"memora-hidden", os.fsencode(path), b"tmpfs", flags, b"size=4k,mode=0555"):
            err = ctypes.get_errno()
            raise OSError(err, f"{path}: {os.strerror(err)}")
    _drop_capabilities(libc)


def _drop_capabilities(libc: ctypes.CDLL) -> None:
    """Empty the capability bounding set, so the command starts with no capability at all.
    Why: these mounts belong to this namespace, so whoever holds CAP_SYS_ADMIN in it may
    ``umount`` them — and when memora runs as root, uid 0 keeps every capability across
    ``execve``, so its command would be root here and could uncover the folders.  With the
    bounding set empty, ``execve`` grants none (setuid binaries included).  A nested user
    namespace the command makes gets capabilities back, but only there, where these mounts are
    locked to what they cover (the kernel's rule for a less privileged mount namespace)."""
    try:
        with open("/proc/sys/kernel/cap_last_cap") as fh:
            last = int(fh.read())
    except (OSError, ValueError):
        last = 63  # every capability number the kernel may know; unknown ones fail EINVAL
    for cap in range(last + 1):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != errno.EINVAL:
            err = ctypes.get_errno()
            raise OSError(err, f"capability {cap} cannot be dropped: {os.strerror(err)}")


def main(argv: list[str]) -> int:
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        sys.stderr.write("usage: reaper.py [--hide PATH]... -- COMMAND [ARGS...]\n")
        return 2
    command = argv[argv.index("--") + 1 :]
    options = argv[: argv.index("--")]
    hidden = [options[i + 1] for i, o in enumerate(options[:-1]) if o == "--hide"]
    if hidden:
        try:
            hide(hidden)
        except (OSError, AttributeError) as exc:
            sys.stderr.write(f"{HIDE_MARK}{', '.join(hidden)}: {exc}\n")
            return HIDE_FAILED
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
