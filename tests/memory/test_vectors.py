"""The vector side of memory: ranking rows with and without numpy, the weighed fusion, and the
SQLite migration of a database written before vectors existed."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from memora.memory import MemoryRecord, NewMemory, ScoredMemory
from memora.memory.sqlite_store import SqliteStorage, open_sqlite_storage
from memora.memory.vectors import VectorRows, fuse, normalize, pack, unpack


def _rows(use_numpy: bool) -> VectorRows:
    rng = random.Random(7)
    rows = VectorRows(use_numpy=use_numpy)
    for i in range(300):
        rows.put(f"m{i}", normalize([rng.gauss(0, 1) for _ in range(16)]))
    return rows


@pytest.mark.parametrize("use_numpy", [True, False])
def test_rows_rank_by_dot_product(use_numpy: bool) -> None:
    rows = _rows(use_numpy)
    rng = random.Random(8)
    query = normalize([rng.gauss(0, 1) for _ in range(16)])
    got = rows.ranked(query, 10)
    want = sorted(
        ((f"m{i}", sum(a * b for a, b in zip(query, v, strict=True))) for i, v in _plain()),
        key=lambda p: -p[1],
    )[:10]
    assert [i for i, _ in got] == [i for i, _ in want]
    assert all(abs(a[1] - b[1]) < 1e-5 for a, b in zip(got, want, strict=True))
    rows.drop("m3")
    rows.put("m3", query)  # a dropped row's slot is used again
    assert rows.ranked(query, 1)[0][0] == "m3"
    assert len(rows) == 300
    rows.put("other", [1.0, 0.0])  # another model behind the same name: the old rows go
    assert len(rows) == 1 and rows.ranked([1.0, 0.0], 5) == [("other", 1.0)]
    assert rows.ranked(query, 5) == [], "a query of another length finds nothing"


@pytest.mark.parametrize("use_numpy", [True, False])
def test_dropped_rows_never_rank_and_never_shorten_a_page(use_numpy: bool) -> None:
    rows = VectorRows(use_numpy=use_numpy)
    rows.put("kept-1", [-1.0, 0.0])
    rows.put("kept-2", [-0.8, -0.6])
    for i in range(5):
        rows.put(f"gone-{i}", [1.0, 0.0])
        rows.drop(f"gone-{i}")
    got = rows.ranked([1.0, 0.0], 2)
    assert [i for i, _ in got] == ["kept-2", "kept-1"], "a negative score still ranks"
    assert len(rows.ranked([1.0, 0.0], 10)) == 2


def _plain() -> list[tuple[int, list[float]]]:
    rng = random.Random(7)
    return [(i, normalize([rng.gauss(0, 1) for _ in range(16)])) for i in range(300)]


def test_numpy_and_plain_python_agree_and_load_in_bulk() -> None:
    a, b = _rows(True), _rows(False)
    query = normalize([1.0] * 16)
    assert [i for i, _ in a.ranked(query, 20)] == [i for i, _ in b.ranked(query, 20)]
    bulk = VectorRows(use_numpy=True)
    bulk.load([(f"m{i}", pack(v)) for i, v in _plain()])
    assert [i for i, _ in bulk.ranked(query, 20)] == [i for i, _ in a.ranked(query, 20)]
    assert list(unpack(pack([0.5, -2.0]))) == [0.5, -2.0]


def test_normalize_refuses_what_is_not_a_vector() -> None:
    assert normalize([3.0, 4.0]) == [0.6, 0.8]
    assert normalize([0.0, 0.0]) == [0.0, 0.0]
    with pytest.raises(ValueError, match="at least one"):
        normalize([])
    with pytest.raises(ValueError, match="finite"):
        normalize([float("nan"), 1.0])


def _hit(ident: str, score: float) -> ScoredMemory:
    return ScoredMemory(MemoryRecord(ident, ident, "round_summary", "", 0.0, 0.0), score)


def test_fusion_is_weighed() -> None:
    keyword = [_hit("a", 9.0), _hit("b", 5.0), _hit("c", 1.0)]
    semantic = [_hit("c", 0.9), _hit("d", 0.85), _hit("b", 0.5)]
    assert [h.record.id for h in fuse(keyword, semantic, 0.0, 10)] == ["a", "b", "c"]
    assert [h.record.id for h in fuse(keyword, semantic, 1.0, 10)] == ["c", "d", "b"]
    # 0.3: a strong keyword hit keeps its place; a memory both lists like rises over one only
    # the vectors like
    got = fuse(keyword, semantic, 0.3, 10)
    assert [h.record.id for h in got] == ["a", "b", "c", "d"]
    assert got[0].score == pytest.approx(0.7)
    assert [h.record.id for h in fuse(keyword, semantic, 0.6, 2)] == ["c", "d"]
    assert [h.record.id for h in fuse([], semantic, 0.3, 2)] == ["c", "d"]
    assert [h.record.id for h in fuse(keyword, [], 0.3, 2)] == ["a", "b"]


async def test_a_database_from_before_vectors_is_migrated_in_place(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    store = open_sqlite_storage(path)
    old = await store.add(NewMemory("written before vectors existed", name="old"))
    await store.close()
    # the schema as the previous release left it: no vector table, one migration recorded
    db = sqlite3.connect(path)
    db.execute("DROP TABLE memory_vectors")
    db.execute("DELETE FROM _memora_migrations WHERE name = '002_vectors'")
    db.commit()
    db.close()
    store = open_sqlite_storage(path)
    try:
        assert (await store.get(old.id)) == old
        assert [h.record.id for h in await store.search_by_keyword("vectors")] == [old.id]
        assert [r.id for r in await store.missing_vectors("t:2")] == [old.id]
        await store.put_vectors("t:2", [(old.id, [1.0, 0.0])])
        assert [h.record.id for h in await store.search_by_vector("t:2", [1.0, 0.0])] == [old.id]
    finally:
        await store.close()


async def test_another_connection_s_vectors_are_seen(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    first, second = open_sqlite_storage(path), SqliteStorage(path)
    try:
        a = await first.add(NewMemory("alpha"))
        await first.put_vectors("t:2", [(a.id, [1.0, 0.0])])
        assert [h.record.id for h in await first.search_by_vector("t:2", [0.0, 1.0])] == [a.id]
        b = await second.add(NewMemory("beta"))
        await second.put_vectors("t:2", [(b.id, [0.0, 1.0])])
        assert (await first.search_by_vector("t:2", [0.0, 1.0]))[0].record.id == b.id
        assert await first.missing_vectors("t:2") == []
        c = await second.add(NewMemory("gamma"))
        assert [r.id for r in await first.missing_vectors("t:2")] == [c.id]
        await second.delete(b.id)
        assert [h.record.id for h in await first.search_by_vector("t:2", [0.0, 1.0])] == [a.id]
    finally:
        await first.close()
        await second.close()
