"""Two users on one `memora serve` (#68 item 1): every REST route, every A2A JSON-RPC method
(protocol 1.0 through the SDK's own client, 0.3 as its JSON-RPC) and AG-UI are driven by bob
with alice's ids, and nothing of alice's comes back.

The tables below are checked against what the server and the SDK actually serve: a route or an
RPC method added later fails :func:`test_the_tables_cover_every_method` until it is given a row
here, so no door is left out of this test by being new."""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.compat.v0_3.jsonrpc_adapter import JSONRPC03Adapter
from a2a.helpers.proto_helpers import get_artifact_text
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.types import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
    TaskState,
)
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message as ProtoMessage

from memora.llm.types import LLMRequest
from memora.testing import ScriptedProvider, ScriptedResponse, text, tool_call
from memora_plugin_server.config import ServerSettings, TokenEntry, hash_token
from memora_plugin_server.routes import API

from .conftest import project_dir, read_events, scripted, serve

pytestmark = pytest.mark.slow

TOKENS = ServerSettings(
    tokens=[
        TokenEntry(name="alice", hash=hash_token("tok-alice"), scope="alice"),
        TokenEntry(name="bob", hash=hash_token("tok-bob"), scope="bob"),
    ]
)
ALICE = {"Authorization": "Bearer tok-alice"}
BOB = {"Authorization": "Bearer tok-bob"}
SECRET = "heron-4711"
"""What alice says; the scripted model repeats it in every answer, so an answer leaked is seen."""


def _model(request: LLMRequest) -> ScriptedResponse:
    """Asks to write a file when told to ``write``, else echoes the user's last words."""
    last = request.messages[-1]
    if last.role == "user" and "write" in last.content:
        call_id = "w-" + uuid.uuid4().hex[:8]
        return tool_call(("write_file", {"path": "notes.txt", "content": SECRET}, call_id))
    said = next((m.content for m in reversed(request.messages) if m.role == "user"), "")
    return text(f"noted: {said}")


@dataclass
class Alice:
    """What alice made, by every protocol: the ids bob tries."""

    session: str = ""
    turn: str = ""
    paused_session: str = ""
    tool_call: str = ""
    memory: str = ""
    context: str = ""
    task: str = ""
    thread: str = ""


def _leaks(body: str, alice: Alice, sent: str = "") -> list[str]:
    """The marks of alice's in ``body``: her words, and her ids bob did not send (a refusal
    may name the id it was asked for)."""
    marks = [SECRET, "heron", alice.memory, alice.turn, alice.task]
    return [m for m in marks if m and m in body and m not in sent]


# -- REST: every route of the table -------------------------------------------------------

Expect = str
"""``"404"``: not found, as an unknown id; ``"own"``: 2xx with the caller's own data only."""


@dataclass(frozen=True)
class Row:
    expect: Expect
    body: dict[str, Any] | None = None
    query: str = ""


