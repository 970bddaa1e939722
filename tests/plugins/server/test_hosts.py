"""Two `memora serve` processes as two machines (each its own copy of the project folder) on one
PostgreSQL database: the session store and the shared turn state are there, so a session made on
one is served by the other, a pause on one is approved through the other, one turn runs per
session across both, and when one is killed mid-turn the other takes the session at once (the
dead process's connection went with it) while a follower is told the turn was lost."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.core.test_chat_cli import Script, call, say, server  # noqa: F401
from tests.plugins.server.test_workers import _events, _free_port

from .conftest import scripted_home

pytestmark = pytest.mark.slow


class Host:
    def __init__(self, name: str, root: Path, env: dict[str, str]) -> None:
        self.project = root / name / "shop"
        self.project.mkdir(parents=True)
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = (root / f"{name}.log").open("w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "memora",
                "serve",
                "--project",
                str(self.project),
                "--port",
                str(self.port),
            ],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def wait(self) -> None:
        for _ in range(600):
            try:
                if httpx2.get(self.base + "/ready", timeout=2).status_code == 200:
                    return
            except httpx2.TransportError:
                pass
            assert self.proc.poll() is None, Path(self.log.name).read_text()
            time.sleep(0.1)
        raise AssertionError("did not start")

    def request(self, method: str, path: str, **kwargs: Any) -> httpx2.Response:
        with httpx2.Client(base_url=self.base, timeout=60) as c:
            return c.request(method, path, **kwargs)

    def turn(self, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
        r = self.request("POST", path, json=body)
        assert r.status_code == 200, r.text
        return [c for _, c in _events(iter(r.text.splitlines()))]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


@contextlib.contextmanager
def durable_hosts(tmp_path: Path, url: str, pg_dsn: str, name: str) -> Iterator[tuple[Host, Host]]:
    """Hosts A and B of one project on one PostgreSQL (its namespace ``name``-unique), with
    durable turns (dbos) and full-auto approvals, both ready; stopped after."""
    env = scripted_home(
        tmp_path,
        url,
        storage="postgres",
        plugins={"postgres": {"namespace": f"{name}-{os.getpid()}-{time.time_ns()}"}},
        turn_executor="dbos",
        approvals="full-auto",
    )
    env["MEMORA_POSTGRES_DSN"] = pg_dsn
    a, b = Host("a", tmp_path, env), Host("b", tmp_path, env)
    try:
        a.wait()
        b.wait()
        yield a, b
    finally:
        a.stop()
        b.stop()


def test_two_hosts_one_database(server: tuple[str, Script], pg_dsn: str, tmp_path: Path) -> None:  # noqa: F811
    url, script = server
    env = scripted_home(
        tmp_path,
        url,
        storage="postgres",
        # both machines serve the same project: the same namespace (user config)
        plugins={"postgres": {"namespace": f"shop-{os.getpid()}-{time.time_ns()}"}},
    )
    env["MEMORA_POSTGRES_DSN"] = pg_dsn
    a, b = Host("a", tmp_path, env), Host("b", tmp_path, env)
    try:
        a.wait()
        b.wait()
        sessions = "/v1/projects/shop/sessions"
        sid = a.request("POST", sessions, json={}).json()["id"]
        base = f"{sessions}/{sid}"
        assert b.request("GET", base).status_code == 200

        # turns alternating between the hosts: each reads on from where it last read the
        # session, and the model gets every question once, in order
        for n in range(1, 6):
            script.answers += [say(f"answer {n}")]
            host = (a, b)[n % 2]
            assert host.turn(f"{base}/turns", {"text": f"问 {n}"})[-1]["type"] == "done"
            streamed = [r for r in script.requests if r.get("stream")]
            asked = [m["content"] for m in streamed[-1]["messages"] if m["role"] == "user"]
            assert asked == [f"问 {i}" for i in range(1, n + 1)], asked

        # paused on A, approved through B
        script.answers += [
            call("write_file", {"path": "out.txt", "content": "hi"}, "w1"),
            say("written"),
        ]
        assert [c["type"] for c in a.turn(f"{base}/turns", {"text": "write"})][-1] == "paused"
        assert b.request("GET", f"{base}/pause").json()["tool_call_id"] == "w1"
        assert b.request("POST", f"{base}/turns", json={"text": "x"}).status_code == 409
        assert b.turn(f"{base}/approvals/w1", {"decision": "approve"})[-1]["type"] == "done"
        assert (b.project / "out.txt").read_text() == "hi"  # ran where it was approved
        assert a.request("GET", base).json()["pause"] is None

        # one turn per session across the hosts; A killed mid-turn, B takes over at once
        script.answers += [say("very slow " * 400, delay=0.05), say("after the crash")]
        with (
            httpx2.Client(base_url=a.base, timeout=60) as c,
            c.stream("POST", f"{base}/turns", json={"text": "crash"}) as r,
        ):
            lost_turn = r.headers["x-memora-turn"]
            events = _events(r.iter_lines())
            next(ch for _, ch in events if ch["type"] == "text")
            busy = b.request("POST", f"{base}/turns", json={"text": "no"})
            assert busy.status_code == 409 and "another worker" in busy.json()["error"]["message"]
            assert b.request("GET", base).json()["running_turn"] == lost_turn
            with (
                httpx2.Client(base_url=b.base, timeout=60) as c2,
                c2.stream("GET", f"{base}/turns/{lost_turn}/events") as follower,
            ):
                lines = follower.iter_lines()
                first = next(ch for _, ch in _events(lines))
                assert first["type"] in ("thinking", "text")
                a.proc.kill()
                a.proc.wait()
                rest = [ch for _, ch in _events(lines)]
                assert rest[-1]["type"] == "error" and rest[-1]["code"] == "TURN_LOST"
        t = time.monotonic()
        chunks = b.turn(f"{base}/turns", {"text": "again"})
        assert time.monotonic() - t < 10  # no lease to wait out
        assert (
            "".join(c.get("content", "") for c in chunks if c["type"] == "text")
            == "after the crash"
        )
        rounds = b.request("GET", base).json()["rounds"]
        assert [r["status"] for r in rounds] == ["done"] * 5 + ["done", "done"]
    finally:
        a.stop()
        b.stop()


@contextlib.asynccontextmanager
async def _pg_state(dsn: str, name: str) -> AsyncIterator[Any]:
    """A started PgSharedState in a namespace of its own, closed with its pool after."""
    from memora_plugin_postgres.database import Database
    from memora_plugin_server.pg_shared import PgSharedState

    db = Database(dsn)
    state = PgSharedState(db, f"{name}-{time.time_ns()}")
    await state.start()
    try:
        yield state
    finally:
        await state.close()
        await db.close()


async def test_pg_shared_state_prunes_old_turns(pg_dsn: str) -> None:
    async with _pg_state(pg_dsn, "prune") as state:
        for turn in ("t_old", "t_new"):
            writer = await state.writer("s1", turn)
            writer.add('{"type": "done"}')
            await writer.end()
        await state._execute(
            "UPDATE memora_server_turns SET started_at = 1 WHERE namespace = %s AND turn_id = %s",
            (state.namespace, "t_old"),
        )
        assert await state.prune(3600) == 1
        assert not await state.has_turn("s1", "t_old") and await state.has_turn("s1", "t_new")
        assert [d async for _, d in state.follow("s1", "t_new")] == ['{"type": "done"}']


async def test_pg_shared_state_names_a_turn_left_without_its_end(pg_dsn: str) -> None:
    """What the take-over looks for when a worker died after its turn's workflow ended (#71
    soak finding 4): the session's current turn, not ended, held by no live worker."""
    from memora_plugin_server.pg_shared import FLUSH_SECONDS

    async with _pg_state(pg_dsn, "orphans") as state:
        lease = await state.try_lock("s1")
        assert lease is not None
        writer = await state.writer("s1", "t_1")
        writer.add('{"type": "text", "content": "答", "round_id": "r1"}')
        await asyncio.sleep(FLUSH_SECONDS * 4)  # written, as a worker's would be
        assert await state.orphans() == []  # held: running
        assert not await state.turn_ended("s1", "t_1")
        await lease.release()  # its worker died before the end
        assert await state.orphans() == [("s1", "t_1")]
        again = await state.resume_writer("s1", "t_1")
        again.add('{"type": "done", "round_id": "r1"}')
        await again.end()
        assert await state.turn_ended("s1", "t_1") and await state.orphans() == []
        assert await state.turn_ended("s1", "t_gone")


