"""A fresh-eyed hostile review of #71's doors — durable turns (``"turn_executor": "dbos"``) and
background turns — against a real ``memora serve`` (uvicorn on 127.0.0.1, in this process) with
DBOS's own journal.  Each test is an attack: one that found a door open (fixed since, so it
passes) says "Found"; one that held and is kept as a guard says "Held"."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from memora import ProjectRuntime
from memora.llm.types import FinishDelta, LLMRequest, TextDelta
from memora.testing import ScriptedProvider, ScriptedResponse, text, tool_call
from memora_plugin_server.config import ServerSettings, TokenEntry, hash_token
from tests.plugins.test_dbos_hostile import make_journal, plant
from tests.small_disk import fill, small_disk

from .conftest import project_dir, read_events, serve

pytestmark = pytest.mark.slow

pytest.importorskip("dbos")

from memora_plugin_dbos.executor import project_tag  # noqa: E402

ALICE = {"Authorization": "Bearer tok-alice"}
BOB = {"Authorization": "Bearer tok-bob"}
READER = {"Authorization": "Bearer tok-reader"}
ROSTER = ServerSettings(
    tokens=[
        TokenEntry(name="alice", hash=hash_token("tok-alice"), scope="alice"),
        TokenEntry(name="bob", hash=hash_token("tok-bob"), scope="bob"),
        TokenEntry(name="reader", hash=hash_token("tok-reader"), scope="alice", access="read"),
    ]
)


def durable(
    tmp_path: Path, provider: object, monkeypatch: pytest.MonkeyPatch, **dbos: object
) -> dict[str, object]:
    """`create_app` options: ``provider``, a user config of the test's own choosing durable
    turns (``"turn_executor": "dbos"``, ``plugins.dbos`` = ``dbos``), the dbos plugin loaded."""
    user = tmp_path / "user"
    user.mkdir(exist_ok=True)
    config: dict[str, object] = {"turn_executor": "dbos"}
    if dbos:
        config["plugins"] = {"dbos": dbos}
    (user / "config.json").write_text(json.dumps(config))
    monkeypatch.setenv("MEMORA_LOAD_PLUGINS", "dbos")
    return {"provider": provider, "config_dir": user, "load_entrypoints": True}


def slow(words: int = 40, delay: float = 0.05) -> ScriptedResponse:
    """An answer streamed one word every ``delay`` seconds (a turn that runs a while)."""
    deltas = [TextDelta("word ") for _ in range(words)]
    return ScriptedResponse([*deltas, FinishDelta("stop")], delay=delay)


def agui(thread: str, said: str = "hello") -> dict[str, object]:
    return {
        "threadId": thread,
        "runId": f"run-{thread}",
        "messages": [{"id": "u1", "role": "user", "content": said}],
    }


async def sse(response: httpx2.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON events of a server-sent event stream, as they come."""
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            yield json.loads(line[6:])


# -- one journal, many sessions: whose turns a session's verbs reach ----------------------------