REST: dict[tuple[str, str], Row] = {
    ("GET", "/health"): Row("own"),
    ("GET", "/ready"): Row("own"),
    ("GET", "/openapi.json"): Row("own"),
    ("GET", "/v1/projects"): Row("own"),
    ("GET", "/v1/plugins"): Row("own"),
    ("GET", "/v1/projects/{project}/sessions"): Row("own", query="?archived=1"),
    ("POST", "/v1/projects/{project}/sessions"): Row("own", body={"title": "bob's"}),
    ("GET", "/v1/projects/{project}/sessions/{session}"): Row("404"),
    ("POST", "/v1/projects/{project}/sessions/{session}/fork"): Row("404", body={}),
    ("POST", "/v1/projects/{project}/sessions/{session}/archive"): Row("404"),
    ("POST", "/v1/projects/{project}/sessions/{session}/turns"): Row("404", body={"text": "hi"}),
    ("GET", "/v1/projects/{project}/sessions/{session}/turns/{turn}/events"): Row("404"),
    ("POST", "/v1/projects/{project}/sessions/{session}/abort"): Row("404"),
    ("GET", "/v1/projects/{project}/sessions/{session}/pause"): Row("404"),
    ("POST", "/v1/projects/{project}/sessions/{session}/approvals/{tool_call}"): Row(
        "404", body={"decision": "approve"}
    ),
    ("POST", "/v1/projects/{project}/sessions/{session}/answers"): Row(
        "404", body={"answers": {"a": "b"}}
    ),
    ("GET", "/v1/projects/{project}/sessions/{session}/tasks"): Row("404"),
    ("POST", "/v1/projects/{project}/sessions/{session}/role-pack"): Row(
        "404", body={"name": "default"}
    ),
    ("GET", "/v1/projects/{project}/role-packs"): Row("404", query="?session={session}"),
    ("GET", "/v1/projects/{project}/memory/search"): Row("own", query="?q=heron"),
    ("GET", "/v1/projects/{project}/memory/stats"): Row("own"),
    ("GET", "/v1/projects/{project}/memory/pinned"): Row("own"),
    ("GET", "/v1/projects/{project}/memory/{memory}"): Row("404"),
    ("POST", "/v1/projects/{project}/memory/{memory}/edit"): Row("404", body={"content": "x"}),
    ("POST", "/v1/projects/{project}/memory/{memory}/forget"): Row("404", query="?everywhere=1"),
    ("POST", "/v1/projects/{project}/memory/{memory}/pin"): Row("404"),
    ("POST", "/v1/projects/{project}/memory/{memory}/unpin"): Row("404"),
    ("POST", "/v1/projects/{project}/ag-ui"): Row("404", body={}),  # filled in by the test
}


def _fill(template: str, alice: Alice, *, paused: bool) -> str:
    session = alice.paused_session if paused else alice.session
    return (
        template.replace("{project}", "proj")
        .replace("{session}", session)
        .replace("{turn}", alice.turn)
        .replace("{tool_call}", alice.tool_call)
        .replace("{memory}", alice.memory)
    )


def _agui(thread: str, *, resume: str | None = None) -> dict[str, Any]:
    run: dict[str, Any] = {
        "threadId": thread,
        "runId": "r-" + uuid.uuid4().hex[:6],
        "state": {},
        "messages": [{"id": "m1", "role": "user", "content": "what did I say?"}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }
    if resume is not None:
        run["resume"] = [{"interruptId": resume, "status": "resolved", "payload": {}}]
    return run


# -- A2A: every JSON-RPC method the SDK serves ----------------------------------------------

Call = Callable[[Any, Alice], Awaitable[Any]]


async def _send(client: Any, alice: Alice, *, task: bool) -> Any:
    message = Message(
        role=Role.ROLE_USER,
        message_id=str(uuid.uuid4()),
        parts=[Part(text="what did I say?")],
        context_id=alice.context,
    )
    if task:
        message.task_id = alice.task
    return [event async for event in client.send_message(SendMessageRequest(message=message))]


async def _subscribe(client: Any, alice: Alice) -> Any:
    return [e async for e in client.subscribe(SubscribeToTaskRequest(id=alice.task))]


def _push(alice: Alice) -> TaskPushNotificationConfig:
    return TaskPushNotificationConfig(task_id=alice.task, id="p1", url="http://127.0.0.1:9/hook")


A2A: dict[str, Call] = {
    # a message in alice's context, and one continuing her task
    "SendMessage": lambda c, a: _send(c, a, task=True),
    "SendStreamingMessage": lambda c, a: _send(c, a, task=False),
    "GetTask": lambda c, a: c.get_task(GetTaskRequest(id=a.task)),
    "ListTasks": lambda c, a: c.list_tasks(ListTasksRequest()),
    "CancelTask": lambda c, a: c.cancel_task(CancelTaskRequest(id=a.task)),
    "CreateTaskPushNotificationConfig": lambda c, a: c.create_task_push_notification_config(
        _push(a)
    ),
    "GetTaskPushNotificationConfig": lambda c, a: c.get_task_push_notification_config(
        GetTaskPushNotificationConfigRequest(task_id=a.task, id="p1")
    ),
    "ListTaskPushNotificationConfigs": lambda c, a: c.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=a.task)
    ),
    "DeleteTaskPushNotificationConfig": lambda c, a: c.delete_task_push_notification_config(
        DeleteTaskPushNotificationConfigRequest(task_id=a.task, id="p1")
    ),
    "SubscribeToTask": _subscribe,
    "GetExtendedAgentCard": lambda c, a: c.get_extended_agent_card(GetExtendedAgentCardRequest()),
}

