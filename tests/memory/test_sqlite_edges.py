"""The SQLite store at its edges (#43 item 6: the mutation runner found these paths unreached):
a search whose best candidates another reader may not see, concurrent adds with an id that
exists, and a read-only open of a file written before memory scopes."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from memora.memory import NewMemory
from memora.memory.sqlite_store import SqliteStorage, open_sqlite_storage


async def test_a_reader_finds_its_memory_below_many_better_ones_of_another(
    tmp_path: Path,
) -> None:
    store = SqliteStorage(tmp_path / "m.db")
    try:
        # 60 of bob's rank above alice's one (shorter, the word twice): the search's first
        # page of candidates holds none of hers
        await store.add_many(
            [NewMemory("harbor harbor", scope="bob") for _ in range(60)]
            + [
                NewMemory(
                    "a long note that mentions the harbor once among many words", scope="alice"
                )
            ]
        )
        hits = await store.search_by_keyword("harbor", limit=1, scopes=("alice",))
        assert [h.record.scope for h in hits] == ["alice"]
        # and fewer left than asked for after the filter: every one of them, not a page
        hits = await store.search_by_keyword("harbor", limit=5, scopes=("alice", ""))
        assert [h.record.scope for h in hits] == ["alice"]
        assert len(await store.search_by_keyword("harbor", limit=70)) == 61
    finally:
        await store.close()


async def test_concurrent_adds_are_each_written_once_and_an_existing_id_is_kept(
    tmp_path: Path,
) -> None:
    """Concurrent adds share one transaction (a group commit); an item whose id exists is
    answered with the stored memory (an import stays idempotent), never written twice."""
    store = SqliteStorage(tmp_path / "m.db")
    try:
        await store.add(NewMemory("the first", id="taken"))
        items = [NewMemory(f"note {i}", id=f"n{i}") for i in range(5)]
        items.insert(2, NewMemory("another text, same id", id="taken"))
        results = await asyncio.gather(*(store.add(i) for i in items))
        assert [r.id for r in results] == [i.id for i in items]
        assert results[2].content == "the first"
        assert await store.count() == 6
        assert len(await store.search_by_keyword("note", limit=10)) == 5
        assert await store.search_by_keyword("another", limit=10) == []
    finally:
        await store.close()


async def test_a_file_from_before_scopes_is_read_only_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    store = SqliteStorage(path)
    await store.add_many([NewMemory("the harbor office"), NewMemory("the river office")])
    await store.close()
    # as an older memora left it: no scope column, no later migrations
    db = sqlite3.connect(path)
    db.executescript(
        """
        DROP INDEX memories_scope; DROP INDEX memories_pinned;
        ALTER TABLE memories DROP COLUMN scope;
        DELETE FROM _memora_migrations WHERE name IN ('003_scopes', '004_pins');
        """
    )
    db.close()
    reader = open_sqlite_storage(path, read_only=True)
    try:
        hits = await reader.search_by_keyword("harbor", limit=5, scopes=("",))
        assert [h.record.content for h in hits] == ["the harbor office"]
        assert hits[0].record.scope is None
        assert await reader.count(scopes=("",)) == 2
        assert await reader.count(scopes=("alice",)) == 0
    finally:
        await reader.close()
    # the reader changed nothing: the file still has no scope column
    db = sqlite3.connect(path)
    assert "scope" not in [r[1] for r in db.execute("PRAGMA table_info(memories)")]
    db.close()
