"""SQLite memory: bulk insert and keyword search at 100k and 1M summaries.

Side by side in one run, on the same database file:
  * memora   — SqliteStorage.search_by_keyword (async, worker thread, records built);
  * raw FTS5 — the same MATCH + bm25 query on a plain sqlite3 connection (the floor);
  * LIKE     — a naive '%term%' scan, what a backend without an index does.

Then memory scopes: one user's search among 100 users' memories next to the same search over
every memory.  Then group commit: CPU per row of ``add`` alone and with 10 and 100 concurrent callers (the
sessions of ``memora serve``), next to one ``add_many`` of 100 (one transaction, the floor).

Usage: python bench/bench_memory.py [N ...]   (default: 100000 1000000)
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from memora.memory import MemoryManager, NewMemory
from memora.memory.sqlite_store import SqliteStorage, build_match_query

RNG = random.Random(42)
HAN = [chr(c) for c in range(0x4E00, 0x4E00 + 2500)]
ZH_WORDS = [
    *list({RNG.choice(HAN) + RNG.choice(HAN) for _ in range(6000)}),
    "记忆",
    "大纲",
    "摘要",
    "决定",
]
EN_WORDS = [
    "".join(RNG.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(RNG.randint(4, 9)))
    for _ in range(8000)
] + ["sqlite", "deadline", "outline", "memory"]


def zipf_pick(words: list[str]) -> str:
    # mildly skewed: low indexes are more common
    return words[
        min(int(RNG.paretovariate(1.1)) - 1, len(words) - 1)
        if RNG.random() < 0.3
        else RNG.randrange(len(words))
    ]


def summary() -> str:
    zh = "".join(zipf_pick(ZH_WORDS) for _ in range(RNG.randint(8, 20)))
    en = " ".join(zipf_pick(EN_WORDS) for _ in range(RNG.randint(6, 14)))
    return f"{zh}。{en}." if RNG.random() < 0.5 else f"{en}. {zh}。"


NEEDLES = ["zqxjneedle", "qwvrareword", "稀有词汇", "罕见标记", "xylophonist"]
QUERIES = [
    *RNG.sample(ZH_WORDS[:-4], 60),
    *RNG.sample(EN_WORDS[:-4], 60),
    "记忆",
    "大纲",
    "sqlite",
    "deadline",
    "记忆 sqlite",
    "长期记忆",
]


def pct(samples: list[float], p: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(len(s) * p))]


async def run(n: int, folder: Path) -> None:
    db = folder / f"bench-{n}.db"
    store = SqliteStorage(db)
    batch = 10_000
    insert_s = 0.0
    for start in range(0, n, batch):
        # rounds of sessions of 20, as an agent writes them (the host's search ranks by session)
        items = [
            NewMemory(summary(), name="s", session_id=f"s{(start + i) // 20}")
            for i in range(min(batch, n - start))
        ]
        if start == n // 2:  # a few needles: rare terms a LIKE scan must read the whole table for
            items[: len(NEEDLES)] = [NewMemory(f"{summary()} {w}", name="needle") for w in NEEDLES]
        t0 = time.perf_counter()
        await store.add_many(items)
        insert_s += time.perf_counter() - t0

    raw = sqlite3.connect(db)
    cols = "m.id, m.source, m.name, m.content, m.summary_type, m.created_at, m.updated_at, m.superseded_by, m.session_id, m.round_id, m.meta"
    # the floor: the minimal top-10 FTS5 query plus fetching those rows, no filters at all
    raw_sql = (
        f"SELECT {cols}, t.rank FROM (SELECT rowid, rank FROM memories_fts WHERE memories_fts MATCH ? "
        "ORDER BY rank LIMIT 10) t JOIN memories m ON m.rowid = t.rowid ORDER BY t.rank"
    )
    like_sql = (
        "SELECT id, content FROM memories WHERE content LIKE ? AND superseded_by IS NULL LIMIT 10"
    )

    for q in QUERIES[:10]:  # warm caches for all three
        await store.search_by_keyword(q)
        raw.execute(raw_sql, (build_match_query(q),)).fetchall()

    manager = MemoryManager(store)
    mem, floor, like, unscoped, host, host_floor = [], [], [], [], [], []
    hits_total = 0
    for _ in range(3):
        for q in QUERIES:
            match = build_match_query(q)
            t = time.perf_counter()
            rows = raw.execute(raw_sql, (match,)).fetchall()
            floor.append(time.perf_counter() - t)
            t = time.perf_counter()
            hits = await store.search_by_keyword(q)
            mem.append(time.perf_counter() - t)
            assert [h.record.id for h in hits] == [r[0] for r in rows]
            hits_total += len(hits)
            # what an unscoped Agent's recall asks since memory scopes: the project's only
            t = time.perf_counter()
            own = await store.search_by_keyword(q, scopes=("",))
            unscoped.append(time.perf_counter() - t)
            assert [h.record.id for h in own] == [r[0] for r in rows]
            # the model's memory_search (8 hits) through agent.memory: best sentence and session rank
            # a pool of 100; next to the store's own top 8
            t = time.perf_counter()
            await store.search_by_keyword(q, limit=8, scopes=("",))
            host_floor.append(time.perf_counter() - t)
            t = time.perf_counter()
            await manager.search(q, limit=8)
            host.append(time.perf_counter() - t)
    rare_mem, rare_like = [], []
    for q in QUERIES[:20]:
        term = q.split()[0]
        t = time.perf_counter()
        raw.execute(like_sql, (f"%{term}%",)).fetchall()
        like.append(time.perf_counter() - t)
    for q in NEEDLES:
        t = time.perf_counter()
        assert len(raw.execute(like_sql, (f"%{q}%",)).fetchall()) == 1
        rare_like.append(time.perf_counter() - t)
        t = time.perf_counter()
        assert len(await store.search_by_keyword(q)) == 1
        rare_mem.append(time.perf_counter() - t)
    raw.close()
    await store.close()

    size_mb = db.stat().st_size / 1e6
    print(f"N = {n:,}  (db {size_mb:,.0f} MB, {hits_total / len(mem):.1f} hits/query)")
    print(f"  insert (batched 10k)   {n / insert_s:12,.0f} rows/s")
    print(
        f"  memora search   p50 {pct(mem, 0.5) * 1e3:7.3f} ms   p99 {pct(mem, 0.99) * 1e3:7.3f} ms"
    )
    print(
        f"  raw FTS5 floor  p50 {pct(floor, 0.5) * 1e3:7.3f} ms   p99 {pct(floor, 0.99) * 1e3:7.3f} ms"
    )
    print(
        f"  LIKE scan       p50 {pct(like, 0.5) * 1e3:7.3f} ms   p99 {pct(like, 0.99) * 1e3:7.3f} ms"
        "   (common terms: the scan stops at 10 hits)"
    )
    print(
        f"  rare term: memora {statistics.median(rare_mem) * 1e3:7.3f} ms vs LIKE "
        f"{statistics.median(rare_like) * 1e3:8.2f} ms ({statistics.median(rare_like) / statistics.median(rare_mem):,.0f}x)"
    )
    print(
        f"  ratio memora / raw FTS5 (p50)  {statistics.median(mem) / statistics.median(floor):6.2f}x"
    )
    print(
        f"  ratio scopes=('',) / no filter (p50) {statistics.median(unscoped) / statistics.median(mem):6.2f}x"
        "   (an unscoped Agent's recall)"
    )
    print(
        f"  agent.memory.search, 8 hits p50 {pct(host, 0.5) * 1e3:7.3f} ms vs the store's top 8 "
        f"{pct(host_floor, 0.5) * 1e3:7.3f} ms: {statistics.median(host) / statistics.median(host_floor):5.2f}x"
        "   (best sentence and session context rank a pool of 100)"
    )
    print(
        f"  ratio LIKE / memora (p50)      {statistics.median(like) / statistics.median(mem):6.1f}x"
    )


async def scoped(folder: Path, n: int = 100_000, users: int = 100) -> None:
    """Memory scopes: ``n`` memories of ``users`` users in one store; one user's search (its
    scope and the unscoped) next to the same search over every memory, in one run."""
    store = SqliteStorage(folder / "scoped.db")
    for start in range(0, n, 10_000):
        await store.add_many(
            [
                NewMemory(summary(), name="s", scope=f"u{i % users}")
                for i in range(start, start + 10_000)
            ]
        )
    every, one = [], []
    for _ in range(3):
        for q in QUERIES:
            t = time.perf_counter()
            await store.search_by_keyword(q)
            every.append(time.perf_counter() - t)
            t = time.perf_counter()
            hits = await store.search_by_keyword(q, scopes=("", "u7"))
            one.append(time.perf_counter() - t)
            assert all(h.record.scope == "u7" for h in hits)
    await store.close()
    print(f"scoped search: {n:,} memories of {users} users, one user's search vs every memory's")
    print(f"  one user's  p50 {pct(one, 0.5) * 1e3:7.3f} ms   p99 {pct(one, 0.99) * 1e3:7.3f} ms")
    print(
        f"  every one's p50 {pct(every, 0.5) * 1e3:7.3f} ms   p99 {pct(every, 0.99) * 1e3:7.3f} ms"
    )
    print(
        f"  ratio one user / every memory (p50)  {statistics.median(one) / statistics.median(every):6.2f}x"
    )


async def group_commit(folder: Path) -> None:
    store = SqliteStorage(folder / "group.db")

    def item() -> NewMemory:
        return NewMemory(summary(), source="round_summary", name="a round")

    print("group commit: CPU per row of add() (worker thread included), median of 5 passes")
    try:
        for callers in (1, 10, 100):
            samples = []
            for _ in range(5):
                t = time.process_time()
                for _ in range(max(1, 400 // callers)):
                    await asyncio.gather(*(store.add(item()) for _ in range(callers)))
                samples.append((time.process_time() - t) / (max(1, 400 // callers) * callers))
            print(
                f"  {callers:3} concurrent adds            {statistics.median(samples) * 1e3:6.3f} ms"
            )
        samples = []
        for _ in range(5):
            t = time.process_time()
            await store.add_many([item() for _ in range(100)])
            samples.append((time.process_time() - t) / 100)
        print(f"  add_many(100), one transaction {statistics.median(samples) * 1e3:6.3f} ms")
    finally:
        await store.close()


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or [100_000, 1_000_000]
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            asyncio.run(run(n, Path(tmp)))
            for f in Path(tmp).glob("bench-*"):
                f.unlink()
        asyncio.run(scoped(Path(tmp)))
        asyncio.run(group_commit(Path(tmp)))


if __name__ == "__main__":
    main()
