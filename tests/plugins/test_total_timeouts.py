"""Every timeout is a total (issue #69 item 2): a provider call, an embeddings request, a web fetch
and an MCP call over HTTP each end at their total timeout, from connect to the last byte, whatever
a server on 127.0.0.1 trickles — the status line a byte at a time, ``100 Continue`` forever, a body
a byte at a time, or no answer at all — with an error naming the timeout, and no connection or
file descriptor left behind.

The read timeouts are set far above the total (30 s against 1 s): each trickle beats them, so
only the total can end the call within the hang guard."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from memora.errors import ToolError, ToolErrorCode
from memora.llm import LLMRequest, Message, ProviderError
from memora.llm.types import FinishDelta, TextDelta
from memora_plugin_fetch import HttpFetcher
from memora_plugin_mcp import McpToolSource
from memora_plugin_openai import OpenAIEmbedder, OpenAIProvider

from .fault_server import (
    STREAM_HEAD,
    FaultServer,
    Scenario,
    chunked,
    continue_forever_scenario,
    silent_scenario,
    sse_chunk,
    stall_scenario,
    trickle_body_scenario,
    trickle_head_scenario,
)

TOTAL = 1.0
"""The total timeout every client gets here (seconds)."""
SILENCE = 30.0
"""Their read (stall) timeouts: far above the total, and above the hang guard."""
GUARD = TOTAL + 3.0
"""A call still running after this long did not end at its total timeout."""

REQ = LLMRequest([Message.user("hi")], max_tokens=8)
JSON_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n"
HTML_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: 100000\r\n\r\n"

# each slow peer, by name; a body trickles in what the client expects to read
SLOW: dict[str, Callable[[str], Scenario]] = {
    "head a byte at a time": lambda _: trickle_head_scenario(),
    "100 Continue forever": lambda _: continue_forever_scenario(),
    "body a byte at a time": lambda kind: (
        trickle_body_scenario(STREAM_HEAD, chunked(b": keep-alive\n"))
        if kind == "sse"
        else trickle_body_scenario(HTML_HEAD if kind == "html" else JSON_HEAD, b" ")
    ),
    "no answer": lambda _: silent_scenario(),
}


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
async def server() -> AsyncIterator[FaultServer]:
    s = FaultServer()
    await s.start()
    yield s
    await s.stop()


async def ends_at_total(call: Awaitable[Any]) -> BaseException:
    """The error ``call`` ends with, checked to come at the total timeout: not before it, and
    not long after (the read timeouts are past the guard, and so is anything else that waits
    on after the total)."""
    started = time.monotonic()
    try:
        async with asyncio.timeout(GUARD):
            await call
    except TimeoutError:
        pytest.fail(f"still running after {GUARD:g} s: the total timeout did not end it")
    except Exception as exc:
        took = time.monotonic() - started
        assert TOTAL * 0.9 <= took < GUARD, f"ended after {took:.2f} s: {exc!r}"
        return exc
    pytest.fail("the call returned")


async def closed(server: FaultServer) -> bool:
    """Whether the client closed its connections (the server's side sees each close)."""
    for _ in range(40):
        if server.open_connections == 0:
            return True
        await asyncio.sleep(0.05)
    return False


async def drain_stream(p: OpenAIProvider) -> list[object]:
    return [d async for d in p.stream(REQ)]


def provider(server: FaultServer) -> OpenAIProvider:
    return OpenAIProvider(
        model="m",
        base_url=server.url,
        stall_timeout=SILENCE,
        connect_timeout=SILENCE,
        total_timeout=TOTAL,
    )


@pytest.mark.parametrize("slow", list(SLOW))
async def test_a_streamed_answer_ends_at_total_timeout(server: FaultServer, slow: str) -> None:
    server.script = [SLOW[slow]("sse")]
    p = provider(server)
    try:
        exc = await ends_at_total(drain_stream(p))
        assert isinstance(exc, ProviderError), exc
        assert exc.category == "timeout"
        assert "total_timeout" in exc.message and "from connect to the last byte" in exc.message
        assert not exc.retryable
        assert await closed(server), "the connection was left open (and its descriptor)"
    finally:
        await p.aclose()


@pytest.mark.parametrize("slow", list(SLOW))
async def test_a_complete_and_the_model_list_end_at_total_timeout(
    server: FaultServer, slow: str
) -> None:
    server.script = [SLOW[slow]("json")]
    p = provider(server)
    try:
        for call in (p.complete(REQ), p.list_models()):
            exc = await ends_at_total(call)
            assert isinstance(exc, ProviderError) and exc.category == "timeout", exc
            assert "total_timeout" in exc.message
            assert await closed(server)
    finally:
        await p.aclose()


@pytest.mark.parametrize("slow", list(SLOW))
async def test_an_embeddings_request_ends_at_total_timeout(server: FaultServer, slow: str) -> None:
    server.script = [SLOW[slow]("json")]
    e = OpenAIEmbedder(base_url=server.url, timeout=SILENCE, total_timeout=TOTAL)
    try:
        exc = await ends_at_total(e.embed(["a memory"], kind="document"))
        assert isinstance(exc, ProviderError) and exc.category == "timeout", exc
        assert "the embeddings" in exc.message and "total_timeout" in exc.message
        assert await closed(server)
    finally:
        await e.aclose()


@pytest.mark.parametrize("slow", list(SLOW))
async def test_a_web_fetch_ends_at_its_timeout(server: FaultServer, slow: str) -> None:
    server.script = [SLOW[slow]("html")]
    f = HttpFetcher(allow_private=True, timeout=TOTAL)
    try:
        exc = await ends_at_total(f.fetch(f"http://127.0.0.1:{server.port}/page"))
        assert isinstance(exc, ToolError) and exc.code == ToolErrorCode.TIMEOUT, exc
        assert "from connect to the last byte" in exc.message
        assert await closed(server)
    finally:
        await f.aclose()


def mcp_scenario(slow: Scenario) -> Scenario:
    """Just enough of an MCP server over streamable HTTP (JSON answers, the handshake, a tool
    list of ``wait`` and ``ok``); a call to ``wait`` is answered by ``slow``."""

    async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: bytes) -> None:
        msg = json.loads(body) if body else None
        if msg is None or "id" not in msg:  # the event stream (GET), or a notification
            status = "405 Method Not Allowed" if msg is None else "202 Accepted"
            writer.write(f"HTTP/1.1 {status}\r\ncontent-length: 0\r\n\r\n".encode())
            await writer.drain()
            return
        method, params = msg["method"], msg.get("params") or {}
        if method == "initialize":
            result: dict[str, Any] = {
                "protocolVersion": params["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "slow", "version": "1"},
            }
        elif method == "tools/list":
            schema = {"type": "object"}
            result = {
                "tools": [
                    {"name": "wait", "description": "Wait.", "inputSchema": schema},
                    {"name": "ok", "description": "Answer.", "inputSchema": schema},
                ]
            }
        elif method == "tools/call" and params.get("name") == "wait":
            await slow(reader, writer, body)
            return
        elif method == "tools/call":
            result = {"content": [{"type": "text", "text": "fine"}]}
        else:  # server/discover: an older server, which the SDK then greets with initialize
            result = {}
        key, value = ("result", result) if result else ("error", {"code": -32601, "message": "no"})
        data = json.dumps({"jsonrpc": "2.0", "id": msg["id"], key: value}).encode()
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(data)}\r\n\r\n".encode()
            + data
        )
        await writer.drain()

    return run