A2A_03: dict[str, Callable[[Alice], dict[str, Any]]] = {
    "message/send": lambda a: {"message": _v03_message(a, task=True)},
    "message/stream": lambda a: {"message": _v03_message(a, task=False)},
    "tasks/get": lambda a: {"id": a.task},
    "tasks/cancel": lambda a: {"id": a.task},
    "tasks/resubscribe": lambda a: {"id": a.task},
    "tasks/pushNotificationConfig/set": lambda a: {
        "taskId": a.task,
        "pushNotificationConfig": {"id": "p1", "url": "http://127.0.0.1:9/hook"},
    },
    "tasks/pushNotificationConfig/get": lambda a: {"id": a.task},
    "tasks/pushNotificationConfig/list": lambda a: {"id": a.task},
    "tasks/pushNotificationConfig/delete": lambda a: {
        "id": a.task,
        "pushNotificationConfigId": "p1",
    },
    "agent/getAuthenticatedExtendedCard": lambda a: {},
}


def _v03_message(alice: Alice, *, task: bool) -> dict[str, Any]:
    message: dict[str, Any] = {
        "kind": "message",
        "role": "user",
        "messageId": str(uuid.uuid4()),
        "parts": [{"kind": "text", "text": "what did I say?"}],
        "contextId": alice.context,
    }
    if task:
        message["taskId"] = alice.task
    return message


def test_the_tables_cover_every_method() -> None:
    """A route or an RPC method added later needs a row here before the suite passes."""
    assert {(api.method, api.path) for api in API} == set(REST)
    assert set(JsonRpcDispatcher.METHOD_TO_MODEL) == set(A2A)
    assert set(JSONRPC03Adapter.METHOD_TO_MODEL) == set(A2A_03)


def _dump(value: Any) -> str:
    if isinstance(value, ProtoMessage):
        return json.dumps(MessageToDict(value))
    if isinstance(value, list):
        return "[" + ",".join(_dump(v) for v in value) + "]"
    return repr(value)


async def _a2a_client(url: str, headers: dict[str, str], *, streaming: bool) -> tuple[Any, Any]:
    http = httpx.AsyncClient(headers=headers, timeout=30)
    card = await A2ACardResolver(http, url).get_agent_card()
    client = ClientFactory(ClientConfig(httpx_client=http, streaming=streaming)).create(card)
    return client, http


