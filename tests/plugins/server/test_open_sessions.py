"""The cap on the sessions a server keeps open (`memora serve --max-open-sessions`): opening one
more closes the least recently used idle Agent, a closed session opens again from its store with
its history, and a session mid-pause or just used is never closed for the cap."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx2
import pytest
from click.testing import CliRunner

from memora.errors import InvalidInputError
from memora.testing import ScriptedProvider, text, tool_call
from memora_plugin_server import create_app
from memora_plugin_server.cli import serve_cmd
from memora_plugin_server.hub import EVICT_GRACE_SECONDS

from .conftest import project_dir, read_events, scripted, serve


async def _turn(client: httpx2.AsyncClient, sid: str, message: str) -> list[str]:
    async with client.stream(
        "POST", f"/v1/projects/proj/sessions/{sid}/turns", json={"text": message}
    ) as r:
        assert r.status_code == 200, await r.aread()
        return [e.type for e in await read_events(r)]


async def _session(client: httpx2.AsyncClient) -> str:
    r = await client.post("/v1/projects/proj/sessions", json={})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def test_the_least_recently_used_idle_session_is_closed_and_reopens_whole(
    tmp_path: Path,
) -> None:
    provider = ScriptedProvider(default=text("noted"))
    options = scripted(tmp_path, provider)
    async with (
        serve(project_dir(tmp_path), max_open_sessions=2, **options) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=30) as client,
    ):
        hub = srv.app.state.hub
        a, b, c, d = [await _session(client) for _ in range(4)]
        assert (await _turn(client, a, "the harbor opens at nine"))[-1] == "done"
        await _turn(client, b, "the ferry leaves at ten")
        await _turn(client, c, "the bakery closes at six")
        # over the cap, but a and b were used a moment ago: a request may be on its way to them
        assert all(hub.live("proj", s) is not None for s in (a, b, c))
        await asyncio.sleep(EVICT_GRACE_SECONDS + 0.1)
        await _turn(client, c, "and the museum?")  # open already: nothing to close
        assert all(hub.live("proj", s) is not None for s in (a, b, c))
        await _turn(client, d, "the pool opens at eight")
        # two may stay open: the two used longest ago gave their places
        assert hub.live("proj", a) is None and hub.live("proj", b) is None
        assert hub.live("proj", c) is not None and hub.live("proj", d) is not None

        # a closed session opens again from its store, with everything it said
        await asyncio.sleep(EVICT_GRACE_SECONDS + 0.1)
        await _turn(client, a, "when does the harbor open?")
        assert "the harbor opens at nine" in [m.content for m in provider.requests[-1].messages]
        rounds = (await client.get(f"/v1/projects/proj/sessions/{a}")).json()["rounds"]
        assert [r["user"] for r in rounds] == [
            "the harbor opens at nine",
            "when does the harbor open?",
        ]
        # and the least recently used of the two open gave its place to it
        assert hub.live("proj", c) is None
        assert hub.live("proj", a) is not None and hub.live("proj", d) is not None


async def test_a_paused_session_keeps_its_agent_over_the_cap(tmp_path: Path) -> None:
    write = ("write_file", {"path": "out.txt", "content": "hello"}, "w1")
    provider = ScriptedProvider([tool_call(write)], default=text("done"))
    project = project_dir(tmp_path)
    async with (
        serve(project, max_open_sessions=1, **scripted(tmp_path, provider)) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=30) as client,
    ):
        hub = srv.app.state.hub
        paused, other = await _session(client), await _session(client)
        assert (await _turn(client, paused, "write it"))[-1] == "paused"
        await asyncio.sleep(EVICT_GRACE_SECONDS + 0.1)
        await _turn(client, other, "hello")
        # one process holds this pause in its Agent alone: closing it would lose the pause
        assert hub.live("proj", paused) is not None
        base = f"/v1/projects/proj/sessions/{paused}"
        async with client.stream("POST", f"{base}/approvals/w1", json={"decision": "approve"}) as r:
            assert r.status_code == 200
            assert [e.type for e in await read_events(r)][-1] == "done"
        assert (project / "out.txt").read_text() == "hello"


def test_the_cap_must_be_at_least_one(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="max_open_sessions: at least 1"):
        create_app(project_dir(tmp_path), max_open_sessions=0)
    result = CliRunner().invoke(serve_cmd, ["--max-open-sessions", "0"])
    assert result.exit_code == 2
    assert "--max-open-sessions" in result.output
