"""fsync through the kernel's asynchronous I/O (``memora.security.kernel_fsync``), and the
session store's appends on it: durable before they return, correct under load, cancellation
and many event loops, and the worker thread where it is not to be used."""

from __future__ import annotations

import asyncio
import errno
import gc
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memora.memory.sessions import JsonlSessionStore, RoundRecord
from memora.security.kernel_fsync import (
    LOCAL_FILE_SYSTEMS,
    KernelFsync,
    file_system_of,
    kernel_fsync,
    on_local_disk,
)


def _here() -> bool:
    async def probe() -> bool:
        return kernel_fsync() is not None

    return asyncio.run(probe())


needs_kernel = pytest.mark.skipif(
    sys.platform != "linux" or not _here(), reason="no kernel fsync on this system"
)


def _round(rid: str) -> RoundRecord:
    return RoundRecord(round_id=rid, user=f"question {rid}", assistant=f"answer {rid}")


@needs_kernel
async def test_a_kernel_fsync_completes_and_a_bad_descriptor_is_refused(tmp_path: Path) -> None:
    queue = kernel_fsync()
    assert queue is not None and kernel_fsync() is queue  # one per event loop
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, "数据".encode())
    done = queue.fsync(fd)
    os.close(fd)  # the request holds the file
    assert await done is None
    with pytest.raises(OSError) as err:
        queue.fsync(fd)  # closed: the kernel refuses it, as os.fsync would
    assert err.value.errno == errno.EBADF
    assert kernel_fsync() is queue  # one file's failure turns nothing off


@needs_kernel
async def test_many_appends_at_once_all_land_beyond_the_kernel_queue(tmp_path: Path) -> None:
    """More appends at once than the kernel queue holds (128): the rest wait on a worker
    thread; every one is on disk, whole, when its append returns."""
    store = JsonlSessionStore(tmp_path)
    ids = [f"s{n}" for n in range(300)]
    for sid in ids:
        await store.create(session_id=sid)
    await asyncio.gather(
        *(store.append_turn(sid, [{"role": "user", "content": sid}], _round(sid)) for sid in ids)
    )
    await asyncio.gather(*(store.append_turn(sid, [], _round(sid + "b")) for sid in ids))
    again = JsonlSessionStore(tmp_path)
    for sid in ids:
        assert [r.round_id for r in await again.rounds(sid)] == [sid, sid + "b"]
        assert await again.messages(sid) == [{"role": "user", "content": sid}]


@needs_kernel
async def test_a_cancelled_append_leaves_the_store_working(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = JsonlSessionStore(tmp_path)
    await store.create(session_id="c")
    task = asyncio.ensure_future(store.append_turn("c", [], _round("r1")))
    await asyncio.sleep(0)  # the write is done and its fsync sent
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.05)  # the kernel's answer arrives for a future no one awaits
    await store.append_turn("c", [], _round("r2"))
    rounds = [r.round_id for r in await JsonlSessionStore(tmp_path).rounds("c")]
    assert rounds[-1] == "r2" and set(rounds) <= {"r1", "r2"}
    gc.collect()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


def _eventfds() -> int:
    return sum(1 for fd in os.listdir("/proc/self/fd") if "eventfd" in _link(f"/proc/self/fd/{fd}"))