async def test_bobs_abort_in_his_project_never_cancels_alices_turn_in_hers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found: a durable turn's journal key is ``memora:<session>:<round>:<run>`` — no project —
    and one process keeps every project's turns in one journal.  Bob's abort of his own idle
    session ``t1`` in project b (an AG-UI thread, whose id the client chooses) gave up every
    unfinished turn of any session ``t1``: alice's, running in project a, cancelled in the
    middle of her answer."""
    folders = {name: project_dir(tmp_path, name) for name in ("a", "b")}
    provider = ScriptedProvider([text("bob's"), slow()])
    journal = f"sqlite:///{tmp_path / 'journal.sqlite'}"
    options = durable(tmp_path, provider, monkeypatch, system_database_url=journal)
    alice_project, bob_project = "a", "b"
    alices = bobs = "t1"  # an AG-UI thread's id is the client's choice
    async with (
        serve(folders, settings=ROSTER, **options) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=60) as client,
    ):
        made = await client.post(f"/v1/projects/{bob_project}/ag-ui", json=agui(bobs), headers=BOB)
        assert made.status_code == 200, made.text
        ran = f"/v1/projects/{alice_project}/ag-ui"
        async with client.stream("POST", ran, json=agui(alices), headers=ALICE) as r:
            assert r.status_code == 200, await r.aread()
            seen: list[str] = []
            async for event in sse(r):
                seen.append(event["type"])
                if event["type"] == "TEXT_MESSAGE_CONTENT" and seen.count(event["type"]) == 1:
                    abort = f"/v1/projects/{bob_project}/sessions/{bobs}/abort"
                    said = await client.post(abort, headers=BOB)
                    assert said.json() == {"aborted": False}, said.text
        assert seen[-1] == "RUN_FINISHED", seen[-5:]
        assert "RUN_ERROR" not in seen


async def test_a_worker_never_takes_over_a_turn_of_another_projects_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found: with the workers' shared state (``--workers``, or PostgreSQL), every worker looks
    each second for durable turns whose session no live worker holds — asking the liveness of
    its own project's session of that id.  Alice's turn running in project a was taken over in
    project b, where bob's session has the same id: run a second time, as bob, into bob's
    session."""
    folders = {name: project_dir(tmp_path, name) for name in ("a", "b")}
    secret = "alices-secret-7731"
    provider = ScriptedProvider([text("bob's"), slow(words=60)], default=text("again"))
    journal = f"sqlite:///{tmp_path / 'journal.sqlite'}"
    options = durable(tmp_path, provider, monkeypatch, system_database_url=journal)
    async with (
        serve(folders, settings=ROSTER, shared=True, **options) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=60) as client,
    ):
        made = await client.post("/v1/projects/b/ag-ui", json=agui("t1"), headers=BOB)
        assert made.status_code == 200, made.text
        async with client.stream(
            "POST", "/v1/projects/a/ag-ui", json=agui("t1", secret), headers=ALICE
        ) as r:
            seen = [event["type"] async for event in sse(r)]
        assert seen[-1] == "RUN_FINISHED", seen[-5:]
        await asyncio.sleep(1.5)  # a take-over pass or two after alice's turn
        bobs = await client.get("/v1/projects/b/sessions/t1", headers=BOB)
        assert secret not in bobs.text, bobs.text[:2000]
        assert len(bobs.json()["rounds"]) == 1
        asked = [m.content for q in provider.requests for m in q.messages if m.role == "user"]
        assert asked.count(secret) == 1, asked


# -- a cloned project's journal ----------------------------------------------------------------


