"""memora-plugin-dbos tried as an attacker would (#71 hostile review): a journal planted in a
cloned project's data folder, a project's config choosing the executor or its journal, a
journal that cannot be made.  See tests/plugins/server/test_hostile_durable.py for the doors
`memora serve` opens on it."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import pickle
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memora import ProjectRuntime
from memora.errors import MemoraError
from memora.testing import ScriptedProvider, text, tool_call

pytest.importorskip("dbos")

from memora_plugin_dbos import DbosTurnExecutor
from memora_plugin_dbos.executor import APP_VERSION, SEGMENT, WORKFLOW, project_tag


@pytest.fixture(autouse=True)
def _dbos_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("MEMORA_LOAD_PLUGINS", "dbos")
    yield


def user_config(root: Path, **config: Any) -> Path:
    folder = root / "user"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"turn_executor": "dbos", **config}))
    return folder


class _Mkdir:
    """Unpickled, it makes a folder: the proof that a pickle from the journal was loaded."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.mkdir, (self.path,))


async def make_journal(path: Path) -> None:
    """A real DBOS journal (its schema, as the plugin makes it) at ``path``."""
    executor = DbosTurnExecutor({"system_database_url": f"sqlite:///{path}", "path": path.parent})
    await executor.close()


def plant(journal: Path, workflow_id: str, state: dict[str, Any], *, output: str | None) -> None:
    """A turn left unfinished in ``journal`` under ``workflow_id``: its state at the start,
    and (``output``) one kept segment whose value is a pickle."""
    db = sqlite3.connect(journal)
    args = json.dumps({"positionalArgs": [workflow_id, state], "namedArgs": {}})
    db.execute(
        "INSERT INTO workflow_status (workflow_uuid, status, name, executor_id, "
        "application_version, application_name, serialization, inputs) "
        "VALUES (?, 'PENDING', ?, 'attacker', ?, 'memora', 'portable_json', ?)",
        (workflow_id, WORKFLOW, APP_VERSION, args),
    )
    db.execute(
        "INSERT INTO workflow_input (workflow_uuid, inputs) VALUES (?, ?)", (workflow_id, args)
    )
    if output is not None:
        db.execute(
            "INSERT INTO operation_outputs (workflow_uuid, function_id, function_name, output, "
            "serialization) VALUES (?, 1, ?, ?, 'py_pickle')",
            (workflow_id, SEGMENT, output),
        )
    db.commit()
    db.close()


def plant_queued(journal: Path, payload: str) -> None:
    """A workflow waiting on DBOS's own queue whose input is a pickle: DBOS starts it by
    itself, without memora asking."""
    db = sqlite3.connect(journal)
    db.execute(
        "INSERT INTO workflow_status (workflow_uuid, status, name, queue_name, "
        "application_version, application_name, serialization, inputs) "
        "VALUES ('queued', 'ENQUEUED', ?, '_dbos_internal_queue', ?, 'memora', 'py_pickle', ?)",
        (WORKFLOW, APP_VERSION, payload),
    )
    db.execute(
        "INSERT INTO workflow_input (workflow_uuid, inputs) VALUES ('queued', ?)", (payload,)
    )
    db.commit()
    db.close()


async def test_a_journal_planted_in_a_cloned_project_is_never_opened(tmp_path: Path) -> None:
    """Found: the default journal was ``<project>/.memora/data/turns.sqlite`` — a file a cloned
    repository brings.  DBOS unpickles any value a row marks ``py_pickle`` whatever serializer
    it was given, and runs the workflows it finds on its own queue: opening the project ran
    the planted pickle within a second (no command, no turn), and looking for turns to take
    over ran another.  The journal is now the user's own file; the planted one is not read."""
    project = tmp_path / "cloned"
    data = project / ".memora" / "data"
    data.mkdir(parents=True)
    planted = data / "turns.sqlite"
    await make_journal(planted)
    marker = tmp_path / "pwned"
    payload = base64.b64encode(pickle.dumps(_Mkdir(marker))).decode()
    plant_queued(planted, payload)
    state = {"journal": 1, "round_id": "r-1", "session_id": "s1", "user_text": "hi"}
    # under the first version's id and under this project's tag (an attacker can compute it)
    tag = project_tag({"path": data})
    for workflow_id in ("memora:s1:r-1:1", f"{tag}/memora:s1:r-1:1"):
        plant(planted, workflow_id, state, output=payload)
    async with ProjectRuntime(
        project_path=project,
        data_dir=data,
        config_dir=user_config(tmp_path),
        provider=ScriptedProvider([text("x")]),
    ) as runtime:
        executor = runtime.turn_executor
        assert executor is not None
        left = await executor.unfinished()
        for turn in left:
            await executor.last_state(turn.key)
        assert not marker.exists(), "a pickle from the planted journal was loaded"
        assert left == []
        # DBOS's queue is polled every second: three polls, and nothing ran
        for _ in range(30):
            assert not marker.exists(), "a pickle from the planted journal was loaded"
            await asyncio.sleep(0.1)
    assert not marker.exists()


