"""The pinned memories a manager keeps per scope are bounded: a backend serving many people
reads each person's pins once a second while they talk, and must not keep every scope it has
ever served (#43: memory flat over a long run)."""

from __future__ import annotations

import asyncio
import tracemalloc

from memora.memory import InMemoryStorage, MemoryManager, NewMemory, manager as manager_module


async def _read_pins(memory: MemoryManager, first: int, count: int, expected: str) -> None:
    for i in range(first, first + count):  # each scope sees the project's (unscoped) pin
        assert [r.id for r in await memory.for_scope(f"user-{i}").pinned()] == [expected]


def _kept(snapshot: tracemalloc.Snapshot) -> int:
    only = snapshot.filter_traces([tracemalloc.Filter(True, manager_module.__file__)])
    return sum(stat.size for stat in only.statistics("filename"))


async def test_the_pins_of_scopes_no_longer_served_are_let_go() -> None:
    storage = InMemoryStorage()
    memory = MemoryManager(storage)
    pinned = await memory.write(NewMemory("the harbor office is on pier 4"))
    await memory.pin(pinned.id, by="test")
    batch = 3 * manager_module.PINS_CACHED
    tracemalloc.start()
    try:
        base = _kept(tracemalloc.take_snapshot())
        await _read_pins(memory, 0, batch, pinned.id)
        first = _kept(tracemalloc.take_snapshot()) - base
        await asyncio.sleep(manager_module.PINNED_MAX_AGE + 0.1)  # those have all expired
        await _read_pins(memory, batch, batch, pinned.id)
        second = _kept(tracemalloc.take_snapshot()) - base
    finally:
        tracemalloc.stop()
    assert first > 0
    # kept: about one batch (the scopes of the last second), not two (every scope ever read)
    assert second < 1.4 * first, (first, second)
    # and what is kept still answers: the project's pin is seen by every scope
    assert [r.id for r in await memory.for_scope("user-1").pinned()] == [pinned.id]
    assert [r.id for r in await memory.pinned()] == [pinned.id]
