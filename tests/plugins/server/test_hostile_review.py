"""A fresh-eyed hostile review of the doors #68 added or changed, against a real `memora serve`
(uvicorn on 127.0.0.1, in this process or a child) with the protocols' own clients.  Each test
here is an attack that found a door open (fixed since, so it passes) or one that held and is
kept as a guard; the module docstring of each section says which."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from memora.llm.types import LLMRequest
from memora.testing import ScriptedProvider, ScriptedResponse, text
from memora_plugin_server.config import (
    ServerSettings,
    TokenEntry,
    add_token,
    hash_token,
    load_server_settings,
    revoke_token,
)
from tests.core.test_chat_cli import Script, server  # noqa: F401

from .conftest import project_dir, read_events, scripted, scripted_home, serve
from .test_hostile_schemas_serve import health_watch, served  # noqa: F401
from .test_tool_isolation import Model
from .test_workers import _serving

pytestmark = pytest.mark.slow

# -- a schema is data (item 3) ----------------------------------------------------------------


def _fan_out(levels: int) -> dict[str, object]:
    """A schema inside every limit (3 KB, 60 ``$ref``, no cycle, no pattern) whose check of any
    answer costs 2**levels: each definition is ``allOf`` the next one twice."""
    defs: dict[str, object] = {
        f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
        for i in range(levels)
    }
    defs[f"d{levels}"] = {"type": "object"}
    return {"$defs": defs, "$ref": "#/$defs/d0"}


async def test_a_schema_whose_refs_fan_out_is_checked_under_the_deadline(
    served: str,  # noqa: F811
) -> None:
    """Found: the check's deadline was looked at only when a ``pattern`` was matched, so this
    schema — admitted by every limit — held a worker thread forever on each try of each turn
    (2**30 checks of one answer), the turn never ended, and a handful of them would have used
    up the threads every ``asyncio.to_thread`` of the server waits for.  Every keyword now looks
    at the deadline: the turn ends with the timeout named, and /health answers throughout."""
    with health_watch(served) as health:
        async with httpx2.AsyncClient(base_url=served, timeout=60) as client:
            sid = (await client.post("/v1/projects/proj/sessions", json={})).json()["id"]
            body = {"text": "a code", "output_schema": _fan_out(30)}
            turn = f"/v1/projects/proj/sessions/{sid}/turns"
            async with client.stream("POST", turn, json=body) as r:
                assert r.status_code == 200, await r.aread()
                events = await asyncio.wait_for(read_events(r), 120)
            assert events[-1].type == "error", events[-1].data
            assert "took over 2 s" in json.dumps(events[-1].data)
            # and the next turn of the session runs (nothing left holding it)
            plain = {"text": "again"}
            async with client.stream("POST", turn, json=plain) as r:
                again = await asyncio.wait_for(read_events(r), 60)
            assert again[-1].type == "done", again[-1].data
    assert health["codes"] == [200]
    times = sorted(health["times"])
    assert sum(t < 0.1 for t in times) / len(times) >= 0.97 and times[-1] < 1.0, times[-5:]


# -- forget everywhere (item 6) ---------------------------------------------------------------

SECRET = "heron-4711-kestrel"
ALICE = {"Authorization": "Bearer tok-alice"}
ALICE_ONLY = ServerSettings(
    tokens=[TokenEntry(name="alice", hash=hash_token("tok-alice"), scope="alice")]
)


def _echo(request: LLMRequest) -> ScriptedResponse:
    return text(f"noted: {request.messages[-1].content}")


@pytest.fixture(params=["one-worker", "workers", "postgres"])
def where(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, object]]:
    """How the server keeps its turns' events: in memory, in ``<data>/server/`` (workers on
    one machine), in PostgreSQL (its storage, which shares them between machines)."""
    if request.param != "postgres":
        yield {"shared": request.param == "workers"}
        return
    from memora_plugin_postgres.testing import ClusterUnavailable, temporary_cluster

    try:
        with temporary_cluster() as dsn:
            monkeypatch.setenv("MEMORA_POSTGRES_DSN", dsn)
            namespace = f"forget-{os.getpid()}-{time.time_ns()}"
            yield {
                "storage": "postgres",
                "plugin_options": {"postgres": {"namespace": namespace}},
                "load_entrypoints": True,  # the postgres plugin
            }
    except ClusterUnavailable as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"PostgreSQL tests cannot run: {exc}")
        pytest.skip(f"PostgreSQL tests SKIPPED: {exc}")


async def test_forget_everywhere_leaves_no_turn_events_holding_the_text(
    tmp_path: Path, where: dict[str, object]
) -> None:
    """Found: after ``forget?everywhere=1`` the session's log and the memory were clean, but
    the server still replayed the turn that said it — ``GET …/turns/{turn}/events`` from the
    turn logs a server keeps for clients that reconnect, in memory and (with workers) in
    ``<data>/server/turns/`` — and that file kept the words on disk.  They go now with the
    rest; then nothing under the data folder holds the words (SQLite, JSONL logs)."""
    project = project_dir(tmp_path)
    provider = ScriptedProvider(default=_echo)
    options = {**scripted(tmp_path, provider), **where}
    async with serve(project, settings=ALICE_ONLY, **options) as srv:
        runtime = srv.app.state.hub.project("proj").runtime
        async with httpx2.AsyncClient(base_url=srv.url, timeout=30) as client:
            made = await client.post("/v1/projects/proj/sessions", json={}, headers=ALICE)
            base = f"/v1/projects/proj/sessions/{made.json()['id']}"
            said = {"text": f"my code is {SECRET}"}
            async with client.stream("POST", f"{base}/turns", json=said, headers=ALICE) as r:
                turn = r.headers["x-memora-turn"]
                assert (await read_events(r))[-1].type == "done"
            events = f"{base}/turns/{turn}/events"
            assert SECRET in (await client.get(events, headers=ALICE)).text  # kept, so far
            memory = ""
            for _ in range(200):  # the round's memory is written after `done`
                hits = await runtime.memory.for_scope("alice").search("heron", limit=5)
                if hits:
                    memory = hits[0].record.id
                    break
                await asyncio.sleep(0.05)
            assert memory
            forgot = await client.post(
                f"/v1/projects/proj/memory/{memory}/forget?everywhere=1", headers=ALICE
            )
            assert forgot.status_code == 201, forgot.text
            replay = await client.get(events, headers=ALICE)
            assert SECRET not in replay.text, replay.text[:500]
            assert replay.status_code == 404, replay.text[:300]
            session = await client.get(base, headers=ALICE)
            assert session.status_code == 200 and SECRET not in session.text
            # the session goes on
            async with client.stream(
                "POST", f"{base}/turns", json={"text": "and now?"}, headers=ALICE
            ) as r:
                assert (await read_events(r))[-1].type == "done"
        data = Path(runtime.options.data_dir)
        holding = [p for p in data.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
        assert holding == [], holding
        if where.get("storage") == "postgres":  # the turn events the workers share, there
            import psycopg

            with psycopg.connect(os.environ["MEMORA_POSTGRES_DSN"]) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM memora_server_events WHERE data LIKE %s",
                    (f"%{SECRET}%",),
                ).fetchone()
            assert row is not None and row[0] == 0, row


# -- fail closed on tokens (item 4) -----------------------------------------------------------


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    return int(stat[stat.rfind(b")") + 2 :].split()[1])


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its parent does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] != b"Z"


def test_a_worker_restarted_after_the_last_token_is_revoked_comes_up_closed(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    """Found: ``memora serve --workers 2`` kept refusing everyone after the last token was
    revoked — until uvicorn restarted a worker (a crash, a failed health check, SIGHUP to the
    supervisor): the new worker read ``server.json``, found no token and came up open to this
    machine as the owner.  A server started with tokens now hands that to every worker it
    starts, whenever it starts it."""
    url, _ = server
    env = scripted_home(tmp_path, url)
    token, _ = add_token(tmp_path / "home", "ops", projects=[], access="full")
    with _serving(tmp_path, env, "/health") as (srv, _, _):
        assert srv.request("GET", "/v1/projects").status_code == 401
        ok = srv.request("GET", "/v1/projects", headers={"Authorization": f"Bearer {token}"})
        assert ok.status_code == 200
        supervisor = _parent(int(ok.headers["x-memora-worker"]))
        revoke_token(tmp_path / "home", "ops")
        time.sleep(1.5)  # followed by every worker within a second
        assert srv.request("GET", "/v1/projects").status_code == 401
        srv.both_up()  # refused requests name their worker too
        before = set(srv.workers)
        os.kill(supervisor, signal.SIGHUP)  # uvicorn's "restart every worker", one by one
        for _ in range(600):
            if not any(_alive(int(pid)) for pid in before):
                break
            time.sleep(0.1)
        assert not any(_alive(int(pid)) for pid in before), before
        answers = [srv.request("GET", "/v1/projects") for _ in range(8)]
        workers = {r.headers.get("x-memora-worker") for r in answers}
        assert workers and not workers & before, (before, workers)
        # refused (401; 429 once the failed-auth allowance this test spent runs out), never open
        codes = {r.status_code for r in answers}
        assert 401 in codes and codes <= {401, 429}, [r.text for r in answers][:2]
        as_alice = srv.request("GET", "/v1/projects", headers={"X-Memora-User": "alice"})
        assert as_alice.status_code in (401, 429)


# -- scopes on A2A (item 1): games with names and bodies, held --------------------------------

A2A_HEADERS = {"A2A-Version": "1.0"}
ROSTER = ServerSettings(
    tokens=[
        TokenEntry(name="alice", hash=hash_token("tok-alice"), scope="alice"),
        TokenEntry(name="bob", hash=hash_token("tok-bob"), scope="bob"),
        TokenEntry(name="owner", hash=hash_token("tok-owner")),
        TokenEntry(name="backend", hash=hash_token("tok-backend"), act_for_users=True),
    ]
)
LOOK_ALIKES = [
    "project",  # the owner's key in the task store, as a user's name
    "nobody",  # the key of a context without a caller
    "refused:0",  # the prefix of a refused caller's key
    "user:alice",  # a user's key, as a name
    "Alice",
    "ALICE",
    "\uff41\uff4c\uff49\uff43\uff45",  # fullwidth "alice"
    "alice\u200b",  # a zero-width space after it
    "a\u0301lice",
]


def _rpc(method: str, params: dict[str, object]) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def _message(said: str, *, user: str | None = None, task: str | None = None) -> dict[str, object]:
    message: dict[str, object] = {
        "role": "ROLE_USER",
        "messageId": str(uuid.uuid4()),
        "parts": [{"text": said}],
    }
    if user is not None:
        message["metadata"] = {"user": user}
    if task is not None:
        message["taskId"] = task
    return {"message": message}


async def test_a2a_names_and_bodies_never_reach_another_users_task(tmp_path: Path) -> None:
    """Held: a backend token naming users whose names collide with the task store's owner keys
    (``project``, ``nobody``, ``refused:…``, ``user:alice``) or look like alice (case, full
    width, a zero-width space, a combining accent) finds neither alice's task nor the owner's;
    bob's token naming alice in ``metadata.user``, in the header, or both disagreeing, gets a
    refusal; a batch and a body that is not JSON are refused by the SDK with nothing run."""
    project = project_dir(tmp_path)
    provider = ScriptedProvider(default=_echo)
    async with (
        serve(project, settings=ROSTER, **scripted(tmp_path, provider)) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=30) as client,
    ):
        seen: list[tuple[str, str, str]] = []  # who, what was sent, what came back

        async def rpc(token: str, body: object, **headers: str) -> str:
            sent = {"Authorization": f"Bearer {token}", **A2A_HEADERS, **headers}
            said = (await client.post("/a2a/proj", json=body, headers=sent)).text
            seen.append((token, json.dumps(body) + json.dumps(headers), said))
            return said

        mine = json.loads(await rpc("tok-alice", _rpc("SendMessage", _message(SECRET))))
        alice_task = mine["result"]["task"]["id"]
        owned = json.loads(await rpc("tok-owner", _rpc("SendMessage", _message("owner's"))))
        owner_task = owned["result"]["task"]["id"]
        del seen[:]

        for name in LOOK_ALIKES:
            if name.isascii():  # a header value; every name goes in a message's metadata
                await rpc("tok-backend", _rpc("ListTasks", {}), **{"X-Memora-User": name})
                for task in (alice_task, owner_task):
                    await rpc(
                        "tok-backend", _rpc("GetTask", {"id": task}), **{"X-Memora-User": name}
                    )
            for task in (alice_task, owner_task, None):
                said = _message("what did I say?", user=name, task=task)
                await rpc("tok-backend", _rpc("SendMessage", said))
        for headers, user in (
            ({"X-Memora-User": "alice"}, None),
            ({}, "alice"),
            ({"X-Memora-User": "bob"}, "alice"),
            ({"X-Memora-User": "alice"}, "bob"),
        ):
            said = _message("what did I say?", user=user, task=alice_task)
            await rpc("tok-bob", _rpc("SendMessage", said), **headers)
            await rpc("tok-bob", _rpc("ListTasks", {}), **headers)
        await rpc("tok-bob", [_rpc("GetTask", {"id": alice_task}), _rpc("ListTasks", {})])
        raw = await client.post(
            "/a2a/proj",
            content=b'{"jsonrpc": "2.0", "method": "ListTasks", "params": {',
            headers={"Authorization": "Bearer tok-bob", "X-Memora-User": "alice", **A2A_HEADERS},
        )
        seen.append(("tok-bob", "not json", raw.text))
        marks = (SECRET, "heron", "owner's", alice_task, owner_task)
        leaked = [
            (who, sent[:200], [m for m in marks if m in said and m not in sent])
            for who, sent, said in seen
            if any(m in said and m not in sent for m in marks)
        ]
        assert leaked == [], leaked
        # a message naming another's task never continued it: "not found" (or refused)
        continued = [
            (who, said[:200])
            for who, sent, said in seen
            if "SendMessage" in sent
            and (alice_task in sent or owner_task in sent)
            and '"error"' not in said
        ]
        assert continued == [], continued
        # and the owners still have their own
        back = json.loads(await rpc("tok-alice", _rpc("GetTask", {"id": alice_task})))
        assert SECRET in json.dumps(back["result"])
        listed = await rpc("tok-owner", _rpc("ListTasks", {}))
        assert owner_task in listed and alice_task not in listed


# -- tools and the server's own port (item 2) -------------------------------------------------

PEEK = """
import json, sys, urllib.request
base, headers = sys.argv[1], json.loads(sys.argv[2])
def get(path):
    request = urllib.request.Request(base + path, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=20) as answer:
            return answer.read().decode()
    except Exception as exc:
        return "refused: " + str(exc)
