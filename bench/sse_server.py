"""A scripted OpenAI-compatible streaming server for benchmarks (runs as its own process so its
CPU is not counted).  POST /v1/chat/completions:

* if the last message is from the user and the request has tools -> one tool call
  ``bench_tool({"n": 1})`` streamed as 4 fragments;
* otherwise a text answer of ``max_tokens`` tokens (default 50), one SSE event per token.

Usage: python bench/sse_server.py PORT_FILE
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path


def event(delta: dict, finish: str | None = None) -> bytes:
    obj = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "bench",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


USAGE = b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":10}}\n\n'


def chunked(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            headers = dict(
                (k.strip().lower(), v.strip())
                for k, _, v in (
                    line.partition(":") for line in head.decode().split("\r\n")[1:] if line
                )
            )
            body = json.loads(await reader.readexactly(int(headers.get("content-length", "0"))))
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            )
            last = body["messages"][-1]
            if last["role"] == "user" and body.get("tools"):
                args = ['{"', 'n": ', "1", "}"]
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
                parts = [event({"role": "assistant", "content": ""})]
                parts += [event({"content": "tok "}) for _ in range(n)]
                parts.append(event({}, "stop"))
            parts += [USAGE, b"data: [DONE]\n\n"]
            for p in parts:
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