def mcp_source(server: FaultServer) -> McpToolSource:
    return McpToolSource(
        servers={"slow": {"url": f"http://127.0.0.1:{server.port}/mcp"}},
        timeout=TOTAL,
        allow=["127.0.0.0/8"],
    )


@pytest.mark.parametrize("slow", list(SLOW))
async def test_an_mcp_call_over_http_ends_at_its_timeout_and_leaves_no_request(
    server: FaultServer, slow: str
) -> None:
    server.script = [mcp_scenario(SLOW[slow]("json"))]
    source = mcp_source(server)
    try:
        tools = {t.name: t for t in await source.tools("mcp:slow")}
        exc = await ends_at_total(tools["mcp_slow_wait"].invoke(None, {}))
        assert isinstance(exc, ToolError) and exc.code == ToolErrorCode.TIMEOUT, exc
        # the SDK stops waiting at the timeout, but its POST went on for as long as the server
        # kept trickling: one more open connection for every call that timed out
        assert await closed(server), "the timed-out call's request is still open"
        # the next call works (on a new session: the request that timed out ended the old one)
        out = await asyncio.wait_for(tools["mcp_slow_ok"].invoke(None, {}), GUARD)
        assert out.content == "fine"
    finally:
        await source.aclose()


@pytest.mark.parametrize("slow", ["head a byte at a time", "100 Continue forever", "no answer"])
async def test_an_mcp_server_that_trickles_its_handshake_fails_at_the_timeout(
    server: FaultServer, slow: str
) -> None:
    server.script = [SLOW[slow]("json")]
    source = mcp_source(server)
    try:
        exc = await ends_at_total(source.tools("mcp:slow"))
        assert isinstance(exc, RuntimeError), exc
        assert f"did not answer within {TOTAL:g} s (timeout)" in str(exc)
        assert await closed(server)
    finally:
        await source.aclose()