async def test_the_users_journal_is_private(tmp_path: Path) -> None:
    """Found: SQLite made ``turns.sqlite`` with the umask's mode (0644) — every local user
    could read the turns' messages and tool results in it, where memora's own files are 0600."""
    project = tmp_path / "project"
    project.mkdir()
    async with ProjectRuntime(
        project_path=project,
        data_dir=tmp_path / "data",
        config_dir=user_config(tmp_path),
        provider=ScriptedProvider([text("x")]),
    ) as runtime:
        executor = runtime.turn_executor
        assert isinstance(executor, DbosTurnExecutor)
        journal = Path(executor.url.removeprefix("sqlite:///"))
    assert stat.S_IMODE(journal.stat().st_mode) == 0o600
    assert not (tmp_path / "data" / "turns.sqlite").exists()
    # in the runtime's own user folder (config_dir), not $MEMORA_HOME's or ~/.config's
    assert journal.parent == user_config(tmp_path) / "turns", journal


async def test_a_projects_config_chooses_neither_the_executor_nor_its_journal(
    tmp_path: Path,
) -> None:
    """Held: ``turn_executor`` and ``plugins.dbos.system_database_url`` in a project's
    ``.memora/config.json`` are requests of an untrusted project: not applied (no executor
    without the user's key; the user's journal, not the project's, with it)."""
    project = tmp_path / "project"
    (project / ".memora").mkdir(parents=True)
    elsewhere = f"sqlite:///{tmp_path / 'chosen-by-the-project.sqlite'}"
    (project / ".memora" / "config.json").write_text(
        json.dumps(
            {"turn_executor": "dbos", "plugins": {"dbos": {"system_database_url": elsewhere}}}
        )
    )
    user = tmp_path / "user"
    user.mkdir()
    (user / "config.json").write_text("{}")
    common: dict[str, Any] = {
        "project_path": project,
        "data_dir": project / ".memora" / "data",
        "provider": ScriptedProvider([text("x")]),
    }
    async with ProjectRuntime(config_dir=user, **common) as runtime:
        assert runtime.turn_executor is None
    async with ProjectRuntime(config_dir=user_config(tmp_path), **common) as runtime:
        executor = runtime.turn_executor
        assert isinstance(executor, DbosTurnExecutor)
        assert executor.url != elsewhere
    assert not (tmp_path / "chosen-by-the-project.sqlite").exists()


async def test_a_journal_that_cannot_be_made_is_a_clear_error_naming_it(tmp_path: Path) -> None:
    """Held: the user's journal folder not writable at start — a clear error naming the path,
    and the runtime not half-open."""
    project = tmp_path / "project"
    project.mkdir()
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the journal's folder goes")
    config = user_config(
        tmp_path, plugins={"dbos": {"system_database_url": f"sqlite:///{blocked}/j.sqlite"}}
    )
    runtime = ProjectRuntime(
        project_path=project,
        data_dir=tmp_path / "data",
        config_dir=config,
        provider=ScriptedProvider([text("x")]),
    )
    with pytest.raises(MemoraError) as info:
        await runtime.open()
    assert str(blocked) in info.value.message
    assert not runtime.is_open


async def test_the_event_loop_runs_threads_after_a_durable_runtime_closed(tmp_path: Path) -> None:
    """Found: DBOS makes its thread pool the event loop's default executor at its first async
    call and leaves it there when destroyed — shut down: every ``asyncio.to_thread`` of a host
    that went on after its durable runtime closed failed (``cannot schedule new futures after
    shutdown``), memora's own session writes among them: a second runtime, durable or not,
    could not even start in that loop."""
    project = tmp_path / "project"
    project.mkdir()
    common: dict[str, Any] = {"project_path": project, "data_dir": tmp_path / "data"}
    async with ProjectRuntime(
        config_dir=user_config(tmp_path), provider=ScriptedProvider([text("kept")]), **common
    ) as runtime:
        agent = await runtime.agent(session_id="s1")
        assert [c async for c in agent.chat("hi")][-1].type == "done"
    assert await asyncio.to_thread(sum, [1, 2]) == 3
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text("{}")
    async with ProjectRuntime(
        config_dir=plain, provider=ScriptedProvider([text("again")]), **common
    ) as runtime:
        agent = await runtime.agent(session_id="s1")
        assert [c async for c in agent.chat("and now")][-1].type == "done"


