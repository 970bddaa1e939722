"""A lone memory add written on the event loop (``SqliteStorage.write_inline``): it makes no
trip to the worker thread, it never waits there for another process's lock, and the
checkpoints it leaves to the worker keep the write-ahead log small."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from pathlib import Path

import pytest

from memora.memory import NewMemory
from memora.memory.sqlite_store import CHECKPOINT_EVERY, SqliteStorage


@pytest.mark.parametrize("inline", [True, False], ids=["on-the-loop", "on-the-worker"])
async def test_a_lone_add_is_written_without_a_trip_to_the_worker(
    tmp_path: Path, inline: bool
) -> None:
    """On a local disk a lone add is done in one step of its coroutine (it never yields to
    the event loop, so no worker ran it); told not to, it waits for the worker."""
    store = SqliteStorage(tmp_path / "m.db", write_inline=inline)
    try:
        assert store.write_inline is inline
        coro = store.add(NewMemory("a lone note 记忆"))
        try:
            coro.send(None)
        except StopIteration as done:
            assert inline, "an add told to use the worker finished without it"
            record = done.value
            assert await store.get(record.id) == record
        else:
            assert not inline, "an add written on the loop waited for the worker"
            coro.close()  # its caller gone: the worker writes it all the same
        assert await store.count() == 1
        assert len(await store.search_by_keyword("记忆")) == 1
    finally:
        await store.close()


async def test_another_processes_lock_is_waited_for_on_the_worker_not_the_loop(
    tmp_path: Path,
) -> None:
    """Another connection (another process, the sqlite3 shell) holds the write lock: the add
    goes to the worker, which waits for it, and the event loop goes on meanwhile.  The add is
    written once the lock is let go."""
    path = tmp_path / "m.db"
    store = SqliteStorage(path)
    other = sqlite3.connect(path, isolation_level=None)
    try:
        await store.add(NewMemory("first"))  # the schema exists
        other.execute("BEGIN IMMEDIATE")
        add = asyncio.ensure_future(store.add(NewMemory("while another writes")))
        gaps: list[float] = []
        last = time.monotonic()
        for _ in range(20):  # 0.4 s with the lock held elsewhere
            await asyncio.sleep(0.02)
            now = time.monotonic()
            gaps.append(now - last)
            last = now
        assert not add.done(), "the add did not wait for the lock"
        # waiting on the loop, it would stall for the busy timeout (10 s)
        assert max(gaps) < 2.0, f"the event loop stalled {max(gaps):.2f} s"
        other.execute("COMMIT")
        record = await asyncio.wait_for(add, 10)
        assert await store.get(record.id) == record
        assert await store.count() == 2
        # and the next lone add, with nobody else writing, is on the loop again
        coro = store.add(NewMemory("after"))
        with pytest.raises(StopIteration):
            coro.send(None)
    finally:
        other.close()
        await store.close()


async def test_checkpoints_on_the_worker_keep_the_log_small(tmp_path: Path) -> None:
    """Adds on the loop commit without SQLite's own checkpoint (it would ``fsync`` there); the
    worker checkpoints after every ``CHECKPOINT_EVERY`` of them, so the write-ahead log is
    reused instead of growing with every memory ever written."""
    path = tmp_path / "m.db"
    store = SqliteStorage(path)
    wal = Path(f"{path}-wal")
    try:
        sizes = []
        for i in range(20 * CHECKPOINT_EVERY):
            await store.add(NewMemory(f"note {i} " + "words of a round " * 40))
            if i % CHECKPOINT_EVERY == CHECKPOINT_EVERY - 1:
                # a read goes to the same worker thread, after the checkpoint queued there: a
                # sleep here let a loaded machine run the next adds first (seen in CI)
                await store.count()
                sizes.append(os.path.getsize(wal))
        # an add leaves some 14 pages in the log: without the checkpoints it would grow by
        # about as much again with every CHECKPOINT_EVERY adds (20 times the first size here)
        assert max(sizes) < 2 * sizes[0], sizes
        assert await store.count() == 20 * CHECKPOINT_EVERY
        assert await store.integrity_check() == "ok"
    finally:
        await store.close()