listed = get("/v1/projects/proj/sessions")
print("listed", listed[:300])
try:
    ids = [s["id"] for s in json.loads(listed)["sessions"]]
except Exception:
    ids = []
for sid in ids:
    print(get("/v1/projects/proj/sessions/" + sid))
print("peek-done")
"""


async def _bobs_command(
    client: httpx2.AsyncClient, model: Model, bob: dict[str, str], command: str
) -> str:
    """Bob's turn runs ``command`` (approved by bob); what the command gave the model."""
    made = await client.post("/v1/projects/proj/sessions", json={}, headers=bob)
    base = f"/v1/projects/proj/sessions/{made.json()['id']}"
    args = json.dumps({"command": command, "timeout": 60})
    async with client.stream(
        "POST", f"{base}/turns", json={"text": f"TOOL run_command {args}"}, headers=bob
    ) as r:
        events = await read_events(r)
    if events[-1].type == "paused":
        call = next(e.data["tool_call_id"] for e in events if e.type == "approval_pending")
        async with client.stream(
            "POST", f"{base}/approvals/{call}", json={"decision": "approve"}, headers=bob
        ) as r:
            events += await read_events(r)
    assert events[-1].type == "done", events[-1].data
    return model.results[-1]


async def _alice_says_it(client: httpx2.AsyncClient, alice: dict[str, str]) -> None:
    made = await client.post("/v1/projects/proj/sessions", json={}, headers=alice)
    base = f"/v1/projects/proj/sessions/{made.json()['id']}"
    said = {"text": f"my code is {SECRET}"}
    async with client.stream("POST", f"{base}/turns", json=said, headers=alice) as r:
        assert (await read_events(r))[-1].type == "done"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux namespaces")