async def test_a_body_that_trickles_after_the_answer_does_not_hold_it(server: FaultServer) -> None:
    """A finished answer keeps what it said when the server trickles on after it: after
    ``[DONE]`` (the drain: 0.25 s in all, where it was 0.25 s a read, so a byte every 0.1 s
    held it for 64 KiB of them) or after ``finish_reason`` without ``[DONE]`` (ended by the
    total, where the answer was lost to a timeout error)."""
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 100000\r\n\r\n"
    answer = sse_chunk({"content": "done"}) + sse_chunk(finish="stop")
    for tail in (answer + b"data: [DONE]\n\n", answer):
        server.script = [trickle_body_scenario(head + tail, b":")]
        p = provider(server)
        try:
            async with asyncio.timeout(GUARD):
                out = await drain_stream(p)
            assert TextDelta("done") in out and FinishDelta("stop") in out
            assert await closed(server)
        finally:
            await p.aclose()


async def test_the_consumer_is_never_cancelled_by_the_deadline(server: FaultServer) -> None:
    """The deadline fires while the caller works between two deltas: the caller's own await is
    not cancelled, and the next read ends the stream with the total-timeout error."""
    server.script = [stall_scenario([sse_chunk({"content": "a"})])]
    p = provider(server)
    slept = False
    try:
        with pytest.raises(ProviderError) as info:
            async with asyncio.timeout(GUARD):
                async for _ in p.stream(REQ):
                    await asyncio.sleep(TOTAL * 1.5)  # past the deadline, in the caller's code
                    slept = True
        assert slept and info.value.category == "timeout"
    finally:
        await p.aclose()


async def test_a_cancellation_from_outside_passes_through(server: FaultServer) -> None:
    """A host's own timeout around the stream (an Agent's ``llm_stall_timeout``) is the host's:
    it raises as the host's ``TimeoutError``, not as the provider's error, and the stream's task
    is not left cancelled."""
    server.script = [silent_scenario()]
    p = OpenAIProvider(model="m", base_url=server.url, stall_timeout=SILENCE, total_timeout=60)
    try:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await drain_stream(p)
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
        assert await closed(server)
    finally:
        await p.aclose()


@pytest.mark.parametrize("value", [0, -1, "10", float("nan"), True])
def test_a_total_timeout_is_a_positive_number_of_seconds(value: object) -> None:
    with pytest.raises(ValueError, match="total_timeout"):
        OpenAIProvider(model="m", base_url="http://127.0.0.1:9/v1", total_timeout=value)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="total_timeout"):
        OpenAIEmbedder(base_url="http://127.0.0.1:9/v1", total_timeout=value)  # type: ignore[arg-type]


def routed(server: FaultServer, make: Callable[[str], Scenario]) -> Scenario:
    """``make``'s scenario for what each request expects: an event stream, JSON, a page, or
    (MCP) a handshake answered and a call to ``wait`` answered slowly."""

    async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: bytes) -> None:
        request = server.requests[-1]  # the request being answered
        path = request["line"].split(" ")[1]
        if path == "/mcp":
            await mcp_scenario(make("json"))(reader, writer, body)
        else:
            kind = "html" if path == "/page" else "sse" if request["body"].get("stream") else "json"
            await make(kind)(reader, writer, body)

    return run


async def test_no_descriptor_is_left_after_every_slow_peer() -> None:
    """Every path against every slow peer, all at once, then everything closed: the process
    holds as many file descriptors as before."""
    before = open_fds()
    s = FaultServer()
    await s.start()
    p = provider(s)
    e = OpenAIEmbedder(base_url=s.url, timeout=SILENCE, total_timeout=TOTAL)
    f = HttpFetcher(allow_private=True, timeout=TOTAL)
    m = mcp_source(s)
    try:
        for make in SLOW.values():
            s.script = [routed(s, make)]
            (wait,) = [t for t in await m.tools("mcp:slow") if t.name == "mcp_slow_wait"]
            calls = [
                drain_stream(p),
                p.complete(REQ),
                e.embed(["x"], kind="query"),
                f.fetch(f"http://127.0.0.1:{s.port}/page"),
                wait.invoke(None, {}),
            ]
            async with asyncio.timeout(GUARD):
                ends = await asyncio.gather(*calls, return_exceptions=True)
            assert all(isinstance(end, ProviderError | ToolError) for end in ends), ends
            assert await closed(s)
    finally:
        await p.aclose()
        await e.aclose()
        await f.aclose()
        await m.aclose()
        await s.stop()
    await asyncio.sleep(0.1)
    assert open_fds() == before