async def test_the_journal_keeps_the_turns_that_may_go_on_not_every_turn(tmp_path: Path) -> None:
    """Found: every turn's workflow stayed in the journal once ended, each of its steps holding
    the whole turn as it stood — a turn of 16 tool steps reading a 5.6 KB file added 1.7 MB —
    so a server's journal grew without end (a full disk's way in, and its turns' text kept
    where no forget reaches).  An ended turn's workflow is now deleted."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "big.txt").write_text("lorem ipsum dolor sit amet\n" * 200)
    reads = [tool_call(("read_file", {"path": "big.txt"}, f"c{i}")) for i in range(4)]
    provider = ScriptedProvider([*reads, text("read"), *reads, text("again")])
    journal = tmp_path / "journal.sqlite"
    config = user_config(
        tmp_path, plugins={"dbos": {"system_database_url": f"sqlite:///{journal}"}}
    )
    async with ProjectRuntime(
        project_path=project,
        data_dir=tmp_path / "data",
        config_dir=config,
        provider=provider,
        approvals="full-auto",
    ) as runtime:
        agent = await runtime.agent(session_id="s1")
        for said in ("read it", "read it again"):
            assert [c async for c in agent.chat(said)][-1].type == "done"
    db = sqlite3.connect(journal)
    kept = {
        table: db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        for table in ("workflow_status", "operation_outputs", "workflow_input")
    }
    db.close()
    assert kept == {"workflow_status": 0, "operation_outputs": 0, "workflow_input": 0}


LEAVE_ENDED = """
import asyncio, os, sys
from pathlib import Path
from memora import ProjectRuntime
from memora.testing import ScriptedProvider, text

async def main() -> None:
    root = Path(sys.argv[1])
    runtime = ProjectRuntime(
        project_path=root / "project", data_dir=root / "data", config_dir=root / "user",
        provider=ScriptedProvider([text("answered")]), approvals="full-auto",
    )
    await runtime.open()
    agent = await runtime.agent(session_id="s1")
    assert [c async for c in agent.chat("hello")][-1].type == "done"
    os._exit(0)  # gone before the ended turn's sweep: its workflow stays in the journal

asyncio.run(main())
"""


async def test_ended_turns_a_dead_process_left_in_the_journal_are_deleted_by_the_next(
    tmp_path: Path,
) -> None:
    """Ended turns leave the journal together, a second after they end (one deletion for many:
    each one alone cost 1.6 ms of CPU a turn); a process that dies first leaves them there, and
    the next one's first sweep deletes them (after a turn's end, never inside it)."""
    import subprocess
    import sys

    (tmp_path / "project").mkdir()
    journal = tmp_path / "journal.sqlite"
    config = user_config(
        tmp_path, plugins={"dbos": {"system_database_url": f"sqlite:///{journal}"}}
    )
    env = {**os.environ, "MEMORA_LOAD_PLUGINS": "dbos"}
    done = subprocess.run(
        [sys.executable, "-c", LEAVE_ENDED, str(tmp_path)],
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]

    def ended() -> list[str]:
        db = sqlite3.connect(journal)
        try:
            rows = db.execute("SELECT workflow_uuid, status FROM workflow_status").fetchall()
        finally:
            db.close()
        return [f"{status}" for _, status in rows]

    assert ended() == ["SUCCESS"]  # left by the process that died
    db = sqlite3.connect(journal)
    with db:  # ended over a minute ago: a live process would have deleted it by now
        db.execute("UPDATE workflow_status SET completed_at = completed_at - 120000")
    db.close()
    async with ProjectRuntime(
        project_path=tmp_path / "project",
        data_dir=tmp_path / "data",
        config_dir=config,
        provider=ScriptedProvider([text("again")]),
        approvals="full-auto",
    ) as runtime:
        agent = await runtime.agent(session_id="s1")
        assert [c async for c in agent.chat("and now")][-1].type == "done"
        assert ended() == ["SUCCESS", "SUCCESS"]  # the old one and this turn's, to be swept
        await asyncio.sleep(1.5)  # SWEEP_SECONDS: the first sweep takes both
        assert ended() == []


async def test_a_kept_state_of_another_session_is_not_continued_under_this_turns_key(
    tmp_path: Path,
) -> None:
    """Held: a journal row whose state names another session (or round) than its turn's key —
    continued, it would run session s2's turn, its messages, in s1 — is refused, naming both."""
    project = tmp_path / "project"
    project.mkdir()
    journal = tmp_path / "journal.sqlite"
    await make_journal(journal)
    config = user_config(
        tmp_path, plugins={"dbos": {"system_database_url": f"sqlite:///{journal}"}}
    )
    data = tmp_path / "data"
    tag = project_tag({"path": data})
    state = {"journal": 1, "round_id": "r-1", "session_id": "s2", "user_text": "not yours"}
    plant(journal, f"{tag}/memora:s1:r-1:1", state, output=None)
    provider = ScriptedProvider([text("must not be asked")])
    async with ProjectRuntime(
        project_path=project,
        data_dir=data,
        config_dir=config,
        provider=provider,
        approvals="full-auto",
    ) as runtime:
        executor = runtime.turn_executor
        assert executor is not None
        (left,) = await executor.unfinished()
        assert left.key == "memora:s1:r-1:1"
        agent = await runtime.agent(session_id="s1")
        with pytest.raises(MemoraError, match="of session 's2'"):
            [c async for c in agent.take_over(left.key)]
        assert provider.requests == []
        assert await runtime.session_store.rounds("s1") == []
