"""Session context in keyword ranking (memora.memory.ranking): a round is ranked with the session
it came from, in the search a host, the model's ``memory_search`` and the server all use."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from memora import ProjectRuntime
from memora.memory import MemoryManager, MemoryRecord, NewMemory, ScoredMemory
from memora.memory.ranking import (
    DEFAULT_SESSION_WEIGHT,
    PASSAGE_WEIGHT,
    session_pool,
    with_session_context,
)
from memora.memory.sqlite_store import open_sqlite_storage
from memora.memory.vectors import SemanticSearch
from memora.testing import ScriptedProvider


def _hit(ident: str, score: float, session: str | None) -> ScoredMemory:
    record = MemoryRecord(
        id=ident, content=ident, source="round_summary", name="", created_at=0.0,
        updated_at=0.0, session_id=session,
    )  # fmt: skip
    return ScoredMemory(record, score)


def test_a_round_of_a_session_that_answers_outranks_a_lone_match() -> None:
    hits = [
        _hit("lone", 10.0, "s1"),  # one rare word, in a session about something else
        _hit("answer", 9.0, "s2"),
        _hit("same-day", 8.0, "s2"),  # the answer's session says more of the question
        _hit("other", 1.0, "s3"),
    ]
    assert [h.record.id for h in with_session_context(hits, 0.0, 4)] == [
        "lone",
        "answer",
        "same-day",
        "other",
    ]
    ranked = with_session_context(hits, 1.0, 3)
    assert [h.record.id for h in ranked] == ["answer", "same-day", "lone"]
    # the combined score: own / best + weight * session / best session (two best of each)
    assert ranked[0].score == pytest.approx(0.9 + (0.9 + 0.8) / (0.9 + 0.8))
    assert ranked[2].score == pytest.approx(1.0 + 1.0 / 1.7)


def test_only_the_two_best_of_a_session_count_and_a_memory_without_one_is_its_own() -> None:
    many = [_hit(f"chatty-{i}", 5.0, "busy") for i in range(6)]
    hits = [_hit("top", 6.0, "quiet"), _hit("solo-a", 5.9, None), _hit("solo-b", 5.8, None)]
    hits += [_hit("quiet-2", 5.5, "quiet"), *many]
    ranked = [h.record.id for h in with_session_context(hits, 1.0, 10)]
    # "quiet" (6 + 5.5) beats "busy" (5 + 5, however many more it has)
    assert ranked[:2] == ["top", "quiet-2"]
    # two memories without a session are not one session: each counts alone
    assert ranked.index("chatty-0") < ranked.index("solo-a")
    assert sorted(ranked) == sorted(h.record.id for h in hits)


def test_scores_that_are_not_positive_still_rank() -> None:
    # scaled min-max (a=1, b=.87, c=.8, d=0): y's two (1.67) lift b and c over a
    hits = [_hit("a", 0.0, "x"), _hit("b", -0.2, "y"), _hit("c", -0.3, "y"), _hit("d", -1.5, "z")]
    assert [h.record.id for h in with_session_context(hits, 1.0, 4)] == ["b", "c", "a", "d"]
    same = [_hit("a", 2.0, "x"), _hit("b", 2.0, "y")]
    assert [h.record.id for h in with_session_context(same, 1.0, 2)] == ["a", "b"]
    assert with_session_context([], 1.0, 5) == []


def test_the_pool_grows_with_the_limit() -> None:
    assert session_pool(5) == 100
    assert session_pool(25) == 200


def _rounds() -> list[NewMemory]:
    """The answer's words spread over the rounds of one afternoon, and a short round elsewhere
    that holds two of the question's words by itself."""
    rounds = [
        NewMemory("Melanie: I ran a charity race for the animal shelter on Saturday, 5K", session_id="race-day"),
        NewMemory("Melanie: the race raised a lot of money for the shelter, a good day for charity", session_id="race-day"),
        NewMemory("Caroline: well done, Melanie", session_id="race-day"),
        NewMemory("Caroline: charity race sign-ups", session_id="gala"),
    ]  # fmt: skip
    rounds += [NewMemory(f"Caroline: painting number {i}", session_id="art") for i in range(8)]
    return rounds


