"""Client CPU per streamed token and per tool-call round trip: memora-plugin-openai versus a bare
httpx2 + SSE loop doing the same work (the floor).  Target: <= 1.3x the floor.

CPU is this process's time (time.process_time); the server runs in another process.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import httpx2

sys.path.insert(0, str(Path(__file__).parent))
from _server import sse_server

from memora.llm import LLMRequest, Message, ToolSpec
from memora.llm.assemble import ToolCallAssembler
from memora_plugin_openai import OpenAIProvider

TOKENS = 200
ROUNDS = 30
TOOL = ToolSpec(
    "bench_tool", "A benchmark tool.", {"type": "object", "properties": {"n": {"type": "integer"}}}
)


async def bare_text(client: httpx2.AsyncClient, messages: list[dict]) -> str:
    body = {"model": "bench", "messages": messages, "stream": True, "max_tokens": TOKENS}
    out = []
    async with client.stream("POST", "/chat/completions", json=body) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                data = line[6:]
                if data == "[DONE]":  # read on to the end of the body: the connection is reused
                    continue
                obj = json.loads(data)
                if obj.get("choices"):
                    c = obj["choices"][0]["delta"].get("content")
                    if c:
                        out.append(c)
    return "".join(out)


async def bare_tool(client: httpx2.AsyncClient, messages: list[dict]) -> tuple[str, str]:
    body = {
        "model": "bench",
        "messages": messages,
        "stream": True,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": TOOL.name,
                    "description": TOOL.description,
                    "parameters": TOOL.parameters,
                },
            }
        ],
    }
    name, args = "", []
    async with client.stream("POST", "/chat/completions", json=body) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                data = line[6:]
                if data == "[DONE]":  # read on to the end of the body: the connection is reused
                    continue
                obj = json.loads(data)
                if obj.get("choices"):
                    for tc in obj["choices"][0]["delta"].get("tool_calls") or []:
                        fn = tc.get("function") or {}
                        name = fn.get("name") or name
                        args.append(fn.get("arguments") or "")
    return name, "".join(args)


async def memora_text(p: OpenAIProvider, messages: list[Message]) -> str:
    out = []
    async for d in p.stream(LLMRequest(messages, max_tokens=TOKENS)):
        if d.kind == "text":
            out.append(d.text)  # type: ignore[union-attr]
    return "".join(out)


async def memora_tool(p: OpenAIProvider, messages: list[Message]) -> tuple[str, str]:
    asm = ToolCallAssembler()
    async for d in p.stream(LLMRequest(messages, tools=[TOOL])):
        if d.kind == "tool_call":
            asm.feed(d)  # type: ignore[arg-type]
    (call,) = asm.calls()
    return call.name, call.arguments


def cpu(make, run, rounds: int) -> float:  # type: ignore[no-untyped-def]
    """Median CPU of ``run(client)`` (five requests); the client is made once, outside the
    timed part (its TLS context alone costs more than a request), and warmed up first."""

    async def go() -> float:
        client, close = make()
        try:
            await run(client)  # warm-up (connection, caches)
            samples = []
            for _ in range(rounds):
                t = time.process_time()
                await run(client)
                samples.append(time.process_time() - t)
        finally:
            await close()
        return statistics.median(samples)

    return asyncio.run(go())


def main() -> None:
    with sse_server() as url:

        def bare_client():  # type: ignore[no-untyped-def]
            client = httpx2.AsyncClient(base_url=url, timeout=30)
            return client, client.aclose

        def mem_client():  # type: ignore[no-untyped-def]
            p = OpenAIProvider(model="bench", base_url=url)
            return p, p.aclose

        def bare(kind: str):  # type: ignore[no-untyped-def]
            async def run(client: httpx2.AsyncClient) -> None:
                for _ in range(5):
                    if kind == "text":
                        assert (await bare_text(client, [{"role": "user", "content": "hi"}])).count(
                            "tok"
                        ) == TOKENS
                    else:
                        assert (await bare_tool(client, [{"role": "user", "content": "hi"}]))[
                            0
                        ] == "bench_tool"

            return run

        def mem(kind: str):  # type: ignore[no-untyped-def]
            async def run(p: OpenAIProvider) -> None:
                for _ in range(5):
                    if kind == "text":
                        assert (await memora_text(p, [Message.user("hi")])).count("tok") == TOKENS
                    else:
                        assert (await memora_tool(p, [Message.user("hi")]))[0] == "bench_tool"

            return run

        results = {}
        for kind in ("text", "tool"):
            # interleave to share machine noise
            b1 = cpu(bare_client, bare(kind), ROUNDS // 2)
            m1 = cpu(mem_client, mem(kind), ROUNDS // 2)
            b2 = cpu(bare_client, bare(kind), ROUNDS // 2)
            m2 = cpu(mem_client, mem(kind), ROUNDS // 2)
            results[kind] = ((b1 + b2) / 2 / 5, (m1 + m2) / 2 / 5)
        bt, mt = results["text"]
        print(f"streamed text ({TOKENS} tokens/response), client CPU per token:")
        print(f"  bare httpx2 + SSE  {bt / TOKENS * 1e6:8.2f} us")
        print(f"  memora openai      {mt / TOKENS * 1e6:8.2f} us")
        print(f"  ratio memora/bare  {mt / bt:8.2f}x   (target <= 1.3x)")
        bt, mt = results["tool"]
        print("tool-call round trip (one streamed call), client CPU per request:")
        print(f"  bare httpx2 + SSE  {bt * 1e6:8.1f} us")
        print(f"  memora openai      {mt * 1e6:8.1f} us")
        print(f"  ratio memora/bare  {mt / bt:8.2f}x   (target <= 1.3x)")


if __name__ == "__main__":
    main()
