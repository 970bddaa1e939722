"""A full or failing disk never acknowledges a turn that is not on it (issue #69).

On a real small file system (a 1 MiB ``tmpfs``, as root; skipped with the reason elsewhere):
the session log, the SQLite memory store and an Agent's turns.  An ``fsync`` that fails
(``EIO``, which no small file system gives on demand) is injected at ``os.fsync``."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest

from memora.agent import Agent
from memora.errors import ErrorCode, MemoraError, StorageError, StorageFullError
from memora.events import ArchiveFailed
from memora.memory import JsonlSessionStore, RoundRecord
from memora.memory.sqlite_store import SqliteStorage
from memora.memory.types import NewMemory
from memora.testing import ScriptedProvider, text
from tests.agent.conftest import write_pack
from tests.small_disk import fill, small_disk


def _turn(n: int, size: int = 700) -> tuple[list[dict[str, Any]], RoundRecord]:
    messages = [
        {"role": "user", "content": f"question {n}"},
        {"role": "assistant", "content": f"answer {n}"},
    ]
    return messages, RoundRecord(f"r{n}", f"question {n}", f"answer {n} " + "x" * size)


async def _refused(append: Awaitable[None]) -> BaseException:
    """The error ``append`` failed with (it must fail)."""
    try:
        await append
    except Exception as exc:  # the caller checks what it is
        return exc
    raise AssertionError("the append did not fail")


def _log_lines(folder: Path) -> list[bytes]:
    """Every line of the session's logs; each must be a whole JSON object (no torn record in
    the middle that a reader could skip or mistake)."""
    lines: list[bytes] = []
    for log in sorted(folder.glob("*.jsonl")):
        data = log.read_bytes()
        assert data.endswith(b"\n"), f"{log} ends in a torn line"
        for raw in data.splitlines():
            assert isinstance(json.loads(raw), dict), raw
            lines.append(raw)
    return lines


async def test_a_full_disk_acknowledges_only_the_turns_on_it(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk") as disk:
        store = JsonlSessionStore(disk)
        sid = (await store.create("full disk")).id
        await store.append_turn(sid, *_turn(0))
        filler = fill(disk, leave_pages=1)
        acked, refused = ["r0"], []
        for n in range(1, 12):
            try:
                await store.append_turn(sid, *_turn(n))
            except Exception as exc:  # every failure is looked at below
                refused.append(exc)
            else:
                acked.append(f"r{n}")
        assert refused, "the disk never filled: the test proves nothing"
        filler.unlink()  # space is back: the next turn is written
        await store.append_turn(sid, *_turn(99))
        acked.append("r99")
        # every turn acknowledged is read back, and nothing of one that was not: no round,
        # not one of its messages
        again = JsonlSessionStore(disk)
        assert [r.round_id for r in await again.rounds(sid)] == acked
        said = [m["content"] for m in await again.messages(sid)]
        assert said == [f"{w} {r[1:]}" for r in acked for w in ("question", "answer")]
        assert len(_log_lines(disk / "sessions" / sid)) == 1 + 3 * len(acked)
        for error in refused:
            assert isinstance(error, StorageFullError), repr(error)
            assert error.code == ErrorCode.STORAGE_FULL and "full" in error.message


async def test_a_new_session_whose_first_turn_did_not_fit_stays_as_created(
    tmp_path: Path,
) -> None:
    """Its log is not left behind empty or torn: that would make it a session on disk without
    its first line, losing its title and its scope (whose it is)."""
    with small_disk(tmp_path / "disk") as disk:
        store = JsonlSessionStore(disk)
        await store.create("alice's plan", session_id="s1", scope="alice")
        filler = fill(disk)
        refused = await _refused(store.append_turn("s1", *_turn(1, size=20_000)))
        info = await store.get("s1")
        assert (info.title, info.scope, info.round_count) == ("alice's plan", "alice", 0)
        filler.unlink()
        await store.append_turn("s1", *_turn(2))
        again = await JsonlSessionStore(disk).get("s1")
        assert (again.title, again.scope, again.round_count) == ("alice's plan", "alice", 1)
        assert isinstance(refused, StorageFullError), repr(refused)


class _FailOnce:
    """``os.fsync`` failing once with ``EIO`` for a file named ``*.jsonl``."""

    def __init__(self) -> None:
        self.real = os.fsync
        self.failed = 0

    def __call__(self, fd: int) -> None:
        if not self.failed and os.readlink(f"/proc/self/fd/{fd}").endswith(".jsonl"):
            self.failed += 1
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        self.real(fd)


async def test_a_failed_fsync_fails_the_append_and_takes_it_back_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonlSessionStore(tmp_path)
    sid = (await store.create()).id
    await store.append_turn(sid, *_turn(1))
    failing = _FailOnce()
    monkeypatch.setattr(os, "fsync", failing)
    refused = await _refused(store.append_turn(sid, *_turn(2)))
    assert failing.failed, "the failure was not injected"
    # the bytes written before the failed fsync are not acknowledged: not read back, not
    # even the turn's messages
    again = JsonlSessionStore(tmp_path)
    assert [r.round_id for r in await again.rounds(sid)] == ["r1"]
    assert [m["content"] for m in await again.messages(sid)] == ["question 1", "answer 1"]
    await store.append_turn(sid, *_turn(3))
    assert [r.round_id for r in await JsonlSessionStore(tmp_path).rounds(sid)] == ["r1", "r3"]
    assert len(_log_lines(tmp_path / "sessions" / sid)) == 7
    assert isinstance(refused, StorageError), repr(refused)
    assert refused.code == ErrorCode.STORAGE_ERROR and "EIO" in refused.message


@pytest.mark.parametrize("inline", [True, False], ids=["on-the-loop", "on-the-worker"])
async def test_a_full_disk_is_storage_full_for_the_sqlite_memory_store(
    tmp_path: Path, inline: bool
) -> None:
    with small_disk(tmp_path / "disk") as disk:
        store = SqliteStorage(disk / "memory.db", write_inline=inline)
        try:
            await store.add(NewMemory(source="round_summary", content="kept", id="m0"))
            filler = fill(disk)
            big = "the round's words " * 2000
            with pytest.raises(StorageFullError) as one:
                await store.add(NewMemory(source="round_summary", content=big, id="m1"))
            with pytest.raises(StorageFullError) as many:
                await store.add_many([NewMemory(source="round_summary", content=big, id="m2")])
            for info in (one, many):
                assert info.value.code == ErrorCode.STORAGE_FULL
                assert "is full" in info.value.message and str(disk) in info.value.message
            assert await store.count() == 1  # nothing of the refused writes
            filler.unlink()
            await store.add(NewMemory(source="round_summary", content=big, id="m3"))
            assert [m.id for m in await store.list()] == ["m3", "m0"]
            assert await store.integrity_check() == "ok"
        finally:
            await store.close()


async def test_through_the_agent_every_saved_turn_is_read_back(tmp_path: Path) -> None:
    """Turns through an Agent whose project and data are on a small disk that fills up: each
    ``done`` says whether its round was saved, an unsaved one says why (``STORAGE_FULL``), the
    round memory a full database could not take is reported, and once space is back the
    session goes on and reads back whole."""
    config = tmp_path / "config"
    write_pack(config, "test", {"reflect": {"summary": "on"}})
    with small_disk(tmp_path / "disk", size="2m") as disk:
        (disk / "project").mkdir()
        answers = [text(f"answer {n} " + "z" * 1500) for n in range(24)]
        agent = Agent(
            project_path=disk / "project",
            data_dir=disk / "data",
            provider=ScriptedProvider(answers),
            config_dir=config,
            active_role_pack="test",
            load_entrypoints=False,
            summary_verbatim_tokens=100_000,  # each round's memory is its own words
        )
        await agent.init()
        failures: list[ArchiveFailed] = []
        agent.events.on(ArchiveFailed, failures.append)
        saved: dict[str, bool] = {}
        filler = None
        try:
            for n in range(24):
                if n == 3:
                    filler = fill(disk, leave_pages=4)
                if n == 16:
                    assert filler is not None
                    filler.unlink()
                chunks = [c async for c in agent.chat(f"question {n}")]
                done = chunks[-1]
                assert done.type == "done", chunks  # a full disk is not a failed turn
                saved[f"question {n}"] = done.saved
                await agent.idle()
            sid = agent.session_id
        finally:
            await agent.close()
        unsaved = [q for q, ok in saved.items() if not ok]
        assert unsaved and all(saved[f"question {n}"] for n in range(16, 24))
        rounds = await JsonlSessionStore(disk / "data").rounds(sid)
        assert [r.user for r in rounds] == [q for q, ok in saved.items() if ok]
        messages = await JsonlSessionStore(disk / "data").messages(sid)
        assert not {m["content"] for m in messages if m["role"] == "user"} & set(unsaved)
        _log_lines(disk / "data" / "sessions" / sid)
        by_stage = {f.stage: f.error for f in failures}
        assert len([f for f in failures if f.stage == "round"]) == len(unsaved)
        assert "STORAGE_FULL" in by_stage["round"]
        assert "STORAGE_FULL" in by_stage["summary"]  # the round's memory did not fit either


def test_storage_full_is_a_storage_error_with_its_own_code() -> None:
    error = MemoraError(ErrorCode.STORAGE_FULL, "the disk is full")
    assert isinstance(error, StorageFullError) and isinstance(error, StorageError)
    assert StorageFullError("x").code == ErrorCode.STORAGE_FULL
