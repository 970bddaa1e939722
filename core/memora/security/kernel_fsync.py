"""``fsync`` that waits in the kernel, not on a worker thread.

A durable append is a ``write`` into the page cache and an ``fsync`` that waits for the disk.
Only the second can stall, so it must not run on the event loop; on a worker thread, though, the
trip costs more than the append: the thread's wake-up, its GIL hand-offs after every system call
and the loop's wake-up cost about five context switches (≈120 µs of CPU a trip on a small VM,
about three times the ``write`` and ``fsync`` themselves).

Linux's asynchronous I/O takes an ``fsync`` as a request (``io_submit`` with ``IOCB_CMD_FSYNC``,
Linux 4.18+): the kernel runs it on its own worker and signals an ``eventfd`` that the event loop
watches, so no Python thread wakes and the GIL never changes hands.  This is how Redis writes its
append-only file (the ``write`` from the event loop, the ``fsync`` in the background), here with
the background in the kernel.

:func:`kernel_fsync` gives the running loop's :class:`KernelFsync`, or ``None`` where it is not
available — another system, another processor than x86-64 and ARM64, a kernel without it, a
sandbox that forbids the calls — and then the caller uses a worker thread, as before.  A failure
of the ``fsync`` itself is raised as the ``OSError`` ``os.fsync`` would raise.

:func:`on_local_disk` says whether a folder lies on a local file system (from
``/proc/self/mountinfo``): a network file system may stall any call, not only ``fsync``, so the
callers keep their whole write on a worker thread there.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import logging
import os
import platform
import sys
import weakref
from pathlib import Path

__all__ = [
    "LOCAL_FILE_SYSTEMS",
    "KernelFsync",
    "file_system_of",
    "kernel_fsync",
    "on_local_disk",
    "unsupported",
]

log = logging.getLogger("memora")

_SYSCALLS = {  # io_setup, io_destroy, io_getevents, io_submit
    "x86_64": (206, 207, 208, 209),
    "aarch64": (0, 1, 4, 2),
}
_IOCB_CMD_FSYNC = 2
_IOCB_FLAG_RESFD = 1
_DEPTH = 128
"""Requests in flight per event loop; one more waits on a worker thread."""
_BATCH = 64

LOCAL_FILE_SYSTEMS = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "tmpfs", "overlay", "zfs", "bcachefs"}
)
"""File systems on a local disk (or in memory): a page-cache ``write`` there does not wait on a
network.  ``overlay`` is a container's root, over a local one."""


class _Iocb(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_uint64),
        ("key", ctypes.c_uint32),
        ("rw_flags", ctypes.c_uint32),
        ("opcode", ctypes.c_uint16),
        ("reqprio", ctypes.c_int16),
        ("fildes", ctypes.c_uint32),
        ("buf", ctypes.c_uint64),
        ("nbytes", ctypes.c_uint64),
        ("offset", ctypes.c_int64),
        ("reserved2", ctypes.c_uint64),
        ("flags", ctypes.c_uint32),
        ("resfd", ctypes.c_uint32),
    ]


class _Event(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_uint64),
        ("obj", ctypes.c_uint64),
        ("res", ctypes.c_int64),
        ("res2", ctypes.c_int64),
    ]


def _long(n: int) -> ctypes.c_long:
    return ctypes.c_long(n)


class _Libc:
    """The raw system calls (glibc has no wrappers for them)."""

    def __init__(self) -> None:
        # syscall() is variadic: every argument goes as a C long (a Python int would go as an
        # int, whose upper half a long read may not find zeroed)
        self.setup, self.destroy, self.getevents, self.submit = (
            _long(n) for n in _SYSCALLS[platform.machine()]
        )
        libc = ctypes.CDLL(None, use_errno=True)
        self.syscall = libc.syscall
        self.syscall.restype = ctypes.c_long