async def test_pg_shared_state_reads_a_session_view_in_one_query(pg_dsn: str) -> None:
    """The version, pause and role pack the hub checks before a turn: one query, the same
    values as the three single reads."""
    async with _pg_state(pg_dsn, "view") as state:
        assert await state.view("s1") == ("", None, None)
        version = await state.bump("s1")
        await state.set_role_pack("s1", "评审")
        await state.set_pause("s1", {"state": {"turn": {"id": "t_1"}}})
        view = await state.view("s1")
        assert view == (version, {"state": {"turn": {"id": "t_1"}}}, "评审")
        assert view == (
            await state.version("s1"),
            await state.pause("s1"),
            await state.role_pack("s1"),
        )
        await state.set_pause("s1", None)
        assert (await state.view("s1")).pause is None
        # a turn's end: pause and version in one statement
        settled = await state.settle("s1", {"state": {"turn": {"id": "t_2"}}})
        assert await state.view("s1") == (settled, {"state": {"turn": {"id": "t_2"}}}, "评审")
        cleared = await state.settle("s1", None)
        assert await state.view("s1") == (cleared, None, "评审") and cleared != settled
        # an abort asked for between turns is dropped when the next turn takes the lock, and
        # the statement that takes it reads the session's view too (the hub does not again)
        await state.request_abort("s1")
        lease = await state.try_lock("s1")
        assert lease is not None and not await state.take_abort("s1")
        assert lease.view == (cleared, None, "评审") == await state.view("s1")
        fresh = await state.try_lock("s2")
        assert fresh is not None and fresh.view == ("", None, None)
        await fresh.release()
        await state.request_abort("s1")
        assert await state.take_abort("s1")
        await lease.release()


