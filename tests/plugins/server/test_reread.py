"""Two workers on one project, in one process (two apps made with ``shared=True``, as
``memora serve --workers 2`` makes them): when the other worker moved a session on, this one
reads the session again into the Agent it has open, and opens a new Agent only when more than
the rounds changed (the role pack)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2

from memora.testing import ScriptedProvider, text, tool_call
from memora_plugin_server import create_app
from tests.role_pack.helpers import write_pack

from .conftest import project_dir, scripted


@asynccontextmanager
async def two_workers(
    tmp_path: Path, provider: ScriptedProvider
) -> AsyncIterator[tuple[list[Any], list[httpx2.AsyncClient]]]:
    project = project_dir(tmp_path)
    write_pack(project / ".memora" / "role-packs", "reviewer", persona="You review.")
    apps = [create_app(project, shared=True, **scripted(tmp_path, provider)) for _ in range(2)]
    async with AsyncExitStack() as stack:
        clients = []
        for app in apps:
            await stack.enter_async_context(app.router.lifespan_context(app))
            transport = httpx2.ASGITransport(app=app, client=("127.0.0.1", 4242))
            clients.append(
                await stack.enter_async_context(
                    httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1")
                )
            )
        yield apps, clients


async def turn(client: httpx2.AsyncClient, sid: str, words: str) -> None:
    r = await client.post(f"/v1/projects/proj/sessions/{sid}/turns", json={"text": words})
    assert r.status_code == 200, r.text
    assert '"type":"done"' in r.text.replace(" ", ""), r.text[-300:]


async def test_a_session_moved_on_elsewhere_is_read_again_into_the_open_agent(
    tmp_path: Path,
) -> None:
    provider = ScriptedProvider([], default=text("noted"))
    async with two_workers(tmp_path, provider) as ((one, _), (first, second)):
        made = await first.post("/v1/projects/proj/sessions", json={})
        sid = made.json()["id"]
        await turn(first, sid, "the first question, asked of worker one")
        agent = one.state.hub.live("proj", sid)
        assert agent is not None

        await turn(second, sid, "the second question, asked of worker two")
        await turn(first, sid, "the third question, asked of worker one again")

        # the same Agent, with the other worker's round in the history it sent the model
        assert one.state.hub.live("proj", sid) is agent
        asked = [m.content for m in provider.requests[-1].messages if m.role == "user"]
        assert [q.split(",")[0] for q in asked[-3:]] == [
            "the first question",
            "the second question",
            "the third question",
        ]
        info = (await first.get(f"/v1/projects/proj/sessions/{sid}")).json()
        assert len(info["rounds"]) == 3

        # a role pack switched on the other worker: a new Agent, with that role pack
        switched = await second.post(
            f"/v1/projects/proj/sessions/{sid}/role-pack", json={"name": "reviewer"}
        )
        assert switched.json() == {"active": "reviewer"}
        await turn(first, sid, "the fourth question, after the switch")
        reopened = one.state.hub.live("proj", sid)
        assert reopened is not None and reopened is not agent
        assert reopened.role_pack.active.name == "reviewer"
        asked = [m.content for m in provider.requests[-1].messages if m.role == "user"]
        assert len([q for q in asked if q.startswith("the ")]) == 4


async def test_a_session_made_on_one_worker_and_first_turned_on_the_other(
    tmp_path: Path,
) -> None:
    """The worker that created a session keeps it in memory until its first turn; when the
    other worker ran that turn, the creator reads what was written, not its empty session."""
    provider = ScriptedProvider([], default=text("noted"))
    async with two_workers(tmp_path, provider) as (_, (first, second)):
        sid = (await second.post("/v1/projects/proj/sessions", json={})).json()["id"]
        await turn(first, sid, "the first question, on worker one")
        await turn(second, sid, "the second question, on worker two")
        asked = [m.content for m in provider.requests[-1].messages if m.role == "user"]
        assert [q.split(",")[0] for q in asked] == ["the first question", "the second question"]
        for client in (first, second):
            info = (await client.get(f"/v1/projects/proj/sessions/{sid}")).json()
            assert len(info["rounds"]) == 2
            listed = (await client.get("/v1/projects/proj/sessions")).json()["sessions"]
            assert [s["round_count"] for s in listed if s["id"] == sid] == [2]
    logs = list((tmp_path / "proj").rglob(f"sessions/{sid}/*.jsonl"))
    kinds = [json.loads(line)["kind"] for log in logs for line in log.read_text().splitlines()]
    assert kinds.count("session") == 1 and kinds.count("round") == 2


async def test_turns_alternating_between_workers_send_the_model_the_whole_session(
    tmp_path: Path,
) -> None:
    """Each worker reads on from where it last read the session (its own turns and the other
    worker's since): the model gets every question once, in order, and the plan the other
    worker's turn made."""
    provider = ScriptedProvider([], default=text("noted"))
    plan = {"items": [{"id": "1", "description": "write the harbour report", "status": "active"}]}
    async with two_workers(tmp_path, provider) as (_, clients):
        sid = (await clients[0].post("/v1/projects/proj/sessions", json={})).json()["id"]
        for n in range(1, 8):
            if n == 3:
                provider.extend([tool_call(("task_table_update", plan)), text("planned")])
            await turn(clients[n % 2], sid, f"问题 {n}, asked")
            sent = provider.requests[-1].messages
            asked = [m.content.split(",")[0] for m in sent if m.role == "user"]
            assert asked == [f"问题 {i}" for i in range(1, n + 1)], (n, asked)
            system = "\n".join(m.content for m in sent if m.role == "system")
            assert ("write the harbour report" in system) == (n >= 3), (n, system[-300:])
        info = (await clients[0].get(f"/v1/projects/proj/sessions/{sid}")).json()
        assert len(info["rounds"]) == 7
