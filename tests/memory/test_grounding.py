"""A memory never says what the round did not (issue #39, item 1): a round summary is checked
against its round before it is stored; one that fails is replaced by an extractive summary of
the round; one that passes keeps the user's request; a memory's name is cut at a word boundary.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memora.events import EventEmitter
from memora.memory import MemoryManager
from memora.memory.grounding import (
    extractive_summary,
    grounded,
    grounding,
    short_name,
    with_request,
)
from memora.memory.simple_backends import InMemoryStorage
from memora.testing import ScriptedProvider, text

USER = "In two sentences: why should a notes app store data in SQLite instead of one JSON file?"
ANSWER = (
    "SQLite gives atomic writes and crash safety, so a note is never half-saved. "
    "It also lets you search notes with indexes instead of loading one big JSON file. "
    "Backups are one file either way."
)


async def _stored(summary: str, user: str = USER, answer: str = ANSWER) -> object:
    manager = MemoryManager(InMemoryStorage(), EventEmitter())
    record = await manager.write_round_summary(
        ScriptedProvider([text(summary)]),
        user=user,
        assistant=answer,
        session_id="s",
        round_id="r1",
        verbatim_tokens=0,
    )
    assert record is not None
    return record, manager


async def test_the_invented_conversation_is_never_stored() -> None:
    """What `make demo` stored before: the bundled model's summary of another conversation."""
    record, manager = await _stored(
        "TYPE: fact\nUser: What is the difference between a JSON file and XML?"
    )
    assert "XML" not in record.content  # type: ignore[attr-defined]
    assert "SQLite" in record.content and "atomic writes" in record.content  # type: ignore[attr-defined]
    assert record.meta["written"] == "extractive"  # type: ignore[attr-defined]
    assert record.meta["grounding"] < 0.7  # type: ignore[attr-defined]
    hits = await manager.search("SQLite")  # type: ignore[attr-defined]
    assert [h.record.round_id for h in hits] == ["r1"]
    # the name keeps its words whole: never "…store data in SQLit"
    name = record.name  # type: ignore[attr-defined]
    assert len(name) <= 60 and not name.rstrip("…").endswith("SQLit")
    assert all(word in USER for word in name.rstrip("…").split())


async def test_a_grounded_summary_is_kept_with_the_request() -> None:
    summary = "TYPE: decision\nSQLite gives atomic writes, crash safety and indexes; one JSON file does not."
    record, manager = await _stored(summary)
    content = record.content  # type: ignore[attr-defined]
    assert record.meta["written"] == "model"  # type: ignore[attr-defined]
    assert record.summary_type == "decision"  # type: ignore[attr-defined]
    assert "SQLite gives atomic writes" in content
    assert content.startswith("User: In two sentences")  # the request's words are in it
    assert [h.record.round_id for h in await manager.search("notes app")] == ["r1"]  # type: ignore[attr-defined]


async def test_a_question_the_user_never_asked_is_refused() -> None:
    """`make demo`'s case: the answer talked about JSON and XML, so every word of the summary
    is in the round — but it puts a question in the user's mouth the user never asked."""
    answer = "The main difference between SQLite and JSON: JSON is a lighter alternative to XML."
    record, _ = await _stored(
        "TYPE: general\nUser: What is the difference between a JSON file and XML?", answer=answer
    )
    assert record.meta["written"] == "extractive"  # type: ignore[attr-defined]
    assert "What is the difference" not in record.content  # type: ignore[attr-defined]


async def test_an_invented_number_is_refused() -> None:
    record, _ = await _stored("TYPE: fact\nSQLite is 40 times faster than one JSON file for notes.")
    assert record.meta["written"] == "extractive"  # type: ignore[attr-defined]
    assert "40" not in record.content  # type: ignore[attr-defined]


async def test_chinese_rounds_are_checked_the_same_way() -> None:
    user = "我们的笔记应用应该用 SQLite 还是一个 JSON 文件来存储数据？"
    answer = "建议使用 SQLite：写入是原子的，崩溃也不会丢数据，还能用索引搜索笔记。"
    kept, _ = await _stored(
        "TYPE: decision\n建议使用 SQLite 存储数据：写入原子，能用索引搜索笔记。", user, answer
    )
    assert kept.meta["written"] == "model"  # type: ignore[attr-defined]
    made_up, _ = await _stored("TYPE: fact\n用户喜欢红色的汽车和周末去海边旅行。", user, answer)
    assert made_up.meta["written"] == "extractive"  # type: ignore[attr-defined]
    assert "汽车" not in made_up.content and "SQLite" in made_up.content  # type: ignore[attr-defined]


def test_the_rule_and_its_parts() -> None:
    round_text = f"{USER}\n{ANSWER}"
    assert grounding("", round_text) == 1.0
    assert grounded("The user asked why SQLite; the assistant explained atomic writes.", round_text)
    assert not grounded("   ", round_text)
    # speech verbs and contractions make no claim; invented content words do
    assert grounding("She said it's what they've discussed: SQLite.", round_text) == 1.0
    assert grounding("SQLite makes gardening relaxing.", round_text) < 0.7
    summary = extractive_summary(USER, ANSWER, ["read_file notes.json"], max_chars=300)
    assert summary.startswith("User: In two sentences") and "Tools used: read_file" in summary
    assert len(summary) <= 300 + 60
    # a summary that already holds every word of the request is stored as written
    assert with_request(f"Asked: {USER} Answer: SQLite.", USER).count("User:") == 0
    assert with_request("SQLite.", USER).startswith("User: In two sentences")


@pytest.mark.parametrize(
    ("text_", "limit", "expected"),
    [
        ("short enough", 60, "short enough"),
        (
            "why should a notes app store data in SQLite instead",
            36,
            "why should a notes app store data…",
        ),
        ("为什么笔记应用应该把数据存在SQLite而不是JSON文件里", 20, "为什么笔记应用应该把数据存在…"),
        ("数据存在SQLite", 11, "数据存在SQLite"),
        ("supercalifragilisticexpialidocious words", 10, "supercali…"),
    ],
)
def test_short_names_keep_words_whole(text_: str, limit: int, expected: str) -> None:
    assert short_name(text_, limit) == expected


@pytest.mark.slow
async def test_the_bundled_model_can_no_longer_write_a_false_memory(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    from memora_plugin_llamacpp import LlamaCppProvider

    provider = LlamaCppProvider()
    try:
        manager = MemoryManager(InMemoryStorage(), EventEmitter())
        record = await manager.write_round_summary(
            provider, user=USER, assistant=ANSWER, session_id="s", round_id="r1", verbatim_tokens=0
        )
    finally:
        await provider.aclose()
    assert record is not None
    assert grounding(record.content, f"{USER}\n{ANSWER}") >= 0.7
    assert [h.record.round_id for h in await manager.search("SQLite")] == ["r1"]


def test_long_words_are_checked_but_not_kept() -> None:
    """A word longer than any English word (a blob a tool returned) is compared as written,
    not stemmed, and not kept: before, each was stemmed (0.3 ms of CPU a thousand letters,
    on the event loop) and stayed in the stem cache, up to 8,192 of them — gigabytes for
    blobs of a megabyte."""
    import string
    import tracemalloc

    letters = string.ascii_lowercase
    words = ["".join(letters[(i >> s) % 26] for s in (0, 5, 10)) + "x" * 50_000 for i in range(100)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for word in words:
            assert grounding(f"{word} harbour", f"the harbour and {word}") == 1.0
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 1_000_000, f"{kept} bytes kept for 100 words of 50,000 letters"
