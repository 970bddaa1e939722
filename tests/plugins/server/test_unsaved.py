"""A round the session's log refused is told to every client of `memora serve`: REST's `done`
carries `saved: false`, A2A completes the task with a status message and `metadata.saved`,
AG-UI sends a `memora.unsaved` CUSTOM event before RUN_FINISHED.  The answer itself is whole."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import httpx
import httpx2
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import get_message_text
from a2a.types import Message, Part, Role, SendMessageRequest, TaskState
from ag_ui.core import Event, EventType
from google.protobuf.json_format import MessageToDict
from pydantic import TypeAdapter

from memora.testing import ScriptedProvider, text
from memora_plugin_server.agui import UNSAVED_EVENT

from .conftest import project_dir, read_events, scripted, serve

AGUI_EVENTS: TypeAdapter[Any] = TypeAdapter(Event)


def _refuse_writes(project: Path, session: str, elsewhere: Path) -> dict[str, bytes]:
    """The session's folder becomes a link to a copy elsewhere: memora will not write through
    it.  Returns the copy's files, which must stay as they are."""
    folder = project / ".memora" / "data" / "sessions" / session
    shutil.move(folder, elsewhere)
    folder.symlink_to(elsewhere, target_is_directory=True)
    return {p.name: p.read_bytes() for p in elsewhere.iterdir()}


async def test_rest_done_says_the_round_was_not_saved(tmp_path: Path) -> None:
    project = project_dir(tmp_path)
    provider = ScriptedProvider([text("first answer"), text("second answer")])
    async with (
        serve(project, **scripted(tmp_path, provider)) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=30) as client,
    ):
        sid = (await client.post("/v1/projects/proj/sessions", json={})).json()["id"]
        turns = f"/v1/projects/proj/sessions/{sid}/turns"
        async with client.stream("POST", turns, json={"text": "hello"}) as r:
            first = (await read_events(r))[-1].data
        assert first["type"] == "done" and first["saved"] is True
        before = _refuse_writes(project, sid, tmp_path / "elsewhere")
        async with client.stream("POST", turns, json={"text": "again"}) as r:
            second = (await read_events(r))[-1].data
        assert second["type"] == "done" and second["answer"] == "second answer"
        assert second["saved"] is False
        # reading it through the link is refused too (it could be another project's log)
        read = await client.get(f"/v1/projects/proj/sessions/{sid}")
        assert read.status_code >= 400, read.text
        assert read.json()["error"]["code"] == "STORAGE_ERROR"
        assert "symbolic link" in read.json()["error"]["message"]
    assert {p.name: p.read_bytes() for p in (tmp_path / "elsewhere").iterdir()} == before


async def test_a2a_completes_with_a_status_message_naming_the_unsaved_round(
    tmp_path: Path,
) -> None:
    project = project_dir(tmp_path)
    provider = ScriptedProvider([text("first answer"), text("second answer")])
    context = str(uuid.uuid4())

    def message(words: str) -> SendMessageRequest:
        return SendMessageRequest(
            message=Message(
                role=Role.ROLE_USER,
                message_id=str(uuid.uuid4()),
                parts=[Part(text=words)],
                context_id=context,
            )
        )

    async with serve(project, **scripted(tmp_path, provider)) as srv:
        http = httpx.AsyncClient(timeout=30)
        card = await A2ACardResolver(http, srv.url).get_agent_card()
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create(card)
        try:
            first = [e async for e in client.send_message(message("hello"))]
            done = first[-1].status_update
            assert done.status.state == TaskState.TASK_STATE_COMPLETED
            assert "saved" not in MessageToDict(done.metadata)
            _refuse_writes(project, f"a2a-{context}", tmp_path / "elsewhere")
            second = [e async for e in client.send_message(message("again"))]
            done = second[-1].status_update
            assert done.status.state == TaskState.TASK_STATE_COMPLETED
            assert MessageToDict(done.metadata) == {"saved": False}
            assert "could not be saved" in get_message_text(done.status.message)
            artifacts = [e.artifact_update for e in second if e.HasField("artifact_update")]
            assert "".join(p.text for a in artifacts for p in a.artifact.parts) == "second answer"
        finally:
            await client.close()
            await http.aclose()


async def test_agui_sends_a_custom_event_before_run_finished(tmp_path: Path) -> None:
    project = project_dir(tmp_path)
    provider = ScriptedProvider([text("first answer"), text("second answer")])

    async def run(client: httpx2.AsyncClient, words: str, run_id: str) -> list[Any]:
        body = {
            "threadId": "thread-1",
            "runId": run_id,
            "messages": [{"id": run_id, "role": "user", "content": words}],
        }
        events = []
        async with client.stream("POST", "/v1/projects/proj/ag-ui", json=body) as r:
            assert r.status_code == 200
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    events.append(AGUI_EVENTS.validate_python(json.loads(line[6:])))
        return events

    async with (
        serve(project, **scripted(tmp_path, provider)) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=30) as client,
    ):
        first = await run(client, "hello", "r1")
        assert EventType.CUSTOM not in [e.type for e in first]
        _refuse_writes(project, "thread-1", tmp_path / "elsewhere")
        second = await run(client, "again", "r2")
        assert [e.type for e in second[-2:]] == [EventType.CUSTOM, EventType.RUN_FINISHED]
        assert second[-2].name == UNSAVED_EVENT and second[-2].value == {"saved": False}
        assert second[-1].outcome.type == "success" and second[-1].result == "second answer"