async def test_bobs_command_gets_nothing_from_the_servers_own_port_with_tokens(
    tmp_path: Path,
) -> None:
    """Held: with tokens, bob's approved command that calls the server on 127.0.0.1 — as
    alice, by ``X-Memora-User``, with no token and with bob's own — gets a refusal or bob's
    own sessions: no token is in its environment or in a folder it can read."""
    project = project_dir(tmp_path)
    model = Model()
    settings = ServerSettings(tokens=[*ROSTER.tokens])
    async with (
        serve(
            project, settings=settings, **scripted(tmp_path, ScriptedProvider(default=model))
        ) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=60) as client,
    ):
        await _alice_says_it(client, {"Authorization": "Bearer tok-alice"})
        bob = {"Authorization": "Bearer tok-bob"}
        tries = [{"X-Memora-User": "alice"}, {}, {"Authorization": "Bearer $MEMORA_TOKEN"}]
        for headers in tries:
            command = f"python3 -c {shlex.quote(PEEK)} {srv.url} {shlex.quote(json.dumps(headers))}"
            seen = await _bobs_command(client, model, bob, command)
            assert "peek-done" in seen, seen
            assert SECRET not in seen and "401" in seen, seen
        env = await _bobs_command(client, model, bob, "env; echo env-done")
        assert "env-done" in env and "tok-" not in env and "Bearer" not in env, env


