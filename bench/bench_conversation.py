"""Client CPU per LLM step over whole conversations, memora with its documented defaults versus
a bare httpx2 streaming loop, against one scripted OpenAI-compatible server in another process.

A conversation is a new session and one user message that asks for K tool steps: the model calls
``bench_tool`` K times, each with new arguments (so every call runs, as in a real loop), then
answers (K + 1 LLM calls).  The bare loop does the same requests with the same tool schemas and
reads every response to its end (so httpx2 keeps one connection).  memora's CPU includes
everything it does for the conversation — session files, the round summary (written after
``done``: the round itself when it is short, as at K=1, otherwise an extra LLM call, as at
K=10) — measured until the Agent is idle again.  memora and the bare loop alternate in 12
rounds; compare medians of several runs (this machine's noise moves one run by ±0.05).

Also reported: TCP connections per conversation, and the wall time from the last text chunk to
``done``.  Targets: <= 1.3x at K=10, <= 1.6x at K=1, flat as K grows to 40; one connection.

The durable floor (issue #43 item 2; first section): the bare loop doing, inline, the least of
what memora promises — per conversation a folder and a JSONL log created, the turn's messages
written in one append and fsynced (the file, then the folder), and one row inserted into an
SQLite FTS5 table (WAL, synchronous=NORMAL, as memora's store).  Goals: memora with its
documented defaults at most 1.25x the floor at K=1 and 1.15x at K=10, and at most 1.15x the
bare loop (no durability) at K=40.  Printed beside it: the same floor with its disk work on a
worker thread (one trip per conversation), as a loop must do it that never does a disk's work
on its event loop: memora makes that trip for the session's log, and writes a lone round memory
on the event loop, page-cache work in SQLite's WAL mode with its checkpoints on the worker (see
docs/memory.md).

Per streamed token (second section): K=1 conversations whose answer is 50 or 500 tokens, memora
and the floor interleaved; the CPU difference over the 450 extra tokens is what one streamed
event costs each (the HTTP client's share of it is the same for both).

``--variants[=ROUNDS]`` (default 12) runs only issue #70 item 3's comparison: memora with its
documented defaults in each variant of :data:`VARIANTS` (which HTTP transport the provider uses:
bench/_variants.py), taking turns ROUNDS times at K=1 and K=10; printed: each one's client CPU
per LLM step and its ratio to the first's in the same round (paired).  ``--only=a,b`` picks the
variants.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx2

sys.path.insert(0, str(Path(__file__).parent))
import _variants
from _server import sse_server
from bench_loop import bare_turn, bench_tool

from memora import Agent
from memora_plugin_openai import OpenAIProvider

RUNS = {1: 30, 10: 8, 40: 3}
"""K -> conversations measured (after one warm-up)."""


class Recording(OpenAIProvider):
    """Keeps the last request (to give the bare loop the same tools and system prompt)."""

    last: Any = None

    def encode(self, request: Any, *, stream: bool) -> bytes:
        if request.tools:  # not the round summary's request
            self.last = request
        return super().encode(request, stream=stream)


async def connections(url: str) -> int:
    async with httpx2.AsyncClient() as client:
        return int((await client.get(f"{url}/stats")).json()["connections"])


async def run_bare(
    url: str, k: int, runs: int, tools: list[dict[str, Any]], system: str
) -> list[float]:
    samples = []
    async with httpx2.AsyncClient(base_url=url, timeout=30) as client:
        for i in range(runs + 1):
            t = time.process_time()
            # a new conversation: empty history; bench_loop's bare turn does the requests
            await bare_turn(client, [], tools, system, f"conversation {i}: steps={k}")
            if i:
                samples.append(time.process_time() - t)
    return samples


class Floor:
    """The durable floor's disk work: a folder and a log per conversation, one FTS5 table."""

    def __init__(self, root: Path) -> None:
        self.root = Path(tempfile.mkdtemp(dir=root))
        # check_same_thread off: the threaded floor writes from a worker thread, one at a time
        self.db = sqlite3.connect(
            self.root / "memory.db", isolation_level=None, check_same_thread=False
        )
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("CREATE VIRTUAL TABLE memories USING fts5(content)")
        self.n = 0

    def keep(self, history: list[dict[str, Any]]) -> None:
        self.n += 1
        folder = self.root / f"c{self.n}"
        os.mkdir(folder, 0o700)
        payload = b"".join(json.dumps(m, ensure_ascii=False).encode() + b"\n" for m in history)
        fd = os.open(
            folder / "log.jsonl", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600
        )
        try:
            os.write(fd, payload)
            os.fsync(fd)
        finally:
            os.close(fd)
        dfd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        user, answer = history[0]["content"], history[-1]["content"]
        self.db.execute("INSERT INTO memories (content) VALUES (?)", (f"{user}\n{answer}",))

    def close(self) -> None:
        self.db.close()


