"""A2A over `memora serve`, driven by a2a-sdk's own client (JSON-RPC, protocol 1.0): the agent
card, `message/send`, `message/stream`, a task that needs input (an approval) continued by the
next message, and the bearer token the card asks for."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import get_artifact_text, get_message_text
from a2a.types import GetTaskRequest, Message, Part, Role, SendMessageRequest, TaskState

from memora.testing import ScriptedProvider, text, tool_call
from memora_plugin_server.config import ServerSettings, TokenEntry, hash_token

from .conftest import project_dir, scripted, serve


def _message(text_: str, *, context: str | None = None, task: str | None = None) -> Message:
    return Message(
        role=Role.ROLE_USER,
        message_id=str(uuid.uuid4()),
        parts=[Part(text=text_)],
        context_id=context or "",
        task_id=task or "",
    )


async def _send(client: Any, text_: str, **ids: str) -> list[Any]:
    """Every event of one message (a `message/send` or `message/stream`)."""
    request = SendMessageRequest(message=_message(text_, **ids))
    return [e async for e in client.send_message(request)]


async def _client(url: str, headers: dict[str, str] | None = None, *, streaming: bool) -> Any:
    http = httpx.AsyncClient(headers=headers or {}, timeout=30)
    card = await A2ACardResolver(http, url).get_agent_card()
    client = ClientFactory(ClientConfig(httpx_client=http, streaming=streaming)).create(card)
    return client, card, http


async def test_send_stream_and_an_approval_as_input_required(tmp_path: Path) -> None:
    project = project_dir(tmp_path)
    write = ("write_file", {"path": "a2a.txt", "content": "from a2a"}, "w1")
    provider = ScriptedProvider(
        [text("Paris is the capital."), tool_call(write), text("written 好", chunks=3)]
    )
    options = scripted(tmp_path, provider)
    async with serve(project, **options) as srv:
        client, card, http = await _client(srv.url, streaming=False)
        try:
            assert card.name == "memora: proj" and card.capabilities.streaming
            assert card.supported_interfaces[0].url == f"{srv.url}/a2a/proj"

            # message/send: the finished task with its answer
            events = await _send(client, "capital?")
            task = events[-1].task
            assert task.status.state == TaskState.TASK_STATE_COMPLETED
            assert get_artifact_text(task.artifacts[0]) == "Paris is the capital."
        finally:
            await client.close()
            await http.aclose()

        client, _, http = await _client(srv.url, streaming=True)
        try:
            context = str(uuid.uuid4())
            events = await _send(client, "write", context=context)
            task_id = events[0].task.id
            last = events[-1].status_update.status
            assert last.state == TaskState.TASK_STATE_INPUT_REQUIRED
            assert "write_file" in get_message_text(last.message)
            assert not (project / "a2a.txt").exists()

            follow = await _send(client, "approve", context=context, task=task_id)
            states = [e.status_update.status.state for e in follow if e.HasField("status_update")]
            assert states[-1] == TaskState.TASK_STATE_COMPLETED
            streamed = "".join(
                get_artifact_text(e.artifact_update.artifact)
                for e in follow
                if e.HasField("artifact_update")
            )
            assert streamed == "written 好"
            assert (project / "a2a.txt").read_text() == "from a2a"

            stored = await client.get_task(GetTaskRequest(id=task_id))
            assert stored.status.state == TaskState.TASK_STATE_COMPLETED
        finally:
            await client.close()
            await http.aclose()

        # the context is a memora session with its rounds
        async with httpx.AsyncClient(base_url=srv.url) as plain:
            session = (await plain.get(f"/v1/projects/proj/sessions/a2a-{context}")).json()
            assert [r["status"] for r in session["rounds"]] == ["done"]


async def test_a2a_needs_the_token_when_tokens_are_configured(tmp_path: Path) -> None:
    project = project_dir(tmp_path)
    settings = ServerSettings(
        tokens=[
            TokenEntry(name="agent", hash=hash_token("tok-a")),
            TokenEntry(name="ro", hash=hash_token("tok-ro"), access="read"),
        ]
    )
    provider = ScriptedProvider([], default=text("hello"))
    options = scripted(tmp_path, provider)
    async with serve(project, settings=settings, **options) as srv:
        async with httpx.AsyncClient() as plain:
            refused = await plain.get(f"{srv.url}/.well-known/agent-card.json")
            assert refused.status_code == 401
        client, card, http = await _client(
            srv.url, {"Authorization": "Bearer tok-a"}, streaming=False
        )
        try:
            assert "bearer" in card.security_schemes
            events = await _send(client, "hi")
            assert events[-1].task.status.state == TaskState.TASK_STATE_COMPLETED
        finally:
            await client.close()
            await http.aclose()
        async with httpx.AsyncClient(headers={"Authorization": "Bearer tok-ro"}) as ro:
            r = await ro.post(
                f"{srv.url}/a2a/proj",
                json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {}},
            )
            assert r.status_code == 403 and r.json()["error"]["code"] == "FORBIDDEN"


@pytest.mark.parametrize("reply", ["deny", "no thanks, not that file"])
async def test_a_denial_by_reply(tmp_path: Path, reply: str) -> None:
    project = project_dir(tmp_path)
    provider = ScriptedProvider(
        [tool_call(("write_file", {"path": "x.txt", "content": "x"}, "c1")), text("fine")]
    )
    options = scripted(tmp_path, provider)
    async with serve(project, **options) as srv:
        client, _, http = await _client(srv.url, streaming=True)
        try:
            context = str(uuid.uuid4())
            events = await _send(client, "w", context=context)
            task_id = events[0].task.id
            follow = await _send(client, reply, context=context, task=task_id)
            notes = [
                get_message_text(e.status_update.status.message)
                for e in follow
                if e.HasField("status_update") and e.status_update.status.HasField("message")
            ]
            assert any(n.startswith("write_file refused") for n in notes), notes
            assert not (project / "x.txt").exists()
        finally:
            await client.close()
            await http.aclose()


async def test_a2a_0_3_method_names_work_too(tmp_path: Path) -> None:
    """Clients of protocol 0.3 call `message/send` with `kind` parts: the same endpoint answers."""
    project = project_dir(tmp_path)
    provider = ScriptedProvider([], default=text("hello from memora"))
    options = scripted(tmp_path, provider)
    async with serve(project, **options) as srv, httpx.AsyncClient(timeout=30) as client:
        body = {
            "jsonrpc": "2.0",
            "id": "1",
            "method": "message/send",
            "params": {
                "message": {
                    "role": "user",
                    "messageId": str(uuid.uuid4()),
                    "parts": [{"kind": "text", "text": "hi"}],
                },
                "configuration": {"blocking": True},
            },
        }
        r = await client.post(f"{srv.url}/a2a/proj", json=body)
        assert r.status_code == 200, r.text
        result = r.json()["result"]
        assert result["status"]["state"] == "completed"
        texts = [p.get("text") for a in result["artifacts"] for p in a["parts"]]
        assert "".join(t for t in texts if t) == "hello from memora"


async def test_a_question_is_input_required_and_the_reply_answers_it(tmp_path: Path) -> None:
    project = project_dir(tmp_path)
    question = {"questions": [{"slot": "tone", "question": "Which tone?"}]}
    provider = ScriptedProvider([tool_call(("ask_user", question, "q1")), text("Dark it is.")])
    options = scripted(tmp_path, provider, ask=True)
    async with serve(project, **options) as srv:
        client, _, http = await _client(srv.url, streaming=True)
        try:
            context = str(uuid.uuid4())
            events = await _send(client, "a poem", context=context)
            status = events[-1].status_update.status
            assert status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            assert get_message_text(status.message) == "Which tone?"
            follow = await _send(client, "dark", context=context, task=events[0].task.id)
            states = [e.status_update.status.state for e in follow if e.HasField("status_update")]
            assert states[-1] == TaskState.TASK_STATE_COMPLETED
            answer = provider.requests[1].messages[-1].content
            assert json.loads(answer) == {"answers": {"tone": "dark"}}
        finally:
            await client.close()
            await http.aclose()


async def test_a_task_that_paused_ends_with_one_artifact_holding_the_answer(
    tmp_path: Path,
) -> None:
    """#41: a task that paused ended with two artifacts (the narration before the pause, then
    the answer); docs/service.md promises one answer."""
    project = project_dir(tmp_path)
    write = ("write_file", {"path": "a.txt", "content": "x"}, "w1")
    provider = ScriptedProvider(
        [tool_call(write, preface="Let me write the file first."), text("Written: a.txt.")]
    )
    async with serve(project, **scripted(tmp_path, provider)) as srv:
        client, _, http = await _client(srv.url, streaming=True)
        try:
            context = str(uuid.uuid4())
            events = await _send(client, "write a.txt", context=context)
            task_id = events[0].task.id
            await _send(client, "approve", context=context, task=task_id)
            task = await client.get_task(GetTaskRequest(id=task_id))
            assert task.status.state == TaskState.TASK_STATE_COMPLETED
            assert len(task.artifacts) == 1
            assert get_artifact_text(task.artifacts[0], delimiter="") == "Written: a.txt."
        finally:
            await client.close()
            await http.aclose()