def _link(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


def test_one_store_used_from_several_event_loops(tmp_path: Path) -> None:
    """``asyncio.run`` after ``asyncio.run`` (a host's ``chat_sync``): a closed loop's queue
    serves the next loop — no new kernel context each time (the system allows a limited number:
    a leak would end in ``EAGAIN`` and the thread), and none given back either (``io_destroy``
    waits tens of milliseconds, on the event loop of whoever called it)."""
    store = JsonlSessionStore(tmp_path)
    asyncio.run(store.create(session_id="loops"))
    queues: list[KernelFsync | None] = []

    async def turn(n: int) -> None:
        queues.append(kernel_fsync())
        await store.append_turn("loops", [], _round(f"r{n}"))

    gc.disable()  # a closed loop's queue is taken by the next one, not freed by the collector
    try:
        before = _eventfds() if os.path.isdir("/proc/self/fd") else 0
        for n in range(30):
            asyncio.run(turn(n))
        after = _eventfds() if os.path.isdir("/proc/self/fd") else 0
    finally:
        gc.enable()
    rounds = asyncio.run(JsonlSessionStore(tmp_path).rounds("loops"))
    assert [r.round_id for r in rounds] == [f"r{n}" for n in range(30)]
    if _here():
        assert all(q is not None for q in queues)
        assert len({id(q) for q in queues}) == 1  # the first loop's, taken by each next one
        assert after - before <= 1


def test_an_append_is_durable_across_a_kill(tmp_path: Path) -> None:
    """A child process appends through the kernel path, says so, and is killed at once: the
    turn it acknowledged is read back whole."""
    script = textwrap.dedent(
        f"""
        import asyncio, os, signal, sys
        from memora.memory.sessions import JsonlSessionStore, RoundRecord
        async def main():
            store = JsonlSessionStore({str(tmp_path)!r})
            await store.create(session_id="k")
            for n in range(20):
                await store.append_turn("k", [], RoundRecord(round_id=f"r{{n}}", user="u"))
            print("acknowledged", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        asyncio.run(main())
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert proc.stdout.strip() == "acknowledged", proc.stderr
    assert proc.returncode == -9
    rounds = asyncio.run(JsonlSessionStore(tmp_path).rounds("k"))
    assert [r.round_id for r in rounds] == [f"r{n}" for n in range(20)]


def test_the_file_system_of_a_path_is_the_innermost_mount() -> None:
    mounts = [
        ("/", "ext4"),
        ("/home", "nfs4"),
        ("/home/me/fast disk", "xfs"),
        ("/proc", "proc"),
    ]
    assert file_system_of("/var/lib/memora", mounts) == "ext4"
    assert file_system_of("/home/you/project/.memora", mounts) == "nfs4"
    assert file_system_of("/home/me/fast disk/p", mounts) == "xfs"
    assert file_system_of("/home/me/fast diskette", mounts) == "nfs4"  # a prefix is not a mount
    assert file_system_of("/", [("/", "ext4"), ("/", "overlay")]) == "overlay"  # the later one
    assert "nfs4" not in LOCAL_FILE_SYSTEMS and "ext4" in LOCAL_FILE_SYSTEMS


@pytest.mark.skipif(not os.path.exists("/proc/self/mountinfo"), reason="no mountinfo")
def test_this_machines_temporary_folder_is_read_from_mountinfo(tmp_path: Path) -> None:
    kind = file_system_of(tmp_path)
    assert kind is not None
    assert on_local_disk(tmp_path) == (kind in LOCAL_FILE_SYSTEMS)
    assert not on_local_disk("/proc/self")  # procfs is no disk


async def test_a_store_told_not_to_uses_the_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[int] = []
    real = KernelFsync.fsync

    def submitting(self: KernelFsync, fd: int) -> asyncio.Future[None]:
        sent.append(fd)
        return real(self, fd)

    monkeypatch.setattr(KernelFsync, "fsync", submitting)
    store = JsonlSessionStore(tmp_path, kernel_fsync=False)
    await store.create(session_id="t")
    await store.append_turn("t", [], _round("r1"))
    assert sent == [] and len(await store.rounds("t")) == 1
    if kernel_fsync() is not None and on_local_disk(tmp_path):
        other = JsonlSessionStore(tmp_path / "other")
        await other.create(session_id="t")
        await other.append_turn("t", [], _round("r1"))
        assert len(sent) == 2  # the default, on this machine: the log and its new folder


@needs_kernel
def test_two_loops_running_at_once_each_have_a_queue(tmp_path: Path) -> None:
    """A host running an event loop per thread: each live loop gets its own queue, and each
    loop's appends complete on that loop."""
    import threading

    seen: dict[str, KernelFsync | None] = {}
    both = threading.Barrier(2)

    async def appends(name: str) -> None:
        store = JsonlSessionStore(tmp_path / name)
        await store.create(session_id=name)
        seen[name] = kernel_fsync()
        await asyncio.to_thread(both.wait, 30)  # both loops are running now
        for n in range(20):
            await store.append_turn(name, [], _round(f"{name}{n}"))
            await asyncio.sleep(0.001)

    thread = threading.Thread(target=lambda: asyncio.run(appends("other")))
    thread.start()
    asyncio.run(appends("main"))
    thread.join(30)
    assert seen["main"] is not None and seen["other"] is not None
    assert seen["main"] is not seen["other"]
    for name in ("main", "other"):
        rounds = asyncio.run(JsonlSessionStore(tmp_path / name).rounds(name))
        assert len(rounds) == 20


@needs_kernel
def test_a_kernel_that_refuses_fsync_requests_falls_back_to_the_thread(tmp_path: Path) -> None:
    """A kernel older than 4.18 takes the context but refuses an fsync request (``EINVAL``):
    that append is made durable on a worker thread, and the process uses the thread from then
    on.  Run in a child process, since it turns kernel fsync off for the process."""
    script = textwrap.dedent(
        f"""
        import asyncio, errno, os
        from memora.memory.sessions import JsonlSessionStore, RoundRecord
        from memora.security import kernel_fsync as kf
        fsyncs = []
        real_fsync = os.fsync
        def counting(fd):
            fsyncs.append(fd)
            real_fsync(fd)
        os.fsync = counting
        def refuse(self, fd):
            raise OSError(errno.EINVAL, "Invalid argument")
        kf.KernelFsync.fsync = refuse
        async def main():
            store = JsonlSessionStore({str(tmp_path)!r})
            await store.create(session_id="old")
            for n in range(3):
                await store.append_turn("old", [], RoundRecord(round_id=f"r{{n}}", user="u"))
            assert kf.kernel_fsync() is None, "still on"
            rounds = await JsonlSessionStore({str(tmp_path)!r}).rounds("old")
            assert [r.round_id for r in rounds] == ["r0", "r1", "r2"], rounds
            assert len(fsyncs) == 4, fsyncs  # the log thrice and its new folder, on the thread
            print("fell back")
        asyncio.run(main())
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert proc.stdout.strip() == "fell back", proc.stderr