async def test_the_host_search_ranks_rounds_with_their_session(tmp_path: Path) -> None:
    store = open_sqlite_storage(tmp_path / "m.db")
    await store.add_many(_rounds())
    try:
        question = "When did Melanie run the charity race?"
        alone = await MemoryManager(store, session_weight=0, passage_weight=0).search(
            question, limit=10
        )
        ranked = await MemoryManager(store).search(question, limit=10)
        assert {h.record.id for h in ranked} == {h.record.id for h in alone}
        # each round alone: the short sign-up line with "charity race" first
        assert alone[0].record.session_id == "gala"
        # with its session: the afternoon that answers (race, charity, Melanie) first
        assert [h.record.session_id for h in ranked[:2]] == ["race-day"] * 2, [
            h.record.content for h in ranked
        ]
        assert len(await MemoryManager(store).search(question, limit=2)) == 2
    finally:
        await store.close()


async def test_scoped_readers_rank_only_what_they_see(tmp_path: Path) -> None:
    store = open_sqlite_storage(tmp_path / "m.db")
    await store.add_many(
        [
            NewMemory("Melanie: the charity race was fun", session_id="s-bob", scope="bob"),
            NewMemory("Melanie: the charity race raised money", session_id="s-bob", scope="bob"),
            NewMemory("Melanie: a charity race", session_id="s-alice", scope="alice"),
        ]
    )
    try:
        alice = MemoryManager(store).for_scope("alice")
        hits = await alice.search("charity race", limit=10)
        assert [h.record.scope for h in hits] == ["alice"]
    finally:
        await store.close()


def _runtime(tmp_path: Path, **options: Any) -> ProjectRuntime:
    return ProjectRuntime(
        project_path=tmp_path / "project",
        data_dir=tmp_path / "data",
        provider=ScriptedProvider([]),
        config_dir=tmp_path / "config",
        storage="memory",
        load_entrypoints=False,
        **options,
    )


@pytest.mark.parametrize(
    ("option", "default"),
    [("session_weight", DEFAULT_SESSION_WEIGHT), ("passage_weight", PASSAGE_WEIGHT)],
)
async def test_ranking_weights_are_options_with_a_range(
    tmp_path: Path, option: str, default: float
) -> None:
    (tmp_path / "project").mkdir()
    async with _runtime(tmp_path) as runtime:
        assert getattr(runtime.memory, option) == default
    async with _runtime(tmp_path, **{option: 0}) as runtime:
        assert getattr(runtime.memory, option) == 0
    for bad in (-1, 5, 9):
        with pytest.raises(ValidationError, match=option):
            _runtime(tmp_path, **{option: bad})


class _FlatEmbedder:
    """Every text the same vector: the semantic side of a fusion adds the same to every memory,
    so the keyword side's order decides."""

    name = "test:flat"

    async def embed(self, texts: Sequence[str], *, kind: str) -> list[list[float]]:
        return [[1.0, 0.0, 0.0] for _ in texts]

    async def aclose(self) -> None:
        return None


async def test_semantic_recall_fuses_the_keyword_ranking_with_session_context(
    tmp_path: Path,
) -> None:
    store = open_sqlite_storage(tmp_path / "m.db")
    await store.add_many(_rounds())
    try:
        question = "When did Melanie run the charity race?"
        for weight, first in ((0.0, ["gala"]), (DEFAULT_SESSION_WEIGHT, ["race-day"] * 2)):
            # the keyword side's own order, each memory alone (no best sentence either) at 0
            semantic = SemanticSearch(
                _FlatEmbedder(), store, session_weight=weight, passage_weight=weight
            )
            await semantic.fill()
            hits = await MemoryManager(store, semantic=semantic).search(question, limit=10)
            assert [h.record.session_id for h in hits[: len(first)]] == first, weight
    finally:
        await store.close()