async def test_serving_a_cloned_project_never_runs_a_call_its_journal_approved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found: ``memora serve`` takes over, at its start, every unfinished durable turn in the
    journal whose session exists — and the journal was ``.memora/data/turns.sqlite``, which a
    cloned repository brings along with the session.  A kept state names the calls to make
    next, an approval among them: the planted ``write_file`` ran with no one asked, in a server
    whose approvals are ``ask``.  (Paused turns in that folder are sealed with the user's key;
    the journal was not.)  The journal is now the user's own file: the planted one is not
    read, and nothing runs."""
    project = project_dir(tmp_path, "cloned")
    data = project / ".memora" / "data"
    # the attacker's memora makes the session and a turn paused on a write, then approves it
    call = ("write_file", {"path": "pwned.txt", "content": "x"}, "c1")
    script = ScriptedProvider([text("hi"), tool_call(call)])
    async with ProjectRuntime(
        project_path=project, data_dir=data, config_dir=tmp_path / "attacker", provider=script
    ) as runtime:
        agent = await runtime.agent(session_id="s1")
        agent.approvals = "ask"
        [_ async for _ in agent.chat("hello")]
        [_ async for _ in agent.chat("write it")]
        paused = agent.paused_turn
        assert paused is not None
        paused.approve()
        state = {**paused.to_json()["turn"], "journal": 1, "runs": 1}
        paused.discard()
    journal = data / "turns.sqlite"
    await make_journal(journal)
    round_id = state["round_id"]
    tag = project_tag({"path": data})  # the victim's tag is the attacker's to compute
    for workflow_id in (f"memora:s1:{round_id}:1", f"{tag}/memora:s1:{round_id}:1"):
        plant(journal, workflow_id, state, output=None)
    provider = ScriptedProvider(default=text("done"))
    options = durable(tmp_path, provider, monkeypatch)
    async with (
        serve(project, approvals="ask", **options) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=60) as client,
    ):
        for _ in range(30):  # the take-over pass runs at the start: 3 s is many of them
            assert not (project / "pwned.txt").exists(), "the planted call ran"
            await asyncio.sleep(0.1)
        info = (await client.get("/v1/projects/cloned/sessions/s1")).json()
        assert info["running_turn"] is None and len(info["rounds"]) == 1
    assert not (project / "pwned.txt").exists()
    assert provider.requests == []


# -- background turns: who may follow, start, abort ----------------------------------------------


async def test_only_alice_follows_or_aborts_her_background_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held: alice's background turn (a durable one) is not bob's to follow, abort or start
    another in (404, as for a session that does not exist); her read-only token follows it but
    neither starts nor aborts one (403); a second background turn in her session while one runs
    is refused (409) — the same bound as a turn with a client; an abort of a session that does
    not exist, or in a project not served, is 404; and her turn ends done."""
    project = project_dir(tmp_path)
    provider = ScriptedProvider([slow(words=30)], default=text("later"))
    options = durable(tmp_path, provider, monkeypatch)
    async with (
        serve(project, settings=ROSTER, **options) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=60) as client,
    ):
        sid = (await client.post("/v1/projects/proj/sessions", json={}, headers=ALICE)).json()["id"]
        base = f"/v1/projects/proj/sessions/{sid}"
        body = {"text": "go", "background": True}
        started = await client.post(f"{base}/turns", json=body, headers=ALICE)
        assert started.status_code == 202, started.text
        events = started.json()["events"]
        tries = {
            "bob follows": await client.get(events, headers=BOB),
            "bob aborts": await client.post(f"{base}/abort", headers=BOB),
            "bob starts": await client.post(f"{base}/turns", json=body, headers=BOB),
            "bob names alice": await client.post(
                f"{base}/abort", headers={**BOB, "X-Memora-User": "alice"}
            ),
            "reader starts": await client.post(f"{base}/turns", json=body, headers=READER),
            "reader aborts": await client.post(f"{base}/abort", headers=READER),
            "alice again": await client.post(f"{base}/turns", json=body, headers=ALICE),
            "no session": await client.post("/v1/projects/proj/sessions/nope/abort", headers=ALICE),
            "no project": await client.post(
                f"/v1/projects/other/sessions/{sid}/abort", headers=ALICE
            ),
        }
        codes = {what: r.status_code for what, r in tries.items()}
        assert codes == {
            "bob follows": 404,
            "bob aborts": 404,
            "bob starts": 404,
            "bob names alice": 403,
            "reader starts": 403,
            "reader aborts": 403,
            "alice again": 409,
            "no session": 404,
            "no project": 404,
        }, {w: (r.status_code, r.text[:200]) for w, r in tries.items()}
        async with client.stream("GET", events, headers=READER) as r:
            assert r.status_code == 200
            seen = await read_events(r)
        assert seen[-1].type == "done", seen[-1].data


# -- a journal from a newer memora ---------------------------------------------------------------


