"""Killed processes, read-only views, two writer processes, missing FTS5."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from memora.errors import MemoraError, NotAvailableError
from memora.memory import JsonFileStorage, NewMemory, sqlite_file, sqlite_store
from memora.memory.sqlite_store import SqliteStorage, build_match_query, open_sqlite_storage

WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from memora.memory import NewMemory, JsonFileStorage
    from memora.memory.sqlite_store import SqliteStorage

    async def main():
        kind, path = sys.argv[1], sys.argv[2]
        store = SqliteStorage(path) if kind == "sqlite" else JsonFileStorage(path)
        i = 0
        while True:
            rec = await store.add(NewMemory(f"entry {i} 记忆条目 " + "x" * 200))
            sys.stdout.write(rec.id + "\\n")
            sys.stdout.flush()
            i += 1

    asyncio.run(main())
    """
)


def _kill_mid_stream(kind: str, path: Path, at_least: int, writer: str = WRITER) -> list[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", writer, kind, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    ids: list[str] = []
    deadline = time.monotonic() + 60
    while len(ids) < at_least and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        ids.append(line.strip())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    # ids the writer printed after our last read may also be durable; we only need ours
    assert len(ids) >= at_least, f"writer produced only {len(ids)} entries"
    return ids


async def test_sqlite_survives_kill_9(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    acknowledged = _kill_mid_stream("sqlite", db, 200)
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    store = SqliteStorage(db)
    try:
        assert await store.integrity_check() == "ok"
        for memory_id in acknowledged:
            assert await store.get(memory_id) is not None, memory_id
        hits = await store.search_by_keyword("记忆条目", limit=1000)
        assert len(hits) >= len(acknowledged)
    finally:
        await store.close()


async def test_json_store_never_truncated_by_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "memories.json"
    acknowledged = _kill_mid_stream("json", path, 60)
    doc = json.loads(path.read_text(encoding="utf-8"))  # a complete JSON document
    ids = {m["id"] for m in doc["memories"]}
    assert set(acknowledged) <= ids
    store = JsonFileStorage(path)
    assert await store.count() == len(ids)


async def test_two_processes_write_one_sqlite_file(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    SqliteStorage(db).close_sync()
    script = textwrap.dedent(
        """
        import asyncio, sys
        from memora.memory import NewMemory
        from memora.memory.sqlite_store import SqliteStorage
        async def main():
            s = SqliteStorage(sys.argv[1])
            await s.add_many([NewMemory(f"{sys.argv[2]} batch {i}") for i in range(50)])
            for i in range(50):
                await s.add(NewMemory(f"{sys.argv[2]} single {i}"))
            await s.close()
        asyncio.run(main())
        """
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(db), tag]) for tag in ("alpha", "beta")
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    store = SqliteStorage(db)
    try:
        assert await store.count() == 200
        assert len(await store.search_by_keyword("alpha", limit=1000)) == 100
    finally:
        await store.close()


async def test_read_only_view_has_no_write_methods(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    writer = SqliteStorage(db)
    await writer.add(NewMemory("大纲 outline"))
    view = open_sqlite_storage(db, read_only=True)
    try:
        for name in ("add", "add_many", "update", "delete", "supersede"):
            assert not hasattr(view, name)
        assert [h.record.content for h in await view.search_by_keyword("大纲")] == ["大纲 outline"]
        # even the store under the view (opened read-only) refuses writes
        inner = SqliteStorage(db, read_only=True)
        try:
            with pytest.raises(MemoraError):
                await inner.add(NewMemory("sneaky"))
        finally:
            await inner.close()
    finally:
        await view.close()
        await writer.close()
    with pytest.raises(MemoraError):
        open_sqlite_storage(tmp_path / "absent.db", read_only=True)


def test_missing_fts5_is_not_available(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_file, "fts5_available", lambda: False)  # the file checks it
    with pytest.raises(NotAvailableError, match="FTS5"):
        SqliteStorage(tmp_path / "x.db")


def test_migrations_recorded(tmp_path: Path) -> None:
    SqliteStorage(tmp_path / "m.db").close_sync()
    SqliteStorage(tmp_path / "m.db").close_sync()  # reopening applies nothing twice
    conn = sqlite3.connect(tmp_path / "m.db")
    names = [r[0] for r in conn.execute("SELECT name FROM _memora_migrations")]
    assert names == ["001_initial", "002_vectors", "003_scopes", "004_pins"]
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_match_query_is_always_quoted() -> None:
    # an FTS operator a user types is a quoted word, never syntax (NEAR: not a function word)
    assert build_match_query('alpha" NEAR "beta') == '"alpha"* OR "near"* OR "beta"*'
    # function words ("the", "or") are left out when other words remain
    assert build_match_query('a" OR "b') == '"b"'
    assert build_match_query("长期记忆") == '"长期 期记 记忆"'
    assert build_match_query("猫") == '"猫"*'
    assert build_match_query("%_*()") is None


def test_corrupt_json_file_is_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "memories.json"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(MemoraError, match="left untouched"):
        JsonFileStorage(path)
    assert path.read_text(encoding="utf-8") == "{not json"


async def test_two_processes_write_one_json_file(tmp_path: Path) -> None:
    """Each change re-reads the file under a lock other processes see: no write is lost."""
    path = tmp_path / "memories.json"
    script = textwrap.dedent(
        """
        import asyncio, sys
        from memora.memory import NewMemory
        from memora.memory.simple_backends import JsonFileStorage
        async def main():
            s = JsonFileStorage(sys.argv[1])
            for i in range(150):
                await s.add(NewMemory(f"{sys.argv[2]} entry {i}"))
            first = (await s.search_by_keyword(f"{sys.argv[2]}", limit=1))[0]
            await s.update(first.record.id, content=f"{sys.argv[2]} updated")
            await s.close()
        asyncio.run(main())
        """
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(path), tag])
        for tag in ("alpha", "beta")
    ]
    assert [p.wait(timeout=180) for p in procs] == [0, 0]
    store = JsonFileStorage(path)
    try:
        assert await store.count() == 300
        assert len(await store.search_by_keyword("alpha", limit=1000)) == 150
        assert len(await store.search_by_keyword("updated", limit=10)) == 2
    finally:
        await store.close()


GROUP_WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from memora.memory import NewMemory
    from memora.memory.sqlite_store import SqliteStorage

    async def main():
        store = SqliteStorage(sys.argv[2], write_inline=False)
        i = 0
        while True:  # twenty sessions at a time: their adds share commits (group commit)
            batch = [store.add(NewMemory(f"entry {i + n} 记忆条目")) for n in range(20)]
            for rec in await asyncio.gather(*batch):
                sys.stdout.write(rec.id + "\\n")
            sys.stdout.flush()
            i += 20

    asyncio.run(main())
    """
)


async def test_sqlite_group_commit_survives_kill_9(tmp_path: Path) -> None:
    """Concurrent adds share a transaction; each one that returned was committed."""
    db = tmp_path / "memory.db"
    acknowledged = _kill_mid_stream("sqlite", db, 400, GROUP_WRITER)
    store = SqliteStorage(db)
    try:
        assert await store.integrity_check() == "ok"
        for memory_id in acknowledged:
            assert await store.get(memory_id) is not None, memory_id
    finally:
        await store.close()


async def test_one_failing_add_of_a_group_fails_alone(tmp_path: Path) -> None:
    """Adds written together: one the database refuses gets its error, the rest are kept."""
    db = tmp_path / "memory.db"
    store = SqliteStorage(db, write_inline=False)  # on the worker, where adds are grouped
    await store.add(NewMemory("first"))  # the schema exists
    conn = sqlite3.connect(db)
    conn.execute(
        "CREATE TRIGGER poison BEFORE INSERT ON memories WHEN NEW.name = 'poison' "
        "BEGIN SELECT RAISE(ABORT, 'poisoned row'); END"
    )
    conn.commit()
    conn.close()
    adds = [
        store.add(NewMemory(f"row {n}", name="poison" if n == 3 else f"n{n}")) for n in range(8)
    ]
    results = await asyncio.gather(*adds, return_exceptions=True)
    try:
        failed = [r for r in results if isinstance(r, BaseException)]
        assert len(failed) == 1 and isinstance(failed[0], MemoraError)
        assert failed[0].code == "STORAGE_ERROR" and "poisoned row" in failed[0].message
        for n, r in enumerate(results):
            if n != 3:
                assert not isinstance(r, BaseException)
                assert (await store.get(r.id)) is not None
        assert len(await store.search_by_keyword("row", limit=50)) == 7
    finally:
        await store.close()


async def test_close_writes_the_adds_it_accepted(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    store = SqliteStorage(db, write_inline=False)  # on the worker: adds wait for their batch
    adds = [asyncio.ensure_future(store.add(NewMemory(f"late {n}"))) for n in range(30)]
    await asyncio.sleep(0)  # accepted: the first batch is being written, the rest wait
    await store.close()
    records = await asyncio.gather(*adds)
    with pytest.raises(MemoraError, match="closed"):
        await store.add(NewMemory("after close"))
    reopened = SqliteStorage(db)
    try:
        for r in records:
            assert await reopened.get(r.id) is not None
    finally:
        await reopened.close()


def test_the_fts5_probe_sees_a_sqlite_without_it(monkeypatch: pytest.MonkeyPatch) -> None:
    assert sqlite_store.fts5_available() is True
    real_connect = sqlite3.connect
    closed: list[bool] = []

    class WithoutFts5:
        """A connection of a SQLite built without FTS5 (as some system Pythons are)."""

        def __init__(self, *args: object, **kwargs: object) -> None:
            self.db = real_connect(*args, **kwargs)  # type: ignore[arg-type]

        def execute(self, sql: str, *args: object) -> sqlite3.Cursor:
            if "fts5" in sql:
                raise sqlite3.OperationalError("no such module: fts5")
            return self.db.execute(sql, *args)  # type: ignore[arg-type]

        def close(self) -> None:
            closed.append(True)
            self.db.close()

    monkeypatch.setattr(sqlite3, "connect", WithoutFts5)
    assert sqlite_store.fts5_available() is False
    assert closed == [True], "the probe's connection is closed"
