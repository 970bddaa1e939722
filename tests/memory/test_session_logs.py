"""Session logs as a user relies on them after a crash or with odd text: nothing is lost that
was written, a damaged line costs only itself, and both session stores answer alike."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import shutil
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


async def test_a_session_loads_at_once_as_its_parts_read(store: Any) -> None:
    """``load`` (what an Agent reads when it opens a session) is ``get``, ``messages`` and
    ``rounds`` in one; ``None`` for a session that is not there."""
    assert await store.load("nope") is None
    made = await store.create(session_id="a", title="标题")
    loaded = await store.load("a")  # created, nothing written yet
    assert loaded is not None
    assert (loaded.info.id, loaded.info.title, loaded.messages, loaded.rounds) == (
        "a",
        "标题",
        [],
        [],
    )
    turns = [("first 问题", 100.0), ("second", 200.0)]
    for n, (words, ended) in enumerate(turns):
        await store.append_turn(
            "a",
            [{"role": "user", "content": words}, {"role": "assistant", "content": f"ok {n}"}],
            _round(f"r{n}", words, ended),
        )
    loaded = await store.load("a")
    assert loaded is not None
    assert loaded.info == await store.get("a") and loaded.info.round_count == 2
    assert loaded.info.created_at == made.created_at
    assert loaded.messages == await store.messages("a")
    assert [m["content"] for m in loaded.messages] == ["first 问题", "ok 0", "second", "ok 1"]
    assert [r.to_dict() for r in loaded.rounds] == [r.to_dict() for r in await store.rounds("a")]
    if isinstance(store, JsonlSessionStore):  # an id that is no folder name is refused
        with pytest.raises(MemoraError) as info:
            await store.load("../a")
        assert info.value.code == ErrorCode.INVALID_INPUT


async def test_a_session_created_here_and_written_by_another_process(tmp_path: Path) -> None:
    """Two processes on one folder (a server's workers): a session this store created and
    keeps in memory until its first turn was written by the other — this one reads what was
    written and appends after it, never a second header."""
    here, there = JsonlSessionStore(tmp_path), JsonlSessionStore(tmp_path)
    await here.create(session_id="s", title="made here")
    await there.create(session_id="s", title="made here")  # told of it, it runs the first turn
    await there.append_turn("s", [{"role": "user", "content": "第一"}], _round("r1", "第一"))
    assert [m["content"] for m in await here.messages("s")] == ["第一"]
    assert [r.round_id for r in await here.rounds("s")] == ["r1"]
    assert (await here.get("s")).round_count == 1
    assert [i.round_count for i in await here.list()] == [1]
    await here.append_turn("s", [{"role": "user", "content": "second"}], _round("r2", "second"))
    loaded = await there.load("s")
    assert loaded is not None and [r.round_id for r in loaded.rounds] == ["r1", "r2"]
    log = next((tmp_path / "sessions" / "s").glob("*.jsonl")).read_text(encoding="utf-8")
    assert [json.loads(line)["kind"] for line in log.splitlines()].count("session") == 1


async def test_a_session_read_on_from_its_mark(tmp_path: Path) -> None:
    """``load(after=mark)`` reads only what was written since the mark — by this store or
    another on the same folder, in a new day's log too; a log cut shorter than its mark (or
    gone) is read whole again, and says so (``since`` None)."""
    here, there = JsonlSessionStore(tmp_path), JsonlSessionStore(tmp_path)
    await here.create(session_id="s")
    await here.append_turn("s", [{"role": "user", "content": "一"}], _round("r1", "一", 100.0))
    first = await here.load("s")
    assert first is not None and first.since is None and first.mark is not None
    await there.append_turn("s", [{"role": "user", "content": "二"}], _round("r2", "二", 200.0))
    (tmp_path / "sessions" / "s" / "2099-01-01.jsonl").write_text(
        json.dumps({"kind": "message", "role": "user", "content": "三"}) + "\n",
        encoding="utf-8",
    )
    on = await here.load("s", after=first.mark)
    assert on is not None and on.since is first.mark
    assert [m["content"] for m in on.messages] == ["二", "三"]
    assert [r.round_id for r in on.rounds] == ["r2"]
    whole = await here.load("s")
    assert whole is not None and on.info == whole.info and whole.info.round_count == 2
    assert (await here.load("s", after=on.mark)).messages == []  # type: ignore[union-attr]
    # a log shorter than its mark: read from the start
    log = next(p for p in (tmp_path / "sessions" / "s").glob("*.jsonl") if "2099" not in p.name)
    log.write_bytes(log.read_bytes()[: log.stat().st_size // 2])
    again = await here.load("s", after=on.mark)
    assert again is not None and again.since is None
    assert again.messages[-1]["content"] == "三"


async def test_a_read_during_another_process_append_reads_on_the_whole_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A reader may see part of another process's append (a write is copied into the page
    cache a page at a time).  The unended line is not read, and the mark stops before it, so
    the next read on gets it whole: no line is lost to a read that came too early."""
    here, there = JsonlSessionStore(tmp_path), JsonlSessionStore(tmp_path)
    await here.create(session_id="s")
    await here.append_turn("s", [{"role": "user", "content": "一"}], _round("r1", "一", 100.0))
    log = next((tmp_path / "sessions" / "s").glob("*.jsonl"))
    line = (json.dumps({"kind": "message", "role": "user", "content": "二" * 3000}) + "\n").encode()
    with log.open("ab") as fh:  # another process's append, caught half-way
        fh.write(line[:4096])
    with caplog.at_level(logging.WARNING, logger="memora.sessions"):
        part = await there.load("s")
    assert part is not None and [m["content"] for m in part.messages] == ["一"]
    assert caplog.records == []  # a line being written is not called torn
    with log.open("ab") as fh:
        fh.write(line[4096:])
    on = await there.load("s", after=part.mark)
    assert on is not None and on.since is part.mark
    assert [m["content"] for m in on.messages] == ["二" * 3000]
    # a line torn by a killed writer is closed by the next append, then skipped once
    with log.open("ab") as fh:
        fh.write(b'{"kind": "message", "role": "us')
    torn = await there.load("s", after=on.mark)
    assert torn is not None and torn.messages == []
    await here.append_turn("s", [{"role": "user", "content": "三"}], _round("r3", "三", 300.0))
    with caplog.at_level(logging.WARNING, logger="memora.sessions"):
        last = await there.load("s", after=torn.mark)
    assert last is not None and [m["content"] for m in last.messages] == ["三"]
    assert len(caplog.records) == 1 and "torn or corrupt" in caplog.records[0].getMessage()
    whole = await there.load("s")
    assert whole is not None and [m["content"] for m in whole.messages] == ["一", "二" * 3000, "三"]