async def test_a_turn_kept_by_a_newer_memora_is_named_once_and_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Found: the workers' take-over pass (every second) took over a turn whose kept state is
    of a newer journal version; the Agent refused it, naming the version — and the next pass
    did it again, forever: the session's lock taken, its Agent opened, "took over" logged, and
    each refusal written as an ``error`` into the events of the session's last turn (a
    finished one of the user's, which a client re-attaching on another worker reads after its
    ``done``).  It is now named once and left to a memora that reads it (or to an abort)."""
    project = project_dir(tmp_path)
    provider = ScriptedProvider(default=text("ok"))
    options = durable(tmp_path, provider, monkeypatch)
    async with (
        serve(project, shared=True, **options) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=60) as client,
    ):
        sid = (await client.post("/v1/projects/proj/sessions", json={})).json()["id"]
        base = f"/v1/projects/proj/sessions/{sid}"
        async with client.stream("POST", f"{base}/turns", json={"text": "hi"}) as r:
            assert (await read_events(r))[-1].type == "done"
        executor = srv.app.state.hub.projects["proj"].runtime.turn_executor
        journal = Path(executor.url.removeprefix("sqlite:///"))
        key = f"memora:{sid}:r-newer:1"
        state = {"journal": 2, "round_id": "r-newer", "session_id": sid, "user_text": "x"}
        plant(journal, f"{executor.tag}/{key}", state, output=None)
        with caplog.at_level("INFO", logger="memora.server"):
            await asyncio.sleep(3.5)  # three passes or more
        said = [r.getMessage() for r in caplog.records if key in r.getMessage()]
        assert len(said) == 1 and "version 2" in said[0], said
        async with client.stream("POST", f"{base}/turns", json={"text": "again"}) as r:
            assert (await read_events(r))[-1].type == "done"
        # the user can drop it: gone from the journal, its text with it
        assert (await client.post(f"{base}/abort")).json() == {"aborted": True}
        assert await executor.unfinished() == []
        for _ in range(100):  # the ended turns leave together, within SWEEP_SECONDS
            with contextlib.closing(sqlite3.connect(journal)) as db:
                rows = db.execute("SELECT count(*) FROM workflow_status").fetchone()[0]
            if rows == 0:
                break
            await asyncio.sleep(0.05)
        assert rows == 0
    written = [p.read_bytes() for p in (project / ".memora" / "data").rglob("*") if p.is_file()]
    assert not [t for t in written if b"journal is version" in t]


# -- the journal fails mid-turn ------------------------------------------------------------------


async def test_a_turn_whose_journal_failed_never_goes_on_after_the_session_moved_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found: a turn whose journal failed mid-turn (its disk full) ends with an error, kept up to
    its last step "to go on once the journal answers" — and the session takes the next message
    meanwhile.  The user asked again, that turn ran and was stored; at the server's next start
    the first turn was taken over anyway and went on behind the user's back: its LLM calls made
    again, its round stored after the newer one, out of order.  A turn whose session stored a
    round started after it is now given up, not taken over."""
    counter = tmp_path / "ran.txt"
    command = ("run_command", {"command": f"echo once >> {counter}"}, "c1")
    with small_disk(tmp_path / "disk", size="1m") as disk:
        project = project_dir(tmp_path)
        fillers: list[Path] = []

        def filling(request: LLMRequest) -> ScriptedResponse:
            fillers.append(fill(disk))  # the journal's disk is full from this answer on
            return tool_call(command)

        provider = ScriptedProvider(
            [filling, tool_call(command), text("done now")], default=text("behind your back")
        )
        journal = f"sqlite:///{disk / 'journal.sqlite'}"
        options = durable(tmp_path, provider, monkeypatch, system_database_url=journal)
        async with (
            serve(project, approvals="full-auto", **options) as srv,
            httpx2.AsyncClient(base_url=srv.url, timeout=60) as client,
        ):
            sid = (await client.post("/v1/projects/proj/sessions", json={})).json()["id"]
            base = f"/v1/projects/proj/sessions/{sid}"
            async with client.stream("POST", f"{base}/turns", json={"text": "run it"}) as r:
                failed = await read_events(r)
            assert failed[-1].type == "error" and "journal" in failed[-1].data["message"]
            fillers[0].unlink()  # space is back; the user asks again
            async with client.stream("POST", f"{base}/turns", json={"text": "run it"}) as r:
                assert (await read_events(r))[-1].type == "done"
        assert len(provider.requests) == 3
        async with (
            serve(project, approvals="full-auto", **options) as srv,
            httpx2.AsyncClient(base_url=srv.url, timeout=60) as client,
        ):
            executor = srv.app.state.hub.projects["proj"].runtime.turn_executor
            for _ in range(100):  # the take-over pass at the start has looked at it
                if not await executor.unfinished():
                    break
                await asyncio.sleep(0.05)
            info = (await client.get(base)).json()
        assert [(r["user"], r["assistant"]) for r in info["rounds"]] == [("run it", "done now")]
        assert len(provider.requests) == 3, [q.messages[-1].content for q in provider.requests]
        assert counter.read_text() == "once\n"


