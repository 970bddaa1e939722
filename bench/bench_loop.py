"""The agent loop against a local scripted OpenAI-compatible server.

1. Client CPU per turn with one tool step (two LLM calls: a tool call, then a 50-token answer),
   memora ``Agent.chat`` versus a bare httpx2 loop doing the same requests (same tool schemas,
   same growing history, same tool execution) — the floor.  Target: <= 1.5x.  Turns run in one
   session so the history grows; the ratio is reported for early and late turns to show the
   per-step cost stays flat.
2. Time from the first SSE bytes of a response to the first ``text`` chunk out of ``chat()``.
   Target: < 1 ms.
3. Memory per idle Agent, 100 Agents in one process.

Round summaries are off (they are an extra LLM call the bare loop does not make).
"""

from __future__ import annotations

import asyncio
import gc
import json
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import httpx2

sys.path.insert(0, str(Path(__file__).parent))
from _server import sse_server

from memora import Agent
from memora.tools import ToolContext, tool
from memora_plugin_openai import OpenAIProvider

TURNS = 60


@tool(idempotency="read-only")
async def bench_tool(ctx: ToolContext, n: int) -> str:
    """A trivial tool."""
    return f"result {n}"


async def bare_turn(
    client: httpx2.AsyncClient,
    history: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    system: str,
    prompt: str,
    max_tokens: int | None = None,
) -> None:
    """What any loop must do: post the history, parse SSE, assemble the call, run it, repeat.
    ``max_tokens``: sent with each request (the scripted server answers with that many)."""
    history.append({"role": "user", "content": prompt})
    while True:
        body = {
            "model": "bench",
            "messages": [{"role": "system", "content": system}, *history],
            "stream": True,
            "stream_options": {"include_usage": True},
            "tools": tools,
            "temperature": 0.7,
        }
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        async with client.stream("POST", "/chat/completions", json=body) as r:
            async for line in r.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":  # read on to the end of the body: the connection is reused
                    continue
                obj = json.loads(data)
                if not obj.get("choices"):
                    continue
                delta = obj["choices"][0]["delta"]
                if delta.get("content"):
                    text.append(delta["content"])
                for tc in delta.get("tool_calls") or []:
                    c = calls.setdefault(tc["index"], {"id": tc.get("id"), "name": "", "args": []})
                    fn = tc.get("function") or {}
                    c["name"] = fn.get("name") or c["name"]
                    c["args"].append(fn.get("arguments") or "")
        if not calls:
            history.append({"role": "assistant", "content": "".join(text)})
            return
        call = calls[0]
        raw = "".join(call["args"])
        history.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call["id"],
                        "type": "function",
                        "function": {"name": call["name"], "arguments": raw},
                    }
                ],
            }
        )
        result = (await bench_tool.invoke(None, json.loads(raw))).content
        history.append({"role": "tool", "tool_call_id": call["id"], "content": result})


async def run_memora(url: str, tmp: Path, turns: int) -> list[float]:
    project = tmp / "proj"
    project.mkdir(exist_ok=True)
    agent = Agent(
        project_path=project,
        data_dir=tmp / "data",
        provider=OpenAIProvider(model="bench", base_url=url),
        strategy_override={"reflect": {"summary": "off"}, "act": {"toolStepLimit": 0}},
        load_entrypoints=False,
    )
    await agent.init()
    agent.tools.register(bench_tool)
    samples = []
    try:
        for i in range(turns):
            t = time.process_time()
            async for _chunk in agent.chat(f"turn {i}: please use the tool"):
                pass
            samples.append(time.process_time() - t)
    finally:
        await agent.close()
    return samples


async def run_bare(url: str, tools: list[dict[str, Any]], system: str, turns: int) -> list[float]:
    samples = []
    async with httpx2.AsyncClient(base_url=url, timeout=30) as client:
        history: list[dict[str, Any]] = []
        for i in range(turns):
            t = time.process_time()
            await bare_turn(client, history, list(tools), system, f"turn {i}: please use the tool")
            samples.append(time.process_time() - t)
    return samples