_libc: _Libc | None = None
_unavailable: str | None = None
"""Why kernel fsync is off for this process (after the first attempt failed)."""
_worked = False
"""A kernel fsync has succeeded in this process: the kernel takes the request, so a refusal
later is about one file, not about the kernel."""


def _lib() -> _Libc | None:
    global _libc, _unavailable
    if _libc is None and _unavailable is None:
        if sys.platform != "linux" or platform.machine() not in _SYSCALLS:
            _unavailable = f"not on {sys.platform}/{platform.machine()}"
        elif not hasattr(os, "eventfd"):
            _unavailable = "no os.eventfd"
        else:
            try:
                _libc = _Libc()
            except (OSError, AttributeError) as exc:
                _unavailable = f"libc: {exc}"
    return _libc


def _turn_off(reason: str) -> None:
    global _unavailable
    if _unavailable is None:
        _unavailable = reason
        log.debug("fsync through the kernel's asynchronous I/O is off: %s", reason)


class KernelFsync:
    """One event loop's queue of ``fsync`` requests to the kernel (see the module's doc)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, lib: _Libc) -> None:
        self._lib = lib
        self._owner = weakref.ref(loop)  # weakly: a loop dropped unclosed frees its queue too
        self.pid = os.getpid()
        ctx = ctypes.c_ulong(0)
        if lib.syscall(lib.setup, _long(_DEPTH), ctypes.byref(ctx)) < 0:
            code = ctypes.get_errno()
            raise OSError(code, f"io_setup: {os.strerror(code)}")
        self._ctx = ctx
        try:
            self._efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        except OSError:
            lib.syscall(lib.destroy, ctx)
            raise
        self._next = 0
        self._waiting: dict[int, asyncio.Future[None]] = {}
        self._events = (_Event * _BATCH)()
        self._no_wait = (ctypes.c_long * 2)(0, 0)  # a timespec of zero: io_getevents never waits
        self.attach(loop)
        # a queue lives as long as the process (a later loop takes it over, see attach); one
        # dropped in a forked child is given back; at exit the kernel takes them all
        self._finalizer = weakref.finalize(self, _release, lib, ctx.value, self._efd)
        self._finalizer.atexit = False

    def full(self) -> bool:
        return len(self._waiting) >= _DEPTH

    def owner(self) -> asyncio.AbstractEventLoop | None:
        """The loop this queue serves; ``None`` once that loop is closed or gone."""
        loop = self._owner()
        return None if loop is None or loop.is_closed() else loop

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Serve ``loop``, the last one having closed: giving a context back to the kernel
        (``io_destroy``) waits tens of milliseconds, so a process keeps its contexts and the
        next loop takes one.  A request still in flight for the closed loop is forgotten (no
        one can await it any more)."""
        self._waiting.clear()
        self._owner = weakref.ref(loop)
        loop.add_reader(self._efd, self._completed)

    def fsync(self, fd: int) -> asyncio.Future[None]:
        """A future that completes when ``fd``'s data and metadata are on the disk (as after
        ``os.fsync(fd)``), or fails with its ``OSError``.  The caller may close ``fd`` at once
        after this returns: the request holds the file."""
        lib = self._lib
        self._next += 1
        key = self._next
        iocb = _Iocb(
            data=key,
            opcode=_IOCB_CMD_FSYNC,
            fildes=fd,
            flags=_IOCB_FLAG_RESFD,
            resfd=self._efd,
        )
        pointers = (ctypes.POINTER(_Iocb) * 1)(ctypes.pointer(iocb))
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[key] = future
        # io_submit copies the request: iocb need not outlive this call
        if lib.syscall(lib.submit, self._ctx, _long(1), pointers) != 1:
            code = ctypes.get_errno()
            del self._waiting[key]
            raise OSError(code, f"io_submit(fsync): {os.strerror(code)}")
        return future

    def _completed(self) -> None:
        global _worked
        try:
            os.eventfd_read(self._efd)
        except BlockingIOError:
            return
        lib = self._lib
        while True:
            got = lib.syscall(
                lib.getevents, self._ctx, _long(0), _long(_BATCH), self._events, self._no_wait
            )
            if got <= 0:
                return
            for event in self._events[:got]:
                future = self._waiting.pop(event.data, None)
                if future is None or future.done():  # its awaiting task was cancelled
                    continue
                if event.res < 0:
                    code = -event.res
                    future.set_exception(OSError(code, os.strerror(code)))
                else:
                    _worked = True
                    future.set_result(None)
            if got < _BATCH:
                return


