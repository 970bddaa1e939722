"""memora's own state files never follow links planted in a (cloned, untrusted) project."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from memora import Agent
from memora.errors import MemoraError
from memora.memory import JsonlSessionStore, RoundRecord
from memora.memory.simple_backends import JsonFileStorage
from memora.memory.sqlite_store import SqliteStorage
from memora.memory.types import NewMemory
from memora.security.lock import ProjectLock
from memora.security.paths import PathGuard
from memora.security.state import check_state_path
from memora.testing import ScriptedProvider
from memora.tools.works import WorksRegistry


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    target = tmp_path / "victim.txt"
    target.write_text("precious\n", encoding="utf-8")
    return target


def _untouched(victim: Path) -> bool:
    return victim.read_text(encoding="utf-8") == "precious\n"


def test_lock_file_link_is_refused(tmp_path: Path, victim: Path) -> None:
    project = tmp_path / "p"
    (project / ".memora").mkdir(parents=True)
    (project / ".memora" / ".lock").symlink_to(victim)
    with pytest.raises(MemoraError, match="is a symbolic link") as info:
        ProjectLock(project).acquire()
    assert info.value.code == "STORAGE_ERROR" and _untouched(victim)


def test_memora_folder_link_is_refused(tmp_path: Path) -> None:
    project, elsewhere = tmp_path / "p", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / ".memora").symlink_to(elsewhere)
    with pytest.raises(MemoraError, match=r"\.memora is a symbolic link"):
        ProjectLock(project).acquire()
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("what", ["memora-file", "lock-folder"])
def test_wrong_kinds_are_clear_errors(tmp_path: Path, what: str) -> None:
    project = tmp_path / "p"
    project.mkdir()
    if what == "memora-file":
        (project / ".memora").write_text("not a folder")
        needle = ".memora is not a folder"
    else:
        (project / ".memora" / ".lock").mkdir(parents=True)
        needle = ".lock is"
    with pytest.raises(MemoraError, match=needle) as info:
        ProjectLock(project).acquire()
    assert info.value.code == "STORAGE_ERROR"


async def test_agent_init_refuses_a_planted_memora_file(tmp_path: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    (project / ".memora").write_text("not a folder")
    agent = Agent(
        project_path=project,
        data_dir=project / ".memora" / "data",
        provider=ScriptedProvider([]),
        load_entrypoints=False,
    )
    with pytest.raises(MemoraError, match="is not a folder") as info:
        await agent.init()
    assert info.value.code == "STORAGE_ERROR"


async def test_session_file_link_is_refused(tmp_path: Path, victim: Path) -> None:
    store = JsonlSessionStore(tmp_path / "data")
    s = await store.create()
    await store.append_round(s.id, RoundRecord("r0", "q", "a"))
    (log,) = (tmp_path / "data" / "sessions" / s.id).glob("*.jsonl")
    log.unlink()
    log.symlink_to(victim)
    with pytest.raises(MemoraError, match="is a symbolic link"):
        await store.append_round(s.id, RoundRecord("r1", "q", "a"))
    assert _untouched(victim)


async def test_session_folder_link_is_refused(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path / "data")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "data" / "sessions").mkdir(parents=True)
    (tmp_path / "data" / "sessions" / "planted").symlink_to(elsewhere)
    with pytest.raises(MemoraError, match="is a symbolic link"):
        await store.create(session_id="planted")
    assert list(elsewhere.iterdir()) == []


async def test_a_sessions_folder_link_is_refused_at_the_first_turn(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "sessions").symlink_to(elsewhere)
    store = JsonlSessionStore(tmp_path / "data")
    s = await store.create()
    with pytest.raises(MemoraError, match="is a symbolic link"):
        await store.append_round(s.id, RoundRecord("r0", "q", "a"))
    assert list(elsewhere.iterdir()) == []


async def test_a_link_planted_at_a_new_sessions_folder_is_refused(tmp_path: Path) -> None:
    """Between create() and the first turn nothing is on disk; a link put at the session's
    folder in that time is refused, not followed."""
    store = JsonlSessionStore(tmp_path / "data")
    first = await store.create()
    await store.append_round(first.id, RoundRecord("r0", "q", "a"))  # sessions/ now checked
    s = await store.create()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "data" / "sessions" / s.id).symlink_to(elsewhere)
    with pytest.raises(MemoraError, match="is a symbolic link"):
        await store.append_round(s.id, RoundRecord("r1", "q", "a"))
    assert list(elsewhere.iterdir()) == []


async def test_a_linked_session_is_not_read_and_no_cache_is_written_through_it(
    tmp_path: Path,
) -> None:
    """A session folder that is a link (a cloned project's, to another project's session) is
    not shown as this project's: reading it is refused, a listing skips it, and nothing —
    not even the round-count cache — is written into the folder it points to."""
    other = JsonlSessionStore(tmp_path / "other")
    theirs = await other.create()
    await other.append_round(theirs.id, RoundRecord("r0", "their secret", "a"))
    target = tmp_path / "other" / "sessions" / theirs.id
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    store = JsonlSessionStore(tmp_path / "data")
    mine = await store.create()
    await store.append_round(mine.id, RoundRecord("r0", "mine", "a"))
    (tmp_path / "data" / "sessions" / "planted").symlink_to(target)
    for read in (store.get, store.rounds, store.messages, store.exists, store.load):
        with pytest.raises(MemoraError, match="is a symbolic link"):
            await read("planted")  # type: ignore[operator]
    assert [i.id for i in await store.list()] == [mine.id]
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    # a link among a real session's logs is left unread: their round does not become ours
    (their_log,) = target.glob("*.jsonl")
    (tmp_path / "data" / "sessions" / mine.id / "1999-01-01.jsonl").symlink_to(their_log)
    assert [r.user for r in await store.rounds(mine.id)] == ["mine"]
    assert (await store.get(mine.id)).round_count == 1
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before


async def test_a_json_memory_file_link_is_refused_not_read(tmp_path: Path) -> None:
    theirs = JsonFileStorage(tmp_path / "other" / "memories.json")
    await theirs.add(NewMemory(source="summary", name="their secret", content="their secret"))
    before = (tmp_path / "other" / "memories.json").read_bytes()
    data = tmp_path / "data"
    data.mkdir()
    (data / "memories.json").symlink_to(tmp_path / "other" / "memories.json")
    with pytest.raises(MemoraError, match="is a symbolic link"):
        JsonFileStorage(data / "memories.json")
    assert (tmp_path / "other" / "memories.json").read_bytes() == before


async def test_nothing_planted_in_a_session_can_stall_a_read(tmp_path: Path) -> None:
    """A FIFO among the logs would block the read for a writer that never comes, and a cache
    linked to /dev/zero would never end: both are left unread."""
    store = JsonlSessionStore(tmp_path / "data")
    s = await store.create()
    await store.append_round(s.id, RoundRecord("r0", "mine", "a"))
    folder = tmp_path / "data" / "sessions" / s.id
    os.mkfifo(folder / "1999-01-01.jsonl")
    index = folder / "index.json"
    index.unlink(missing_ok=True)
    index.symlink_to("/dev/zero")
    info = await asyncio.wait_for(store.get(s.id), 10)
    assert info.round_count == 1
    rounds = await asyncio.wait_for(store.rounds(s.id), 10)
    assert [r.user for r in rounds] == ["mine"]


def test_a_planted_works_file_is_refused(tmp_path: Path, victim: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "works.json").symlink_to(victim)
    with pytest.raises(MemoraError, match="is a symbolic link"):
        WorksRegistry(data, PathGuard(tmp_path))
    (data / "works.json").unlink()
    os.mkfifo(data / "works.json")
    with pytest.raises(MemoraError, match="is not a regular file"):
        WorksRegistry(data, PathGuard(tmp_path))
    assert _untouched(victim)


async def test_database_link_is_refused(tmp_path: Path, victim: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "memory.db").symlink_to(victim)
    with pytest.raises(MemoraError, match="is a symbolic link"):
        SqliteStorage(data / "memory.db")
    assert _untouched(victim)


@pytest.mark.parametrize(
    ("path", "root"),
    [
        ("r/link/b/f", "r"),
        ("r//link/./b/f", "r/"),
        ("./r/link/b/f", "./r"),
        ("r/link/b/f", "./r"),
        ("{abs}/r/link/b/f", "{abs}/r"),
        ("{abs}/r/link/b/f", "{abs}"),
    ],
)
def test_a_link_between_root_and_file_is_refused_however_the_path_is_spelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str, root: str
) -> None:
    # the check reads paths as strings (it runs on every session append): repeated separators,
    # "." parts, a trailing separator or a relative root must not let a planted link through
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r" / "a" / "b").mkdir(parents=True)
    (tmp_path / "r" / "a" / "b" / "f").write_text("x")
    (tmp_path / "r" / "link").symlink_to(tmp_path / "r" / "a")
    path, root = path.format(abs=tmp_path), root.format(abs=tmp_path)
    with pytest.raises(MemoraError, match="link is a symbolic link"):
        check_state_path(path, root)
    check_state_path(path.replace("link", "a"), root)  # the real folder passes
    # outside its root only the file itself is checked, as before
    check_state_path(str(tmp_path / "r" / "link" / "b" / "f"), str(tmp_path / "elsewhere"))
