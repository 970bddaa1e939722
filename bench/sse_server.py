"""A scripted OpenAI-compatible streaming server for benchmarks (runs as its own process so its
CPU is not counted).  POST /v1/chat/completions:

* if the request has tools and fewer tool results follow the last user message than the
  ``steps=K`` that message asks for (default 1) -> one tool call ``bench_tool({"n": S})``
  streamed as 4 fragments, S = the step's number (1, 2, ...: a real loop's calls differ, and
  identical ones would meet a client's duplicate-call guard instead of the tool);
* otherwise a text answer of ``max_tokens`` tokens (default 50), one SSE event per token; a
  round-summary request (no tools, a system prompt asking for a summary) gets at most 60.

``GET /v1/stats`` answers ``{"connections": N}``: the TCP connections accepted so far, so a
benchmark can check that a client reuses one connection.  ``GET /v1/last_request``: the last
streamed request with tools, as it was sent.

Usage: python bench/sse_server.py PORT_FILE
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path

CONNECTIONS = 0
LAST_REQUEST: dict = {}
"""The last streamed request that carried tools (``GET /v1/last_request``): a benchmark can send
the same prompt and tool schemas from its bare client."""
STEPS = re.compile(r"steps=(\d+)")


def tool_step(body: dict) -> int | None:
    """The number of the tool step this request should get (1, 2, ...), or None: answer."""
    if not body.get("tools"):
        return None
    messages = body["messages"]
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    m = STEPS.search(messages[last_user].get("content") or "")
    steps = int(m.group(1)) if m else 1
    done = sum(1 for msg in messages[last_user + 1 :] if msg["role"] == "tool")
    return done + 1 if done < steps else None


def event(delta: dict, finish: str | None = None) -> bytes:
    obj = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "bench",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


# an answer's events are the same every time: encoded once (the provider's own CPU is taken from
# the cores the measured server runs on)
ROLE_EVENT = event({"role": "assistant", "content": ""})
TOKEN_EVENT = event({"content": "tok "})
STOP_EVENT = event({}, "stop")
USAGE = b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":10}}\n\n'


async def json_response(writer: asyncio.StreamWriter, obj: dict) -> None:
    doc = json.dumps(obj).encode()
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        + f"content-length: {len(doc)}\r\n\r\n".encode()
        + doc
    )
    await writer.drain()


def chunked(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    global CONNECTIONS
    CONNECTIONS += 1
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            if head.startswith(b"GET /v1/stats"):
                await json_response(writer, {"connections": CONNECTIONS})
                continue
            if head.startswith(b"GET /v1/last_request"):
                await json_response(writer, LAST_REQUEST)
                continue
            headers = dict(
                (k.strip().lower(), v.strip())
                for k, _, v in (
                    line.partition(":") for line in head.decode().split("\r\n")[1:] if line
                )
            )
            body = json.loads(await reader.readexactly(int(headers.get("content-length", "0"))))
            if not body.get("stream"):  # a non-streamed answer (round summaries use it)
                n = min(int(body.get("max_tokens") or 50), 60)
                await json_response(
                    writer,
                    {
                        "id": "c",
                        "object": "chat.completion",
                        "model": "bench",
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": "tok " * n},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": 10, "completion_tokens": n},
                    },
                )
                continue
            if body.get("tools"):
                LAST_REQUEST.clear()
                LAST_REQUEST.update(body)
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            )
            step = tool_step(body)
            if step is not None:
                args = ['{"', 'n": ', str(step), "}"]
                parts = [
                    event(
                        {
                            "role": "assistant",
                            "tool_calls": [
                                {
                                    "index": 0,
                                    "id": "call_1",
                                    "type": "function",
                                    "function": {"name": "bench_tool", "arguments": ""},
                                }
                            ],
                        }
                    )
                ]
                parts += [
                    event({"tool_calls": [{"index": 0, "function": {"arguments": a}}]})
                    for a in args
                ]
                parts.append(event({}, "tool_calls"))
            else:
                n = int(body.get("max_tokens") or 50)
                first = body["messages"][0]
                if not body.get("tools") and "summar" in (first.get("content") or "").lower():
                    n = min(n, 60)  # a round summary: as long as a real one, not max_tokens
                parts = [ROLE_EVENT, *[TOKEN_EVENT] * n, STOP_EVENT]
            parts += [USAGE, b"data: [DONE]\n\n"]
            for p in parts:  # one send each, as tokens arrive from a real model
                writer.write(chunked(p))
            writer.write(b"0\r\n\r\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main(port_file: str) -> None:
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    Path(port_file).write_text(str(server.sockets[0].getsockname()[1]))  # noqa: ASYNC240
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
