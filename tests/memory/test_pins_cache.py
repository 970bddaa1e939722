"""The pinned memories a manager keeps per scope are bounded: a backend serving many people
reads each person's pins once a second while they talk, and must not keep every scope it has
ever served (#43: memory flat over a long run)."""

from __future__ import annotations

import asyncio
import tracemalloc

from memora.memory import (
    InMemoryStorage,
    MemoryManager,
    MemoryRecord,
    NewMemory,
    manager as manager_module,
)


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


class _Counting(InMemoryStorage):
    """Counts how often the store is asked for pinned memories."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    async def pinned(self, **kwargs: object) -> list[MemoryRecord]:
        self.asked += 1
        return await super().pinned(**kwargs)  # type: ignore[arg-type]


async def test_a_store_with_nothing_pinned_is_asked_once_for_all_its_scopes() -> None:
    """Most stores have no pin: a server of many people asks the store once a second whether
    anything is pinned, not once per person; pins still show at once here, within
    ``PINNED_MAX_AGE`` from elsewhere, and never in another scope."""
    storage = _Counting()
    memory = MemoryManager(storage)
    await memory.write(NewMemory("nothing pinned here"))
    for i in range(50):
        assert await memory.for_scope(f"user-{i}").pinned() == []
    assert await memory.pinned() == []
    assert storage.asked == 1
    erin = memory.for_scope("erin")  # a memory written pinned shows at once too
    kept = await erin.write(NewMemory("erin's boat is blue", meta={"pinned": {"by": "host"}}))
    assert [r.id for r in await erin.pinned()] == [kept.id]
    assert await memory.for_scope("frank").pinned() == []

    alice = memory.for_scope("alice")
    note = await alice.write(NewMemory("alice keeps her boat at pier 4"))
    await alice.pin(note.id, by="test")
    assert [r.id for r in await alice.pinned()] == [note.id]  # made here: at once
    assert await memory.for_scope("bob").pinned() == []  # and only in her scope
    assert await memory.pinned() == []

    elsewhere = MemoryManager(storage)  # another process on the same store
    carol = await elsewhere.for_scope("carol").write(NewMemory("carol's key is under the mat"))
    await elsewhere.for_scope("carol").pin(carol.id, by="test")
    await asyncio.sleep(manager_module.PINNED_MAX_AGE + 0.1)
    assert [r.id for r in await memory.for_scope("carol").pinned()] == [carol.id]
    assert await memory.for_scope("dave").pinned() == []
