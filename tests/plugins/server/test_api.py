"""`memora serve`'s REST + SSE API, through a real uvicorn on 127.0.0.1 and httpx2: sessions,
turns as server-sent events (reconnecting with Last-Event-ID), approvals across requests, abort,
one turn per session, memory, role packs, the OpenAPI document, and every refusal as JSON."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx2
import pytest

from memora.testing import ScriptedProvider, text, tool_call
from memora.testing.scripted import ScriptedResponse
from memora_plugin_server.app import API, openapi_document
from tests.role_pack.helpers import write_pack

from .conftest import project_dir, read_events, scripted, serve

JSON = {"Content-Type": "application/json"}


def _options(tmp_path: Path, provider: Any) -> dict[str, Any]:
    return scripted(tmp_path, provider)


async def _session(client: httpx2.AsyncClient, project: str = "proj") -> str:
    r = await client.post(f"/v1/projects/{project}/sessions", json={"title": "t"})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def test_a_conversation_with_an_approval_across_requests(tmp_path: Path) -> None:
    project = project_dir(tmp_path)
    write = ("write_file", {"path": "out.txt", "content": "hello"}, "w1")
    provider = ScriptedProvider([tool_call(write), text("written 你好", chunks=3)])
    async with (
        serve(project, **_options(tmp_path, provider)) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=30) as client,
    ):
        sid = await _session(client)
        base = f"/v1/projects/proj/sessions/{sid}"
        async with client.stream("POST", f"{base}/turns", json={"text": "write it"}) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            turn = r.headers["x-memora-turn"]
            events = await read_events(r)
        types = [e.type for e in events]
        assert types[-2:] == ["approval_pending", "paused"]
        assert [e.id for e in events] == [f"{turn}:{n}" for n in range(1, len(events) + 1)]
        assert not (project / "out.txt").exists()

        pause = (await client.get(f"{base}/pause")).json()
        assert pause["kind"] == "approval" and pause["tool_call_id"] == "w1"
        assert pause["name"] == "write_file" and pause["args"]["path"] == "out.txt"
        # a new message while the turn waits is refused, naming what it waits for
        busy = await client.post(f"{base}/turns", json={"text": "again"})
        assert busy.status_code == 409 and busy.json()["error"]["code"] == "BUSY"

        async with client.stream("POST", f"{base}/approvals/w1", json={"decision": "approve"}) as r:
            assert r.status_code == 200
            rest = await read_events(r)
        assert [e.type for e in rest if e.type in ("tool_result", "done")] == [
            "tool_result",
            "done",
        ]
        assert "".join(e.data["content"] for e in rest if e.type == "text") == "written 你好"
        assert (project / "out.txt").read_text() == "hello"

        session = (await client.get(base)).json()
        assert session["pause"] is None and session["running_turn"] is None
        assert [r["status"] for r in session["rounds"]] == ["done"]
        assert session["rounds"][0]["assistant"] == "written 你好"

        # a client that reconnects after event 2 of the first turn gets the rest of it
        async with client.stream(
            "GET", f"{base}/turns/{turn}/events", headers={"Last-Event-ID": f"{turn}:2"}
        ) as r:
            replay = await read_events(r)
        assert [e.id for e in replay] == [e.id for e in events[2:]]
        assert [e.data for e in replay] == [e.data for e in events[2:]]


async def test_deny_and_edit(tmp_path: Path) -> None:
    project = project_dir(tmp_path)
    provider = ScriptedProvider(
        [
            tool_call(("write_file", {"path": "a.txt", "content": "model's"}, "c1")),
            text("ok"),
            tool_call(("write_file", {"path": "b.txt", "content": "x"}, "c2")),
            text("refused"),
        ]
    )
    async with (
        serve(project, **_options(tmp_path, provider)) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=30) as client,
    ):
        sid = await _session(client)
        base = f"/v1/projects/proj/sessions/{sid}"
        async with client.stream("POST", f"{base}/turns", json={"text": "one"}) as r:
            await read_events(r)
        edited = {"path": "a.txt", "content": "the user's"}
        async with client.stream(
            "POST", f"{base}/approvals/c1", json={"decision": "approve", "args": edited}
        ) as r:
            await read_events(r)
        assert (project / "a.txt").read_text() == "the user's"  # what ran is what was approved

        async with client.stream("POST", f"{base}/turns", json={"text": "two"}) as r:
            await read_events(r)
        async with client.stream(
            "POST", f"{base}/approvals/c2", json={"decision": "deny", "reason": "no"}
        ) as r:
            rest = await read_events(r)
        result = next(e for e in rest if e.type == "tool_result")
        assert result.data["blocked"] and not (project / "b.txt").exists()
        assert rest[-1].type == "done"

        # nothing paused now: an approval is a clear 400
        r = await client.post(f"{base}/approvals/c2", json={"decision": "approve"})
        assert r.status_code == 400 and "no paused turn" in r.json()["error"]["message"]


async def test_one_turn_per_session_abort_and_a_late_reader(tmp_path: Path) -> None:
    project = project_dir(tmp_path)
    slow = text("a long answer " * 20, chunks=40)
    slow = ScriptedResponse(slow.deltas, delay=0.05)
    provider = ScriptedProvider([slow], default=text("next"))
    async with (
        serve(project, **_options(tmp_path, provider)) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=30) as client,
    ):
        sid = await _session(client)
        base = f"/v1/projects/proj/sessions/{sid}"
        async with client.stream("POST", f"{base}/turns", json={"text": "go"}) as r:
            turn = r.headers["x-memora-turn"]
            first = await read_events(r, stop_after=2)  # the client goes away mid-turn
        assert len(first) == 2
        again = await client.post(f"{base}/turns", json={"text": "meanwhile"})
        assert again.status_code == 409 and again.json()["error"]["code"] == "BUSY"
        assert (await client.get(base)).json()["running_turn"] == turn

        aborted = await client.post(f"{base}/abort")
        assert aborted.json() == {"aborted": True}
        # the turn went on without its client: a reader from event 2 sees it end
        async with client.stream("GET", f"{base}/turns/{turn}/events?after=2") as r:
            rest = await read_events(r)
        assert rest[0].id == f"{turn}:3" and rest[-1].type == "aborted"

        async with client.stream("POST", f"{base}/turns", json={"text": "next"}) as r:
            assert (await read_events(r))[-1].type == "done"
        rounds = (await client.get(base)).json()["rounds"]
        assert [x["status"] for x in rounds] == ["aborted", "done"]


async def test_sessions_fork_archive_memory_role_packs(tmp_path: Path) -> None:
    project = project_dir(tmp_path)
    write_pack(project / ".memora" / "role-packs", "reviewer", persona="You review.")
    provider = ScriptedProvider([], default=text("the capital of France is Paris"))
    async with (
        serve(project, **_options(tmp_path, provider)) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=30) as client,
    ):
        sid = await _session(client)
        base = f"/v1/projects/proj/sessions/{sid}"
        async with client.stream("POST", f"{base}/turns", json={"text": "France?"}) as r:
            await read_events(r)
        listed = (await client.get("/v1/projects/proj/sessions")).json()["sessions"]
        assert [s["id"] for s in listed] == [sid]

        fork = await client.post(f"{base}/fork", json={})
        assert fork.status_code == 201 and fork.json()["rounds_copied"] == 1
        forked = fork.json()["id"]
        assert (await client.post(f"{base}/archive")).json()["archived"] is True
        listed = (await client.get("/v1/projects/proj/sessions")).json()["sessions"]
        assert [s["id"] for s in listed] == [forked]
        everything = (await client.get("/v1/projects/proj/sessions?archived=1")).json()
        assert {s["id"] for s in everything["sessions"]} == {sid, forked}

        # the round summary is written in the background after `done`
        for _ in range(100):
            stats = (await client.get("/v1/projects/proj/memory/stats")).json()
            if stats["total"]:
                break
            await asyncio.sleep(0.05)
        assert stats["by_source"].get("round_summary") == 1
        hits = (await client.get("/v1/projects/proj/memory/search?q=capital")).json()["hits"]
        assert hits and "Paris" in hits[0]["content"]

        packs = (await client.get("/v1/projects/proj/role-packs")).json()["role_packs"]
        names = [p["name"] for p in packs]
        assert "memora-default" in names and all("strategy" in p for p in packs)
        other = "reviewer"
        assert other in names
        switched = await client.post(f"{base}/role-pack", json={"name": other})
        assert switched.json() == {"active": other}
        active = (await client.get(f"/v1/projects/proj/role-packs?session={sid}")).json()
        assert [p["name"] for p in active["role_packs"] if p["active"]] == [other]
        missing = await client.post(f"{base}/role-pack", json={"name": "no-such-pack"})
        assert missing.status_code == 404

        assert (await client.get(f"{base}/tasks")).json() == {"tasks": []}
        assert (await client.get("/health")).json() == {"status": "ok"}
        assert (await client.get("/ready")).json()["projects"] == ["proj"]


async def test_bad_requests_are_json_errors_naming_the_field(tmp_path: Path) -> None:
    project = project_dir(tmp_path)
    async with (
        serve(project, **_options(tmp_path, ScriptedProvider([], default=text("x")))) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=30) as client,
    ):
        sid = await _session(client)
        base = f"/v1/projects/proj/sessions/{sid}"
        cases = [
            (await client.post(f"{base}/turns", json={}), 400, "text"),
            (await client.post(f"{base}/turns", json={"text": "x", "extra": 1}), 400, "extra"),
            (await client.post(f"{base}/turns", content=b"{", headers=JSON), 400, "not JSON"),
            (await client.post(f"{base}/turns", content=b"hi"), 415, "application/json"),
            (await client.post("/v1/projects/nope/sessions", json={}), 404, "nope"),
            (await client.get("/v1/projects/proj/sessions/missing"), 404, "missing"),
            (await client.get("/v1/projects/proj/memory/search"), 400, "q"),
            (await client.get("/v1/projects/proj/memory/search?q=a&limit=0"), 400, "limit"),
            (await client.get(f"{base}/turns/t_nope/events"), 404, "t_nope"),
            (await client.get(f"{base}/pause"), 404, "no paused turn"),
            (
                await client.post(
                    f"{base}/turns", content=b'{"text":"' + b"x" * 2_000_000 + b'"}', headers=JSON
                ),
                413,
                "over",
            ),
        ]
        for response, status, words in cases:
            assert response.status_code == status, (response.request.url, response.text)
            error = response.json()["error"]
            assert words in error["message"] and error["code"], error


def test_the_openapi_document_lists_every_route() -> None:
    doc = openapi_document()
    listed = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    assert listed == {(a.method, a.path) for a in API}
    turns = doc["paths"]["/v1/projects/{project}/sessions/{session}/turns"]["post"]
    assert "text/event-stream" in turns["responses"]["200"]["content"]
    ref = turns["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert doc["components"]["schemas"][ref.rsplit("/", 1)[1]]["required"] == ["text"]


@pytest.mark.parametrize("count", [2])
async def test_several_projects_each_with_its_own_sessions(tmp_path: Path, count: int) -> None:
    folders = [project_dir(tmp_path, f"p{i}") for i in range(count)]
    provider = ScriptedProvider([], default=text("hi"))
    async with (
        serve(folders, **_options(tmp_path, provider)) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=30) as client,
    ):
        assert (await client.get("/v1/projects")).json() == {
            "projects": [{"name": "p0"}, {"name": "p1"}]
        }
        sid = await _session(client, "p0")
        assert (await client.get(f"/v1/projects/p1/sessions/{sid}")).status_code == 404


QUESTION = {
    "questions": [{"slot": "tone", "question": "Which tone?", "options": ["dark", "light"]}]
}


async def test_a_question_answered_across_requests(tmp_path: Path) -> None:
    project = project_dir(tmp_path)
    provider = ScriptedProvider([tool_call(("ask_user", QUESTION, "q1")), text("Dark it is.")])
    options = scripted(tmp_path, provider, ask=True)
    async with (
        serve(project, **options) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=30) as client,
    ):
        sid = await _session(client)
        base = f"/v1/projects/proj/sessions/{sid}"
        async with client.stream("POST", f"{base}/turns", json={"text": "a poem"}) as r:
            events = await read_events(r)
        assert [e.type for e in events][-2:] == ["question_pending", "paused"]
        pause = (await client.get(f"{base}/pause")).json()
        assert pause["kind"] == "question"
        assert pause["questions"][0]["options"] == ["dark", "light"]
        async with client.stream(
            "POST", f"{base}/answers", json={"answers": {"tone": "dark"}}
        ) as r:
            rest = await read_events(r)
        assert rest[-1].type == "done"
        assert json.loads(provider.requests[1].messages[-1].content) == {
            "answers": {"tone": "dark"}
        }
        bad = await client.post(f"{base}/answers", json={"answers": {"tone": 3}})
        assert bad.status_code == 400 and "answers.tone" in bad.json()["error"]["message"]


async def test_a_quiet_turn_sends_keep_alives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A proxy must not close a stream that waits long for the model: a comment line goes out
    after KEEPALIVE_SECONDS without an event."""
    import memora_plugin_server.sse as app_module

    monkeypatch.setattr(app_module, "KEEPALIVE_SECONDS", 0.1)
    project = project_dir(tmp_path)
    slow = ScriptedResponse(text("late", chunks=2).deltas, delay=0.4)
    async with (
        serve(project, **_options(tmp_path, ScriptedProvider([slow]))) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=30) as client,
    ):
        sid = await _session(client)
        async with client.stream(
            "POST", f"/v1/projects/proj/sessions/{sid}/turns", json={"text": "wait"}
        ) as r:
            raw = (await r.aread()).decode()
        assert ": keep-alive" in raw
        last = raw.strip().rsplit("data: ", 1)[1]
        assert json.loads(last)["type"] == "done"
