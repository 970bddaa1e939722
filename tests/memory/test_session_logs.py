"""Session logs as a user relies on them after a crash or with odd text: nothing is lost that
was written, a damaged line costs only itself, and both session stores answer alike."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import pytest

from memora.errors import ErrorCode, MemoraError
from memora.memory.sessions import InMemorySessionStore, JsonlSessionStore, RoundRecord


def _round(rid: str, user: str = "hi", ended: float = 0.0) -> RoundRecord:
    return RoundRecord(round_id=rid, user=user, assistant="ok", ended_at=ended or time.time())


@pytest.fixture(params=["jsonl", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    return JsonlSessionStore(tmp_path) if request.param == "jsonl" else InMemorySessionStore()


async def test_a_turn_holding_a_lone_surrogate_is_kept_exactly(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    s = await store.create(session_id="s")
    odd = "tool output \ud800 with a lone surrogate, 中文 too"
    plain = {"role": "user", "content": "正常的中文"}
    await store.append_turn(s.id, [plain, {"role": "tool", "content": odd}], _round("r1", odd))
    again = JsonlSessionStore(tmp_path)
    assert [m["content"] for m in await again.messages(s.id)] == ["正常的中文", odd]
    assert [r.user for r in await again.rounds(s.id)] == [odd]
    log = next((tmp_path / "sessions" / "s").glob("*.jsonl")).read_bytes()
    log.decode("utf-8")  # the file stays valid UTF-8 (the odd line is JSON-escaped)
    assert "正常的中文".encode() in log  # a normal line keeps its text readable


async def test_one_corrupt_line_hides_nothing_after_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = JsonlSessionStore(tmp_path)
    s = await store.create(session_id="s")
    await store.append_turn(s.id, [{"role": "user", "content": "one"}], _round("r1"))
    log = next((tmp_path / "sessions" / "s").glob("*.jsonl"))
    with log.open("ab") as fh:
        fh.write(b'{"kind": "round", "round_id": \n')  # damaged in the middle
    await store.append_turn(s.id, [{"role": "user", "content": "two"}], _round("r2"))
    await store.append_turn(s.id, [{"role": "user", "content": "three"}], _round("r3"))
    with caplog.at_level(logging.WARNING, logger="memora.sessions"):
        rounds = await store.rounds(s.id)
    assert [r.round_id for r in rounds] == ["r1", "r2", "r3"]
    assert [m["content"] for m in await store.messages(s.id)] == ["one", "two", "three"]
    assert any("torn or corrupt" in r.getMessage() for r in caplog.records)
    assert (await store.get(s.id)).round_count == 3


async def test_a_crash_before_meta_json_with_a_torn_first_line_still_lists(
    tmp_path: Path,
) -> None:
    """The crash case: a session folder holding only a log whose first line was torn."""
    folder = tmp_path / "sessions" / "crashed"
    folder.mkdir(parents=True)
    (folder / "2026-01-01.jsonl").write_bytes(b'{"kind": "sess')
    store = JsonlSessionStore(tmp_path)
    listed = await store.list()
    assert [i.id for i in listed] == ["crashed"]
    info = await store.get("crashed")
    assert info.round_count == 0 and info.created_at > 0
    await store.append_turn("crashed", [], _round("r1", "after the crash"))
    assert [r.round_id for r in await store.rounds("crashed")] == ["r1"]
    assert (await store.get("crashed")).title == "after the crash"


async def test_a_session_known_only_by_its_log_keeps_its_header(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    s = await store.create(title="kept title", session_id="h")
    await store.append_turn(s.id, [], _round("r1"))
    (tmp_path / "sessions" / "h" / "meta.json").unlink(missing_ok=True)
    info = await JsonlSessionStore(tmp_path).get("h")
    assert info.title == "kept title" and info.created_at == pytest.approx(s.created_at)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("title", 5),
        ("created_at", True),
        ("created_at", "yesterday"),
        ("updated_at", 1e12),
        ("updated_at", float("nan")),
        ("parent_id", 7),
        ("fork_round_id", ["x"]),
        ("archived", "yes"),
    ],
)
async def test_a_meta_field_of_the_wrong_kind_is_named(
    tmp_path: Path, field: str, value: Any
) -> None:
    store = JsonlSessionStore(tmp_path)
    await store.create(session_id="ok")
    await store.append_turn("ok", [], _round("r1"))
    await store.create(session_id="bad")
    await store.append_turn("bad", [], _round("r1"))
    meta = tmp_path / "sessions" / "bad" / "meta.json"
    doc = json.loads(meta.read_text(encoding="utf-8")) if meta.exists() else {"id": "bad"}
    doc[field] = value
    meta.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(MemoraError) as info:
        await store.get("bad")
    assert info.value.code == ErrorCode.STORAGE_ERROR and field in str(info.value)
    assert [i.id for i in await store.list()] == ["ok"]  # the listing survives


async def test_a_torn_last_line_is_closed_before_the_next_append(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    s = await store.create(session_id="t")
    await store.append_turn(s.id, [], _round("r1"))
    log = next((tmp_path / "sessions" / "t").glob("*.jsonl"))
    with log.open("ab") as fh:
        fh.write(b'{"kind": "round", "round_id": "torn"')  # killed mid-write
    await store.append_turn(s.id, [], _round("r2"))
    assert [r.round_id for r in await store.rounds(s.id)] == ["r1", "r2"]
    assert log.read_bytes().endswith(b"\n")


async def test_the_round_index_follows_the_log(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    s = await store.create(session_id="i")
    for n in range(3):
        await store.append_turn(s.id, [], _round(f"r{n}", f"question {n}", ended=1000.0 + n))
    assert (await store.get(s.id)).round_count == 3
    index = tmp_path / "sessions" / "i" / "index.json"
    assert index.is_file()
    await store.append_turn(s.id, [], _round("r3", ended=2000.0))
    info = await store.get(s.id)
    assert info.round_count == 4 and info.updated_at >= 2000.0
    index.write_text(json.dumps({"x.jsonl": {"size": -1}}), encoding="utf-8")
    assert (await JsonlSessionStore(tmp_path).get(s.id)).round_count == 4
    log = next((tmp_path / "sessions" / "i").glob("*.jsonl"))
    entry = {log.name: {"size": 10**9, "rounds": 99, "first_user": None, "last_ended": 0.0}}
    index.write_text(json.dumps(entry), encoding="utf-8")  # claims more than the file holds
    assert (await JsonlSessionStore(tmp_path).get(s.id)).round_count == 4


async def test_both_stores_answer_alike(store: Any) -> None:
    await store.create(session_id="a")
    assert await store.exists("a") and not await store.exists("b")
    assert await store.messages("a") == [] and await store.rounds("a") == []
    assert [i.id for i in await store.list()] == ["a"]
    with pytest.raises(MemoraError) as info:
        await store.create(session_id="a")
    assert info.value.code == ErrorCode.INVALID_INPUT
    await store.append_messages("a", [])  # nothing to add: no error
    await store.append_turn(
        "a",
        [{"role": "user", "content": "first question\nmore"}],
        _round("r1", "first question\nmore", 100.0),
    )
    await store.append_turn(
        "a", [{"role": "user", "content": "second"}], _round("r2", "second", 200.0)
    )
    await store.append_round("a", _round("r3", "third", 300.0))
    info = await store.get("a")
    assert info.round_count == 3 and info.title == "first question"
    assert info.updated_at >= 300.0
    fork, copied = await store.fork("a", "r2")
    assert copied == 2 and fork.parent_id == "a" and fork.fork_round_id == "r2"
    assert fork.title == "first question (fork)"
    assert [r.round_id for r in await store.rounds(fork.id)] == ["r1", "r2"]
    assert [m["content"] for m in await store.messages(fork.id)] == [
        "first question\nmore",
        "second",
    ]
    whole, copied = await store.fork("a", title="all of it")
    assert copied == 3 and whole.title == "all of it"
    with pytest.raises(MemoraError) as info:
        await store.fork("a", "r9")
    assert info.value.code == ErrorCode.NOT_FOUND
    archived = await store.archive("a")
    assert archived.archived
    assert "a" not in [i.id for i in await store.list()]
    assert "a" in [i.id for i in await store.list(include_archived=True)]
    assert not (await store.archive("a", False)).archived
    ordered = [i.id for i in await store.list()]
    assert ordered[0] == "a"  # the most recently updated first
    with pytest.raises(MemoraError) as info:
        await store.get("nope")
    assert info.value.code == ErrorCode.NOT_FOUND


async def test_a_log_file_in_another_name_is_not_a_session(tmp_path: Path) -> None:
    (tmp_path / "sessions" / "junk").mkdir(parents=True)
    (tmp_path / "sessions" / "junk" / "notes.txt").write_text("x", encoding="utf-8")
    store = JsonlSessionStore(tmp_path)
    assert await store.list() == []
    assert not await store.exists("junk")
    os.makedirs(tmp_path / "sessions" / "real")
    (tmp_path / "sessions" / "real" / "2026-01-02.jsonl").write_text("", encoding="utf-8")
    assert [i.id for i in await store.list()] == ["real"]


async def test_a_session_spanning_days_reads_back_in_order(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    s = await store.create(session_id="days")
    await store.append_turn(s.id, [{"role": "user", "content": "today"}], _round("r2"))
    folder = tmp_path / "sessions" / "days"
    older = {"kind": "round", "round_id": "r1", "user": "yesterday", "ended_at": 1.0}
    message = {"kind": "message", "role": "user", "content": "yesterday"}
    (folder / "2000-01-01.jsonl").write_text(
        json.dumps(message) + "\n" + json.dumps(older) + "\n", encoding="utf-8"
    )
    again = JsonlSessionStore(tmp_path)
    assert [r.round_id for r in await again.rounds("days")] == ["r1", "r2"]
    assert [m["content"] for m in await again.messages("days")] == ["yesterday", "today"]
    assert (await again.get("days")).round_count == 2


async def test_a_left_behind_folder_or_a_removed_sessions_folder_still_takes_turns(
    tmp_path: Path,
) -> None:
    (tmp_path / "sessions" / "kept").mkdir(parents=True)  # an empty folder from before
    store = JsonlSessionStore(tmp_path)
    await store.create(session_id="kept")
    await store.append_turn("kept", [], _round("r1"))
    assert [r.round_id for r in await store.rounds("kept")] == ["r1"]
    import shutil

    shutil.rmtree(tmp_path / "sessions")  # removed while the store is in use
    s = await store.create()
    await store.append_turn(s.id, [], _round("r9"))
    assert [r.round_id for r in await JsonlSessionStore(tmp_path).rounds(s.id)] == ["r9"]


async def test_a_fork_is_named_after_its_source(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    long_id = "s" * 128
    await store.create(title="Plan", session_id=long_id)
    await store.append_turn(long_id, [], _round("r1"))
    fork, copied = await store.fork(long_id)
    assert copied == 1 and fork.title == "Plan (fork)" and fork.parent_id == long_id
    assert fork.id.startswith("s" * 100 + "-fork-") and len(fork.id) <= 128
    assert fork.round_count == 1 and (await store.get(fork.id)).round_count == 1
    assert [r.round_id for r in await store.rounds(fork.id)] == ["r1"]
    with pytest.raises(MemoraError) as info:
        await store.get(5)  # type: ignore[arg-type]
    assert info.value.code == ErrorCode.INVALID_INPUT


async def test_an_unwritten_session_is_known_but_holds_nothing(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    s = await store.create(title="fresh", session_id="fresh")
    assert await store.exists("fresh") and (await store.get("fresh")).title == "fresh"
    assert not (tmp_path / "sessions" / "fresh").exists()  # nothing on disk before a turn
    assert await store.messages("fresh") == [] and await store.rounds("fresh") == []
    assert [i.id for i in await store.list()] == [s.id]
    await store.append_messages("fresh", [{"role": "system", "content": "note"}])
    assert (tmp_path / "sessions" / "fresh").is_dir()
    again = JsonlSessionStore(tmp_path)
    assert (await again.get("fresh")).title == "fresh"
    assert [m["content"] for m in await again.messages("fresh")] == ["note"]
