"""The session store's appends, each whole on a worker thread: durable before they return,
correct when many run at once and when one is cancelled."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from memora.memory.sessions import JsonlSessionStore, RoundRecord


def _round(rid: str) -> RoundRecord:
    return RoundRecord(round_id=rid, user=f"question {rid}", assistant=f"answer {rid}")


async def test_many_appends_at_once_all_land(tmp_path: Path) -> None:
    """300 appends at once, more than the worker threads: every one is on disk, whole, when
    its append returns."""
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


async def test_a_cancelled_append_leaves_the_store_working(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = JsonlSessionStore(tmp_path)
    await store.create(session_id="c")
    task = asyncio.ensure_future(store.append_turn("c", [], _round("r1")))
    await asyncio.sleep(0)  # the append is on its worker thread
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.05)  # the thread finishes an append no one awaits
    await store.append_turn("c", [], _round("r2"))
    rounds = [r.round_id for r in await JsonlSessionStore(tmp_path).rounds("c")]
    assert rounds[-1] == "r2" and set(rounds) <= {"r1", "r2"}
    gc.collect()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


def test_an_append_is_durable_across_a_kill(tmp_path: Path) -> None:
    """A child process appends, says so, and is killed at once: the turns it acknowledged are
    read back whole."""
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


async def test_every_append_is_synced_on_a_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log's and its new folder's ``fsync`` run on a worker thread, never on the event loop,
    whatever ``kernel_fsync`` says: the option (which asked for the kernel's asynchronous
    ``fsync``, gone since issue #70) is still accepted and changes nothing."""
    loop_thread = threading.get_ident()
    on_loop: list[bool] = []
    real_fsync = os.fsync

    def recording(fd: int) -> None:
        on_loop.append(threading.get_ident() == loop_thread)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording)
    for asked in (True, False):
        store = JsonlSessionStore(tmp_path / str(asked), kernel_fsync=asked)
        await store.create(session_id="t")
        await store.append_turn("t", [], _round("r1"))  # the log and its new folder
        await store.append_turn("t", [], _round("r2"))  # the log
    assert on_loop == [False] * 6