async def test_a_log_file_in_another_name_is_not_a_session(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "sessions" / "junk").mkdir(parents=True)
    (tmp_path / "sessions" / "junk" / "notes.txt").write_text("x", encoding="utf-8")
    store = JsonlSessionStore(tmp_path)
    with caplog.at_level(logging.WARNING, logger="memora.sessions"):
        assert await store.list() == []
    assert caplog.records == []  # not a session, and not a damaged one either
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
    shutil.rmtree(tmp_path / "sessions")  # removed while the store is in use
    s = await store.create()
    await store.append_turn(s.id, [], _round("r9"))
    assert [r.round_id for r in await JsonlSessionStore(tmp_path).rounds(s.id)] == ["r9"]


async def test_a_session_removed_by_hand_after_its_turns_is_not_found_not_recreated(
    tmp_path: Path,
) -> None:
    store = JsonlSessionStore(tmp_path)
    s = await store.create()
    await store.append_turn(s.id, [], _round("r1"))
    await store.append_turn(s.id, [], _round("r2"))  # the store has found it on disk by now
    shutil.rmtree(tmp_path / "sessions" / s.id)
    with pytest.raises(MemoraError) as caught:
        await store.append_turn(s.id, [], _round("r3"))
    assert caught.value.code == ErrorCode.NOT_FOUND
    assert not (tmp_path / "sessions" / s.id).exists()  # nothing half-made in its place
    with pytest.raises(MemoraError):
        await store.append_turn(s.id, [], _round("r4"))  # still not found on the next try


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


async def test_the_most_recently_active_session_is_listed_first(store: Any) -> None:
    await store.create(session_id="older")
    await store.create(session_id="newer")
    await store.append_turn("older", [], _round("r1", "back to it", ended=time.time() + 100))
    assert [i.id for i in await store.list()] == ["older", "newer"]
    assert (await store.get("older")).updated_at >= time.time() + 99
    await store.append_turn("newer", [], _round("r1", "and this", ended=time.time() + 200))
    assert [i.id for i in await store.list()] == ["newer", "older"]


async def test_an_unknown_session_is_not_found_everywhere(store: Any) -> None:
    for call in (
        store.messages("nope"),
        store.rounds("nope"),
        store.append_messages("nope", [{"role": "user", "content": "x"}]),
        store.append_turn("nope", [], _round("r1")),
        store.archive("nope"),
        store.fork("nope"),
    ):
        with pytest.raises(MemoraError) as info:
            await call
        assert info.value.code == ErrorCode.NOT_FOUND