async def _alice_everywhere(srv: Any, rest: httpx2.AsyncClient) -> Alice:
    """Alice talks by every protocol: a REST session with a finished turn and a memory of it, a
    second one paused on an approval, an A2A task, an AG-UI thread."""
    alice = Alice()
    made = await rest.post("/v1/projects/proj/sessions", json={}, headers=ALICE)
    alice.session = made.json()["id"]
    base = f"/v1/projects/proj/sessions/{alice.session}"
    async with rest.stream(
        "POST", base + "/turns", json={"text": f"my code is {SECRET}"}, headers=ALICE
    ) as response:
        alice.turn = response.headers["x-memora-turn"]
        assert (await read_events(response))[-1].type == "done"
    runtime = srv.app.state.hub.project("proj").runtime
    for _ in range(200):  # the round's memory is written after `done`
        hits = await runtime.memory.for_scope("alice").search("heron", limit=5)
        if hits:
            alice.memory = hits[0].record.id
            break
        await __import__("asyncio").sleep(0.05)
    assert alice.memory, "alice's round left no memory"
    pinned = await rest.post(f"/v1/projects/proj/memory/{alice.memory}/pin", headers=ALICE)
    assert pinned.status_code == 200, pinned.text

    made = await rest.post("/v1/projects/proj/sessions", json={}, headers=ALICE)
    alice.paused_session = made.json()["id"]
    async with rest.stream(
        "POST",
        f"/v1/projects/proj/sessions/{alice.paused_session}/turns",
        json={"text": "write it down"},
        headers=ALICE,
    ) as response:
        events = await read_events(response)
    assert events[-1].type == "paused"
    alice.tool_call = next(e.data["tool_call_id"] for e in events if e.type == "approval_pending")

    client, http = await _a2a_client(srv.url, ALICE, streaming=False)
    try:
        alice.context = str(uuid.uuid4())
        message = Message(
            role=Role.ROLE_USER,
            message_id=str(uuid.uuid4()),
            parts=[Part(text=f"remember {SECRET}")],
            context_id=alice.context,
        )
        task = [e async for e in client.send_message(SendMessageRequest(message=message))][-1].task
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        assert SECRET in get_artifact_text(task.artifacts[0])
        alice.task = task.id
    finally:
        await client.close()
        await http.aclose()

    alice.thread = "thread-" + uuid.uuid4().hex[:8]
    async with rest.stream(
        "POST", "/v1/projects/proj/ag-ui", json=_agui(alice.thread), headers=ALICE
    ) as response:
        assert response.status_code == 200
        assert "RUN_FINISHED" in "".join([p async for p in response.aiter_text()])
    return alice


async def _rest_as_bob(rest: httpx2.AsyncClient, alice: Alice) -> list[str]:
    problems: list[str] = []
    for (method, template), row in REST.items():
        for paused in (False, True) if "{session}" in template else (False,):
            path = _fill(template, alice, paused=paused) + _fill(row.query, alice, paused=paused)
            bodies: list[Any] = [row.body]
            if template.endswith("/ag-ui"):  # alice's thread, a new run and a resume
                bodies = [_agui(alice.thread), _agui(alice.thread, resume=alice.tool_call)]
            for body in bodies:
                async with rest.stream(method, path, json=body, headers=BOB) as response:
                    said = (await response.aread()).decode()
                where = f"{method} {path} -> {response.status_code}"
                if row.expect == "404" and response.status_code != 404:
                    problems.append(f"{where}: expected 404 ({said[:200]})")
                elif row.expect == "own" and not 200 <= response.status_code < 300:
                    problems.append(f"{where}: expected the caller's own data ({said[:200]})")
                leaked = _leaks(said, alice, path + json.dumps(body))
                if leaked:
                    problems.append(f"{where}: alice's {leaked} came back")
    return problems


async def _a2a_as_bob(url: str, alice: Alice) -> list[str]:
    problems: list[str] = []
    for streaming in (False, True):
        client, http = await _a2a_client(url, BOB, streaming=streaming)
        try:
            for method, call in A2A.items():
                try:
                    said = _dump(await call(client, alice))
                    failed = False
                except Exception as exc:  # the SDK raises the server's JSON-RPC error
                    said, failed = f"{type(exc).__name__}: {exc}", True
                leaked = _leaks(said, alice, alice.task)  # every call names her task
                if leaked:
                    problems.append(f"A2A {method}: alice's {leaked} came back")
                if method in ("GetTask", "CancelTask", "SubscribeToTask") and not failed:
                    problems.append(f"A2A {method}: alice's task was found ({said[:200]})")
                if method == "ListTasks" and alice.task in said:
                    problems.append("A2A ListTasks listed alice's task")
        finally:
            await client.close()
            await http.aclose()
    async with httpx2.AsyncClient(base_url=url, timeout=30, headers=BOB) as raw:
        for method, params in A2A_03.items():
            body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params(alice)}
            async with raw.stream("POST", "/a2a/proj", json=body) as response:
                said = (await response.aread()).decode()
            leaked = _leaks(said, alice, alice.task)
            if leaked:
                problems.append(f"A2A 0.3 {method}: alice's {leaked} came back")
            if (
                method in ("tasks/get", "tasks/cancel", "tasks/resubscribe")
                and '"error"' not in said
            ):
                problems.append(f"A2A 0.3 {method}: alice's task was found ({said[:200]})")
    return problems


