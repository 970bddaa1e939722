"""A hostile review (H11) of the pass that writes the end of a turn a dead worker left without
one (#71 soak finding 4: ``takeover._end_orphans``, ``orphans()``), against a real ``memora
serve`` (uvicorn on 127.0.0.1, in this process) with the workers' file state and DBOS's own
journal.  Each test is an attack: "Found" — the door was open (fixed since); "Held" — kept as a
guard."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import httpx2
import pytest

from memora import ProjectRuntime
from memora.testing import ScriptedProvider, text, tool_call

from .conftest import project_dir, read_events, serve
from .test_hostile_durable import durable

pytestmark = pytest.mark.slow

pytest.importorskip("dbos")

END = "END\n"


async def until(done: Callable[[], bool], seconds: float = 20.0) -> bool:
    """Whether ``done()`` came true within ``seconds`` (a bound on a hang, not a timing)."""
    for _ in range(int(seconds / 0.1)):
        if done():
            return True
        await asyncio.sleep(0.1)
    return done()


def plant_turn(turns: Path, session: str, turn: str, events: str = "") -> Path:
    """A turn left without its end, as a dead worker (or a cloned project) leaves one."""
    folder = turns / session
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "current").write_text(turn)
    path = folder / f"{turn}.jsonl"
    path.write_text(events)
    return path


async def sessions(project: Path, config: Path, *names: str) -> None:
    """Sessions ``names`` in ``project``, a round each (what a cloned project can bring)."""
    data = project / ".memora" / "data"
    provider = ScriptedProvider(default=text("hi"))
    async with ProjectRuntime(
        project_path=project, data_dir=data, config_dir=config, provider=provider
    ) as runtime:
        for name in names:
            agent = await runtime.agent(session_id=name)
            [_ async for _ in agent.chat("hello")]


def ended(path: Path) -> bool:
    return path.is_file() and path.read_text().endswith(END)


# -- what a cloned project (or another local user) plants in the file state -------------------


async def test_a_planted_turn_file_never_makes_the_orphan_pass_write_outside_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found: the pass looks in ``<data>/server/turns/*/current`` — a project's folder, which
    a cloned repository fills — and wrote the end of every turn it named that had none.  A
    turn file that is a symlink (git keeps those) had ``TURN_LOST`` and ``END`` appended to
    whatever it pointed at — after cutting that file back to its last newline; a session
    folder that is a symlink had its ``current`` replaced.  Only real files in real folders
    are ended now; the planted ones are left as they are."""
    project = project_dir(tmp_path, "cloned")
    turns = project / ".memora" / "data" / "server" / "turns"
    victim = tmp_path / "victim.txt"
    victim.write_text("line one\nkept without a newline")
    elsewhere = tmp_path / "elsewhere"
    plant_turn(tmp_path, "elsewhere", "t_2")
    (elsewhere / "current").write_text("t_2")
    (turns / "s1").mkdir(parents=True)
    (turns / "s1" / "current").write_text("t_1")
    (turns / "s1" / "t_1.jsonl").symlink_to(victim)
    (turns / "s2").symlink_to(elsewhere)
    control = plant_turn(turns, "s3", "t_3")  # a real one: the pass did run
    await sessions(project, tmp_path / "attacker", "s1", "s2", "s3")
    options = durable(tmp_path, ScriptedProvider(default=text("hi")), monkeypatch)
    async with serve(project, shared=True, **options):
        assert await until(lambda: ended(control)), "the orphan pass never ran"
        await asyncio.sleep(0.5)
    assert victim.read_text() == "line one\nkept without a newline"
    assert (elsewhere / "t_2.jsonl").read_text() == ""
    assert (elsewhere / "current").read_text() == "t_2"


