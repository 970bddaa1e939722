"""Sessions, the project lock and two hosts on one database, against a real PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from memora import Agent
from memora.errors import MemoraError
from memora.memory import RoundRecord
from memora.testing import ScriptedProvider, text
from memora_plugin_postgres.database import Database, dsn_from
from memora_plugin_postgres.lock import PostgresProjectLock
from memora_plugin_postgres.sessions import PostgresSessionStore
from tests.conftest import REPO

_HOST_NS: dict[Path, str] = {}


def _ns() -> str:
    return f"test-{uuid.uuid4().hex}"


async def test_session_store_lifecycle(pg_dsn: str) -> None:
    store = PostgresSessionStore(Database(pg_dsn), _ns())
    try:
        s = await store.create()
        assert await store.exists(s.id)
        await store.append_turn(
            s.id,
            [{"role": "user", "content": "你好"}, {"role": "assistant", "content": "hi"}],
            RoundRecord("r0", "question 0", "answer 0", events=[{"type": "x"}], ended_at=5.0),
        )
        for i in (1, 2):
            await store.append_round(s.id, RoundRecord(f"r{i}", f"question {i}", f"answer {i}"))
        info = await store.get(s.id)
        assert info.round_count == 3 and info.title == "question 0"
        assert [m["content"] for m in await store.messages(s.id)] == ["你好", "hi"]
        rounds = await store.rounds(s.id)
        assert [r.round_id for r in rounds] == ["r0", "r1", "r2"]
        assert rounds[0].events == [{"type": "x"}]
        # what an Agent reads when it opens the session, through one connection
        loaded = await store.load(s.id)
        assert loaded is not None and loaded.info == info
        assert loaded.messages == await store.messages(s.id)
        assert [r.to_dict() for r in loaded.rounds] == [r.to_dict() for r in rounds]
        assert await store.load("missing") is None
        # read on from the mark: only what was written since
        await store.append_turn(
            s.id, [{"role": "user", "content": "再问"}], RoundRecord("r3", "再问", "ok")
        )
        on = await store.load(s.id, after=loaded.mark)
        assert on is not None and on.since == loaded.mark
        assert [m["content"] for m in on.messages] == ["再问"]
        assert [r.round_id for r in on.rounds] == ["r3"] and on.info.round_count == 4
        nothing = await store.load(s.id, after=on.mark)
        assert nothing is not None and (nothing.messages, nothing.rounds) == ([], [])
        # a mark that no longer counts the lines up to it is not trusted: read whole
        count, last = on.mark
        whole = await store.load(s.id, after=(count - 1, last))
        assert whole is not None and whole.since is None and len(whole.rounds) == 4
        fork, count = await store.fork(s.id, "r1")
        assert count == 2 and fork.parent_id == s.id and fork.fork_round_id == "r1"
        assert [r.round_id for r in await store.rounds(fork.id)] == ["r0", "r1"]
        await store.archive(s.id)
        assert [i.id for i in await store.list()] == [fork.id]
        assert {i.id for i in await store.list(include_archived=True)} == {s.id, fork.id}
        with pytest.raises(MemoraError, match="no session"):
            await store.rounds("missing")
        with pytest.raises(MemoraError, match="no session") as missing:
            await store.append_turn(
                "missing", [{"role": "user", "content": "x"}], RoundRecord("r9", "x", "y")
            )
        assert missing.value.code == "NOT_FOUND"
        async with await store._conn() as conn:  # nothing of it was written
            cur = await conn.execute(
                "SELECT count(*) FROM memora_session_lines WHERE namespace=%s AND session_id=%s",
                (store.namespace, "missing"),
            )
            assert (await cur.fetchone())[0] == 0
        with pytest.raises(MemoraError, match="already exists"):
            await store.create(session_id=s.id)
    finally:
        await store.close()


async def test_lock_names_the_holder_and_is_released(pg_dsn: str) -> None:
    ns = _ns()
    first, second = PostgresProjectLock(pg_dsn, ns), PostgresProjectLock(pg_dsn, ns)
    await first.acquire()
    try:
        with pytest.raises(MemoraError) as info:
            await second.acquire()
        assert info.value.code == "PROJECT_LOCKED"
        assert f"PID {os.getpid()}" in str(info.value)
    finally:
        await first.release()
    await second.acquire()
    await second.release()


async def test_a_shared_lock_for_a_services_workers(pg_dsn: str) -> None:
    """Workers of `memora serve` hold the lock together; an exclusive holder (a `memora chat`)
    is refused while they do, and excludes them while it holds."""
    ns = _ns()
    workers = [PostgresProjectLock(pg_dsn, ns, shared=True) for _ in range(2)]
    for w in workers:
        await w.acquire()
    exclusive = PostgresProjectLock(pg_dsn, ns)
    try:
        with pytest.raises(MemoraError) as info:
            await exclusive.acquire()
        assert info.value.code == "PROJECT_LOCKED"
    finally:
        for w in workers:
            await w.release()
    await exclusive.acquire()
    try:
        with pytest.raises(MemoraError):
            await workers[0].acquire()
    finally:
        await exclusive.release()
    assert PostgresProjectLock.from_options({"dsn": pg_dsn, "namespace": ns, "shared": True}).shared


def test_dsn_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMORA_POSTGRES_DSN", raising=False)
    with pytest.raises(MemoraError, match="MEMORA_POSTGRES_DSN"):
        dsn_from({})
    for bad in ("host=db password=hunter2 dbname=m", "postgresql://u:hunter2@db/m"):
        with pytest.raises(MemoraError, match="holds a password") as info:
            dsn_from({"dsn": bad})
        assert "hunter2" not in str(info.value)
    assert dsn_from({"dsn": "host=db dbname=m user=u"}) == "host=db dbname=m user=u"
    monkeypatch.setenv("MEMORA_POSTGRES_DSN", "host=db password=fromenv")
    assert dsn_from({}) == "host=db password=fromenv"  # the environment may carry secrets


HOST = textwrap.dedent(
    """
    import asyncio, json, sys, time
    from pathlib import Path
    from memora import Agent
    from memora.errors import MemoraError
    from memora.testing import ScriptedProvider, text

    project, word, hold = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])

    async def main():
        provider = ScriptedProvider([text(f"noted {word}"), text(f"TYPE: fact\\nThe word is {word}.")])
        agent = Agent(project_path=project, data_dir=project / ".memora" / "data",
                      provider=provider, load_entrypoints=True)
        try:
            await agent.init()
        except MemoraError as exc:
            print(json.dumps({"error": exc.code, "message": exc.message}), flush=True)
            return
        try:
            async for _ in agent.chat(f"remember {word}"):
                pass
            await agent.idle()
            hits = await agent.memory.search("zebra") + await agent.memory.search("quokka")
            print(json.dumps({"ok": True, "storage": agent.settings.storage,
                              "found": sorted({h.record.content for h in hits})}), flush=True)
            await asyncio.sleep(hold)
        finally:
            await agent.close()

    asyncio.run(main())
    """
)


def _user_namespace(tmp_path: Path, namespace: str) -> Path:
    """A user config folder that sets the PostgreSQL namespace: whose data a project reads is
    the user's choice, never the project's (a project config naming one is refused)."""
    home = tmp_path / "user-config"
    home.mkdir(exist_ok=True)
    (home / "config.json").write_text(
        json.dumps({"plugins": {"postgres": {"namespace": namespace}}}), encoding="utf-8"
    )
    return home


def _host(project: Path, word: str, hold: float, dsn: str, script: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "MEMORA_POSTGRES_DSN": dsn, "PYTHONPATH": str(REPO)}
    env["MEMORA_HOME"] = str(_user_namespace(project.parent, _HOST_NS.setdefault(project, _ns())))
    return subprocess.Popen(
        [sys.executable, str(script), str(project), word, str(hold)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.slow
async def test_two_hosts_one_database_one_project(pg_dsn: str, tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / ".memora").mkdir(parents=True)
    (project / ".memora" / "config.json").write_text(json.dumps({"storage": "postgres"}))
    script = tmp_path / "host.py"
    script.write_text(HOST, encoding="utf-8")

    first = _host(project, "zebra", 60, pg_dsn, script)
    assert first.stdout is not None
    line = await asyncio.to_thread(first.stdout.readline)
    doc = json.loads(line)
    assert doc["ok"] and doc["storage"] == "postgres"
    assert any("zebra" in c for c in doc["found"])

    # the second host is refused while the first holds the project, and told who holds it
    second = _host(project, "quokka", 0, pg_dsn, script)
    out, err = await asyncio.to_thread(second.communicate, timeout=120)
    refused = json.loads(out.splitlines()[-1])
    assert refused["error"] == "PROJECT_LOCKED", err
    assert f"PID {first.pid}" in refused["message"]

    # the first host is killed: the server ends its session and with it the lock
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    third = _host(project, "quokka", 0, pg_dsn, script)
    out, err = await asyncio.to_thread(third.communicate, timeout=120)
    doc = json.loads(out.splitlines()[-1])
    assert doc.get("ok"), (out, err)
    # memories written by one host are found by the other
    assert any("zebra" in c for c in doc["found"]) and any("quokka" in c for c in doc["found"])


async def test_agent_selects_postgres_from_config(
    pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORA_POSTGRES_DSN", pg_dsn)
    project = tmp_path / "p"
    (project / ".memora").mkdir(parents=True)
    (project / ".memora" / "config.json").write_text(json.dumps({"storage": "postgres"}))
    provider = ScriptedProvider([text("hello"), text("TYPE: fact\nsaid hello")])
    async with Agent(
        project_path=project,
        data_dir=tmp_path / "d",
        provider=provider,
        config_dir=_user_namespace(tmp_path, _ns()),
    ) as agent:
        chunks = [c async for c in agent.chat("hi")]
        assert chunks[-1].type == "done"
        await agent.idle()
        assert type(agent.sessions.store).__name__ == "PostgresSessionStore"
        assert type(agent.security.lock).__name__ == "PostgresProjectLock"
        assert (await agent.memory.snapshot()).total == 1
        assert [r.user for r in await agent.sessions.rounds()] == ["hi"]
    # nothing of it went to files
    assert not (tmp_path / "d" / "memory.db").exists()
    assert not (tmp_path / "d" / "sessions").exists()
    assert not (project / ".memora" / ".lock").exists()


def test_cli_memory_commands_on_postgres(pg_dsn: str, tmp_path: Path) -> None:
    project = tmp_path / "p"
    (project / ".memora").mkdir(parents=True)
    (project / ".memora").mkdir(exist_ok=True)
    src = tmp_path / "in.jsonl"
    src.write_text(
        json.dumps({"id": "m1", "source": "persona", "content": "长期记忆 in PostgreSQL"}) + "\n",
        encoding="utf-8",
    )
    env = {
        **os.environ,
        "MEMORA_POSTGRES_DSN": pg_dsn,
        "MEMORA_HOME": str(_user_namespace(tmp_path, _ns())),
    }

    def memora(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "memora", *args, "--project", str(project)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )

    r = memora("memory", "import", str(src), "--storage", "postgres")
    assert r.returncode == 0, r.stderr
    r = memora("memory", "search", "记忆", "--storage", "postgres", "--json")
    assert [x["id"] for x in json.loads(r.stdout)["results"]] == ["m1"]
    env["MEMORA_STORAGE"] = "postgres"  # the same through the environment
    r = memora("memory", "stats", "--json")
    assert json.loads(r.stdout) == {"total": 1, "by_source": {"persona": 1}}


async def test_cli_sessions_follow_the_storage(pg_dsn: str, tmp_path: Path) -> None:
    namespace = _ns()
    store = PostgresSessionStore(Database(pg_dsn), namespace)
    s = await store.create(title="from the service")
    await store.append_round(s.id, RoundRecord("r0", "q", "a"))
    await store.close()
    project = tmp_path / "p"
    (project / ".memora").mkdir(parents=True)
    (project / ".memora" / "config.json").write_text(json.dumps({"storage": "postgres"}))
    r = subprocess.run(
        [sys.executable, "-m", "memora", "sessions", "list", "--project", str(project), "--json"],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "MEMORA_POSTGRES_DSN": pg_dsn,
            "MEMORA_HOME": str(_user_namespace(tmp_path, namespace)),
        },
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    (listed,) = json.loads(r.stdout)["sessions"]
    assert listed["id"] == s.id and listed["round_count"] == 1
