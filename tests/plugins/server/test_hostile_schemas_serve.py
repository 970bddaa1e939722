"""Hostile output schemas through a real server (``create_app`` under uvicorn on 127.0.0.1, in
a child process of its own, so a stalled or dead server cannot hide behind the test's own event
loop): REST and AG-UI answer 400 naming the reason, A2A fails the task with it, nothing is
fetched, and ``/health`` answers within 100 ms throughout — also while a result is checked
against a pattern that backtracks for seconds."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from a2a.types import Message, Part, Role, SendMessageRequest

from .conftest import project_dir, read_events
from .test_a2a import _client

SERVER = textwrap.dedent(
    """
    import asyncio, sys
    import uvicorn
    from memora.llm import schema_guard
    from memora.testing import ScriptedProvider, text
    from memora_plugin_server import create_app
    from memora_plugin_server.config import ServerSettings

    project, config_dir, answer = sys.argv[1:4]
    app = create_app(
        project,
        provider=ScriptedProvider(default=text(answer)),
        config_dir=config_dir,
        load_entrypoints=False,
        # /health is asked every 20 ms: more than the default 600 requests a minute
        settings=ServerSettings(rate_limit_per_minute=100_000),
        strategy_override={"act": {"toolMode": "block"}, "reflect": {"summary": "off"}},
    )
    # what a server's start-up does (the lead's): jsonschema imported before the first request,
    # not on the event loop while it serves (~65 ms, once)
    schema_guard.preload()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    )

    async def main():
        task = asyncio.create_task(server.serve())
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        print(server.servers[0].sockets[0].getsockname()[1], flush=True)
        await task

    asyncio.run(main())
    """
)

SLOW = "a" * 38 + "b"
"""Against ``^(a|aa)+$``: seconds of backtracking for any engine (5.6 s for the stdlib ``re``)."""


@pytest.fixture
def silent_listener() -> Iterator[tuple[str, list[socket.socket]]]:
    """A URL on 127.0.0.1 whose server accepts and never answers, and what it accepted."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.1)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}/shape.json", accepted
    stop.set()
    thread.join(5)
    for conn in accepted:
        conn.close()
    server.close()


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[str]:
    project = project_dir(tmp_path)
    answer = json.dumps({"code": SLOW})
    process = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(project), str(tmp_path / "user"), answer],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), 120)
        assert line.strip().isdigit(), process.stderr.read() if process.stderr else ""
        yield f"http://127.0.0.1:{line.strip()}"
        assert process.poll() is None, "the server died"
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


WATCH = textwrap.dedent(
    """
    import json, sys, threading, time
    import httpx2

    # asks /health every 20 ms until its stdin closes, then prints each round trip: a process
    # of its own, so the test's own work (a 0.8 MB body to encode) cannot slow the asking
    url = sys.argv[1]
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    times, codes = [], set()
    with httpx2.Client(base_url=url, timeout=30) as client:
        while not stop.is_set():
            started = time.monotonic()
            codes.add(client.get("/health").status_code)
            times.append(time.monotonic() - started)
            time.sleep(0.02)
    print(json.dumps({"times": times, "codes": sorted(codes)}))
    """
)