async def test_titles_ids_and_counts_as_documented(store: Any) -> None:
    import re

    from memora.memory.sessions import new_session_id

    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{8}", new_session_id())
    fresh = await store.create()
    assert fresh.round_count == 0 and re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{8}", fresh.id)
    long_question = "q" * 100
    await store.append_turn(fresh.id, [], _round("r1", long_question))
    assert (await store.get(fresh.id)).title == "q" * 80
    await store.create(title="t" * 1500, session_id="titled")
    await store.append_turn("titled", [], _round("r1"))
    if isinstance(store, JsonlSessionStore):  # what meta.json gives back is capped
        assert (await JsonlSessionStore(store.root.parent).get("titled")).title == "t" * 1000


async def test_an_empty_append_writes_nothing(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    await store.create(session_id="quiet")
    await store.append_messages("quiet", [])
    assert not (tmp_path / "sessions" / "quiet").exists()


async def test_odd_lines_of_a_log_cost_only_themselves(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = JsonlSessionStore(tmp_path)
    await store.create(session_id="odd")
    await store.append_turn("odd", [], _round("r1"))
    log = next((tmp_path / "sessions" / "odd").glob("*.jsonl"))
    with log.open("ab") as fh:
        fh.write(b"\n   \n")  # blank lines: nothing to report
        fh.write(json.dumps({"kind": "round", "user": "no id"}).encode() + b"\n")
        fh.write(
            json.dumps({"kind": "round", "round_id": "bad", "started_at": "x"}).encode() + b"\n"
        )
        fh.write(
            json.dumps({"kind": "round", "round_id": "r2", "user": "no times"}).encode() + b"\n"
        )
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="memora.sessions"):
        rounds = await store.rounds("odd")
    assert [r.round_id for r in rounds] == ["r1", "r2"]
    assert rounds[1].ended_at == 0.0 and rounds[1].started_at == 0.0
    warnings = [r.getMessage() for r in caplog.records]
    assert not any("torn or corrupt" in w for w in warnings)  # blank lines are not damage
    assert any("malformed round skipped" in w for w in warnings)
    assert (await store.get("odd")).round_count == 4  # the index counts round lines


@pytest.mark.parametrize(
    "broken",
    [
        {"size": -1},
        {"rounds": -5},
        {"rounds": True},
        {"size": 1.5},
        {"first_user": 7},
        {"last_ended": float("nan")},
        {"last_ended": "later"},
    ],
)
async def test_a_damaged_index_entry_is_rebuilt_not_trusted(
    tmp_path: Path, broken: dict[str, Any]
) -> None:
    store = JsonlSessionStore(tmp_path)
    await store.create(session_id="ix")
    await store.append_turn("ix", [], _round("r1", ended=1000.0))
    folder = tmp_path / "sessions" / "ix"
    log = next(folder.glob("*.jsonl"))
    entry = {"size": log.stat().st_size, "rounds": 1, "first_user": "hi", "last_ended": 1000.0}
    entry.update(broken)
    (folder / "index.json").write_text(json.dumps({log.name: entry}), encoding="utf-8")
    info = await JsonlSessionStore(tmp_path).get("ix")
    assert info.round_count == 1 and info.title == "hi"


async def test_an_index_of_the_wrong_shape_or_a_broken_meta_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = JsonlSessionStore(tmp_path)
    await store.create(session_id="m")
    await store.append_turn("m", [], _round("r1"))
    folder = tmp_path / "sessions" / "m"
    (folder / "index.json").write_text("[1, 2]", encoding="utf-8")
    assert (await store.get("m")).round_count == 1
    (folder / "meta.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(MemoraError) as info:
        await store.get("m")
    assert info.value.code == ErrorCode.STORAGE_ERROR and "meta.json" in str(info.value)
    with caplog.at_level(logging.WARNING, logger="memora.sessions"):
        assert await store.list() == []
    assert any("session m skipped" in r.getMessage() for r in caplog.records)


async def test_a_log_only_session_is_read_from_its_first_day(tmp_path: Path) -> None:
    folder = tmp_path / "sessions" / "lo"
    folder.mkdir(parents=True)
    head = {"kind": "session", "id": "lo", "title": "from the header", "created_at": 5.0}
    (folder / "2000-01-01.jsonl").write_text(json.dumps(head) + "\n", encoding="utf-8")
    (folder / "2000-01-02.jsonl").write_text(
        json.dumps({"kind": "round", "round_id": "r1", "user": "u", "ended_at": 6.0}) + "\n",
        encoding="utf-8",
    )
    info = await JsonlSessionStore(tmp_path).get("lo")
    assert info.title == "from the header" and info.created_at == 5.0
    bad = dict(head, title=5)
    (folder / "2000-01-01.jsonl").write_text(json.dumps(bad) + "\n", encoding="utf-8")
    with pytest.raises(MemoraError) as err:
        await JsonlSessionStore(tmp_path).get("lo")
    assert "2000-01-01.jsonl" in str(err.value) and "title" in str(err.value)


def _record_fsyncs(monkeypatch: pytest.MonkeyPatch, note: Any) -> list[Any]:
    """Every fsync, noted by ``note(fd)``."""
    synced: list[Any] = []
    real_fsync = os.fsync

    def recording(fd: int) -> None:
        synced.append(note(fd))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording)
    return synced


async def test_appends_are_synced_and_leak_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonlSessionStore(tmp_path)
    await store.create(session_id="d")
    await store.append_turn("d", [], _round("r0"))
    synced = _record_fsyncs(monkeypatch, lambda fd: os.fstat(fd).st_size)
    log = next((tmp_path / "sessions" / "d").glob("*.jsonl"))
    await store.append_turn("d", [], _round("r1"))
    assert log.stat().st_size in synced  # the turn is on disk before append_turn returns
    synced.clear()
    await store.archive("d")
    assert synced  # meta.json too
    monkeypatch.undo()
    fds = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    for n in range(100):
        await store.append_turn("d", [], _round(f"x{n}"))
    if fds is not None:
        assert len(os.listdir("/proc/self/fd")) <= fds
    fork, _ = await store.fork("d")
    mode = (tmp_path / "sessions" / fork.id).stat().st_mode
    assert mode & 0o077 == 0  # a fork's folder is private like any session's


async def test_a_new_log_is_durable_by_name_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first turn of a session creates its folder and log: the log's data and its name
    in the folder are both fsynced before append_turn returns (later appends sync the file
    alone)."""
    store = JsonlSessionStore(tmp_path)
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc to name a descriptor")
    synced = _record_fsyncs(monkeypatch, lambda fd: os.readlink(f"/proc/self/fd/{fd}"))
    await store.create(session_id="new")
    await store.append_turn("new", [], _round("r1"))
    folder = tmp_path / "sessions" / "new"
    log = next(folder.glob("*.jsonl"))
    assert synced[-2:] == [str(log), str(folder)]
    synced.clear()
    await store.append_turn("new", [], _round("r2"))
    assert synced == [str(log)]


async def test_a_bare_json_value_in_a_log_is_skipped(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    await store.create(session_id="bare")
    await store.append_turn("bare", [], _round("r1"))
    log = next((tmp_path / "sessions" / "bare").glob("*.jsonl"))
    with log.open("ab") as fh:
        fh.write(b'"a string that says round"\n[1, "round"]\n')
    again = JsonlSessionStore(tmp_path)
    assert (await again.get("bare")).round_count == 1
    assert [r.round_id for r in await again.rounds("bare")] == ["r1"]


async def test_concurrent_appends_land_whole_and_keep_no_lock_per_session(
    tmp_path: Path,
) -> None:
    store = JsonlSessionStore(tmp_path)
    await store.create(session_id="busy")

    async def turn(n: int) -> None:
        await store.append_turn("busy", [{"role": "user", "content": f"m{n}"}], _round(f"r{n}"))

    await asyncio.gather(*(turn(n) for n in range(20)))  # one session, twenty at once
    rounds = await store.rounds("busy")
    assert sorted(r.round_id for r in rounds) == sorted(f"r{n}" for n in range(20))
    # each turn's message and round are together: appends never interleave
    lines = [
        json.loads(x)
        for p in (tmp_path / "sessions" / "busy").glob("*.jsonl")
        for x in p.read_text(encoding="utf-8").splitlines()
    ]
    order = [x.get("content") or x.get("round_id") for x in lines if x["kind"] != "session"]
    assert all(order[i][1:] == order[i + 1][1:] for i in range(0, len(order), 2))

    # a waiter cancelled while another append holds the session leaves it usable
    first = asyncio.ensure_future(turn(100))
    waiting = asyncio.ensure_future(turn(101))
    await asyncio.sleep(0)
    waiting.cancel()
    await first
    await turn(102)
    assert {"r100", "r102"} <= {r.round_id for r in await store.rounds("busy")}

    # a long-running process meets many sessions: no lock stays behind for each one
    def locks() -> int:
        gc.collect()
        return sum(1 for o in gc.get_objects() if isinstance(o, asyncio.Lock))

    before = locks()
    for n in range(200):
        info = await store.create()
        await store.append_turn(info.id, [], _round(f"s{n}"))
    assert locks() - before < 10
