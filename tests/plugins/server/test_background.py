"""Background runs over REST (#71 item 3): a turn started with ``background: true`` answers at
once with its id and runs with no client attached; its events are followed — and followed
again — from any event; a run that waits on an approval is cancelled cleanly and the session
takes the next message."""

from __future__ import annotations

from pathlib import Path

import httpx2

from memora.testing import ScriptedProvider, text, tool_call

from .conftest import project_dir, read_events, scripted, serve


async def test_a_background_turn_runs_unattended_and_is_followed_from_any_event(
    tmp_path: Path,
) -> None:
    project = project_dir(tmp_path)
    provider = ScriptedProvider([tool_call(("list_dir", {})), text("listed it all")])
    async with (
        serve(project, **scripted(tmp_path, provider)) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=60) as client,
    ):
        sid = (await client.post("/v1/projects/proj/sessions", json={})).json()["id"]
        base = f"/v1/projects/proj/sessions/{sid}"
        started = await client.post(f"{base}/turns", json={"text": "list", "background": True})
        assert started.status_code == 202, started.text
        run = started.json()
        assert run["session_id"] == sid and started.headers["x-memora-turn"] == run["turn_id"]
        async with client.stream("GET", run["events"]) as r:
            events = await read_events(r)
        assert events[-1].type == "done" and events[-1].data["answer"] == "listed it all"
        middle = events[len(events) // 2]
        assert middle.id is not None
        async with client.stream("GET", run["events"], headers={"Last-Event-ID": middle.id}) as r:
            again = await read_events(r)
        assert [e.data for e in again] == [e.data for e in events[len(events) // 2 + 1 :]]
        info = (await client.get(base)).json()
        assert [r["status"] for r in info["rounds"]] == ["done"] and info["running_turn"] is None


async def test_cancelling_a_run_that_waits_on_an_approval_leaves_the_session_ready(
    tmp_path: Path,
) -> None:
    project = project_dir(tmp_path)
    provider = ScriptedProvider(
        [tool_call(("write_file", {"path": "a.txt", "content": "x"})), text("next answer")]
    )
    async with (
        serve(project, **scripted(tmp_path, provider), approvals="ask") as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=60) as client,
    ):
        sid = (await client.post("/v1/projects/proj/sessions", json={})).json()["id"]
        base = f"/v1/projects/proj/sessions/{sid}"
        run = (
            await client.post(f"{base}/turns", json={"text": "write", "background": True})
        ).json()
        async with client.stream("GET", run["events"]) as r:
            events = await read_events(r)
        assert events[-1].type == "paused"
        assert (await client.get(f"{base}/pause")).status_code == 200
        cancelled = await client.post(f"{base}/abort")
        assert cancelled.json() == {"aborted": True}
        assert (await client.get(f"{base}/pause")).status_code == 404
        assert not (project / "a.txt").exists()
        async with client.stream("POST", f"{base}/turns", json={"text": "hello"}) as r:
            after = await read_events(r)
        assert after[-1].type == "done" and after[-1].data["answer"] == "next answer"
        # nothing of the cancelled run was kept: the model saw only the new message
        asked = [m.content for m in provider.requests[-1].messages if m.role == "user"]
        assert asked == ["hello"]
        assert (await client.post(f"{base}/abort")).json() == {"aborted": False}


async def test_an_a2a_message_sent_to_return_immediately_runs_on_and_is_read_later(
    tmp_path: Path,
) -> None:
    """A2A's own background run: ``configuration.returnImmediately`` answers with the task
    while it still works; ``GetTask`` reads it to its end (the answer in its artifact)."""
    import asyncio
    import uuid

    from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
    from a2a.types import (
        GetTaskRequest,
        Message,
        Part,
        Role,
        SendMessageConfiguration,
        SendMessageRequest,
        TaskState,
    )

    project = project_dir(tmp_path)
    slow = text("answered while nobody waited", chunks=4)
    slow.delay = 0.3
    provider = ScriptedProvider([slow])
    async with serve(project, **scripted(tmp_path, provider)) as srv:
        import httpx

        async with httpx.AsyncClient(timeout=30) as http:
            card = await A2ACardResolver(http, srv.url).get_agent_card()
            client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
            message = Message(
                role=Role.ROLE_USER,
                message_id=str(uuid.uuid4()),
                parts=[Part(text="take your time")],
            )
            request = SendMessageRequest(
                message=message,
                configuration=SendMessageConfiguration(return_immediately=True),
            )
            (first,) = [e async for e in client.send_message(request)]
            task = first.task
            assert task.status.state in (
                TaskState.TASK_STATE_SUBMITTED,
                TaskState.TASK_STATE_WORKING,
            )
            for _ in range(300):
                task = await client.get_task(GetTaskRequest(id=task.id))
                if task.status.state == TaskState.TASK_STATE_COMPLETED:
                    break
                await asyncio.sleep(0.1)
            assert task.status.state == TaskState.TASK_STATE_COMPLETED
            assert "".join(p.text for a in task.artifacts for p in a.parts) == (
                "answered while nobody waited"
            )