@contextlib.contextmanager
def health_watch(url: str) -> Iterator[dict[str, Any]]:
    """``/health`` asked every 20 ms from another process while the block runs; what it saw."""
    process = subprocess.Popen(
        [sys.executable, "-c", WATCH, url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    seen: dict[str, Any] = {}
    try:
        time.sleep(0.5)  # asking before the first hostile schema is sent
        yield seen
    finally:
        out, _ = process.communicate("", timeout=60)
        seen.update(json.loads(out))


def _hostile(url: str, tmp_path: Path) -> dict[str, tuple[dict[str, Any], str]]:
    secret = tmp_path / "secret.json"
    secret.write_text('{"type": "string"}', encoding="utf-8")
    big = {
        "type": "object",
        "properties": {f"f{i}": {"type": "string", "description": "x" * 80} for i in range(8000)},
    }
    return {
        "url": ({"type": "object", "properties": {"a": {"$ref": url}}}, "outside the schema"),
        "file": ({"$ref": secret.as_uri()}, "no file is read"),
        "cycle": (
            {
                "$ref": "#/$defs/a",
                "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
            },
            "$ref cycle",
        ),
        "minLength": ({"type": "string", "minLength": 5000}, "minLength 5000"),
        "size": (big, "over 16384 characters"),
        "nested repeats": ({"type": "string", "pattern": "(?:a{100}){100}"}, "repeats up to"),
    }


async def _rest(client: httpx2.AsyncClient, base: str, schema: Any) -> httpx2.Response:
    return await client.post(f"{base}/turns", json={"text": "a code", "output_schema": schema})


async def _agui(client: httpx2.AsyncClient, schema: Any) -> httpx2.Response:
    body = {
        "threadId": f"t-{uuid.uuid4()}",
        "runId": "r1",
        "state": {},
        "messages": [{"id": "u1", "role": "user", "content": "a code"}],
        "tools": [],
        "context": [],
        "forwardedProps": {"output_schema": schema},
    }
    return await client.post("/v1/projects/proj/ag-ui", json=body)


async def _a2a(url: str, schema: Any) -> Any:
    client, _, http = await _client(url, streaming=False)
    try:
        message = Message(
            role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[Part(text="a code")]
        )
        message.metadata.update({"output_schema": schema})
        events = [e async for e in client.send_message(SendMessageRequest(message=message))]
        return events[-1].task
    finally:
        await client.close()
        await http.aclose()


async def test_hostile_schemas_are_refused_and_health_keeps_answering(
    served: str, silent_listener: tuple[str, list[socket.socket]], tmp_path: Path
) -> None:
    url, accepted = silent_listener
    with health_watch(served) as health:
        async with httpx2.AsyncClient(base_url=served, timeout=60) as client:
            sid = (await client.post("/v1/projects/proj/sessions", json={})).json()["id"]
            base = f"/v1/projects/proj/sessions/{sid}"
            for name, (schema, reason) in _hostile(url, tmp_path).items():
                for surface, response in (
                    ("REST", await _rest(client, base, schema)),
                    ("AG-UI", await _agui(client, schema)),
                ):
                    assert response.status_code == 400, (surface, name, response.text)
                    message = response.json()["error"]["message"]
                    assert "output_schema" in message and reason in message, (surface, name)
            # A2A: every hostile schema is the JSON-RPC error for invalid params (JSON-RPC's
            # 400, sent with HTTP 200 as every A2A error is), the reason named, no task made
            for name, (schema, reason) in _hostile(url, tmp_path).items():
                rpc = {
                    "jsonrpc": "2.0",
                    "id": 7,
                    "method": "SendMessage",
                    "params": {
                        "message": {
                            "role": "ROLE_USER",
                            "messageId": str(uuid.uuid4()),
                            "parts": [{"text": "a code"}],
                            "metadata": {"output_schema": schema},
                        }
                    },
                }
                refused = await client.post("/a2a/proj", json=rpc)
                assert refused.status_code == 200, (name, refused.text)
                error = refused.json()["error"]
                assert error["code"] == -32602 and reason in error["message"], (name, error)
            # and through the SDK's own client, which raises it
            schema, reason = _hostile(url, tmp_path)["cycle"]
            with pytest.raises(Exception, match="output_schema"):
                await _a2a(served, schema)

            # a schema let through, whose pattern backtracks for seconds on the model's answer:
            # each try fails at the deadline, off the event loop, and the turn ends cleanly
            pattern = {
                "type": "object",
                "properties": {"code": {"type": "string", "pattern": "^(a|aa)+$"}},
                "required": ["code"],
            }
            body = {"text": "a code", "output_schema": pattern}
            async with client.stream("POST", f"{base}/turns", json=body) as r:
                assert r.status_code == 200
                events = await asyncio.wait_for(read_events(r), 120)
            assert events[-1].type == "error", events[-1].data
            assert "took over 2 s" in json.dumps(events[-1].data)
    assert accepted == []  # the URL in a $ref was never fetched
    assert health["codes"] == [200] and len(health["times"]) > 50
    times = sorted(health["times"])
    # within 100 ms throughout — bar the odd probe the shared machine's scheduler delays
    # (a stall is what this guards against: a hostile schema held the loop for 3-15 s)
    within = sum(t < 0.1 for t in times) / len(times)
    assert within >= 0.97 and times[-1] < 1.0, times[-5:]
