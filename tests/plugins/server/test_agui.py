"""AG-UI over `memora serve`: a run with a tool call that needs approval ends with an interrupt,
the next run resumes it; every event is validated with the `ag-ui-protocol` package's models and
the stream keeps the protocol's order (start before content before end, one RUN_STARTED first,
one RUN_FINISHED last)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
from ag_ui.core import Event, EventType
from pydantic import TypeAdapter

from memora.testing import ScriptedProvider, reasoning, text, tool_call

from .conftest import project_dir, scripted, serve

EVENTS: TypeAdapter[Any] = TypeAdapter(Event)


async def _run(client: httpx2.AsyncClient, body: dict[str, Any]) -> list[Any]:
    events = []
    async with client.stream("POST", "/v1/projects/proj/ag-ui", json=body) as r:
        assert r.status_code == 200, await r.aread()
        assert r.headers["content-type"].startswith("text/event-stream")
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                events.append(EVENTS.validate_python(json.loads(line[6:])))
    _check_order(events)
    return events


def _check_order(events: list[Any]) -> None:
    assert events[0].type == EventType.RUN_STARTED
    assert events[-1].type in (EventType.RUN_FINISHED, EventType.RUN_ERROR)
    assert sum(e.type == EventType.RUN_STARTED for e in events) == 1
    open_messages: set[str] = set()
    open_calls: set[str] = set()
    closed_calls: set[str] = set()
    for e in events:
        if e.type in (EventType.TEXT_MESSAGE_START, EventType.REASONING_MESSAGE_START):
            assert e.message_id not in open_messages
            open_messages.add(e.message_id)
        elif e.type in (EventType.TEXT_MESSAGE_CONTENT, EventType.REASONING_MESSAGE_CONTENT):
            assert e.message_id in open_messages and e.delta
        elif e.type in (EventType.TEXT_MESSAGE_END, EventType.REASONING_MESSAGE_END):
            open_messages.remove(e.message_id)
        elif e.type == EventType.TOOL_CALL_START:
            assert not open_messages  # a text message is closed before a call opens
            open_calls.add(e.tool_call_id)
        elif e.type == EventType.TOOL_CALL_ARGS:
            assert e.tool_call_id in open_calls
        elif e.type == EventType.TOOL_CALL_END:
            open_calls.remove(e.tool_call_id)
            closed_calls.add(e.tool_call_id)
    assert not open_messages and not open_calls


def _input(thread: str, run: str, **extra: Any) -> dict[str, Any]:
    return {
        "threadId": thread,
        "runId": run,
        "messages": [{"id": "u1", "role": "user", "content": "write the file"}],
        **extra,
    }


async def test_an_approval_is_an_interrupt_and_the_next_run_resumes_it(tmp_path: Path) -> None:
    project = project_dir(tmp_path)
    write = ("write_file", {"path": "a.txt", "content": "hi"}, "w1")
    provider = ScriptedProvider(
        [tool_call(write, preface="Writing."), reasoning("it worked", "Done: a.txt")]
    )
    options = scripted(tmp_path, provider)
    async with (
        serve(project, **options) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=30) as client,
    ):
        first = await _run(client, _input("agui-thread", "run-1"))
        kinds = [e.type for e in first]
        assert EventType.TEXT_MESSAGE_CONTENT in kinds
        start = next(e for e in first if e.type == EventType.TOOL_CALL_START)
        assert start.tool_call_id == "w1" and start.tool_call_name == "write_file"
        args = "".join(e.delta for e in first if e.type == EventType.TOOL_CALL_ARGS)
        assert json.loads(args)["path"] == "a.txt"
        finished = first[-1]
        assert finished.type == EventType.RUN_FINISHED and finished.outcome.type == "interrupt"
        interrupt = finished.outcome.interrupts[0]
        assert interrupt.id == "w1" and interrupt.tool_call_id == "w1"
        assert interrupt.reason == "approval"
        assert not (project / "a.txt").exists()

        resume = {
            "resume": [
                {"interruptId": "w1", "status": "resolved", "payload": {"decision": "approve"}}
            ]
        }
        second = await _run(client, _input("agui-thread", "run-2", **resume))
        result = next(e for e in second if e.type == EventType.TOOL_CALL_RESULT)
        assert result.tool_call_id == "w1"
        reasoning_text = "".join(
            e.delta for e in second if e.type == EventType.REASONING_MESSAGE_CONTENT
        )
        assert reasoning_text == "it worked"
        answer = "".join(e.delta for e in second if e.type == EventType.TEXT_MESSAGE_CONTENT)
        assert answer == "Done: a.txt"
        assert second[-1].type == EventType.RUN_FINISHED
        assert second[-1].outcome.type == "success" and second[-1].result == "Done: a.txt"
        assert (project / "a.txt").read_text() == "hi"

        # the thread is a memora session: its round is stored
        session = (await client.get("/v1/projects/proj/sessions/agui-thread")).json()
        assert [r["status"] for r in session["rounds"]] == ["done"]


async def test_cancelling_the_interrupt_denies_and_bad_input_is_named(tmp_path: Path) -> None:
    project = project_dir(tmp_path)
    provider = ScriptedProvider(
        [tool_call(("write_file", {"path": "b.txt", "content": "x"}, "c1")), text("ok, not")]
    )
    options = scripted(tmp_path, provider)
    async with (
        serve(project, **options) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=30) as client,
    ):
        await _run(client, _input("t2", "r1"))
        cancel = {"resume": [{"interruptId": "c1", "status": "cancelled"}]}
        events = await _run(client, _input("t2", "r2", **cancel))
        result = next(e for e in events if e.type == EventType.TOOL_CALL_RESULT)
        assert result.content == "rejected: denied"  # the reason a cancel gives
        assert not (project / "b.txt").exists()

        r = await client.post("/v1/projects/proj/ag-ui", json={"threadId": "t3", "messages": []})
        assert r.status_code == 400
        assert r.json()["error"]["message"] == "runId: Field required"
        no_text = _input("t3", "r1")
        no_text["messages"] = [{"id": "a", "role": "assistant", "content": "hi"}]
        r = await client.post("/v1/projects/proj/ag-ui", json=no_text)
        assert r.status_code == 400 and "user message" in r.json()["error"]["message"]


async def test_a_question_is_an_interrupt_with_a_schema(tmp_path: Path) -> None:
    project = project_dir(tmp_path)
    question = {
        "questions": [{"slot": "tone", "question": "Which tone?", "options": ["dark", "light"]}]
    }
    provider = ScriptedProvider([tool_call(("ask_user", question, "q1")), text("Dark.")])
    options = scripted(tmp_path, provider, ask=True)
    async with (
        serve(project, **options) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=30) as client,
    ):
        first = await _run(client, _input("agui-q", "run-1"))
        outcome = first[-1].outcome
        assert outcome.type == "interrupt"
        interrupt = outcome.interrupts[0]
        assert interrupt.reason == "question" and interrupt.message == "Which tone?"
        assert interrupt.response_schema["properties"]["tone"]["enum"] == ["dark", "light"]
        resume = {
            "resume": [
                {"interruptId": interrupt.id, "status": "resolved", "payload": {"tone": "dark"}}
            ]
        }
        second = await _run(client, _input("agui-q", "run-2", **resume))
        assert second[-1].outcome.type == "success" and second[-1].result == "Dark."
        assert json.loads(provider.requests[1].messages[-1].content) == {
            "answers": {"tone": "dark"}
        }
