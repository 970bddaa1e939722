"""A small scripted HTTP server on 127.0.0.1 for provider fault injection.

Each accepted request takes the next scenario from ``script`` (the last one repeats).  A scenario
is an async function ``(reader, writer, body) -> None`` writing whatever raw bytes it wants.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from collections.abc import Awaitable, Callable
from typing import Any

Scenario = Callable[[asyncio.StreamReader, asyncio.StreamWriter, bytes], Awaitable[None]]


class FaultServer:
    def __init__(self) -> None:
        self.script: list[Scenario] = []
        self.requests: list[dict[str, Any]] = []
        self.open_connections = 0
        self.accepted = 0
        """TCP connections accepted so far (a client that reuses one connection keeps it 1)."""
        self._server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        # a backlog for a burst of connections (a test opens over 100 at once)
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, backlog=512)
        self.port = self._server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def stop(self) -> None:
        if self._server:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open_connections += 1
        self.accepted += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                headers = {
                    k.lower(): v.strip()
                    for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)
                }
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                self.requests.append(
                    {"line": lines[0], "headers": headers, "body": json.loads(body or b"{}")}
                )
                scenario = self.script.pop(0) if len(self.script) > 1 else self.script[0]
                await scenario(reader, writer, body)
                if writer.is_closing():
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self.open_connections -= 1
            writer.close()


def sse_chunk(
    delta: dict[str, Any] | None = None,
    finish: str | None = None,
    usage: dict[str, int] | None = None,
) -> bytes:
    obj: dict[str, Any] = {"id": "c", "object": "chat.completion.chunk", "choices": []}
    if delta is not None or finish is not None:
        obj["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
    if usage is not None:
        obj["usage"] = usage
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)


def chunked(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def stream_scenario(
    events: list[bytes], *, split: int = 0, done: bool = True, delay: float = 0.0
) -> Scenario:
    """Stream SSE ``events``; ``split`` > 0 sends the body in pieces of that many bytes."""

    async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: bytes) -> None:
        writer.write(STREAM_HEAD)
        payload = b"".join(events) + (b"data: [DONE]\n\n" if done else b"")
        pieces = (
            [payload[i : i + split] for i in range(0, len(payload), split)] if split else [payload]
        )
        for piece in pieces:
            writer.write(chunked(piece))
            await writer.drain()
            if delay:
                await asyncio.sleep(delay)
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    return run


def cut_scenario(events: list[bytes]) -> Scenario:
    """Send some events, then drop the connection without finishing the chunked body."""

    async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: bytes) -> None:
        writer.write(STREAM_HEAD + chunked(b"".join(events)))
        await writer.drain()
        writer.close()

    return run


def reset_scenario() -> Scenario:
    async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: bytes) -> None:
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.close()

    return run


def status_scenario(
    status: int,
    body: bytes = b'{"error": {"message": "slow down"}}',
    headers: dict[str, str] | None = None,
) -> Scenario:
    async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: bytes) -> None:
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        writer.write(
            f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n{extra}\r\n".encode()
            + body
        )
        await writer.drain()

    return run


def stall_scenario(after_events: list[bytes] | None = None) -> Scenario:
    async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: bytes) -> None:
        writer.write(STREAM_HEAD)
        if after_events:
            writer.write(chunked(b"".join(after_events)))
        await writer.drain()
        await asyncio.sleep(3600)

    return run


def json_scenario(obj: dict[str, Any]) -> Scenario:
    return status_scenario(200, json.dumps(obj).encode())


CONCEPTS: tuple[tuple[str, ...], ...] = (
    ("dog", "puppy", "hound", "rex"),
    ("car", "automobile", "vehicle", "tyres"),
    ("hike", "hiking", "mountain", "爬山"),
    ("invoice", "payment", "bill"),
)
"""Word groups a scripted embedder maps to one axis each: a query finds a memory through a
synonym it does not share (``hound`` → ``puppy``)."""


def concept_vector(text: str) -> list[float]:
    low = text.lower()
    return [0.05] + [float(sum(w in low for w in words)) for words in CONCEPTS]


def embeddings_scenario() -> Scenario:
    """An OpenAI-compatible ``/v1/embeddings`` answer: a concept vector per input text."""

    async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: bytes) -> None:
        request = json.loads(body)
        texts = request["input"] if isinstance(request["input"], list) else [request["input"]]
        data = [
            {"object": "embedding", "index": i, "embedding": concept_vector(t)}
            for i, t in enumerate(texts)
        ]
        await json_scenario({"object": "list", "data": data, "model": request["model"]})(
            reader, writer, body
        )

    return run


# -- slow peers: each ends only when the client goes (a write to a closed connection fails) --


async def _drip(writer: asyncio.StreamWriter, data: bytes, interval: float) -> None:
    """``data`` one byte every ``interval`` seconds."""
    for i in range(len(data)):
        writer.write(data[i : i + 1])
        await writer.drain()
        await asyncio.sleep(interval)


def trickle_head_scenario(interval: float = 0.1) -> Scenario:
    """The status line one byte at a time, then a header line that never ends: a read never
    waits longer than ``interval``, and the response head never arrives."""

    async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: bytes) -> None:
        await _drip(writer, b"HTTP/1.1 200 OK\r\nx-slow: ", interval)
        while True:
            await _drip(writer, b"a", interval)

    return run


def continue_forever_scenario(interval: float = 0.1) -> Scenario:
    """``HTTP/1.1 100 Continue`` again and again: each is a whole interim response, and the
    client waits on for the final one."""

    async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: bytes) -> None:
        while True:
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            await writer.drain()
            await asyncio.sleep(interval)

    return run


def trickle_body_scenario(head: bytes, piece: bytes, interval: float = 0.1) -> Scenario:
    """``head`` at once, then ``piece`` over and over, one byte every ``interval`` seconds."""

    async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: bytes) -> None:
        writer.write(head)
        await writer.drain()
        while True:
            await _drip(writer, piece, interval)

    return run


def silent_scenario() -> Scenario:
    """The request is read and never answered (the connection stays open)."""

    async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: bytes) -> None:
        await reader.read()  # until the client closes: nothing is ever written
        writer.close()

    return run