async def test_pg_shared_state_keeps_a_sessions_last_turns(pg_dsn: str) -> None:
    """A new turn becomes the session's current one, and only its last KEPT_TURNS turns (and
    their events) stay to be replayed — all in the one statement that starts it."""
    from memora_plugin_server.pg_shared import KEPT_TURNS

    async with _pg_state(pg_dsn, "kept") as state:
        lease = await state.try_lock("s1")
        assert lease is not None
        turns = [f"t_{i}" for i in range(KEPT_TURNS + 3)]
        for turn in turns:
            writer = await state.writer("s1", turn)
            assert await state.current_turn("s1") == turn
            writer.add(f'{{"type": "text", "content": "{turn}"}}')
            await writer.end()
        await lease.release()
        kept = [t for t in turns if await state.has_turn("s1", t)]
        assert kept == turns[-KEPT_TURNS:]
        rows = await state._execute(
            "SELECT DISTINCT turn_id FROM memora_server_events WHERE namespace = %s",
            (state.namespace,),
        )
        assert sorted(r[0] for r in rows) == sorted(kept)  # the events of the others went too
        other = await state.writer("s2", "t_other")  # another session's turns are its own
        await other.end()
        assert await state.has_turn("s2", "t_other") and await state.has_turn("s1", turns[-1])


async def _collect(items: Any) -> list[str]:
    return [data async for _, data in items]


async def test_pg_shared_state_writes_a_batch_of_chunks_in_order(pg_dsn: str) -> None:
    """What streams in within FLUSH_SECONDS goes to PostgreSQL as one batch, and a follower
    reads every chunk back in order, text of any kind intact."""
    from memora_plugin_server.pg_shared import FLUSH_SECONDS

    async with _pg_state(pg_dsn, "batch") as state:
        lease = await state.try_lock("s1")
        assert lease is not None
        writer = await state.writer("s1", "t_1")
        sent = [
            json.dumps({"type": "text", "content": f"{i} 你好 'quoted' \\ {{}}"})
            for i in range(120)
        ]
        for data in sent:
            writer.add(data)
        sent.append('{"type": "done"}')
        writer.add(sent[-1])
        await writer.end()
        await lease.release()
        got = [item async for item in state.follow("s1", "t_1")]
        assert got == list(enumerate(sent, 1))
        assert [d async for _, d in state.follow("s1", "t_1", after=118)] == sent[118:]

        # a turn whose chunks came over several batches: a follower reading along gets each
        # once, in order, and the last batch goes with the end (one statement, so a follower
        # that sees the turn ended has every chunk)
        lease = await state.try_lock("s1")
        assert lease is not None
        writer = await state.writer("s1", "t_2")
        following = asyncio.create_task(_collect(state.follow("s1", "t_2")))
        more = [f'{{"type": "text", "content": "第{i}"}}' for i in range(9)]
        for n, data in enumerate(more):
            writer.add(data)
            if n % 3 == 2:
                await asyncio.sleep(FLUSH_SECONDS * 3)  # the timer's batch is written
        writer.add('{"type": "done"}')
        await writer.end()
        await lease.release()
        assert await asyncio.wait_for(following, 10) == [*more, '{"type": "done"}']


