"""A token names its user (#39 item 2): over `memora serve`, what one user's conversation stored
is never recalled, listed or opened by another; a backend token may act for its users by naming
them (REST header or body, A2A message metadata, AG-UI forwarded props); the project owner's
unscoped token sees the unscoped memory only."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import httpx2
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import get_artifact_text, get_message_text
from a2a.types import Message, Part, Role, SendMessageRequest, TaskState
from google.protobuf.struct_pb2 import Struct

from memora.memory.types import NewMemory
from memora.testing import ScriptedProvider, text
from memora_plugin_server.a2a import session_for
from memora_plugin_server.config import ServerSettings, TokenEntry, hash_token

from .conftest import project_dir, read_events, scripted, serve

TOKENS = ServerSettings(
    tokens=[
        TokenEntry(name="alice", hash=hash_token("tok-alice"), scope="alice"),
        TokenEntry(name="bob", hash=hash_token("tok-bob"), scope="bob"),
        TokenEntry(name="backend", hash=hash_token("tok-backend"), act_for_users=True),
        TokenEntry(name="owner", hash=hash_token("tok-owner")),
    ]
)


def _as(token: str, user: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer tok-{token}"}
    if user is not None:
        headers["X-Memora-User"] = user
    return headers


async def _recalled(client: httpx2.AsyncClient, headers: dict[str, str], q: str) -> list[Any]:
    """The memory search's hits, waiting (up to 10 s) for a round's memory to be written."""
    for _ in range(200):
        found = await client.get(f"/v1/projects/proj/memory/search?q={q}", headers=headers)
        assert found.status_code == 200, found.text
        if found.json()["hits"]:
            return list(found.json()["hits"])
        await asyncio.sleep(0.05)
    return []


async def _turn(client: httpx2.AsyncClient, headers: dict[str, str], sid: str, said: str) -> int:
    async with client.stream(
        "POST", f"/v1/projects/proj/sessions/{sid}/turns", json={"text": said}, headers=headers
    ) as response:
        if response.status_code == 200:
            events = await read_events(response)
            assert events[-1].type == "done", events[-1].data
        return response.status_code


async def test_rest_keeps_each_user_to_their_own(tmp_path: Path) -> None:
    project = project_dir(tmp_path)
    provider = ScriptedProvider(default=text("noted"))
    async with serve(project, settings=TOKENS, **scripted(tmp_path, provider)) as srv:
        runtime = srv.app.state.hub.project("proj").runtime
        await runtime.memory.write(NewMemory("the office wifi password is heron42"))
        async with httpx2.AsyncClient(base_url=srv.url, timeout=30) as client:
            made = await client.post("/v1/projects/proj/sessions", json={}, headers=_as("alice"))
            assert made.status_code == 201 and made.json()["scope"] == "alice"
            sid = made.json()["id"]
            assert await _turn(client, _as("alice"), sid, "my locker code is 4711") == 200
            hits = await _recalled(client, _as("alice"), "locker")
            assert [h["scope"] for h in hits] == ["alice"] and "4711" in hits[0]["content"]
            memory_id = hits[0]["id"]
            wifi = await _recalled(client, _as("alice"), "wifi")
            assert [h["scope"] for h in wifi] == [None], "the project's memory is everyone's"

            # bob: not alice's memory, session, turns or pause by any route
            search = "/v1/projects/proj/memory/search?q=locker"
            assert (await client.get(search, headers=_as("bob"))).json()["hits"] == []
            memory = f"/v1/projects/proj/memory/{memory_id}"
            assert (await client.get(memory, headers=_as("bob"))).status_code == 404
            forget = await client.post(memory + "/forget", headers=_as("bob"))
            assert forget.status_code == 404
            listed = await client.get("/v1/projects/proj/sessions", headers=_as("bob"))
            assert listed.json()["sessions"] == []
            base = f"/v1/projects/proj/sessions/{sid}"
            for method, path in (
                ("GET", base),
                ("GET", base + "/pause"),
                ("GET", base + "/tasks"),
                ("POST", base + "/abort"),
                ("POST", base + "/archive"),
                ("POST", base + "/fork"),
            ):
                body = {} if path.endswith("/fork") else None
                refused = await client.request(method, path, headers=_as("bob"), json=body)
                assert refused.status_code == 404, (method, path, refused.text)
            assert await _turn(client, _as("bob"), sid, "what is alice's code?") == 404
            stats = await client.get("/v1/projects/proj/memory/stats", headers=_as("bob"))
            assert stats.json()["total"] == 1, "bob counts the project's memory, not alice's"

            # a token may not name another user unless it acts for users
            assert (await client.get(search, headers=_as("bob", "alice"))).status_code == 403
            same = await client.get(search, headers=_as("alice", "alice"))
            assert same.status_code == 200 and same.json()["hits"]
            bad = await client.get(search, headers=_as("backend", "a\tb"))
            assert bad.status_code == 400

            # the backend acts for whoever it names, and for nobody in particular without
            named = await client.get(search, headers=_as("backend", "alice"))
            assert [h["id"] for h in named.json()["hits"]] == [memory_id]
            assert (await client.get(search, headers=_as("backend"))).json()["hits"] == []
            opened = await client.get(base, headers=_as("backend", "alice"))
            assert opened.status_code == 200 and opened.json()["scope"] == "alice"
            carol = await client.post(
                "/v1/projects/proj/sessions", json={"user": "carol"}, headers=_as("backend")
            )
            assert carol.status_code == 201 and carol.json()["scope"] == "carol"
            mixed = await client.post(
                "/v1/projects/proj/sessions", json={"user": "carol"}, headers=_as("backend", "dan")
            )
            assert mixed.status_code == 400
            theirs = await client.get("/v1/projects/proj/sessions", headers=_as("backend", "carol"))
            assert [s["id"] for s in theirs.json()["sessions"]] == [carol.json()["id"]]

            # pins respect scopes: alice pins hers; bob can neither pin it nor see it pinned
            pin = await client.post(memory + "/pin", headers=_as("alice"))
            assert pin.status_code == 200 and pin.json()["meta"]["pinned"]["by"] == "token:alice"
            assert (await client.post(memory + "/pin", headers=_as("bob"))).status_code == 404
            pins = await client.get("/v1/projects/proj/memory/pinned", headers=_as("alice"))
            assert [p["id"] for p in pins.json()["pinned"]] == [memory_id]
            pins = await client.get("/v1/projects/proj/memory/pinned", headers=_as("bob"))
            assert pins.json()["pinned"] == []
            unpin = await client.post(memory + "/unpin", headers=_as("alice"))
            assert unpin.status_code == 200 and "pinned" not in unpin.json()["meta"]

            # the owner's unscoped token: the project's memory only
            assert (await client.get(search, headers=_as("owner"))).json()["hits"] == []
            owner_sessions = await client.get("/v1/projects/proj/sessions", headers=_as("owner"))
            assert owner_sessions.json()["sessions"] == []


async def _a2a(url: str, headers: dict[str, str]) -> Any:
    http = httpx.AsyncClient(headers=headers, timeout=30)
    card = await A2ACardResolver(http, url).get_agent_card()
    client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
    return client, http


def _message(said: str, context: str, user: str | None = None) -> Message:
    message = Message(
        role=Role.ROLE_USER,
        message_id=str(uuid.uuid4()),
        parts=[Part(text=said)],
        context_id=context,
    )
    if user is not None:
        meta = Struct()
        meta.update({"user": user})
        message.metadata.CopyFrom(meta)
    return message


async def test_a2a_and_agui_name_the_user(tmp_path: Path) -> None:
    project = project_dir(tmp_path)
    provider = ScriptedProvider(default=text("noted"))
    async with serve(project, settings=TOKENS, **scripted(tmp_path, provider)) as srv:
        client, http = await _a2a(srv.url, _as("backend"))
        try:
            context = str(uuid.uuid4())
            request = SendMessageRequest(message=_message("my bike is red", context, "erin"))
            events = [e async for e in client.send_message(request)]
            task = events[-1].task
            assert task.status.state == TaskState.TASK_STATE_COMPLETED
            assert get_artifact_text(task.artifacts[0]) == "noted"
        finally:
            await client.close()
            await http.aclose()
        async with httpx2.AsyncClient(base_url=srv.url, timeout=30) as rest:
            hits = await _recalled(rest, _as("backend", "erin"), "bike")
            assert [h["scope"] for h in hits] == ["erin"]
            listed = await rest.get("/v1/projects/proj/sessions", headers=_as("backend", "erin"))
            assert [s["id"] for s in listed.json()["sessions"]] == [session_for(context)]
            assert (await rest.get("/v1/projects/proj/sessions", headers=_as("alice"))).json()[
                "sessions"
            ] == []

        # alice's token may not act for erin over A2A either: the task fails, nothing runs
        client, http = await _a2a(srv.url, _as("alice"))
        try:
            request = SendMessageRequest(message=_message("hello", str(uuid.uuid4()), "erin"))
            events = [e async for e in client.send_message(request)]
            last = events[-1].task
            assert last.status.state == TaskState.TASK_STATE_FAILED
            assert "FORBIDDEN" in get_message_text(last.status.message)
        finally:
            await client.close()
            await http.aclose()

        # AG-UI: forwardedProps.user
        run = {
            "threadId": "thread-frank",
            "runId": "r1",
            "state": {},
            "messages": [{"id": "m1", "role": "user", "content": "my dog is Rex"}],
            "tools": [],
            "context": [],
            "forwardedProps": {"user": "frank"},
        }
        async with httpx2.AsyncClient(base_url=srv.url, timeout=30) as rest:
            async with rest.stream(
                "POST", "/v1/projects/proj/ag-ui", json=run, headers=_as("backend")
            ) as response:
                assert response.status_code == 200
                body = "".join([part async for part in response.aiter_text()])
            assert "RUN_FINISHED" in body
            hits = await _recalled(rest, _as("backend", "frank"), "dog")
            assert [h["scope"] for h in hits] == ["frank"]
            assert (
                await rest.get(
                    "/v1/projects/proj/memory/search?q=dog", headers=_as("backend", "erin")
                )
            ).json()["hits"] == []
            # the thread is frank's: erin cannot continue it
            run2 = {**run, "runId": "r2", "forwardedProps": {"user": "erin"}}
            refused = await rest.post("/v1/projects/proj/ag-ui", json=run2, headers=_as("backend"))
            assert refused.status_code == 404, refused.text
            forbidden = await rest.post("/v1/projects/proj/ag-ui", json=run, headers=_as("bob"))
            assert forbidden.status_code == 403
            assert json.loads(forbidden.text)["error"]["code"] == "FORBIDDEN"


def test_an_a2a_message_without_a_known_caller_runs_as_nobody() -> None:
    """The A2A executor learns its caller from the guarded request; outside one (a task the
    SDK ran elsewhere) it must refuse, never act as this machine's owner who may name users."""
    import pytest
    from a2a.server.context import ServerCallContext

    from memora.errors import MemoraError
    from memora_plugin_server.a2a import caller_of, owner_of

    with pytest.raises(MemoraError, match="caller of this A2A request is unknown"):
        caller_of(ServerCallContext())
    # and the task store files nothing it made under such a context's key
    assert owner_of(ServerCallContext()) == "nobody"
