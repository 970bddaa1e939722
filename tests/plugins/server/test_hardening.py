"""Findings of the hostile review of `memora serve` (issue #43, item 5), each a test that failed
before: limits and content rules on every route, A2A and AG-UI included (one middleware);
deep JSON is a 400; no project names without a token; Host parsed strictly; every proxy
header means "proxied"; bad edited arguments are a 400 and the pause survives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest

from memora.testing import ScriptedProvider, text, tool_call
from memora_plugin_server.config import ServerSettings, TokenEntry, hash_token

from .conftest import project_dir, read_events, scripted, serve


def _deep(levels: int) -> bytes:
    return b'{"text": "x", "deep": ' + b"[" * levels + b"]" * levels + b"}"


@pytest.mark.parametrize("route", ["rest", "agui", "a2a"])
async def test_every_route_has_the_same_body_rules(tmp_path: Path, route: str) -> None:
    project = project_dir(tmp_path)
    settings = ServerSettings(max_body_bytes=4096)
    options = scripted(tmp_path, ScriptedProvider([], default=text("hello")))
    async with (
        serve(project, settings=settings, **options) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=30) as client,
    ):
        sid = (await client.post("/v1/projects/proj/sessions", json={})).json()["id"]
        path = {
            "rest": f"/v1/projects/proj/sessions/{sid}/turns",
            "agui": "/v1/projects/proj/ag-ui",
            "a2a": "/a2a/proj",
        }[route]
        json_header = {"Content-Type": "application/json"}
        # over the size limit: 413, by Content-Length or as it arrives
        big = json.dumps({"text": "x" * 10_000}).encode()
        r = await client.post(path, content=big, headers=json_header)
        assert r.status_code == 413 and r.json()["error"]["code"] == "TOO_LARGE"

        async def chunks() -> Any:
            for _ in range(10):
                yield b" " * 1000

        r = await client.post(path, content=chunks(), headers=json_header)
        assert r.status_code == 413
        # not JSON: 415
        r = await client.post(path, content=b"text=hi", headers={"Content-Type": "text/plain"})
        assert r.status_code == 415
        # nested 1,000 deep: 400, not a 500
        r = await client.post(path, content=_deep(1000), headers=json_header)
        assert r.status_code == 400 and "nested" in r.json()["error"]["message"]
    # the service still answers
    assert r.json()["error"]["code"] == "INVALID_INPUT"


async def test_a2a_refuses_a_message_over_the_turn_limit(tmp_path: Path) -> None:
    import uuid

    from a2a.types import Message, Part, Role, SendMessageRequest, TaskState

    from .test_a2a import _client

    project = project_dir(tmp_path)
    provider = ScriptedProvider([], default=text("hello"))
    settings = ServerSettings(max_body_bytes=4 * 1_048_576)
    async with serve(project, settings=settings, **scripted(tmp_path, provider)) as srv:
        client, _, http = await _client(srv.url, streaming=False)
        try:
            message = Message(
                role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[Part(text="x" * 200_001)]
            )
            events = [e async for e in client.send_message(SendMessageRequest(message=message))]
            task = events[-1].task
            assert task.status.state == TaskState.TASK_STATE_FAILED
            assert "200000 characters" in str(task.status.message)
        finally:
            await client.close()
            await http.aclose()
    assert provider.requests == []  # no turn ran on the text


async def test_ready_names_no_project_without_a_token(tmp_path: Path) -> None:
    project = project_dir(tmp_path)
    settings = ServerSettings(tokens=[TokenEntry(name="ops", hash=hash_token("tok-1"))])
    async with (
        serve(project, settings=settings, **scripted(tmp_path, ScriptedProvider())) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=30) as client,
    ):
        anonymous = (await client.get("/ready")).json()
        assert anonymous == {"status": "ready"}
        wrong = await client.get("/ready", headers={"Authorization": "Bearer nope"})
        assert "projects" not in wrong.json()
        known = await client.get("/ready", headers={"Authorization": "Bearer tok-1"})
        assert known.json()["projects"] == ["proj"]


@pytest.mark.parametrize(
    "headers",
    [
        {"Host": "127.0.0.1:80@evil.test"},
        {"Host": "localhost:1@evil.test"},
        {"Host": "127.0.0.1 evil.test"},
        {"X-Client-IP": "203.0.113.9"},
        {"True-Client-IP": "203.0.113.9"},
        {"CF-Connecting-IP": "203.0.113.9"},
        {"Via": "1.1 proxy.example"},
    ],
)
async def test_loopback_mode_refuses_what_is_not_this_machine(
    tmp_path: Path, headers: dict[str, str]
) -> None:
    project = project_dir(tmp_path)
    async with (
        serve(project, **scripted(tmp_path, ScriptedProvider())) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=30) as client,
    ):
        ok = await client.get("/v1/projects")
        assert ok.status_code == 200
        r = await client.get("/v1/projects", headers=headers)
        assert r.status_code == 403 and r.json()["error"]["code"] == "LOOPBACK_ONLY"


async def test_bad_edited_arguments_are_a_400_and_the_pause_survives(tmp_path: Path) -> None:
    project = project_dir(tmp_path)
    provider = ScriptedProvider(
        [tool_call(("write_file", {"path": "a.txt", "content": "x"}, "c1")), text("done")]
    )
    async with (
        serve(project, **scripted(tmp_path, provider)) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=30) as client,
    ):
        sid = (await client.post("/v1/projects/proj/sessions", json={})).json()["id"]
        base = f"/v1/projects/proj/sessions/{sid}"
        async with client.stream("POST", f"{base}/turns", json={"text": "write"}) as r:
            assert (await read_events(r))[-1].type == "paused"
        bad = {"decision": "approve", "args": {"path": "a.txt", "content": "y", "mode": "777"}}
        r = await client.post(f"{base}/approvals/c1", json=bad)
        assert r.status_code == 400, r.text
        assert "mode" in r.json()["error"]["message"]
        assert (await client.get(f"{base}/pause")).json()["tool_call_id"] == "c1"
        async with client.stream("POST", f"{base}/approvals/c1", json={"decision": "approve"}) as r:
            assert (await read_events(r))[-1].type == "done"
        assert (project / "a.txt").read_text() == "x"


async def test_slow_heads_and_bodies_do_not_hold_connections(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#43: connections sending headers (or a body) a byte at a time stayed open as long as
    their clients liked; now a head has `header_seconds`, a body BODY_SECONDS."""
    import asyncio

    import uvicorn

    import memora_plugin_server.bodies as bodies
    from memora_plugin_server.app import create_app
    from memora_plugin_server.protocol import with_deadlines

    monkeypatch.setattr(bodies, "BODY_SECONDS", 0.5)
    project = project_dir(tmp_path)
    app = create_app(project, **scripted(tmp_path, ScriptedProvider(default=text("hi"))))
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_level="warning", http=with_deadlines(0.5)
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        slow = []
        for _ in range(20):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            await writer.drain()
            slow.append((reader, writer))
        closed = 0
        for reader, _ in slow:
            async with asyncio.timeout(5):
                closed += (await reader.read()) == b""  # closed by the server, nothing sent
        assert closed == 20
        # a body that never finishes: 408 after BODY_SECONDS
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"POST /v1/projects/proj/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
        )
        await writer.drain()
        async with asyncio.timeout(5):
            head = await reader.readline()
        assert b" 408 " in head
        writer.close()
        # the server still serves
        async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            assert (await client.get("/health")).status_code == 200
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 30)