async def run_floor(
    url: str,
    tmp: Path,
    k: int,
    runs: int,
    tools: list[dict[str, Any]],
    system: str,
    max_tokens: int | None = None,
    threaded: bool = False,
) -> list[float]:
    """``threaded``: the floor's disk work goes to a worker thread (one trip per conversation),
    as a loop that never does a disk's work on its event loop must do it, as memora does for the
    session's log (a lone memory row is page-cache work on its event loop)."""
    samples = []
    floor = Floor(tmp)
    try:
        async with httpx2.AsyncClient(base_url=url, timeout=30) as client:
            for i in range(runs + 1):
                t = time.process_time()
                history: list[dict[str, Any]] = []
                await bare_turn(
                    client, history, tools, system, f"conversation {i}: steps={k}", max_tokens
                )
                if threaded:
                    await asyncio.to_thread(floor.keep, history)
                else:
                    floor.keep(history)
                if i:
                    samples.append(time.process_time() - t)
    finally:
        floor.close()
    return samples


async def run_memora(
    url: str, tmp: Path, k: int, runs: int, **agent_options: Any
) -> tuple[list[float], float, list[float], list[dict[str, Any]], str]:
    project = Path(tempfile.mkdtemp(dir=tmp))
    agent = Agent(
        project_path=project,
        data_dir=project / "data",
        provider=(provider := Recording(model="bench", base_url=url)),
        strategy_override={"act": {"toolStepLimit": 0}},
        load_entrypoints=False,
        **agent_options,
    )
    await agent.init()
    agent.tools.register(bench_tool)
    samples: list[float] = []
    tail: list[float] = []
    before = await connections(url)
    try:
        for i in range(runs + 1):
            t = time.process_time()
            if i:
                await agent.new_session()
            last_text = 0.0
            async for chunk in agent.chat(f"conversation {i}: steps={k}"):
                if chunk.type == "text":
                    last_text = time.perf_counter()
                elif chunk.type == "done":
                    tail.append(time.perf_counter() - last_text)
            if hasattr(agent, "idle"):
                await agent.idle()
            if i:
                samples.append(time.process_time() - t)
        conns = (await connections(url) - before - 1) / (runs + 1)  # -1: this stats request
        request = provider.last
        tools = [
            {
                "type": "function",
                "function": {
                    "name": s.name,
                    "description": s.description,
                    "parameters": s.parameters,
                },
            }
            for s in request.tools
        ]
        system = request.messages[0].content
    finally:
        await agent.close()
    return samples, conns, tail, tools, system


