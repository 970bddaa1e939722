"""Vector search at 100k memories: how each backend's brute-force scan costs, side by side.

384-dimensional unit vectors (e5-small's size), seeded random, one per memory; the p50 of a
top-50 ``search_by_vector`` per backend, and the first search (which loads the vectors into
process memory for SQLite).  sqlite-vec was the other candidate for SQLite: this prints whether
this Python's ``sqlite3`` can load it at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _server import postgres_cluster

N = 100_000
DIMS = 384
QUERIES = 20


def vectors(n: int, seed: int) -> list[list[float]]:
    from memora.memory.vectors import normalize

    rng = random.Random(seed)
    return [normalize([rng.gauss(0, 1) for _ in range(DIMS)]) for _ in range(n)]


async def fill(store: Any, rows: list[list[float]]) -> None:
    from memora.memory import NewMemory

    for start in range(0, len(rows), 5000):
        batch = rows[start : start + 5000]
        records = await store.add_many(
            [NewMemory(content=f"memory {start + i}") for i in range(len(batch))]
        )
        await store.put_vectors("bench", [(r.id, v) for r, v in zip(records, batch, strict=True)])


async def timed(store: Any, queries: list[list[float]]) -> tuple[float, float]:
    t0 = time.perf_counter()
    await store.search_by_vector("bench", queries[0], limit=50)
    first = time.perf_counter() - t0
    took = []
    for q in queries[1:]:
        t0 = time.perf_counter()
        hits = await store.search_by_vector("bench", q, limit=50)
        took.append(time.perf_counter() - t0)
        assert len(hits) == 50
    return first * 1000, statistics.median(took) * 1000


async def main() -> None:
    import memora.memory.vectors as vec
    from memora.memory import InMemoryStorage
    from memora.memory.sqlite_store import open_sqlite_storage

    loadable = hasattr(sqlite3.Connection, "enable_load_extension")
    print(
        f"sqlite-vec: {'loadable' if loadable else 'cannot be loaded'} — this Python's sqlite3 "
        f"{'has' if loadable else 'lacks'} enable_load_extension (SQLite {sqlite3.sqlite_version})"
    )
    print(f"making {N} vectors of {DIMS} dimensions …", flush=True)
    rows = vectors(N, 1)
    queries = vectors(QUERIES, 2)
    results: list[tuple[str, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        store: Any = open_sqlite_storage(Path(tmp) / "v.db")
        t0 = time.perf_counter()
        await fill(store, rows)
        print(f"SQLite: {N} memories + vectors written in {time.perf_counter() - t0:.1f} s")
        results.append(("SQLite BLOB, numpy", *await timed(store, queries)))
        await store.close()
        numpy_of = vec._numpy
        vec._numpy = lambda: None  # the same store without numpy (plain Python)
        try:
            store = open_sqlite_storage(Path(tmp) / "v.db")
            results.append(("SQLite BLOB, plain Python", *await timed(store, queries[:6])))
            await store.close()
        finally:
            vec._numpy = numpy_of
    results += sqlite_vec_rows(rows, queries)
    memory = InMemoryStorage()
    await fill(memory, rows)
    results.append(("in-memory, numpy", *await timed(memory, queries)))
    with contextlib.ExitStack() as stack:
        dsn = postgres_cluster(stack)
        if dsn:
            from memora_plugin_postgres.database import Database
            from memora_plugin_postgres.storage import PostgresStorage

            db = Database(dsn)
            pg = PostgresStorage(db, namespace="bench-vectors")
            t0 = time.perf_counter()
            await fill(pg, rows)
            print(f"PostgreSQL: {N} memories + vectors written in {time.perf_counter() - t0:.1f} s")
            results.append(("PostgreSQL real[], in process", *await timed(pg, queries)))
            await pg.close()
            await db.close()
    print(f"\ntop-50 vector search over {N} memories ({DIMS} dims):")
    base = results[0][2]
    for name, first, p50 in results:
        print(f"  {name:28} first {first:8.1f} ms   p50 {p50:8.1f} ms   {p50 / base:6.1f}×")


def sqlite_vec_rows(
    rows: list[list[float]], queries: list[list[float]]
) -> list[tuple[str, float, float]]:
    """sqlite-vec through apsw (whose SQLite can load extensions): its vec0 KNN index and its
    scalar distance over a BLOB table — raw top 50, without memora's filters."""
    try:
        import apsw
        import sqlite_vec
    except ImportError:
        print("sqlite-vec: not measured (pip install apsw sqlite-vec)")
        return []
    from memora.memory.vectors import pack

    out: list[tuple[str, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        db = apsw.Connection(str(Path(tmp) / "vec.db"))
        db.enable_load_extension(True)
        db.load_extension(sqlite_vec.loadable_path())
        db.execute(f"CREATE VIRTUAL TABLE knn USING vec0(embedding float[{DIMS}])")
        db.execute("CREATE TABLE blobs (id INTEGER PRIMARY KEY, embedding BLOB)")
        with db:
            db.executemany(
                "INSERT INTO knn(rowid, embedding) VALUES (?, ?)",
                ((i + 1, pack(v)) for i, v in enumerate(rows)),
            )
            db.executemany(
                "INSERT INTO blobs VALUES (?, ?)", ((i + 1, pack(v)) for i, v in enumerate(rows))
            )
        for name, sql in (
            (
                "sqlite-vec vec0 KNN (apsw)",
                "SELECT rowid, distance FROM knn WHERE embedding MATCH ? AND k = 50",
            ),
            (
                "sqlite-vec scalar scan (apsw)",
                "SELECT id, vec_distance_cosine(embedding, ?) AS d FROM blobs ORDER BY d LIMIT 50",
            ),
        ):
            took = []
            for q in queries:
                t0 = time.perf_counter()
                assert len(list(db.execute(sql, (pack(q),)))) == 50
                took.append(time.perf_counter() - t0)
            out.append((name, took[0] * 1000, statistics.median(took[1:]) * 1000))
        db.close()
    return out


if __name__ == "__main__":
    asyncio.run(main())