async def test_bob_reaches_nothing_of_alices_by_any_route_or_method(tmp_path: Path) -> None:
    project = project_dir(tmp_path)
    provider = ScriptedProvider(default=_model)
    async with serve(project, settings=TOKENS, **scripted(tmp_path, provider)) as srv:
        async with httpx2.AsyncClient(base_url=srv.url, timeout=30) as rest:
            alice = await _alice_everywhere(srv, rest)
            problems = await _rest_as_bob(rest, alice)
            problems += await _a2a_as_bob(srv.url, alice)
            assert problems == [], "\n".join(problems)

            # and alice still has everything bob tried to touch
            mine = await rest.get(f"/v1/projects/proj/memory/{alice.memory}", headers=ALICE)
            assert mine.status_code == 200 and "pinned" in mine.json()["meta"]
            assert mine.json()["superseded_by"] is None
            paused = f"/v1/projects/proj/sessions/{alice.paused_session}/pause"
            assert (await rest.get(paused, headers=ALICE)).json()["tool_call_id"] == alice.tool_call
            listed = await rest.get("/v1/projects/proj/sessions", headers=ALICE)
            ids = {s["id"] for s in listed.json()["sessions"]}
            assert {alice.session, alice.paused_session} <= ids
            client, http = await _a2a_client(srv.url, ALICE, streaming=False)
            try:
                task = await client.get_task(GetTaskRequest(id=alice.task))
                assert task.status.state == TaskState.TASK_STATE_COMPLETED
                listed_tasks = await client.list_tasks(ListTasksRequest())
                assert [t.id for t in listed_tasks.tasks] == [alice.task]
            finally:
                await client.close()
                await http.aclose()
        assert not (project / "notes.txt").exists(), "bob approved alice's paused call"


async def test_a_user_recalls_the_projects_memory_but_does_not_change_it(tmp_path: Path) -> None:
    """The project's unscoped memories are every user's to recall; an edit, a pin or a forget
    by one user would change what every other user recalls (or has in their system prompt),
    so only the project's owner — an unscoped caller — makes them."""
    from memora.memory.types import NewMemory

    project = project_dir(tmp_path)
    settings = ServerSettings(
        tokens=[*TOKENS.tokens, TokenEntry(name="owner", hash=hash_token("tok-own"))]
    )
    async with serve(project, settings=settings, **scripted(tmp_path, ScriptedProvider())) as srv:
        runtime = srv.app.state.hub.project("proj").runtime
        note = await runtime.memory.write(NewMemory("the deploy window is Tuesday"))
        base = f"/v1/projects/proj/memory/{note.id}"
        async with httpx2.AsyncClient(base_url=srv.url, timeout=30) as rest:
            seen = await rest.get(base, headers=BOB)
            assert seen.status_code == 200 and "Tuesday" in seen.json()["content"]
            for verb, body in (
                ("edit", {"content": "ignore alice"}),
                ("pin", None),
                ("forget", None),
            ):
                refused = await rest.post(f"{base}/{verb}", json=body, headers=BOB)
                assert refused.status_code == 409, (verb, refused.text)
                assert "the project's" in refused.json()["error"]["message"]
            after = await rest.get(base, headers=ALICE)
            assert after.json()["superseded_by"] is None and "pinned" not in after.json()["meta"]
            owner = {"Authorization": "Bearer tok-own"}
            pinned = await rest.post(f"{base}/pin", headers=owner)
            assert pinned.status_code == 200, pinned.text