def test_two_hosts_keep_users_apart(
    server: tuple[str, Script],  # noqa: F811
    pg_dsn: str,
    tmp_path: Path,
) -> None:
    """Memory scopes on one PostgreSQL: what alice's conversation on host A stored is recalled
    for alice (and a backend acting for her) on host B, and never for bob there."""
    from memora_plugin_server.config import (
        ServerSettings,
        TokenEntry,
        hash_token,
        save_server_settings,
    )

    url, script = server
    env = scripted_home(
        tmp_path,
        url,
        storage="postgres",
        plugins={"postgres": {"namespace": f"scopes-{os.getpid()}-{time.time_ns()}"}},
    )
    env["MEMORA_POSTGRES_DSN"] = pg_dsn
    save_server_settings(
        tmp_path / "home",
        ServerSettings(
            tokens=[
                TokenEntry(name="alice", hash=hash_token("t-alice"), scope="alice"),
                TokenEntry(name="bob", hash=hash_token("t-bob"), scope="bob"),
                TokenEntry(name="backend", hash=hash_token("t-backend"), act_for_users=True),
            ]
        ),
    )

    def auth(name: str, user: str | None = None) -> dict[str, str]:
        headers = {"Authorization": f"Bearer t-{name}"}
        return headers | ({"X-Memora-User": user} if user else {})

    a, b = Host("a", tmp_path, env), Host("b", tmp_path, env)
    try:
        a.wait()
        b.wait()
        sessions = "/v1/projects/shop/sessions"
        sid = a.request("POST", sessions, json={}, headers=auth("alice")).json()["id"]
        script.answers += [say("noted")]
        r = a.request(
            "POST", f"{sessions}/{sid}/turns", json={"text": "locker 4711"}, headers=auth("alice")
        )
        assert r.status_code == 200 and '"done"' in r.text
        search = "/v1/projects/shop/memory/search?q=locker"
        hits: list[Any] = []
        for _ in range(100):  # the round's memory is written after `done`
            hits = b.request("GET", search, headers=auth("alice")).json()["hits"]
            if hits:
                break
            time.sleep(0.1)
        assert [h["scope"] for h in hits] == ["alice"]
        assert b.request("GET", search, headers=auth("bob")).json()["hits"] == []
        assert b.request("GET", f"{sessions}/{sid}", headers=auth("bob")).status_code == 404
        assert b.request("GET", sessions, headers=auth("bob")).json()["sessions"] == []
        acting = b.request("GET", search, headers=auth("backend", "alice")).json()["hits"]
        assert [h["id"] for h in acting] == [hits[0]["id"]]
        opened = b.request("GET", f"{sessions}/{sid}", headers=auth("backend", "alice"))
        assert opened.status_code == 200 and opened.json()["scope"] == "alice"
        turn = b.request(
            "POST", f"{sessions}/{sid}/turns", json={"text": "mine now?"}, headers=auth("bob")
        )
        assert turn.status_code == 404
    finally:
        a.stop()
        b.stop()


async def test_pg_an_abort_reaches_the_turns_worker_by_notification(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An abort asked through another worker wakes the worker running the turn by a
    notification, not by its next read of the flag (both reads are set to a minute here); one
    that came after the turn took its lock and before it began to wait is not lost; and when
    the notifying connection goes, the worker reads the flag every ``abort_poll`` instead."""
    from memora_plugin_server import pg_shared

    monkeypatch.setattr(pg_shared, "ABORT_CHECK_SECONDS", 60.0)
    async with _pg_state(pg_dsn, "abort") as a:
        b = pg_shared.PgSharedState(a.db, a.namespace)
        await b.start()
        try:
            a.abort_poll = 60.0
            assert a.listening and b.listening
            lease = await a.try_lock("s1")
            assert lease is not None
            waiting = asyncio.create_task(a.wait_abort("s1"))
            await asyncio.sleep(0.2)
            assert not waiting.done()
            await b.request_abort("s1")
            await asyncio.wait_for(waiting, 10)
            assert not await a.take_abort("s1")  # the wait took the request

            # asked before the wait began: the notification is kept for it
            await b.request_abort("s1")
            await asyncio.sleep(0.5)
            await asyncio.wait_for(a.wait_abort("s1"), 10)

            # another namespace's abort of a session with the same id is not this one's
            other = pg_shared.PgSharedState(a.db, a.namespace + "-other")
            await other.start()
            try:
                waiting = asyncio.create_task(a.wait_abort("s1"))
                await other.request_abort("s1")
                await asyncio.sleep(0.5)
                assert not waiting.done()
                waiting.cancel()
            finally:
                await other.close()

            # the presence connection is cut: back to reading the flag
            async with (await a.db.pool()).connection() as conn:
                await conn.execute("SELECT pg_terminate_backend(%s)", (a.presence[0],))
            for _ in range(100):
                if not a.listening:
                    break
                await asyncio.sleep(0.05)
            assert not a.listening
            assert "abort channel" in caplog.text
            a.abort_poll = 0.05
            await b.request_abort("s1")
            await asyncio.wait_for(a.wait_abort("s1"), 10)
            await lease.release()
        finally:
            await b.close()
