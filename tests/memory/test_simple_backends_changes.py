"""The ``memory`` and ``json`` backends change what a write touches, not a copy of every record,
and a write that fails (here: the file may not grow) leaves the store and its file as they were
— pins included."""

from __future__ import annotations

import resource
import signal
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from memora.memory import InMemoryStorage, JsonFileStorage, NewMemory

PIN = {"pinned": {"by": "test", "at": 1.0}}


async def test_a_write_allocates_what_it_touches_not_a_copy_of_the_store() -> None:
    store = InMemoryStorage()
    await store.add_many([NewMemory(f"memory {i} about the harbor") for i in range(20_000)])
    kept = await store.add(NewMemory("the first of the later ones"))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        new = await store.add(NewMemory("one more about the pier"))
        await store.update(kept.id, meta=PIN)
        await store.supersede(kept.id, NewMemory("the first, edited"))
        await store.delete(new.id)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    # the rollback snapshot it used to take (a copy of the 20,000 records' two dicts) peaked at 836 KB
    assert peak < 100_000, peak
    assert await store.count() == 20_002  # the superseded one is still counted (its history)
    assert [r.content for r in await store.pinned()] == []  # the pinned one was superseded


@contextmanager
def _file_may_not_grow_past(size: int) -> Iterator[None]:
    """Writes past ``size`` bytes fail with EFBIG in this process (as on a full disk)."""
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, old_limit[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)


async def test_a_json_write_that_fails_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "memories.json"
    store = JsonFileStorage(path)
    made = await store.add_many([NewMemory(f"note {i}") for i in range(20)])
    await store.update(made[0].id, meta=PIN)
    saved = path.read_bytes()
    state = [(r.id, r.content, r.superseded_by, r.meta) for r in await store.list(limit=100)]
    big = "x" * 4000  # the rewrite of the file would pass the limit
    with _file_may_not_grow_past(len(saved) + 1000):
        with pytest.raises(OSError):
            await store.add(NewMemory(big))
        with pytest.raises(OSError):
            await store.add_many([NewMemory("small"), NewMemory(big)])
        with pytest.raises(OSError):
            await store.supersede(made[0].id, NewMemory(big, meta=PIN))
        with pytest.raises(OSError):
            await store.update(made[1].id, content=big, meta=PIN)
    assert path.read_bytes() == saved  # the file: replaced whole or not at all
    after = [(r.id, r.content, r.superseded_by, r.meta) for r in await store.list(limit=100)]
    assert after == state  # the store: as it was, not half-changed
    assert [r.id for r in await store.pinned()] == [made[0].id]
    assert await store.search_by_keyword("small") == []
    # and it goes on: a delete, and a later write, land in the file; another reader sees them
    assert await store.delete(made[0].id)
    await store.add(NewMemory("later, pinned", meta=PIN))
    reader = JsonFileStorage(path)
    assert [r.content for r in await reader.pinned()] == ["later, pinned"]
    assert await reader.count() == 20
