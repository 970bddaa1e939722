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