async def test_a_turn_whose_journal_failed_goes_on_under_a_new_turn_id_followers_can_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found: a turn whose journal failed mid-turn ended its events with the error; once the
    journal answered, a worker took the turn over and wrote the rest of it after that end, under
    the same turn id — where no follower reads (a follower stops at the end), while the session
    named that ended turn as its running one.  It now goes on under a new turn id, the session's
    running turn, which a follower reads to its ``done``."""
    command = ("run_command", {"command": "echo once"}, "c1")
    with small_disk(tmp_path / "disk", size="1m") as disk:
        project = project_dir(tmp_path)
        fillers: list[Path] = []

        def filling(request: LLMRequest) -> Any:
            fillers.append(fill(disk))  # the journal's disk is full from this answer on
            return tool_call(command)

        provider = ScriptedProvider([filling, slow(words=60)], default=text("unexpected"))
        journal = f"sqlite:///{disk / 'journal.sqlite'}"
        options = durable(tmp_path, provider, monkeypatch, system_database_url=journal)
        async with (
            serve(project, approvals="full-auto", shared=True, **options) as srv,
            httpx2.AsyncClient(base_url=srv.url, timeout=60) as client,
        ):
            sid = (await client.post("/v1/projects/proj/sessions", json={})).json()["id"]
            base = f"/v1/projects/proj/sessions/{sid}"
            async with client.stream("POST", f"{base}/turns", json={"text": "run it"}) as r:
                failed_turn = r.headers["x-memora-turn"]
                failed = await read_events(r)
            assert failed[-1].type == "error" and "journal" in failed[-1].data["message"]
            fillers[0].unlink()  # space is back: a take-over pass goes on with the turn
            going_on = None
            for _ in range(600):  # (the failed turn's task may still be ending at first)
                going_on = (await client.get(base)).json()["running_turn"]
                if going_on not in (None, failed_turn):
                    break
                await asyncio.sleep(0.05)
            assert going_on is not None and going_on != failed_turn
            async with client.stream("GET", f"{base}/turns/{going_on}/events") as r:
                rest = await read_events(r)
            assert rest[-1].type == "done", [e.type for e in rest[-3:]]
            async with client.stream("GET", f"{base}/turns/{failed_turn}/events") as r:
                assert [e.type for e in await read_events(r)] == [e.type for e in failed]
            rounds = (await client.get(base)).json()["rounds"]
            assert [r["status"] for r in rounds] == ["done"]


# -- forgetting while a background turn runs -----------------------------------------------------

SECRET = "heron-4711-kestrel"


@pytest.mark.parametrize("shared", [False, True], ids=["one-worker", "workers"])
async def test_forgetting_while_a_background_turn_runs_reaches_the_next_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared: bool
) -> None:
    """Found: ``forget?everywhere=1`` while a turn of the session runs (the
    normal case with a background run) cleans the store and the logs, but leaves the session's
    open Agent alone because it is busy — its window still holds the words — and nothing
    reopens it when the turn ends (with workers, the turn's own settle takes the forget's new
    version as the Agent's): the next turn sends the forgotten text to the model again."""
    project = project_dir(tmp_path)
    asked: list[str] = []

    def answer(request: LLMRequest) -> ScriptedResponse:
        asked.append("\n".join(m.content for m in request.messages))
        return text(f"noted: {request.messages[-1].content}")

    def slowly(request: LLMRequest) -> ScriptedResponse:
        asked.append("\n".join(m.content for m in request.messages))
        return slow(words=40)

    provider = ScriptedProvider([answer, slowly], default=answer)
    options = durable(tmp_path, provider, monkeypatch)
    async with (
        serve(project, settings=ROSTER, shared=shared, **options) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=60) as client,
    ):
        memory_of_alice = srv.app.state.hub.project("proj").runtime.memory.for_scope("alice")
        made = await client.post("/v1/projects/proj/sessions", json={}, headers=ALICE)
        base = f"/v1/projects/proj/sessions/{made.json()['id']}"
        said = {"text": f"my code is {SECRET}"}
        async with client.stream("POST", f"{base}/turns", json=said, headers=ALICE) as r:
            assert (await read_events(r))[-1].type == "done"
        memory = ""
        for _ in range(200):  # the round's memory is written after `done`
            hits = await memory_of_alice.search("heron", limit=5)
            if hits:
                memory = hits[0].record.id
                break
            await asyncio.sleep(0.05)
        assert memory
        body = {"text": "think it over", "background": True}
        run = (await client.post(f"{base}/turns", json=body, headers=ALICE)).json()
        forget = f"/v1/projects/proj/memory/{memory}/forget?everywhere=1"
        assert (await client.post(forget, headers=ALICE)).status_code == 201
        async with client.stream("GET", run["events"], headers=ALICE) as r:
            assert (await read_events(r))[-1].type == "done"
        before = len(asked)
        async with client.stream(
            "POST", f"{base}/turns", json={"text": "and now?"}, headers=ALICE
        ) as r:
            assert (await read_events(r))[-1].type == "done"
        assert not [a for a in asked[before:] if SECRET in a]