async def test_a_planted_fifo_never_stops_the_take_over_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found: the pass read each session's ``current`` and the tail of its turn file with a
    plain open — a fifo planted there (or a ``current`` that is one) blocked its thread for
    good, and with it every later pass of the worker: no turn a dead worker left was ended
    or taken over again (nor could the server's thread pool shut down).  Only regular files
    are read now, never waiting on one."""
    project = project_dir(tmp_path, "cloned")
    turns = project / ".memora" / "data" / "server" / "turns"
    (turns / "s0").mkdir(parents=True)
    (turns / "s0" / "current").write_text("t_0")
    fifos = [turns / "s0" / "t_0.jsonl", turns / "s9" / "current"]
    (turns / "s9").mkdir()
    for fifo in fifos:
        os.mkfifo(fifo)
    control = plant_turn(turns, "s3", "t_3")
    await sessions(project, tmp_path / "attacker", "s0", "s3", "s9")
    options = durable(tmp_path, ScriptedProvider(default=text("hi")), monkeypatch)
    try:
        async with serve(project, shared=True, **options) as srv:
            assert await until(lambda: ended(control), 10), "the pass is stuck on a fifo"
            async with httpx2.AsyncClient(base_url=srv.url, timeout=30) as client:
                assert (await client.get("/health")).status_code == 200
    finally:  # a reader blocked on a fifo (the code as it was) is let go: the test ends
        for fifo in fifos:
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


# -- a pause the dead worker had shared --------------------------------------------------------


async def test_a_pause_saved_before_its_worker_died_is_kept_and_ended_as_paused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found: a worker saves a paused turn's pause for every worker, then writes the turn's
    end.  Killed between the two, the turn's workflow had ended (a pause ends it) and no live
    worker held the session — the orphan pass found no stored round of it, told its
    followers ``TURN_LOST`` and settled the session with no pause: the approval the user was
    about to give was gone with it.  The pass now ends such a turn ``paused``, the pause kept,
    and the approval goes on as usual."""
    project = project_dir(tmp_path)
    call = ("write_file", {"path": "a.txt", "content": "x"}, "c1")
    provider = ScriptedProvider([tool_call(call), text("written")])
    options = durable(tmp_path, provider, monkeypatch)
    async with (
        serve(project, shared=True, approvals="ask", **options) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=60) as client,
    ):
        sid = (await client.post("/v1/projects/proj/sessions", json={})).json()["id"]
        base = f"/v1/projects/proj/sessions/{sid}"
        run = (
            await client.post(f"{base}/turns", json={"text": "write", "background": True})
        ).json()
        async with client.stream("GET", run["events"]) as r:
            events = await read_events(r)
        assert events[-1].type == "paused"
        path = project / ".memora" / "data" / "server" / "turns" / sid / f"{run['turn_id']}.jsonl"
        # the worker died after saving the pause, before writing `paused` and END
        lines = path.read_text().splitlines(keepends=True)
        assert lines[-1] == END and json.loads(lines[-2])["type"] == "paused"
        path.write_text("".join(lines[:-2]))
        assert await until(lambda: ended(path)), "the turn was never ended"
        last = json.loads(path.read_text().splitlines()[-2])
        assert last["type"] == "paused", last
        assert (await client.get(f"{base}/pause")).status_code == 200
        approve = {"decision": "approve"}
        async with client.stream("POST", f"{base}/approvals/c1", json=approve) as r:
            assert r.status_code == 200, await r.aread()
            after = await read_events(r)
        assert after[-1].type == "done" and after[-1].data["answer"] == "written"
    assert (project / "a.txt").read_text() == "x"


# -- many orphans ----------------------------------------------------------------------------


async def test_a_turn_left_in_a_session_that_is_gone_is_ended_once_not_every_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found: a turn left without its end in a session the store no longer has (deleted
    since the worker died, or a folder that was never this project's session) failed every
    pass — "no session" — and was tried again every 3 s for good: 2,000 of them cost 2.5 s
    of each pass (a lock, a journal query and a read each), and the pass also holds up the
    take-over of dead workers' turns.  Such a turn is now ended ``TURN_LOST`` once."""
    project = project_dir(tmp_path)
    turns = project / ".memora" / "data" / "server" / "turns"
    left = [plant_turn(turns, f"gone{i}", f"t_{i}", '{"type": "text", "round_id": "r"}\n')
            for i in range(3)]  # fmt: skip
    options = durable(tmp_path, ScriptedProvider(default=text("hi")), monkeypatch)
    async with serve(project, shared=True, **options):
        assert await until(lambda: all(ended(p) for p in left)), "tried again, never ended"
    for path in left:
        last = json.loads(path.read_text().splitlines()[-2])
        assert last["code"] == "TURN_LOST", last


# -- PostgreSQL: a worker whose presence looks dead ------------------------------------------


async def test_a_worker_whose_presence_connection_dropped_still_holds_its_sessions(
    pg_dsn: str,
) -> None:
    """Found: a worker holds a session's lock by its presence connection — and when that
    connection went (a restart of PostgreSQL's side, a proxy's idle timeout, an operator's
    pg_terminate_backend) the worker never made another: every session it held, and every
    one it took afterwards, looked free to the other workers for good.  Their take-over pass
    (every second) and orphan pass (every 3 s) took a live worker's sessions — a durable turn
    running there was run again beside it.  The worker now makes a new presence connection
    and names it on the sessions it holds."""
    from psycopg import AsyncConnection

    from memora_plugin_postgres.database import Database
    from memora_plugin_server.pg_shared import PgSharedState

    namespace = f"presence-{time.time_ns()}"
    dbs = [Database(pg_dsn), Database(pg_dsn)]
    alive, other = (PgSharedState(db, namespace) for db in dbs)
    await alive.start()
    await other.start()
    try:
        lease = await alive.try_lock("s1")
        assert lease is not None and await other.alive("s1")
        for cut in range(2):  # and again: the new connection is kept too
            before = alive.presence
            async with await AsyncConnection.connect(pg_dsn, autocommit=True) as admin:
                await admin.execute("SELECT pg_terminate_backend(%s)", (before[0],))
            await asyncio.sleep(0.5)  # the worker notices its connection went
            held = [await other.alive("s1")]
            for _ in range(50):
                if held[-1]:
                    break
                await asyncio.sleep(0.1)
                held.append(await other.alive("s1"))
            assert held[-1], f"cut {cut}: a live worker's session looks free to the others"
            assert await other.try_lock("s1") is None
            renewed = alive.presence
            await asyncio.sleep(1.0)
            assert alive.presence == renewed != before  # one new connection, not a churn
        later = await alive.try_lock("s2")  # a turn it starts afterwards
        assert later is not None and await other.alive("s2") and await other.try_lock("s2") is None
        await lease.release()
        await later.release()
        assert not await other.alive("s1") and not await other.alive("s2")
    finally:
        for state in (alive, other):
            await state.close()
        for db in dbs:
            await db.close()