def durable_floor(url: str, tmp: Path, rounds: int) -> None:
    """memora (documented defaults), the durable floor and the bare loop, interleaved."""
    print("  the durable floor (#43 item 2): documented defaults vs the bare loop doing what")
    print("  memora promises at the least (folder + log + fsync of file and folder, one FTS5 row):")
    goals = {1: ("floor", 1.25), 10: ("floor", 1.15), 40: ("bare", 1.15)}
    for k, runs in RUNS.items():
        mem: list[float] = []
        floor: list[float] = []
        floor_t: list[float] = []
        bare: list[float] = []
        for _ in range(rounds):
            m, _c, _t, tools, system = asyncio.run(run_memora(url, tmp, k, runs))
            mem += m
            floor += asyncio.run(run_floor(url, tmp, k, runs, tools, system))
            floor_t += asyncio.run(run_floor(url, tmp, k, runs, tools, system, threaded=True))
            bare += asyncio.run(run_bare(url, k, runs, tools, system))
        m_step, f_step, t_step, b_step = (
            statistics.median(x) / (k + 1) for x in (mem, floor, floor_t, bare)
        )
        against, goal = goals[k]
        ratio = m_step / (f_step if against == "floor" else b_step)
        print(
            f"    K={k:<3} memora {m_step * 1e3:6.2f} ms  floor {f_step * 1e3:6.2f} ms  "
            f"bare {b_step * 1e3:6.2f} ms   memora/floor {m_step / f_step:5.2f}x  "
            f"memora/bare {m_step / b_step:5.2f}x   ({ratio:4.2f}x the {against}: goal <= {goal}x)"
        )
        print(
            f"          the floor's disk work on a worker thread (its event loop never waits on "
            f"a disk): {t_step * 1e3:6.2f} ms   memora/that {m_step / t_step:5.2f}x"
        )


