from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memora.errors import ErrorCode, MemoraError
from memora.memory import JsonlSessionStore, RoundRecord
from memora.security.lock import ProjectLock


async def test_session_lifecycle(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    s = await store.create()
    await store.append_messages(
        s.id, [{"role": "user", "content": "你好"}, {"role": "assistant", "content": "hi"}]
    )
    for i in range(3):
        await store.append_round(
            s.id,
            RoundRecord(
                f"r{i}",
                f"question {i}",
                f"answer {i}",
                events=[{"type": "tool_start", "name": "read_file"}],
            ),
        )
    info = await store.get(s.id)
    assert info.round_count == 3 and info.title == "question 0"
    assert [m["content"] for m in await store.messages(s.id)] == ["你好", "hi"]
    rounds = await store.rounds(s.id)
    assert [r.round_id for r in rounds] == ["r0", "r1", "r2"]
    assert rounds[0].events == [{"type": "tool_start", "name": "read_file"}]
    files = list((tmp_path / "sessions" / s.id).glob("*.jsonl"))
    assert len(files) == 1 and len(files[0].stem) == 10  # YYYY-MM-DD


async def test_torn_last_line_is_ignored_and_appends_continue(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    s = await store.create()
    await store.append_round(s.id, RoundRecord("r0", "q", "a"))
    day = next((tmp_path / "sessions" / s.id).glob("*.jsonl"))
    with day.open("ab") as fh:
        fh.write(b'{"kind": "round", "round_id": "r1", "user": "cut mid')  # crash mid-write
    assert [r.round_id for r in await store.rounds(s.id)] == ["r0"]
    await store.append_round(s.id, RoundRecord("r2", "q2", "a2"))
    assert [r.round_id for r in await store.rounds(s.id)] == ["r0", "r2"]


async def test_fork_copies_rounds_up_to_a_point(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    s = await store.create(title="main")
    for i in range(4):
        await store.append_round(s.id, RoundRecord(f"r{i}", f"q{i}", f"a{i}"))
    fork, count = await store.fork(s.id, "r1")
    assert count == 2 and fork.parent_id == s.id and fork.fork_round_id == "r1"
    assert [r.round_id for r in await store.rounds(fork.id)] == ["r0", "r1"]
    assert len(await store.rounds(s.id)) == 4
    with pytest.raises(MemoraError) as info:
        await store.fork(s.id, "nope")
    assert info.value.code == ErrorCode.NOT_FOUND


async def test_list_archive_and_bad_ids(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    a = await store.create(session_id="a")
    await store.create(session_id="b")
    await store.archive(a.id)
    assert [i.id for i in await store.list()] == ["b"]
    assert {i.id for i in await store.list(include_archived=True)} == {"a", "b"}
    for bad in ("../escape", "a/b", "..", "x" * 200):
        with pytest.raises(MemoraError) as info:
            await store.create(session_id=bad)
        assert info.value.code == ErrorCode.INVALID_INPUT and "letters, digits" in str(info.value)
    with pytest.raises(MemoraError) as info:
        await store.rounds("missing")
    assert info.value.code == ErrorCode.NOT_FOUND and "missing" in str(info.value)


def test_project_lock_second_holder_gets_clear_error(tmp_path: Path) -> None:
    first = ProjectLock(tmp_path)
    first.acquire()
    try:
        with pytest.raises(MemoraError) as info:
            ProjectLock(tmp_path).acquire()
        assert info.value.code == ErrorCode.PROJECT_LOCKED
        assert f"PID {os.getpid()}" in str(info.value) and "since" in str(info.value)
    finally:
        first.release()
    with ProjectLock(tmp_path):  # free again
        pass


def test_lock_held_by_other_process_and_stale_takeover(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import sys, time
        from memora.security.lock import ProjectLock
        lock = ProjectLock(sys.argv[1])
        lock.acquire()
        print("locked", flush=True)
        time.sleep(120)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        with pytest.raises(MemoraError, match=f"PID {proc.pid}"):
            ProjectLock(tmp_path).acquire()
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    lock = ProjectLock(tmp_path)
    lock.acquire()  # the dead holder's lock is taken over
    assert lock.holder() is not None and lock.holder()["pid"] == os.getpid()  # type: ignore[index]
    lock.release()


@pytest.mark.parametrize(
    "content",
    [
        '{"pid": 1, "host": "h", "since": 1e308}',
        '{"pid": 1, "host": "h", "since": NaN}',
        '{"pid": ["x"], "host": {"a": 1}, "since": "yesterday"}',
        '{"pid": "' + "9" * 100_000 + '", "host": "h"}',
        "[1, 2, 3]",
        "not json at all",
    ],
    ids=["huge-since", "nan-since", "wrong-types", "huge-pid", "a-list", "not-json"],
)
def test_hostile_lock_file_gives_the_documented_error(tmp_path: Path, content: str) -> None:
    holder = ProjectLock(tmp_path)
    holder.acquire()
    try:
        holder.path.write_text(content, encoding="utf-8")
        with pytest.raises(MemoraError) as info:
            ProjectLock(tmp_path).acquire()
        assert info.value.code == ErrorCode.PROJECT_LOCKED
        assert len(str(info.value)) < 500
    finally:
        holder.release()


@pytest.mark.parametrize(
    "meta",
    [
        {"id": "x", "created_at": "yesterday"},
        {"id": "x", "updated_at": float("inf")},
        {"id": "x", "title": ["a"]},
        {"id": "x", "archived": "yes"},
        [1, 2],
    ],
    ids=["string-time", "inf-time", "list-title", "string-archived", "a-list"],
)
async def test_hostile_session_meta_is_a_clear_error_and_listing_survives(
    tmp_path: Path, meta: object
) -> None:
    import json

    store = JsonlSessionStore(tmp_path)
    good = await store.create(title="fine")
    bad = await store.create()
    for s in (good, bad):  # a session reaches the disk with its first turn
        await store.append_round(s.id, RoundRecord("r0", "q", "a"))
    (tmp_path / "sessions" / bad.id / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    with pytest.raises(MemoraError) as info:
        await store.get(bad.id)
    assert info.value.code == ErrorCode.STORAGE_ERROR and "meta.json is corrupt" in str(info.value)
    assert [i.id for i in await store.list()] == [good.id]


async def test_hostile_index_cache_is_rebuilt(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    s = await store.create()
    await store.append_round(s.id, RoundRecord("r0", "q", "a"))
    index = tmp_path / "sessions" / s.id / "index.json"
    (log,) = (tmp_path / "sessions" / s.id).glob("*.jsonl")
    import json

    index.write_text(
        json.dumps({log.name: {"size": log.stat().st_size, "rounds": "many", "last_ended": 1}})
    )
    assert (await store.get(s.id)).round_count == 1


async def test_a_new_session_reaches_the_disk_with_its_first_turn(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    s = await store.create(title="plans")
    folder = tmp_path / "sessions" / s.id
    # nothing written yet, but this store knows the session
    assert not folder.exists()
    assert await store.exists(s.id)
    assert (await store.get(s.id)).title == "plans"
    assert [i.id for i in await store.list()] == [s.id]
    assert await store.messages(s.id) == [] and await store.rounds(s.id) == []
    with pytest.raises(MemoraError, match="already exists"):
        await store.create(session_id=s.id)
    # another process does not see an empty session ...
    assert not await JsonlSessionStore(tmp_path).exists(s.id)
    await store.append_turn(s.id, [{"role": "user", "content": "q"}], RoundRecord("r0", "q", "a"))
    # ... and sees it, with what the host set, from its first turn on
    other = JsonlSessionStore(tmp_path)
    info = await other.get(s.id)
    assert (info.title, info.round_count, info.created_at) == ("plans", 1, s.created_at)
    assert await other.messages(s.id) == [{"role": "user", "content": "q"}]
    assert [i.id for i in await store.list()] == [s.id]  # listed once


async def test_archiving_or_forking_an_empty_session_works(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    s = await store.create(title="empty")
    assert (await store.archive(s.id)).archived
    assert (await JsonlSessionStore(tmp_path).get(s.id)).archived  # written by the archive
    t = await store.create()
    fork, rounds = await store.fork(t.id)
    assert rounds == 0 and (await store.get(fork.id)).parent_id == t.id


async def test_a_session_line_leads_the_log_and_meta_json_wins_after_a_change(
    tmp_path: Path,
) -> None:
    import json

    store = JsonlSessionStore(tmp_path)
    s = await store.create(title="first title")
    await store.append_round(s.id, RoundRecord("r0", "q", "a"))
    folder = tmp_path / "sessions" / s.id
    (log,) = folder.glob("*.jsonl")
    head = json.loads(log.read_text(encoding="utf-8").splitlines()[0])
    assert head["kind"] == "session" and head["title"] == "first title"
    assert not (folder / "meta.json").exists()
    await store.archive(s.id)
    assert (folder / "meta.json").exists()
    info = await JsonlSessionStore(tmp_path).get(s.id)
    assert info.archived and info.title == "first title" and info.round_count == 1
    fork, rounds = await store.fork(s.id)
    (fork_log,) = (tmp_path / "sessions" / fork.id).glob("*.jsonl")
    kinds = [json.loads(x)["kind"] for x in fork_log.read_text(encoding="utf-8").splitlines()]
    assert rounds == 1 and kinds == ["round"]  # the source's session line is not copied
    assert (await store.get(fork.id)).parent_id == s.id


async def test_a_session_known_only_by_its_log_is_not_created_again(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    s = await store.create(session_id="kept")
    await store.append_round(s.id, RoundRecord("r0", "q", "a"))
    (log,) = (tmp_path / "sessions" / "kept").glob("*.jsonl")
    log.write_text(log.read_text(encoding="utf-8").split("\n", 1)[1])  # no session line either
    other = JsonlSessionStore(tmp_path)
    with pytest.raises(MemoraError, match="already exists"):
        await other.create(session_id="kept")
    assert (await other.get("kept")).round_count == 1