async def test_a_turn_for_an_unknown_session_is_a_404(tmp_path: Path) -> None:
    """#41: a turn posted to an unknown session id silently created that session; the docs
    say 404 (sessions are made by POST /sessions; A2A contexts and AG-UI threads on first use)."""
    project = project_dir(tmp_path)
    provider = ScriptedProvider([], default=text("hello"))
    async with (
        serve(project, **scripted(tmp_path, provider)) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=30) as client,
    ):
        r = await client.post(
            "/v1/projects/proj/sessions/no-such-session/turns", json={"text": "hi"}
        )
        assert r.status_code == 404 and r.json()["error"]["code"] == "NOT_FOUND"
        listed = (await client.get("/v1/projects/proj/sessions")).json()["sessions"]
        assert all(s["id"] != "no-such-session" for s in listed)
    assert provider.requests == []


async def test_tokens_added_and_revoked_apply_to_a_running_server(tmp_path: Path) -> None:
    """#41: `serve-tokens add`/`revoke` did nothing to a running server (a revoked token kept
    working until a restart); now server.json is followed, within a second."""
    import asyncio

    from memora_plugin_server.config import add_token, load_server_settings, revoke_token

    project = project_dir(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    first, _ = add_token(home, "alice", projects=[], access="full")
    async with (
        serve(
            project,
            settings=load_server_settings(home),
            settings_dir=home,
            **scripted(tmp_path, ScriptedProvider()),
        ) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=30) as client,
    ):
        alice = {"Authorization": f"Bearer {first}"}
        assert (await client.get("/v1/projects", headers=alice)).status_code == 200
        second, _ = add_token(home, "bob", projects=[], access="read")
        revoke_token(home, "alice")
        bob = {"Authorization": f"Bearer {second}"}
        for _ in range(30):  # within a second (checked once a second at most)
            if (await client.get("/v1/projects", headers=alice)).status_code == 401:
                break
            await asyncio.sleep(0.1)
        assert (await client.get("/v1/projects", headers=alice)).status_code == 401
        assert (await client.get("/v1/projects", headers=bob)).status_code == 200


