"""Typed results over `memora serve`: a REST turn's ``output_schema`` (the final `done` event
carries the validated ``output``), A2A (``metadata.output_schema`` -> one DataPart, through
a2a-sdk's own client) and AG-UI (``forwardedProps.output_schema`` -> the run's result)."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx2
from a2a.helpers.proto_helpers import get_data_parts
from a2a.types import Message, Part, Role, SendMessageRequest, TaskState

from memora.testing import ScriptedProvider, text

from .conftest import project_dir, read_events, scripted, serve
from .test_a2a import _client
from .test_agui import _run

SCHEMA = {
    "title": "Ticket",
    "type": "object",
    "properties": {"title": {"type": "string"}, "severity": {"type": "integer", "maximum": 4}},
    "required": ["title", "severity"],
}


def _no_tools(tmp_path: Path, provider: ScriptedProvider) -> dict[str, object]:
    options = scripted(tmp_path, provider)
    options["strategy_override"] = {"act": {"toolMode": "block"}}
    return options


async def test_a_rest_turn_with_an_output_schema(tmp_path: Path) -> None:
    project = project_dir(tmp_path)
    provider = ScriptedProvider(
        [text('{"title": "down", "severity": 9}'), text('{"title": "down", "severity": 1}')]
    )
    async with (
        serve(project, **_no_tools(tmp_path, provider)) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=30) as client,
    ):
        sid = (await client.post("/v1/projects/proj/sessions", json={})).json()["id"]
        base = f"/v1/projects/proj/sessions/{sid}"
        body = {"text": "the site is down", "output_schema": SCHEMA}
        async with client.stream("POST", f"{base}/turns", json=body) as r:
            assert r.status_code == 200
            events = await read_events(r)
        done = events[-1]
        assert done.type == "done" and done.data["output"] == {"title": "down", "severity": 1}
        assert any(e.type == "output_partial" for e in events)
        session = (await client.get(base)).json()
        assert session["rounds"][-1]["output"] == {"title": "down", "severity": 1}
        bad = await client.post(
            f"{base}/turns", json={"text": "x", "output_schema": {"type": "nonsense"}}
        )
        assert bad.status_code == 400 and "output_schema" in bad.json()["error"]["message"]


async def test_a2a_answers_a_typed_message_with_a_data_part(tmp_path: Path) -> None:
    project = project_dir(tmp_path)
    provider = ScriptedProvider([text('{"title": "slow", "severity": 3}')])
    async with serve(project, **_no_tools(tmp_path, provider)) as srv:
        client, _, http = await _client(srv.url, streaming=False)
        try:
            message = Message(
                role=Role.ROLE_USER,
                message_id=str(uuid.uuid4()),
                parts=[Part(text="pages load slowly")],
            )
            message.metadata.update({"output_schema": SCHEMA})
            events = [e async for e in client.send_message(SendMessageRequest(message=message))]
            task = events[-1].task
            assert task.status.state == TaskState.TASK_STATE_COMPLETED
            assert len(task.artifacts) == 1
            (data,) = get_data_parts(list(task.artifacts[0].parts))
            assert data == {"title": "slow", "severity": 3.0}  # protobuf numbers are doubles
        finally:
            await client.close()
            await http.aclose()


async def test_agui_gives_the_typed_result_as_the_runs_result(tmp_path: Path) -> None:
    project = project_dir(tmp_path)
    provider = ScriptedProvider([text('{"title": "cold", "severity": 2}')])
    async with (
        serve(project, **_no_tools(tmp_path, provider)) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=30) as client,
    ):
        body = {
            "threadId": "typed-1",
            "runId": "r1",
            "state": {},
            "messages": [{"id": "u1", "role": "user", "content": "the office is cold"}],
            "tools": [],
            "context": [],
            "forwardedProps": {"output_schema": SCHEMA},
        }
        events = await _run(client, body)
        finished = events[-1]
        assert finished.type == "RUN_FINISHED"
        assert finished.result == {"title": "cold", "severity": 2}