def per_token(url: str, tmp: Path, rounds: int) -> None:
    """What each streamed token costs memora and the durable floor: K=1 conversations whose
    answer is 50 or 500 tokens (one SSE event each, as hosted APIs send them), interleaved;
    the difference over the 450 extra tokens."""
    print("  per streamed token (K=1, a 50- and a 500-token answer, one event per token; the")
    print("  round stored verbatim, so the long answer costs no summary call):")
    sizes = (50, 500)
    mem: dict[int, list[float]] = {n: [] for n in sizes}
    floor: dict[int, list[float]] = {n: [] for n in sizes}
    for _ in range(rounds):
        for n in sizes:
            m, _c, _t, tools, system = asyncio.run(
                run_memora(url, tmp, 1, RUNS[1] // 3, max_tokens=n, summary_verbatim_tokens=4 * n)
            )
            mem[n] += m
            floor[n] += asyncio.run(run_floor(url, tmp, 1, RUNS[1] // 3, tools, system, n))
    extra = sizes[1] - sizes[0]
    m_tok, f_tok = (
        (statistics.median(x[sizes[1]]) - statistics.median(x[sizes[0]])) / extra
        for x in (mem, floor)
    )
    print(
        f"    memora {m_tok * 1e6:5.1f} us  floor {f_tok * 1e6:5.1f} us a token   "
        f"memora/floor {m_tok / f_tok:4.2f}x   (whole conversation at {sizes[1]} tokens: "
        f"{statistics.median(mem[sizes[1]]) / statistics.median(floor[sizes[1]]):4.2f}x)"
    )


VARIANTS = _variants.VARIANTS
"""The agents of ``--variants`` (bench/_variants.py); the first is memora as it is."""


def variants(url: str, tmp: Path, rounds: int, chosen: tuple[str, ...] = VARIANTS) -> None:
    """Issue #70 item 3: memora (documented defaults) in each variant of ``chosen`` (:data:`VARIANTS`), taking
    turns ``rounds`` times; per K, each variant's median client CPU per LLM step and the median
    over rounds of its ratio to the first variant's in the same round (paired)."""
    for k in (1, 10):
        runs = RUNS[k]
        samples: dict[str, list[float]] = {v: [] for v in chosen}
        ratios: dict[str, list[float]] = {v: [] for v in chosen}
        for _ in range(rounds):
            medians = {}
            for variant in chosen:
                _variants.apply(variant)
                m = asyncio.run(run_memora(url, tmp, k, runs))[0]
                samples[variant] += m
                medians[variant] = statistics.median(m)
            for variant in chosen:
                ratios[variant].append(medians[variant] / medians[chosen[0]])
        _variants.apply(chosen[0])
        print(f"  K={k} ({rounds} rounds of {runs} conversations), ratio to {chosen[0]}:")
        for variant in chosen:
            step = statistics.median(samples[variant]) / (k + 1)
            r = sorted(ratios[variant])
            print(
                f"    {variant:14} {step * 1e3:6.3f} ms a step   {statistics.median(r):5.3f}x "
                f"(quartiles {r[len(r) // 4]:.3f}-{r[3 * len(r) // 4]:.3f})"
            )


def main() -> None:
    if any(a.startswith("--variants") for a in sys.argv):
        rounds = next(
            int(a.split("=")[1]) for a in [*sys.argv, "--variants=12"] if "-variants=" in a
        )
        only = next((a.split("=")[1] for a in sys.argv if a.startswith("--only=")), "")
        with sse_server() as url, tempfile.TemporaryDirectory() as tmpdir:
            print("client CPU per LLM step; issue #70 item 3's variants (the HTTP transport)")
            variants(url, Path(tmpdir), rounds, tuple(only.split(",")) if only else VARIANTS)
        return
    rounds = 12  # memora and the bare loop alternate, so machine noise hits both alike
    with sse_server() as url, tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        print("client CPU per LLM step; conversation = new session + K tool steps + an answer")
        durable_floor(url, tmp, rounds)
        per_token(url, tmp, rounds)
        if "--floor-only" in sys.argv:
            return
        for label, options in (
            ("documented defaults", {}),
            # what a host compares with: its own loop sends only its one tool (issue #29)
            ("documented defaults vs a one-tool bare loop", {"_bare_tools": "host"}),
            ("a model summary every round", {"summary_verbatim_tokens": 0}),
            ("round summary off", {"archive_mode": "manual"}),
            ("host tool only", {"archive_mode": "manual", "resident_tools": []}),
            (
                "summary off, sessions in memory",
                {"archive_mode": "manual", "session_store": "memory"},
            ),
        ):
            print(f"  {label}:")
            for k, runs in RUNS.items():
                mem: list[float] = []
                bare: list[float] = []
                tail: list[float] = []
                conns: list[float] = []
                agent_options = {k: v for k, v in options.items() if not k.startswith("_")}
                for _ in range(rounds):
                    m, c, t, tools, system = asyncio.run(
                        run_memora(url, tmp, k, runs, **agent_options)
                    )
                    if options.get("_bare_tools") == "host":
                        tools = [t for t in tools if t["function"]["name"] == bench_tool.name]
                    mem += m
                    conns.append(c)
                    tail += t
                    bare += asyncio.run(run_bare(url, k, runs, tools, system))
                m_step = statistics.median(mem) / (k + 1)
                b_step = statistics.median(bare) / (k + 1)
                print(
                    f"    K={k:<3} memora {m_step * 1e3:6.2f} ms  bare {b_step * 1e3:6.2f} ms  "
                    f"ratio {m_step / b_step:5.2f}x   connections/conversation "
                    f"{statistics.mean(conns):4.2f}   last text -> done p50 "
                    f"{statistics.median(tail) * 1e3:6.2f} ms   (bare: {len(tools)} tools)"
                )
        print("  targets: <= 1.3x at K=10, <= 1.6x at K=1, flat to K=40, 1 connection")
        print("  issue #29, documented defaults vs a one-tool bare loop: <= 1.6x at K=1,")
        print("  <= 1.3x at K=10, <= 1.15x at K=40; when the issue was filed (its peers harness,")
        print("  this machine): K=1 2.4-2.6x, K=10 1.7-2.0x, K=40 1.1-1.2x")


if __name__ == "__main__":
    main()
