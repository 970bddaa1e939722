"""Dates a query names (memora.memory.periods): the memories written then rank first, in every
search path — keyword, fused with vectors, each backend."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path

import pytest

from memora.memory import InMemoryStorage, MemoryManager, MemoryRecord, NewMemory, ScoredMemory
from memora.memory.keywords import query_terms
from memora.memory.periods import (
    LOOKBACK_DAYS,
    Period,
    in_periods,
    periods_first,
    query_periods,
)
from memora.memory.sqlite_store import open_sqlite_storage
from memora.memory.vectors import SemanticSearch


@pytest.mark.parametrize(
    ("query", "periods"),
    [
        ("When did Melanie go camping in June?", [Period(month=6)]),
        ("Which outdoor spot did Joanna visit in May?", [Period(month=5)]),
        ("What did Gina find on 1 February, 2023?", [Period(2023, 2, 1)]),
        ("Who had dinner on May 3, 2023?", [Period(2023, 5, 3)]),
        ("the 1st of March 2021 meeting", [Period(2021, 3, 1)]),
        ("plans for Dec 24", [Period(None, 12, 24)]),
        ("the workout class started in December 2023", [Period(2023, 12)]),
        ("What happened in 2022?", [Period(2022)]),
        ("notes of 2023-05-23 and 2023-06", [Period(2023, 5, 23), Period(2023, 6)]),
        ("我们2023年5月23日讨论了什么", [Period(2023, 5, 23)]),
        ("5月的会议", [Period(month=5)]),
        ("去年（2022年）的计划", [Period(2022)]),
        ("early March, then again since june", [Period(month=3), Period(month=6)]),
        # not dates: "may" and "march" as verbs, numbers that are no day, impossible dates
        ("May I ask about SQLite?", []),
        ("this may be wrong", []),
        ("the Women's March", []),
        ("at 10:30 May said so", []),
        ("Why should a notes app store data in SQLite?", []),
        ("2023-13-01 and 15月", []),
        ("", []),
    ],
)
def test_the_periods_a_query_names(query: str, periods: list[Period]) -> None:
    assert sorted(query_periods(query), key=repr) == sorted(periods, key=repr)


def test_a_month_the_query_names_is_searched_for_even_when_its_name_is_a_function_word() -> None:
    assert "may" in [t.text for t in query_terms("Which spot did Joanna visit in May?")]
    assert "may" not in [t.text for t in query_terms("May I ask about SQLite?")]


def _at(year: int, month: int, day: int) -> float:
    return dt.datetime(year, month, day, 12).timestamp()


def test_a_memory_belongs_to_its_period_and_the_days_after() -> None:
    june = [Period(month=6)]
    assert in_periods(_at(2023, 6, 1), june)
    assert in_periods(_at(2022, 6, 30), june)  # a month without a year: every year's
    assert in_periods(_at(2023, 7, LOOKBACK_DAYS), june)  # told of a week later
    assert not in_periods(_at(2023, 7, LOOKBACK_DAYS + 1), june)
    assert not in_periods(_at(2023, 5, 31), june)
    day = [Period(2023, 5, 23)]
    assert in_periods(_at(2023, 5, 25), day)
    assert not in_periods(_at(2023, 5, 22), day)
    assert not in_periods(_at(2024, 5, 23), day)
    assert not in_periods(float("nan"), day)


def _hit(ident: str, created_at: float) -> ScoredMemory:
    record = MemoryRecord(
        id=ident, content=ident, source="round_summary", name="", created_at=created_at,
        updated_at=created_at,
    )  # fmt: skip
    return ScoredMemory(record, 1.0)


def test_the_period_goes_first_and_nothing_is_dropped() -> None:
    hits = [_hit("may", _at(2023, 5, 2)), _hit("june", _at(2023, 6, 9)), _hit("jul", 0.0)]
    june = query_periods("camping in June")
    assert [h.record.id for h in periods_first(hits, june, 3)] == ["june", "may", "jul"]
    assert [h.record.id for h in periods_first(hits, june, 1)] == ["june"]
    # no period, or none of the hits in it: the order given
    assert [h.record.id for h in periods_first(hits, (), 3)] == ["may", "june", "jul"]
    august = query_periods("in August")
    assert [h.record.id for h in periods_first(hits, august, 2)] == ["may", "june"]


def _trips() -> list[NewMemory]:
    # the same words every time; only when they were written tells them apart
    return [
        NewMemory(
            f"Melanie: we went camping by the lake with the kids ({label})",
            created_at=_at(2023, month, 10),
            session_id=f"s{month}",
        )
        for month, label in ((5, "spring"), (6, "summer"), (8, "late summer"))
    ]


class _FlatEmbedder:
    """Every text the same vector: the fusion's semantic side ties every memory."""

    name = "test:flat"

    async def embed(self, texts: Sequence[str], *, kind: str) -> list[list[float]]:
        return [[1.0, 0.0, 0.0] for _ in texts]

    async def aclose(self) -> None:
        return None


@pytest.mark.parametrize("backend", ["sqlite", "memory", "semantic"])
async def test_a_search_that_names_a_month_finds_what_was_written_then(
    tmp_path: Path, backend: str
) -> None:
    store = open_sqlite_storage(tmp_path / "m.db") if backend != "memory" else InMemoryStorage()
    await store.add_many(_trips())
    try:
        semantic = None
        if backend == "semantic":
            semantic = SemanticSearch(_FlatEmbedder(), store)
            await semantic.fill()
        manager = MemoryManager(store, semantic=semantic)
        for question, first in (
            ("When did Melanie go camping in June?", "s6"),
            ("camping in August 2023", "s8"),
            ("Melanie camping 2023年5月", "s5"),
        ):
            hits = await manager.search(question, limit=1)
            assert [h.record.session_id for h in hits] == [first], question
        everything = await manager.search("When did Melanie go camping in June?", limit=10)
        assert len(everything) == 3  # the other months follow
        session_off = MemoryManager(store, semantic=semantic, session_weight=0)
        hits = await session_off.search("camping in June", limit=1)
        assert [h.record.session_id for h in hits] == ["s6"]
    finally:
        await store.close()
