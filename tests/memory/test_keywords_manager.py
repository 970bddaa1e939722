from __future__ import annotations

from pathlib import Path

from memora.events import EventEmitter, MemoryAdded, MemoryRecalled
from memora.memory import (
    InMemoryStorage,
    MemoryManager,
    NewMemory,
    extract_keywords,
    index_tokens,
    query_terms,
)
from memora.memory.summary import parse_summary
from memora.testing import ScriptedProvider, text


def test_index_tokens_mixed() -> None:
    assert index_tokens("长期记忆 Memory-System v2") == [
        "长期",
        "期记",
        "记忆",
        "忆",
        "memory",
        "system",
        "v2",
    ]
    assert index_tokens("ＦＵＬＬ width") == ["full", "width"]


def test_query_terms_capped_and_deduped() -> None:
    terms = query_terms("记忆 记忆 memory " + " ".join(f"w{i}" for i in range(100)))
    assert [t.text for t in terms[:2]] == ["记忆", "memory"]
    assert len(terms) == 32


def test_extract_keywords_chinese_and_english() -> None:
    kws = extract_keywords(
        "记忆系统只保存摘要。记忆系统按关键词召回。The memory system recalls summaries by keyword."
    )
    assert "记忆系统" in kws
    assert "memory" in kws and "summaries" in kws
    assert "the" not in kws and "by" not in kws
    assert extract_keywords("") == []


def test_parse_summary() -> None:
    assert parse_summary("TYPE: decision\nUse SQLite.") == ("decision", "Use SQLite.")
    assert parse_summary("类型：preference\n喜欢简短回答") == ("preference", "喜欢简短回答")
    assert parse_summary("TYPE: weird\nx") == ("general", "x")
    assert parse_summary("Just a summary.") == ("general", "Just a summary.")


async def test_manager_events_snapshot_and_round_summary(tmp_path: Path) -> None:
    events = EventEmitter()
    added: list[MemoryAdded] = []
    recalled: list[MemoryRecalled] = []
    events.on(MemoryAdded, added.append)
    events.on(MemoryRecalled, recalled.append)
    mm = MemoryManager(InMemoryStorage(), events)
    # the summary says what the round said (one that does not is replaced: test_grounding.py)
    provider = ScriptedProvider([text("TYPE: decision\n存储：建议用 SQLite。")])
    rec = await mm.write_round_summary(
        provider,
        user="我们用什么存储？",
        assistant="建议 SQLite。",
        session_id="s1",
        round_id="r1",
        focus="架构决策",
    )
    assert rec is not None and rec.summary_type == "decision" and rec.round_id == "r1"
    assert "架构决策" in provider.requests[0].messages[0].content
    await mm.write(NewMemory("tone", source="persona"))
    hits = await mm.search("SQLite")
    assert [h.record.id for h in hits] == [rec.id]
    assert next(a.memory_id for a in added) == rec.id and recalled[-1].count == 1
    snap = await mm.snapshot()
    assert snap.to_dict() == {"total": 2, "by_source": {"persona": 1, "round_summary": 1}}
    empty = await mm.write_round_summary(
        ScriptedProvider([text("TYPE: fact\n")]),
        user="q",
        assistant="a",
        session_id=None,
        round_id=None,
    )
    assert empty is None


def test_a_question_is_searched_by_its_content_words_and_their_stems() -> None:
    """The LoCoMo levers (bench/bench_recall.py): function words are left out of a query that
    has other words (kept when it has nothing else), and a word whose English stem of four or
    more letters is a prefix of it matches the words that start with the stem."""
    from memora.memory.keywords import query_terms

    terms = query_terms("When did Melanie run the charity race?")
    assert [(t.text, t.prefix) for t in terms] == [
        ("melani", True),
        ("run", False),  # a three-letter stem: the word itself
        ("charity", False),  # its stem "chariti" is no prefix of it
        ("race", True),
    ]
    assert [t.text for t in query_terms("who")] == ["who"]
    assert [t.text for t in query_terms("What did 长期记忆 say?")] == ["长期记忆", "say"]


async def test_a_stem_finds_the_other_forms_of_a_word_on_every_backend(tmp_path: Path) -> None:
    from memora.memory import InMemoryStorage, NewMemory
    from memora.memory.sqlite_store import open_sqlite_storage

    for store in (InMemoryStorage(), open_sqlite_storage(tmp_path / "m.db")):
        painted = await store.add(NewMemory("Melanie painted a sunset at the lake"))
        await store.add(NewMemory("Caroline went hiking"))
        hits = await store.search_by_keyword("Does Melanie like painting?")
        assert hits and hits[0].record.id == painted.id, type(store).__name__
        assert await store.search_by_keyword("sql") == []  # short words stay whole
        await store.close()