def _release(lib: _Libc, ctx: int, efd: int) -> None:
    lib.syscall(lib.destroy, ctypes.c_ulong(ctx))
    os.close(efd)


_queues: list[KernelFsync] = []
"""This process's queues: one per live event loop, and those of closed loops for the next."""


def kernel_fsync() -> KernelFsync | None:
    """The running loop's :class:`KernelFsync`; ``None`` when this process cannot use one
    (then ``fsync`` on a worker thread)."""
    lib = _lib()
    if lib is None or _unavailable is not None:
        return None
    loop = asyncio.get_running_loop()
    pid = os.getpid()
    free = None
    for queue in _queues:
        owner = queue.owner()
        if owner is loop and queue.pid == pid:
            return queue
        if owner is None and free is None:
            free = queue
    if any(q.pid != pid for q in _queues):  # a forked child inherits no usable context
        _queues[:] = [q for q in _queues if q.pid == pid]
    try:
        if free is not None:
            free.attach(loop)
            return free
        queue = KernelFsync(loop, lib)
    except (OSError, RuntimeError, NotImplementedError) as exc:
        if isinstance(exc, OSError) and exc.errno == errno.EAGAIN:
            # the system's limit of requests (fs.aio-max-nr) is reached: this loop uses the
            # thread, a later one may have room
            log.debug("no kernel fsync queue for this event loop: %s", exc)
            return None
        # ENOSYS (no such call), EPERM (a sandbox forbids it), a loop without add_reader:
        # the thread it is, from now on
        _turn_off(str(exc))
        return None
    _queues.append(queue)
    return queue


def unsupported(exc: OSError) -> bool:
    """Whether a refused ``io_submit`` means the kernel takes no ``fsync`` request (a kernel
    older than 4.18 says ``EINVAL``) rather than a failure of this one ``fsync``; then kernel
    fsync is turned off for the process.  Once one has worked, a refusal is the file's."""
    if exc.errno in (errno.ENOSYS, errno.EPERM) or (
        exc.errno in (errno.EINVAL, errno.EOPNOTSUPP) and not _worked
    ):
        _turn_off(str(exc))
        return True
    return False


def _mount_points() -> list[tuple[str, str]]:
    """``(mount point, file system)`` of this process's mounts."""
    out = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as fh:
        for line in fh:
            left, sep, right = line.partition(" - ")
            fields = left.split()
            if not sep or len(fields) < 5 or not right.split():
                continue
            # octal escapes for a space, tab, newline and backslash in the path
            point = fields[4]
            for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
                point = point.replace(code, char)
            out.append((point, right.split()[0]))
    return out


def file_system_of(path: str | Path, mounts: list[tuple[str, str]] | None = None) -> str | None:
    """The file system ``path`` lies on (the innermost mount that holds it); ``None`` when
    unknown."""
    try:
        real = os.path.realpath(path)
        mounts = _mount_points() if mounts is None else mounts
    except OSError:
        return None
    best, kind = "", None
    for point, fs in mounts:
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):  # a later mount over the same point wins
            best, kind = point, fs
    return kind


def on_local_disk(path: str | Path) -> bool:
    """Whether ``path`` lies on a local file system (:data:`LOCAL_FILE_SYSTEMS`)."""
    return file_system_of(path) in LOCAL_FILE_SYSTEMS
