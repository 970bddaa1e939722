"""Passage-level evidence in keyword ranking (memora.memory.ranking.with_best_passage): a memory is
scored by itself and by its sentence that matches the question best, in every search path."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from memora import Agent
from memora.cli.main import build_cli
from memora.memory import MemoryManager, MemoryRecord, NewMemory, ScoredMemory
from memora.memory.ranking import PASSAGE_WEIGHT, rank_keyword_pool, with_best_passage
from memora.memory.sqlite_store import open_sqlite_storage
from memora.testing import ScriptedProvider


def _hit(ident: str, content: str, score: float, session: str | None = None) -> ScoredMemory:
    record = MemoryRecord(
        id=ident, content=content, source="round_summary", name="", created_at=0.0,
        updated_at=0.0, session_id=session,
    )  # fmt: skip
    return ScoredMemory(record, score)


SCATTERED = (
    "Caroline talked about her week. She went to a pottery class. Later she mentioned a "
    "career fair. Writing came up at the end."
)
TOGETHER = "Melanie cooked dinner. Caroline said she wants a career in writing. They laughed."


def test_the_memory_that_answers_in_one_sentence_comes_first() -> None:
    question = "Would Caroline pursue writing as a career?"
    hits = [_hit("scattered", SCATTERED, 5.0), _hit("together", TOGETHER, 4.0)]
    ranked = with_best_passage(hits, question)
    assert [h.record.id for h in ranked] == ["together", "scattered"]
    # the combined score: own / best own + weight * best sentence / best of the pool's
    assert ranked[0].score == pytest.approx(4.0 / 5.0 + PASSAGE_WEIGHT * 1.0)
    assert 1.0 < ranked[1].score < 1.0 + PASSAGE_WEIGHT
    # weight 0: the pool as it came
    assert [h.record.id for h in with_best_passage(hits, question, 0.0)] == [
        "scattered",
        "together",
    ]


def test_a_pool_it_cannot_read_comes_back_as_it_was() -> None:
    hits = [_hit("a", "nothing here", 3.0), _hit("b", "nor here", 2.0)]
    assert with_best_passage(hits, "zebra") == hits  # no sentence holds a query term
    assert with_best_passage(hits, "   ") == hits  # no query term at all
    assert with_best_passage([], "zebra") == []
    assert with_best_passage(hits[:1], "nothing") == hits[:1]


def test_stems_match_as_prefixes_and_ties_keep_the_order() -> None:
    # "painting" searches paint*: "painted" counts in the sentence as the backends count it
    hits = [
        _hit("spread", "She painted. Then a long walk. A sunset later.", 2.0),
        _hit("one", "A sunset she painted on the walk home.", 2.0),
    ]
    ranked = with_best_passage(hits, "painting the sunset on a walk")
    assert [h.record.id for h in ranked] == ["one", "spread"]
    same = [_hit("x", "paint it.", 1.0), _hit("y", "paint it.", 1.0)]
    assert [h.record.id for h in with_best_passage(same, "paint")] == ["x", "y"]


def test_chinese_sentences_and_phrases() -> None:
    # 。 ends a sentence; a phrase matches as its bigrams in a row
    spread = "我们讨论了长期计划。后来说到记忆的问题。最后谈了系统。"
    together = "今天天气很好。长期记忆系统需要可靠的存储。"
    hits = [_hit("spread", spread, 3.0), _hit("together", together, 2.5)]
    ranked = with_best_passage(hits, "长期记忆系统")
    assert [h.record.id for h in ranked] == ["together", "spread"]
    # "长期" and "记忆" apart are not the phrase "长期记忆"
    apart = [_hit("apart", "长期的计划。记忆很好。", 3.0), _hit("phrase", "长期记忆。", 1.0)]
    assert [h.record.id for h in with_best_passage(apart, "长期记忆")] == ["phrase", "apart"]


def test_session_context_applies_after_the_best_sentence() -> None:
    hits = [
        _hit("lone", SCATTERED, 5.0, "s1"),
        _hit("answer", TOGETHER, 4.0, "s2"),
        _hit("same-day", "Caroline brought her writing notebook.", 3.0, "s2"),
    ]
    question = "Would Caroline pursue writing as a career?"
    ranked = rank_keyword_pool(hits, question, 1.0, 2)
    assert [h.record.id for h in ranked] == ["answer", "same-day"]
    alone = rank_keyword_pool(hits, question, 0.0, 3, passage_weight=0.0)
    assert [h.record.id for h in alone] == ["lone", "answer", "same-day"]


_HOST_MEMORIES = (
    # the question's words often, but never together: the whole-memory score prefers it
    (
        "scattered",
        "Caroline met friends. Caroline went to a career fair. The career fair was busy. "
        "Writing came up. Writing again later.",
    ),
    (
        "together",
        "Caroline wants a career in writing, she told Melanie over a long dinner with the kids, "
        "the neighbours and their two dogs in the garden.",
    ),
)


async def test_the_host_search_reads_the_best_sentence(tmp_path: Path) -> None:
    store = open_sqlite_storage(tmp_path / "m.db")
    await store.add_many(
        [NewMemory(content, id=ident, session_id=ident) for ident, content in _HOST_MEMORIES]
    )
    try:
        question = "Would Caroline pursue writing as a career?"
        whole = await MemoryManager(store, passage_weight=0).search(question, limit=2)
        ranked = await MemoryManager(store).search(question, limit=2)
        assert [h.record.id for h in whole] == ["scattered", "together"]
        assert [h.record.id for h in ranked] == ["together", "scattered"]
    finally:
        await store.close()


def test_words_are_whole_words_as_the_index_reads_them() -> None:
    # "sql" is a short word, matched as itself: not inside "mysql", "a_sql" or "sqlite"
    inside = _hit("inside", "We use mysql. The a_sql module. An sqlite file.", 2.0)
    itself = _hit("itself", "Plain sql here.", 1.0)
    assert [h.record.id for h in with_best_passage([inside, itself], "sql")] == [
        "itself",
        "inside",
    ]
    # Chinese text with English words in it: both kinds of term count in one sentence
    mixed = _hit("mixed", "今天很忙。我们用SQLite存储长期记忆。", 1.0)
    apart = _hit("apart", "SQLite很好。长期记忆很重要。", 1.5)
    ranked = with_best_passage([apart, mixed], "sqlite 长期记忆")
    assert [h.record.id for h in ranked] == ["mixed", "apart"]


def test_memory_search_at_the_terminal_ranks_with_the_configs_weight(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()

    async def seed() -> None:
        async with Agent(
            project_path=project,
            data_dir=project / ".memora" / "data",
            provider=ScriptedProvider([]),
            load_entrypoints=False,
        ) as agent:
            for ident, content in _HOST_MEMORIES:
                await agent.memory.write(NewMemory(content, id=ident, session_id=ident))

    asyncio.run(seed())
    question = "Would Caroline pursue writing as a career?"

    def search() -> tuple[int, str]:
        result = CliRunner().invoke(
            build_cli(), ["memory", "search", question, "--json", "--project", str(project)]
        )
        return result.exit_code, result.output

    code, out = search()
    assert code == 0, out
    assert [r["id"] for r in json.loads(out)["results"]] == ["together", "scattered"]
    config = project / ".memora" / "config.json"
    config.write_text(json.dumps({"options": {"passage_weight": 0}}))
    code, out = search()
    assert code == 0, out
    assert [r["id"] for r in json.loads(out)["results"]] == ["scattered", "together"]
    config.write_text(json.dumps({"options": {"passage_weight": 9}}))
    code, out = search()
    assert code != 0 and "options.passage_weight" in out and "0 to 4" in out
