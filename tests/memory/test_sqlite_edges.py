"""The SQLite store at its edges (#43 item 6: the mutation runner found these paths unreached):
a search whose best candidates another reader may not see, concurrent adds with an id that
exists, a read-only open of a file written before memory scopes, a write that fails half-way,
a migration that fails, supersede chains a hand edit broke, another process's writes, and a
closed store."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from memora.errors import ErrorCode, MemoraError
from memora.memory import NewMemory
from memora.memory.sqlite_file import MIGRATIONS
from memora.memory.sqlite_store import SqliteStorage, open_sqlite_storage, pinned_query
from memora.memory.vectors import normalize


def _hand_edit(path: Path, sql: str, *args: object) -> None:
    """``sql`` from another connection, as another process (or the sqlite3 shell) would."""
    db = sqlite3.connect(path)
    db.execute(sql, args)
    db.commit()
    db.close()


def _refuse_name(path: Path, name: str) -> None:
    """A trigger that makes SQLite abort the insert of a memory called ``name`` half-way
    through its transaction."""
    _hand_edit(
        path,
        "CREATE TRIGGER refuse BEFORE INSERT ON memories "
        f"WHEN NEW.name = '{name}' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END",
    )


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
        # one of hers among the best candidates and one below them all: both are found
        best = await store.add(NewMemory("harbor harbor harbor", scope="alice"))
        hits = await store.search_by_keyword("harbor", limit=5, scopes=("alice",))
        assert [h.record.id for h in hits] == [best.id, hits[1].record.id]
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
        assert await reader.pinned(scopes=("",)) == []  # no index, no scope column: a scan
    finally:
        await reader.close()
    # the reader changed nothing: the file still has no scope column
    db = sqlite3.connect(path)
    assert "scope" not in [r[1] for r in db.execute("PRAGMA table_info(memories)")]
    db.close()


async def test_a_write_that_fails_is_rolled_back_and_the_store_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    store = SqliteStorage(path)
    try:
        await store.add(NewMemory("before"))
        _refuse_name(path, "boom")
        with pytest.raises(MemoraError) as failed:
            await store.add(NewMemory("lost", name="boom"))
        assert failed.value.code is ErrorCode.STORAGE_ERROR
        assert "refused by the test" in str(failed.value) and str(path) in str(failed.value)
        with pytest.raises(MemoraError, match="refused by the test"):
            await store.add_many([NewMemory("first of many"), NewMemory("x", name="boom")])
        # the failed transactions were rolled back: nothing of them is stored or indexed, and
        # the next write starts a transaction of its own
        after = await store.add(NewMemory("after"))
        assert await store.get(after.id) == after
        assert await store.count() == 2
        assert await store.search_by_keyword("first") == []
        assert await store.search_by_keyword("lost") == []
    finally:
        await store.close()


async def test_one_failing_add_of_a_batch_fails_alone(tmp_path: Path) -> None:
    """Concurrent adds share a transaction, each under a savepoint: the one SQLite refuses is
    answered with its error, rolled back alone, and the others are written."""
    path = tmp_path / "m.db"
    store = SqliteStorage(path, write_inline=False)  # on the worker, where adds are grouped
    try:
        _refuse_name(path, "boom")
        items = [NewMemory(f"batch note {i}") for i in range(4)]
        items.insert(2, NewMemory("the refused one", name="boom"))
        results = await asyncio.gather(*(store.add(i) for i in items), return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        assert len(failed) == 1 and results[2] is failed[0]
        assert isinstance(failed[0], MemoraError) and failed[0].code is ErrorCode.STORAGE_ERROR
        assert isinstance(failed[0].__cause__, sqlite3.Error)
        assert await store.count() == 4
        assert len(await store.search_by_keyword("batch", limit=10)) == 4
        assert await store.search_by_keyword("refused") == []
        assert (await store.add(NewMemory("and then one more"))).content == "and then one more"
    finally:
        await store.close()


def test_a_migration_that_fails_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE memories (something_else TEXT)")  # not memora's table
    db.commit()
    db.close()
    with pytest.raises(sqlite3.OperationalError, match="already exists"):
        SqliteStorage(path)
    db = sqlite3.connect(path)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    db.close()
    assert tables == {"memories"}, "the failed migration was rolled back whole"


async def test_history_of_a_chain_a_hand_edit_broke(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    store = SqliteStorage(path)
    try:
        a = await store.add(NewMemory("deadline Monday"))
        b = await store.supersede(a.id, NewMemory("deadline Tuesday"))
        c = await store.supersede(b.id, NewMemory("deadline Wednesday"))
        # a loop: the newest says it was superseded by the oldest
        _hand_edit(path, "UPDATE memories SET superseded_by = ? WHERE id = ?", a.id, c.id)
        for member in (a, b, c):
            chain = [r.id for r in await asyncio.wait_for(store.history(member.id), 5)]
            assert sorted(chain) == sorted([a.id, b.id, c.id]), chain
        # a loop ahead of the memory asked about (nothing leads back to it)
        d = await store.add(NewMemory("deadline Thursday"))
        e = await store.add(NewMemory("deadline Friday"))
        _hand_edit(path, "UPDATE memories SET superseded_by = ? WHERE id = ?", e.id, d.id)
        _hand_edit(path, "UPDATE memories SET superseded_by = ? WHERE id = ?", d.id, e.id)
        f = await store.add(NewMemory("deadline Saturday"))
        _hand_edit(path, "UPDATE memories SET superseded_by = ? WHERE id = ?", d.id, f.id)
        chain = [r.id for r in await asyncio.wait_for(store.history(f.id), 5)]
        assert chain[0] == f.id and sorted(chain[1:]) == sorted([d.id, e.id]), chain
        # a successor that is gone: the chain ends where the link breaks
        _hand_edit(path, "UPDATE memories SET superseded_by = 'gone' WHERE id = ?", c.id)
        assert [r.id for r in await store.history(a.id)] == [a.id, b.id, c.id]
        assert [r.id for r in await store.history(c.id)] == [a.id, b.id, c.id]
    finally:
        await store.close()


async def test_another_processes_writes_are_seen_by_vector_recall(tmp_path: Path) -> None:
    """Each store keeps its vectors and what it has embedded in memory; another connection's
    commit (another process, a second worker) makes it look again."""
    path = tmp_path / "m.db"
    mine, theirs = SqliteStorage(path), SqliteStorage(path)
    try:
        a = await mine.add(NewMemory("alpha"))
        await mine.put_vectors("t:2", [(a.id, normalize([1, 0]))])
        assert await mine.missing_vectors("t:2") == []
        assert [h.record.id for h in await mine.search_by_vector("t:2", [0.0, 1.0])] == [a.id]
        b = await theirs.add(NewMemory("beta"))
        assert [r.id for r in await mine.missing_vectors("t:2")] == [b.id], (
            "a memory another process wrote is found to embed"
        )
        await theirs.put_vectors("t:2", [(b.id, normalize([0, 1]))])
        hits = await mine.search_by_vector("t:2", [0.0, 1.0])
        assert [h.record.id for h in hits] == [b.id, a.id], "a vector another process put is found"
        assert await mine.missing_vectors("t:2") == []
        await theirs.update(b.id, content="beta, rewritten")
        assert [r.id for r in await mine.missing_vectors("t:2")] == [b.id]
        assert [h.record.id for h in await mine.search_by_vector("t:2", [0.0, 1.0])] == [a.id]
        # the very first memory changed by another process is embedded again too
        await mine.put_vectors("t:2", [(b.id, normalize([0, 1]))])
        assert await mine.missing_vectors("t:2") == []
        await theirs.update(a.id, content="alpha, rewritten")
        assert [r.id for r in await mine.missing_vectors("t:2")] == [a.id]
    finally:
        await mine.close()
        await theirs.close()


async def test_a_read_only_file_without_vectors_has_none(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    for name, migrate in MIGRATIONS:
        if name == "001_initial":
            migrate(db)
    db.commit()
    db.close()
    reader = SqliteStorage(path, read_only=True)
    try:
        assert await reader.missing_vectors("t:2") == []
        assert await reader.search_by_vector("t:2", [1.0, 0.0]) == []
        assert await reader.count() == 0
    finally:
        await reader.close()


async def test_a_closed_store_refuses_and_closing_again_is_harmless(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    store = SqliteStorage(path)
    kept = await store.add(NewMemory("kept"))
    # adds accepted before close() are written before it returns
    pending = [asyncio.ensure_future(store.add(NewMemory(f"late {i}"))) for i in range(5)]
    await asyncio.sleep(0)
    await store.close()
    assert len({r.id for r in await asyncio.gather(*pending)}) == 5
    await store.close()
    store.close_sync()
    for attempt in (
        store.add(NewMemory("after close")),
        store.get(kept.id),
        store.search_by_keyword("kept"),
    ):
        with pytest.raises(MemoraError, match="is closed") as refused:
            await attempt
        assert refused.value.code is ErrorCode.STORAGE_ERROR
    again = SqliteStorage(path)
    try:
        assert await again.count() == 6
    finally:
        again.close_sync()
        again.close_sync()
    with pytest.raises(MemoraError, match="is closed"):
        await again.count()


async def test_a_query_that_is_not_text_finds_nothing(tmp_path: Path) -> None:
    store = SqliteStorage(tmp_path / "m.db")
    try:
        await store.add(NewMemory("harbor"))
        assert await store.search_by_keyword(None) == []  # type: ignore[arg-type]
        assert await store.search_by_keyword(["harbor"]) == []  # type: ignore[arg-type]
        assert await store.search_by_keyword("harbor", limit=0) == []
        assert await store.search_by_keyword("harbor", limit=-5) == []
    finally:
        await store.close()


async def test_a_folder_name_with_uri_characters_opens_read_only(tmp_path: Path) -> None:
    """The database path goes into an SQLite URI: '#', '?' and '%' in a folder name are
    quoted, so a read-only open finds the same file the writer wrote."""
    folder = tmp_path / "C# notes?draft 100%"
    folder.mkdir()
    path = folder / "m.db"
    store = SqliteStorage(path)
    await store.add(NewMemory("the harbor office"))
    await store.close()
    reader = open_sqlite_storage(path, read_only=True)
    try:
        hits = await reader.search_by_keyword("harbor")
        assert [h.record.content for h in hits] == ["the harbor office"]
    finally:
        await reader.close()


@pytest.mark.parametrize("inline", [True, False], ids=["on-the-loop", "on-the-worker"])
async def test_an_add_whose_index_row_fails_leaves_no_memory(tmp_path: Path, inline: bool) -> None:
    """The memory row is written, then its full-text row fails: the memory row is rolled back
    with it, alone or in a batch (where the others are written)."""
    path = tmp_path / "m.db"
    store = SqliteStorage(path, write_inline=inline)
    try:
        first = await store.add(NewMemory("first"))
        # FTS5 keeps its text in a shadow table; a trigger there fails the index write
        _hand_edit(
            path,
            "CREATE TRIGGER refuse BEFORE INSERT ON memories_fts_content "
            "WHEN NEW.c0 LIKE '%boom%' BEGIN SELECT RAISE(ABORT, 'index refused'); END",
        )
        with pytest.raises(MemoraError) as failed:
            await store.add(NewMemory("lone boom"))
        assert failed.value.code is ErrorCode.STORAGE_ERROR
        assert await store.count() == 1
        items = [NewMemory(f"batch note {i}") for i in range(4)]
        items.insert(2, NewMemory("batch boom"))
        results = await asyncio.gather(*(store.add(i) for i in items), return_exceptions=True)
        assert isinstance(results[2], MemoraError), results
        assert not any(isinstance(r, BaseException) for r in results[:2] + results[3:])
        assert await store.count() == 1 + 4, "the refused add left no memory row behind"
        assert sorted(r.content for r in await store.list()) == sorted(
            ["first", *(f"batch note {i}" for i in range(4))]
        )
        assert await store.get(first.id) == first
    finally:
        await store.close()


async def test_an_index_row_left_by_a_hand_edit_is_replaced(tmp_path: Path) -> None:
    """A memory deleted by hand (the sqlite3 shell) leaves its full-text row: the next memory
    that takes its row number is written all the same, and the old words do not find it."""
    path = tmp_path / "m.db"
    store = SqliteStorage(path)
    try:
        gone = await store.add(NewMemory("zebra crossing"))
        _hand_edit(path, "DELETE FROM memories WHERE id = ?", gone.id)
        later = await store.add(NewMemory("lion enclosure"))
        assert await store.search_by_keyword("zebra") == []
        assert [h.record.id for h in await store.search_by_keyword("lion")] == [later.id]
    finally:
        await store.close()


async def test_a_cancelled_caller_does_not_stop_the_batch(tmp_path: Path) -> None:
    """A caller cancelled while its add waits for the next batch: its memory is written all the
    same (it was accepted), and every other caller of the batch is answered."""
    store = SqliteStorage(tmp_path / "m.db", write_inline=False)
    try:
        tasks = [asyncio.ensure_future(store.add(NewMemory(f"wave note {i}"))) for i in range(6)]
        await asyncio.sleep(0)  # the first is being written; the others wait for the next batch
        tasks[3].cancel()
        done = await asyncio.wait_for(
            asyncio.gather(*tasks[:3], *tasks[4:], return_exceptions=True), 10
        )
        assert all(not isinstance(r, BaseException) for r in done), done
        assert tasks[3].cancelled()
        assert await store.count() == 6
    finally:
        await store.close()


@pytest.mark.parametrize("inline", [True, False], ids=["on-the-loop", "on-the-worker"])
async def test_adds_that_keep_arriving_are_all_written(tmp_path: Path, inline: bool) -> None:
    """Adds that arrive while a batch is written wait for the next one, batch after batch."""
    store = SqliteStorage(tmp_path / "m.db", write_inline=inline)
    try:

        async def writer(n: int) -> list[str]:
            return [(await store.add(NewMemory(f"writer {n} note {i}"))).id for i in range(15)]

        ids = await asyncio.wait_for(asyncio.gather(*(writer(n) for n in range(12))), 30)
        assert len({i for batch in ids for i in batch}) == 12 * 15
        assert await store.count() == 12 * 15
    finally:
        await store.close()


def _slow_on(path: Path, name: str) -> None:
    """A trigger that keeps the write of a memory called ``name`` busy for a while (a slow
    disk), so what arrives meanwhile must wait for the next batch."""
    _hand_edit(
        path,
        "CREATE TRIGGER slow AFTER INSERT ON memories "
        f"WHEN NEW.name = '{name}' BEGIN SELECT count(*) FROM (WITH RECURSIVE c(x) AS "
        "(SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 2000000) SELECT x FROM c); END",
    )


async def test_an_add_arriving_during_the_last_batch_is_written(tmp_path: Path) -> None:
    """An add that arrives while a batch is being written, with nothing after it, is written
    when that batch ends (nobody else's add has to come along to carry it)."""
    path = tmp_path / "m.db"
    store = SqliteStorage(path, write_inline=False)
    try:
        _slow_on(path, "slow")
        first = asyncio.ensure_future(store.add(NewMemory("first")))
        slow = asyncio.ensure_future(store.add(NewMemory("second", name="slow")))
        await first  # the slow one is now being written, as a batch of its own
        last = asyncio.ensure_future(store.add(NewMemory("third")))
        await asyncio.wait_for(asyncio.gather(slow, last), 20)
        assert await store.count() == 3
    finally:
        await store.close()


def _sqlite_threads() -> int:
    return sum(t.name.startswith("memora-sqlite") for t in threading.enumerate())


async def test_a_closed_store_leaves_one_file_and_no_thread(tmp_path: Path) -> None:
    """After close() the database is one self-contained file (its write-ahead log merged
    and removed: it can be copied or backed up as it is) and the store's thread is gone."""
    threads = _sqlite_threads()
    path = tmp_path / "m.db"
    store = SqliteStorage(path)
    gone = await store.add(NewMemory("zebra crossing"))
    await store.add(NewMemory("lion enclosure"))
    await store.delete(gone.id)
    assert Path(f"{path}-wal").exists()
    await store.close()
    assert not Path(f"{path}-wal").exists()
    assert _sqlite_threads() == threads
    # what was deleted is gone from the full-text index too, not only unreachable
    db = sqlite3.connect(path)
    assert db.execute(
        "SELECT count(*) FROM memories_fts WHERE memories_fts MATCH 'zebra'"
    ).fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM memories_fts").fetchone() == (1,)
    db.close()
    again = SqliteStorage(path)
    await again.add(NewMemory("third"))
    again.close_sync()
    assert not Path(f"{path}-wal").exists()
    assert _sqlite_threads() == threads


async def test_pinned_memories_are_read_through_their_index_not_a_scan(tmp_path: Path) -> None:
    """Every turn's prompt asks for the pinned memories: the query must read the partial index
    of the pinned few, not walk the scope's memories (it did, and cost 4-6 ms at 10,000
    memories, 21-39 ms at 50,000, on every turn)."""
    path = tmp_path / "m.db"
    store = SqliteStorage(path)
    try:
        made = await store.add_many(
            [NewMemory(f"note {i}", scope="alice" if i % 2 else None) for i in range(300)]
        )
        for record in (made[10], made[11], made[250]):
            await store.update(record.id, meta={"pinned": {"by": "test", "at": 1.0}})
        await store.supersede(made[250].id, NewMemory("note 250, edited"))
        assert [r.content for r in await store.pinned(scopes=("",))] == ["note 10"]
        both = await store.pinned(scopes=("", "alice"))
        assert sorted(r.content for r in both) == ["note 10", "note 11"]
        assert len(await store.pinned()) == 2
    finally:
        await store.close()
    db = sqlite3.connect(path)
    try:
        for scopes in (None, [""], ["", "alice"], ["alice"]):
            sql, args = pinned_query(scopes, 10)
            plan = " | ".join(str(row[3]) for row in db.execute(f"EXPLAIN QUERY PLAN {sql}", args))
            assert "USING INDEX memories_pinned" in plan, (scopes, plan)
            assert "memories_scope" not in plan and "memories_superseded_by" not in plan, plan
    finally:
        db.close()
    # a file an older memora left without that index: read (read-only) by a scan, as before
    _hand_edit(path, "DROP INDEX memories_pinned")
    _hand_edit(path, "DELETE FROM _memora_migrations WHERE name = '004_pins'")
    reader = open_sqlite_storage(path, read_only=True)
    try:
        pins = await reader.pinned(scopes=("", "alice"))
        assert sorted(r.content for r in pins) == ["note 10", "note 11"]
    finally:
        await reader.close()