async def test_a_server_without_tokens_names_no_user(tmp_path: Path) -> None:
    """Found: without tokens every process of this machine was the owner and could name any
    user — bob's approved command among them: it called the server's port with
    ``X-Memora-User: alice`` and read her sessions, the data folder hidden from it or not.  A
    server without tokens serves one person now: naming a user is ``403`` on every door (the
    header, a body's ``user``, A2A ``metadata.user``, AG-UI ``forwardedProps.user``) and says
    to add tokens; the owner's own requests, naming nobody, work as before."""
    project = project_dir(tmp_path)
    async with (
        serve(project, **scripted(tmp_path, ScriptedProvider(default=Model()))) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=60) as client,
    ):
        alice = {"X-Memora-User": "alice"}
        refused = [
            await client.post("/v1/projects/proj/sessions", json={}, headers=alice),
            await client.post("/v1/projects/proj/sessions", json={"user": "alice"}),
            await client.get("/v1/projects/proj/sessions", headers=alice),
            await client.get("/v1/projects/proj/memory/search?q=code", headers=alice),
        ]
        for r in refused:
            assert r.status_code == 403, r.text
            error = r.json()["error"]
            assert error["code"] == "FORBIDDEN" and "serve-tokens add" in error["message"]
        message = {
            "messageId": "m1",
            "role": "user",
            "parts": [{"kind": "text", "text": "hi"}],
            "metadata": {"user": "alice"},
        }
        body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
        said = (await client.post("/a2a/proj", json=body)).text
        assert "serve-tokens add" in said and SECRET not in said, said
        run = {
            "threadId": "t1",
            "runId": "r1",
            "state": {},
            "messages": [{"id": "m1", "role": "user", "content": "hi"}],
            "tools": [],
            "context": [],
            "forwardedProps": {"user": "alice"},
        }
        agui = await client.post("/v1/projects/proj/ag-ui", json=run)
        assert agui.status_code == 403, agui.text
        # the owner, naming nobody
        made = await client.post("/v1/projects/proj/sessions", json={})
        assert made.status_code in (200, 201), made.text