async def test_revoking_the_last_token_closes_the_server_never_opens_it(tmp_path: Path) -> None:
    """#68 item 4: after the last token was revoked, a running server answered every request
    from this machine as its owner — no token, a garbage token, the revoked one — and acted for
    any user through X-Memora-User.  A server started with tokens now refuses them all, and
    takes a token added later."""
    import asyncio

    from memora_plugin_server.config import add_token, load_server_settings, revoke_token

    project = project_dir(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    first, _ = add_token(home, "alice", projects=[], access="full")
    async with (
        serve(
            project,
            settings=load_server_settings(home),
            settings_dir=home,
            **scripted(tmp_path, ScriptedProvider()),
        ) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=30) as client,
    ):
        alice = {"Authorization": f"Bearer {first}"}
        assert (await client.get("/v1/projects", headers=alice)).status_code == 200
        revoke_token(home, "alice")
        for _ in range(30):  # followed within a second
            if (await client.get("/v1/projects", headers=alice)).status_code == 401:
                break
            await asyncio.sleep(0.1)
        tries: list[dict[str, str]] = [
            {},
            alice,
            {"Authorization": "Bearer garbage"},
            {"X-Memora-User": "bob"},
            {**alice, "X-Memora-User": "bob"},
        ]
        for headers in tries:
            for method, path, body in (
                ("GET", "/v1/projects", None),
                ("POST", "/v1/projects/proj/sessions", {}),
                ("GET", "/v1/projects/proj/memory/search?q=x", None),
                ("POST", "/a2a/proj", {"jsonrpc": "2.0", "id": 1, "method": "ListTasks"}),
                ("GET", "/.well-known/agent-card.json", None),
            ):
                r = await client.request(method, path, headers=headers, json=body)
                # refused: unauthorised, or (past 10 tries an address) rate-limited as guessing
                assert r.status_code in (401, 429), (headers, path, r.text)
                assert r.json()["error"]["code"] in ("UNAUTHORIZED", "RATE_LIMITED")
        ready = await client.get("/ready")
        assert ready.status_code == 200 and "projects" not in ready.json()
        assert (await client.get("/health")).status_code == 200  # the process still answers

        second, _ = add_token(home, "bob", projects=[], access="read")
        bob = {"Authorization": f"Bearer {second}"}
        await asyncio.sleep(1.1)  # followed within a second
        assert (await client.get("/v1/projects", headers=bob)).status_code == 200
