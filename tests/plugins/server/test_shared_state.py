"""The files the workers of `memora serve --workers N` share: a turn followed from its file
(lines arriving in pieces, the end marker, a writer that died), the session lock released with
its holder, names that could leave the folder refused, private files."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memora_plugin_server.shared import FLUSH_SECONDS, KEPT_TURNS, FileSharedState


async def test_a_turn_is_followed_from_its_file(tmp_path: Path) -> None:
    state = FileSharedState(tmp_path)
    lease = await state.try_lock("s1")
    assert lease is not None and await state.try_lock("s1") is None
    assert await state.alive("s1")
    writer = await state.writer("s1", "t_1")
    got: list[tuple[int, str]] = []

    async def follow() -> None:
        async for item in state.follow("s1", "t_1", after=1):
            got.append(item)

    task = asyncio.create_task(follow())
    writer.add('{"type": "text", "content": "a"}')
    writer.add('{"type": "text", "content": "你好"}')
    await asyncio.sleep(0.2)
    assert got == [(2, '{"type": "text", "content": "你好"}')]  # after=1 skips the first
    writer.add('{"type": "done"}')
    await writer.end()
    await lease.release()
    await asyncio.wait_for(task, 5)
    assert [seq for seq, _ in got] == [2, 3]
    assert await state.current_turn("s1") is None and not await state.alive("s1")


async def test_a_dead_writer_ends_its_followers(tmp_path: Path) -> None:
    state = FileSharedState(tmp_path)
    code = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from memora_plugin_server.shared import FileSharedState
        state = FileSharedState(Path({str(tmp_path)!r}))
        async def main():
            global lease, w
            lease = await state.try_lock("s1")
            w = await state.writer("s1", "t_9")
        import asyncio
        asyncio.run(main())
        w.add('{{"type": "text", "content": "partial"}}')
        print("ready", flush=True)
        time.sleep(60)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    assert await state.current_turn("s1") == "t_9"
    proc.kill()
    proc.wait()
    got = [data async for _, data in state.follow("s1", "t_9")]
    assert '"partial"' in got[0] and '"TURN_LOST"' in got[-1]


async def test_private_files_and_safe_names(tmp_path: Path) -> None:
    state = FileSharedState(tmp_path / "server")
    await state.set_pause("s1", {"state": {}, "doc": {"kind": "approval"}})
    path = tmp_path / "server" / "pauses" / "s1.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "server" / "pauses").st_mode) == 0o700
    assert await state.pause("s1") == {"state": {}, "doc": {"kind": "approval"}}
    await state.set_pause("s1", None)
    assert await state.pause("s1") is None
    for bad in ("../x", "a/b", "", "x" * 300):
        with pytest.raises(ValueError, match="not a safe file name"):
            await state.try_lock(bad)


async def test_old_turns_are_pruned(tmp_path: Path) -> None:
    state = FileSharedState(tmp_path)
    for turn in ("t_old", "t_new"):
        writer = await state.writer("s1", turn)
        writer.add('{"type": "done"}')
        await writer.end()
    old = tmp_path / "turns" / "s1" / "t_old.jsonl"
    os.utime(old, (1, 1))
    assert await state.prune(3600) == 1
    assert not await state.has_turn("s1", "t_old") and await state.has_turn("s1", "t_new")


async def test_a_turns_chunks_are_written_in_batches(tmp_path: Path) -> None:
    """What streams in within FLUSH_SECONDS is one write: a follower on another worker looks
    every POLL_SECONDS anyway, and the end marker follows the last chunk."""
    state = FileSharedState(tmp_path)
    writer = await state.writer("s1", "t_1")
    path = tmp_path / "turns" / "s1" / "t_1.jsonl"
    for i in range(3):
        writer.add(f'{{"type": "text", "content": "{i}"}}')
    assert path.read_bytes() == b""  # nothing written chunk by chunk
    await asyncio.sleep(FLUSH_SECONDS * 3)
    assert path.read_bytes().count(b"\n") == 3
    writer.add('{"type": "done"}')
    await writer.end()  # what is left goes before the end marker
    assert path.read_bytes().splitlines()[-2:] == [b'{"type": "done"}', b"END"]
    assert [d async for _, d in state.follow("s1", "t_1")][-1] == '{"type": "done"}'


async def test_a_session_keeps_its_last_turns(tmp_path: Path) -> None:
    state = FileSharedState(tmp_path)
    turns = [f"t_{i}" for i in range(KEPT_TURNS + 4)]
    for n, turn in enumerate(turns):
        writer = await state.writer("s1", turn)
        writer.add('{"type": "done"}')
        await writer.end()
        os.utime(tmp_path / "turns" / "s1" / f"{turn}.jsonl", (1000 + n, 1000 + n))
    kept = [t for t in turns if await state.has_turn("s1", t)]
    assert kept == turns[-KEPT_TURNS:]


async def test_a_session_made_before_its_first_turn_is_read_alone(tmp_path: Path) -> None:
    state = FileSharedState(tmp_path)
    await state.note_created("s1", {"id": "s1", "scope": "alice"})
    await state.note_created("s2", {"id": "s2", "scope": None})
    assert await state.created_session("s1") == {"id": "s1", "scope": "alice"}
    assert await state.created_session("s3") is None
    assert set(await state.created()) == {"s1", "s2"}
    await state.forget_created("s1")
    assert await state.created_session("s1") is None
    path = tmp_path / "created" / "s2.json"
    path.write_text("[1, 2]")  # not an object: not a session
    assert await state.created_session("s2") is None and await state.created() == {}


async def test_a_pause_planted_in_the_project_is_ignored(tmp_path: Path) -> None:
    """The pauses live in the project's folder, which a cloned repository brings: one this
    user's memora did not seal is never shown for approval or resumed."""
    mine = FileSharedState(tmp_path / "server", tmp_path / "me")
    pause = {"state": {"turn": {"id": "t_1"}}, "doc": {"kind": "approval", "name": "run_command"}}
    await mine.set_pause("s1", pause)
    assert await mine.pause("s1") == pause
    path = tmp_path / "server" / "pauses" / "s1.json"
    sealed = json.loads(path.read_bytes())
    # as another user wrote it (another key), unsealed, or with its call changed
    theirs = FileSharedState(tmp_path / "other-server", tmp_path / "someone-else")
    assert await theirs.pause("s1") is None
    await theirs.set_pause("s1", pause)
    planted = [
        json.loads((tmp_path / "other-server" / "pauses" / "s1.json").read_bytes()),
        pause,
        json.loads(json.dumps(sealed).replace("run_command", "write_file")),
    ]
    for doc in planted:
        path.write_text(json.dumps(doc), encoding="utf-8")
        assert await mine.pause("s1") is None
    path.write_text(json.dumps(sealed), encoding="utf-8")
    assert await mine.pause("s1") == pause