async def first_text_latency(url: str, tmp: Path) -> list[float]:
    """Seconds from the first SSE bytes of the answer to the first text chunk out of chat()."""
    marks: dict[str, float] = {}

    class Timed(OpenAIProvider):
        def _translate(self, data: str):  # type: ignore[no-untyped-def]
            out = super()._translate(data)
            if "first" not in marks and any(d.kind == "text" for d in out):
                marks["first"] = time.perf_counter()
            return out

    project = tmp / "lat"
    project.mkdir(exist_ok=True)
    agent = Agent(
        project_path=project,
        data_dir=tmp / "latdata",
        provider=Timed(model="bench", base_url=url),
        strategy_override={"reflect": {"summary": "off"}, "act": {"toolMode": "block"}},
        load_entrypoints=False,
    )
    await agent.init()
    out = []
    try:
        for _ in range(30):
            marks.clear()
            async for chunk in agent.chat("hello"):
                if chunk.type == "text" and "first" in marks and "seen" not in marks:
                    marks["seen"] = time.perf_counter()
            out.append(marks["seen"] - marks["first"])
    finally:
        await agent.close()
    return out


async def idle_agents(tmp: Path, n: int = 100) -> tuple[float, float]:
    def rss() -> int:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * 4096

    gc.collect()
    tracemalloc.start()
    before_py = tracemalloc.get_traced_memory()[0]
    before_rss = rss()
    agents = []
    for i in range(n):
        p = tmp / f"idle{i}"
        p.mkdir()
        a = Agent(
            project_path=p,
            data_dir=tmp / f"idledata{i}",
            provider=OpenAIProvider(model="m", base_url="http://127.0.0.1:9/v1"),
            load_entrypoints=False,
        )
        await a.init()
        agents.append(a)
    gc.collect()
    py = (tracemalloc.get_traced_memory()[0] - before_py) / n
    per_rss = (rss() - before_rss) / n
    tracemalloc.stop()
    for a in agents:
        await a.close()
    return py, per_rss


def main() -> None:
    with sse_server() as url, tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)

        async def specs() -> tuple[list[dict[str, Any]], str]:
            p = tmp / "spec"
            p.mkdir()
            a = Agent(
                project_path=p,
                data_dir=tmp / "specdata",
                provider=OpenAIProvider(model="m", base_url=url),
                load_entrypoints=False,
            )
            await a.init()
            a.tools.register(bench_tool)
            s = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in (tool.spec() for tool in a.exposed_tools())
            ]
            prompt = a.role_pack.system_prompt()
            await a.close()
            return s, prompt

        tools, system = asyncio.run(specs())
        mem = asyncio.run(run_memora(url, tmp, TURNS))
        bare = asyncio.run(run_bare(url, tools, system, TURNS))
        early = slice(2, 12)
        late = slice(TURNS - 10, TURNS)
        m_e, b_e = statistics.median(mem[early]), statistics.median(bare[early])
        m_l, b_l = statistics.median(mem[late]), statistics.median(bare[late])
        print(f"turn = 1 tool step (2 LLM calls, {len(tools)} tool schemas), client CPU per turn:")
        print(
            f"  turns 3-12   memora {m_e * 1e3:7.2f} ms   bare {b_e * 1e3:7.2f} ms   ratio {m_e / b_e:5.2f}x"
        )
        print(
            f"  turns {TURNS - 9}-{TURNS}  memora {m_l * 1e3:7.2f} ms   bare {b_l * 1e3:7.2f} ms   ratio {m_l / b_l:5.2f}x   (target <= 1.5x)"
        )
        print(f"  memora growth late/early: {m_l / m_e:5.2f}x   bare growth: {b_l / b_e:5.2f}x")
        lat = asyncio.run(first_text_latency(url, tmp))
        print(
            f"first SSE text bytes -> first text chunk out of chat(): p50 {statistics.median(lat) * 1e6:6.1f} us, "
            f"max {max(lat) * 1e6:6.1f} us   (target < 1000 us)"
        )
        py, rss_b = asyncio.run(idle_agents(tmp))
        print(
            f"100 idle Agents: {py / 1024:7.1f} KiB Python heap and {rss_b / 1024:7.1f} KiB RSS per Agent"
        )


if __name__ == "__main__":
    main()