async def test_a_token_rotated_within_one_clock_tick_is_seen(tmp_path: Path) -> None:
    """Found: the server noticed a changed ``server.json`` by its modification time and size.
    A token rotated by a rewrite of the same size within one tick of the file system's clock
    (a coarse one: milliseconds) — here made so by setting the old time back — went unseen, and
    the revoked token kept working.  The inode and change time are looked at too: every write
    of the file is a new one."""
    project = project_dir(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    old, _ = add_token(home, "ci", projects=[], access="full")
    path = home / "server.json"
    async with (
        serve(
            project,
            settings=load_server_settings(home),
            settings_dir=home,
            **scripted(tmp_path, ScriptedProvider()),
        ) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=30) as client,
    ):
        before = path.stat()
        assert (await client.get("/v1/projects", headers=_bearer(old))).status_code == 200
        await asyncio.sleep(1.1)  # the server has looked at the file as it is
        assert (await client.get("/v1/projects", headers=_bearer(old))).status_code == 200
        new = "mem_" + "n" * (len(old) - 4)
        settings = json.loads(path.read_text())
        settings["tokens"][0]["hash"] = hash_token(new)  # same length: same size
        fresh = home / "server.json.new"
        fresh.write_text(json.dumps(settings, indent=2) + "\n")
        os.replace(fresh, path)
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert path.stat().st_size == before.st_size
        await asyncio.sleep(1.2)  # followed within a second
        assert (await client.get("/v1/projects", headers=_bearer(old))).status_code == 401
        assert (await client.get("/v1/projects", headers=_bearer(new))).status_code == 200


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_server_json_made_a_pipe_or_a_folder_keeps_the_server_answering_and_closed(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    """Found: ``server.json`` replaced by a named pipe stalled the whole server for good — the
    running server reads the file again on the event loop, and reading a pipe waits for a
    writer; replaced by a folder, it answered ``500`` with a traceback.  Neither is read now:
    the server keeps its tokens in force, says why in its log, and answers."""
    url, _ = server
    env = scripted_home(tmp_path, url)
    home = tmp_path / "home"
    token, _ = add_token(home, "ops", projects=[], access="full")
    path = home / "server.json"
    saved = path.read_bytes()
    with _serving(tmp_path, env, "/health") as (srv, _, _):
        for make in (os.mkfifo, os.mkdir):
            path.unlink()
            make(path)
            time.sleep(1.5)  # followed within a second, by every worker
            for _ in range(6):  # either worker
                with srv.client() as c:
                    assert c.get("/health", timeout=10).status_code == 200
                    mine = c.get("/v1/projects", headers=_bearer(token), timeout=10)
                    assert mine.status_code == 200, mine.text
                    # refused: 401, or 429 once this test spent its failed-auth allowance
                    assert c.get("/v1/projects", timeout=10).status_code in (401, 429)
            (path.rmdir if path.is_dir() else path.unlink)()
            path.write_bytes(saved)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux namespaces")
async def test_bobs_command_finds_nothing_of_a_data_folder_outside_the_project(
    tmp_path: Path,
) -> None:
    """Held: with the data folder outside the project (``data_dir``), bob's approved commands
    reach none of alice's words — not by its path, not through a link from the project, not
    in its SQLite write-ahead files, not by a hard link made to them (the folder is empty for
    the command: there is nothing to link), not under /dev/shm."""
    project = project_dir(tmp_path)
    data = tmp_path / "elsewhere" / "data"
    model = Model()
    async with (
        serve(
            project,
            settings=ServerSettings(tokens=[*ROSTER.tokens]),
            data_dir=data,
            **scripted(tmp_path, ScriptedProvider(default=model)),
        ) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=60) as client,
    ):
        await _alice_says_it(client, {"Authorization": "Bearer tok-alice"})
        assert any(SECRET.encode() in p.read_bytes() for p in data.rglob("*") if p.is_file())
        (project / "shortcut").symlink_to(data)
        part = SECRET[6:14]  # not the command's own text echoed back
        commands = [
            f"grep -r -a -o {part} {tmp_path} {project}/shortcut/ /dev/shm 2>/dev/null; echo g",
            f"for f in {data}/*.db* {data}/*/*; do ln $f {project}/got-$(basename $f); done; "
            f"cat {project}/got-* 2>&1 | grep -a -o {part}; echo linked",
            f"ls -la {data} {project}/shortcut/; echo listed",
        ]
        bob = {"Authorization": "Bearer tok-bob"}
        for command, done in zip(commands, ("g", "linked", "listed"), strict=True):
            seen = await _bobs_command(client, model, bob, command)
            assert seen.rstrip().endswith(done), seen  # it ran to its end
            assert SECRET not in seen and part not in seen, seen
        assert not list(project.glob("got-*")) or all(
            SECRET.encode() not in p.read_bytes() for p in project.glob("got-*")
        )


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux namespaces")
async def test_bobs_command_cannot_read_keys_when_the_config_folder_holds_the_project(
    tmp_path: Path,
) -> None:
    """Found: a deployment that keeps its projects inside memora's user folder (``--config-dir
    /srv/memora``, projects in ``/srv/memora/projects/``) got a warning in the log, and every
    user's commands read ``keys.json`` (the provider keys) and ``seal.key`` there: the folder
    cannot be hidden without hiding the project.  Such a layout's commands are refused now,
    saying why (file tools never left the project)."""
    home = tmp_path / "memora-home"
    project = project_dir(home / "projects", "proj")
    home.chmod(0o700)
    (home / "keys.json").write_text(json.dumps({"shop": "sk-" + SECRET}))
    os.chmod(home / "keys.json", 0o600)
    model = Model()
    async with (
        serve(
            project,
            settings=ServerSettings(tokens=[*ROSTER.tokens]),
            provider=ScriptedProvider(default=model),
            config_dir=home,
            load_entrypoints=False,
        ) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=60) as client,
    ):
        bob = {"Authorization": "Bearer tok-bob"}
        seen = await _bobs_command(client, model, bob, f"cat {home}/keys.json; echo done")
        assert SECRET not in seen, seen
        assert "holds the project" in seen and "refused" in seen, seen