async def test_a_session_view_is_version_pause_and_role_pack_at_once(tmp_path: Path) -> None:
    """What the hub reads before each turn of an open session, in one call (one query on
    PostgreSQL: tests/plugins/server/test_hosts.py), equal to the three reads it replaces."""
    state = FileSharedState(tmp_path)
    assert await state.view("s1") == ("", None, None)  # nothing shared of it yet
    version = await state.bump("s1")
    await state.set_role_pack("s1", "评审")
    await state.set_pause("s1", {"state": {"turn": {"id": "t_1"}}})
    view = await state.view("s1")
    assert view == (version, {"state": {"turn": {"id": "t_1"}}}, "评审")
    assert view == (await state.version("s1"), await state.pause("s1"), await state.role_pack("s1"))
    await state.set_pause("s1", None)
    assert (await state.view("s1")).pause is None


async def test_taking_the_lock_discards_an_old_abort_and_a_turn_settles_at_once(
    tmp_path: Path,
) -> None:
    """An abort asked for while no turn ran is not for the next turn: taking the session's
    lock drops it (probing whether a turn runs does not).  A turn's end saves its pause (or
    clears it) and moves the version on in one call."""
    state = FileSharedState(tmp_path)
    await state.request_abort("s1")
    assert not await state.alive("s1")
    lease = await state.try_lock("s1")
    assert lease is not None and not await state.take_abort("s1")
    await state.request_abort("s1")  # while the turn runs: for it
    assert await state.take_abort("s1")
    before = await state.version("s1")
    version = await state.settle("s1", {"state": {"turn": {"id": "t_1"}}})
    assert version != before and await state.view("s1") == (
        version,
        {"state": {"turn": {"id": "t_1"}}},
        None,
    )
    cleared = await state.settle("s1", None)
    assert await state.view("s1") == (cleared, None, None) and cleared != version
    await lease.release()


async def test_a_turn_left_without_its_end_is_an_orphan_until_it_ends(tmp_path: Path) -> None:
    """What the take-over looks for when a worker died after its turn's workflow ended: the
    session's current turn, not ended, held by no live worker (#71 soak finding 4)."""
    state = FileSharedState(tmp_path)
    lease = await state.try_lock("s1")
    assert lease is not None
    writer = await state.writer("s1", "t_1")
    writer.add('{"type": "text", "content": "答", "round_id": "r1"}')
    await asyncio.sleep(FLUSH_SECONDS * 4)
    assert await state.orphans() == []  # held: running
    assert not await state.turn_ended("s1", "t_1")
    await lease.release()  # the worker died before its end
    assert await state.orphans() == [("s1", "t_1")]
    again = await state.resume_writer("s1", "t_1")
    again.add('{"type": "done", "round_id": "r1"}')
    await again.end()
    assert await state.turn_ended("s1", "t_1") and await state.orphans() == []
    assert await state.turn_ended("s1", "t_gone")  # no events: nothing to end
