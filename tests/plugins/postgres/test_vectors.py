"""Vectors in PostgreSQL: the migration of a database from before them, and two machines that
share one database (each keeps the vectors in memory and reads only what changed)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import psycopg
import pytest

from memora.memory import NewMemory
from memora_plugin_postgres.database import Database
from memora_plugin_postgres.storage import PostgresStorage


@pytest.fixture
async def fresh_dsn(pg_dsn: str) -> AsyncIterator[str]:
    """A database of its own in the test cluster (the migration test drops a table)."""
    name = f"vectors_{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await conn.execute(f"CREATE DATABASE {name}")
    yield f"{pg_dsn} dbname={name}"  # libpq: the last dbname= wins
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


async def test_a_database_from_before_vectors_is_migrated_in_place(fresh_dsn: str) -> None:
    db = Database(fresh_dsn)
    store = PostgresStorage(db, namespace="p")
    old = await store.add(NewMemory("written before vectors existed"))
    await store.close()
    await db.close()
    async with await psycopg.AsyncConnection.connect(fresh_dsn, autocommit=True) as conn:
        await conn.execute("DROP TABLE memora_memory_vectors")
        await conn.execute("DELETE FROM memora_migrations WHERE name = '0002_vectors'")
    db = Database(fresh_dsn)
    store = PostgresStorage(db, namespace="p")
    try:
        assert await store.get(old.id) == old
        assert [r.id for r in await store.missing_vectors("t:2")] == [old.id]
        await store.put_vectors("t:2", [(old.id, [1.0, 0.0])])
        assert [h.record.id for h in await store.search_by_vector("t:2", [1.0, 0.0])] == [old.id]
    finally:
        await store.close()
        await db.close()


async def test_two_machines_see_each_other_s_vectors(pg_dsn: str) -> None:
    namespace = f"two-{uuid.uuid4().hex}"
    db1, db2 = Database(pg_dsn), Database(pg_dsn)
    one, two = PostgresStorage(db1, namespace), PostgresStorage(db2, namespace)
    try:
        a = await one.add(NewMemory("alpha"))
        await one.put_vectors("t:2", [(a.id, [1.0, 0.0])])
        assert [h.record.id for h in await one.search_by_vector("t:2", [0.0, 1.0])] == [a.id]
        b = await two.add(NewMemory("beta"))
        await two.put_vectors("t:2", [(b.id, [0.0, 1.0])])
        hits = await one.search_by_vector("t:2", [0.0, 1.0])
        assert [h.record.id for h in hits] == [b.id, a.id], "the other machine's vector is read"
        await two.put_vectors("t:2", [(a.id, [0.0, 1.0])])  # replaced: read again
        hits = await one.search_by_vector("t:2", [0.0, 1.0])
        assert [round(h.score, 3) for h in hits] == [1.0, 1.0]
        await two.delete(b.id)
        assert [h.record.id for h in await one.search_by_vector("t:2", [0.0, 1.0])] == [a.id]
        await two.update(a.id, content="alpha, rewritten")
        assert [r.id for r in await one.missing_vectors("t:2")] == [a.id]
    finally:
        await one.close()
        await two.close()
        await db1.close()
        await db2.close()


@pytest.mark.parametrize("use_numpy", [True, False])
async def test_real_arrays_are_read_in_binary_form(pg_dsn: str, use_numpy: bool) -> None:
    from memora.memory.vectors import unpack
    from memora_plugin_postgres.storage import packed_real_arrays

    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT array_send(ARRAY[0.5, -2.25, 1e-3]::real[]), "
            "array_send(ARRAY[3, 4, 5]::real[])",
            binary=True,
        )
        row = await cur.fetchone()
    assert row is not None
    got = packed_real_arrays(["a", "b"], [row[0], row[1]], use_numpy=use_numpy)
    assert [i for i, _ in got] == ["a", "b"]
    assert [round(x, 6) for x in unpack(got[0][1])] == [0.5, -2.25, 0.001]
    assert list(unpack(got[1][1])) == [3.0, 4.0, 5.0]
