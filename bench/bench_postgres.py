"""PostgreSQL next to SQLite, on the same generated summaries in one run: keyword search p50/p99
(CJK and English queries, the same ones bench_memory uses), insert rate, and the project lock's
round trip (acquire + release) against the file lock.

The server is a throw-away cluster started for the run on 127.0.0.1 (memora_plugin_postgres
.testing), with durability off on both sides' terms: SQLite runs as memora configures it (WAL,
synchronous=NORMAL), PostgreSQL with fsync off (the cluster is discarded) and
shared_buffers=1GB — sized to hold memora_memories and its GIN index, as docs/service.md
advises (with the 128 MB default, searches for common words read most heap pages from the OS
cache: ~1.6x slower at 300k rows).

Usage: python bench/bench_postgres.py [N ...]   (default: 1000000)
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_memory import NEEDLES, QUERIES, pct, summary

from memora.memory import NewMemory
from memora.memory.sqlite_store import SqliteStorage
from memora.security.lock import ProjectLock
from memora_plugin_postgres.database import Database
from memora_plugin_postgres.lock import PostgresProjectLock
from memora_plugin_postgres.storage import PostgresStorage
from memora_plugin_postgres.testing import temporary_cluster

BATCH = 10_000
SERVER = {"shared_buffers": "1GB"}


async def fill(stores: dict[str, object], n: int) -> dict[str, float]:
    seconds = dict.fromkeys(stores, 0.0)
    for start in range(0, n, BATCH):
        items = [NewMemory(summary(), name="s") for _ in range(min(BATCH, n - start))]
        if start == n // 2:
            items[: len(NEEDLES)] = [NewMemory(f"{summary()} {w}", name="needle") for w in NEEDLES]
        for name, store in stores.items():
            t0 = time.perf_counter()
            await store.add_many(items)  # type: ignore[attr-defined]
            seconds[name] += time.perf_counter() - t0
    return {name: n / s for name, s in seconds.items()}


async def searches(store: object) -> tuple[list[float], list[float]]:
    for q in QUERIES[:10]:
        await store.search_by_keyword(q)  # type: ignore[attr-defined]
    times: list[float] = []
    for _ in range(3):
        for q in QUERIES:
            t = time.perf_counter()
            await store.search_by_keyword(q)  # type: ignore[attr-defined]
            times.append(time.perf_counter() - t)
    rare = []
    for q in NEEDLES:
        t = time.perf_counter()
        hits = await store.search_by_keyword(q)  # type: ignore[attr-defined]
        rare.append(time.perf_counter() - t)
        assert len(hits) == 1, (q, hits)
    return times, rare


async def lock_round_trips(dsn: str, folder: Path, n: int = 200) -> tuple[float, float]:
    project = folder / "lockproject"
    project.mkdir(exist_ok=True)
    file_lock = ProjectLock(project)
    t = time.perf_counter()
    for _ in range(n):
        file_lock.acquire()
        file_lock.release()
    file_s = (time.perf_counter() - t) / n
    pg_lock = PostgresProjectLock(dsn, "bench-lock")
    await pg_lock.acquire()  # the first one runs the migrations check
    await pg_lock.release()
    t = time.perf_counter()
    for _ in range(n // 4):
        await pg_lock.acquire()
        await pg_lock.release()
    return file_s, (time.perf_counter() - t) / (n // 4)


async def run(n: int, dsn: str, folder: Path) -> None:
    sqlite = SqliteStorage(folder / f"bench-{n}.db")
    pg = PostgresStorage(Database(dsn), namespace=f"bench-{n}")
    rates = await fill({"sqlite": sqlite, "postgres": pg}, n)
    print(f"N = {n:,}   (server: {', '.join(f'{k}={v}' for k, v in SERVER.items())})")
    for name, store in (("sqlite", sqlite), ("postgres", pg)):
        times, rare = await searches(store)
        print(
            f"  {name:<9} insert {rates[name]:9,.0f} rows/s   search p50 "
            f"{pct(times, 0.5) * 1e3:7.3f} ms  p99 {pct(times, 0.99) * 1e3:8.3f} ms   "
            f"rare term p50 {statistics.median(rare) * 1e3:7.3f} ms"
        )
    await sqlite.close()
    await pg.close()
    file_s, pg_s = await lock_round_trips(dsn, folder)
    print(
        f"  project lock acquire+release: file {file_s * 1e6:8.1f} us   "
        f"postgres {pg_s * 1e3:7.2f} ms (a new connection each time)"
    )
    print("  target: PostgreSQL search p50 <= 10 ms at 1M")


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or [1_000_000]
    with temporary_cluster(SERVER) as dsn, tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            asyncio.run(run(n, dsn, Path(tmp)))


if __name__ == "__main__":
    main()
