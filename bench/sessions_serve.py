"""`memora serve` as the sessions it has seen pile up (#43 items 1 and 4; not part of `make bench`:
four minutes for the default 10,000 sessions): concurrent conversations of one new session each,
against one worker on SQLite with its documented defaults.

Printed after the first 100 sessions, the first 1,000, then a quarter, half and all of them: the
server's resident memory, and its CPU per turn (its process's user+system time from /proc) over
the sessions since the line before.  A server that keeps more per session seen shows it in the
memory column; one whose turn costs more as sessions pile up (a scan of all sessions, a
growing index) in the CPU column.

Usage: python bench/sessions_serve.py [--sessions 10000] [--conversations 20] [--turns 1]
       [--max-open-sessions 256]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

import httpx2

sys.path.insert(0, str(Path(__file__).parent))
from _server import sse_server
from bench_serve import cpu_seconds, memora_env, process, read_turn, serve


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def drive(base: str, pid: int, args: argparse.Namespace) -> None:
    total, conc, turns = args.sessions, args.conversations, args.turns
    marks = sorted({100, 1000, total // 4, total // 2, total} - {0})
    limits = httpx2.Limits(max_connections=conc * 2)
    async with httpx2.AsyncClient(base_url=base, timeout=120, limits=limits) as client:

        async def conversation(i: int) -> None:
            r = await client.post("/v1/projects/proj/sessions", json={})
            path = f"/v1/projects/proj/sessions/{r.json()['id']}/turns"
            for n in range(turns):
                _, done = await read_turn(client, path, f"conversation {i} turn {n} steps=0")
                if done != 1:
                    raise SystemExit(f"conversation {i} turn {n} ended with {done} done events")

        seen, last_seen, last_cpu = 0, 0, cpu_seconds([pid])
        while seen < total:
            batch = min(conc, total - seen)
            await asyncio.gather(*(conversation(seen + k) for k in range(batch)))
            seen += batch
            if any(last_seen < m <= seen for m in marks):
                cpu = cpu_seconds([pid])
                per_turn = (cpu - last_cpu) / ((seen - last_seen) * turns) * 1e3
                print(
                    f"  {seen:6d} sessions seen: server resident memory {rss_mb(pid):6.1f} MB, "
                    f"server CPU {per_turn:5.2f} ms/turn over the last {seen - last_seen}",
                    flush=True,
                )
                last_seen, last_cpu = seen, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--conversations", type=int, default=20)
    parser.add_argument("--turns", type=int, default=1, help="turns per session")
    parser.add_argument("--max-open-sessions", type=int, default=None)
    args = parser.parse_args()
    print(
        f"{args.sessions} sessions of {args.turns} turn(s), {args.conversations} at a time, "
        "one worker on SQLite, 50-token answers from a scripted provider"
    )
    with sse_server() as upstream, tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        env = memora_env(tmp, upstream, {})
        cmd, base = serve(tmp, env, 1)
        if args.max_open_sessions is not None:
            cmd += ["--max-open-sessions", str(args.max_open_sessions)]
        with process(cmd, env, tmp / "serve.log", base + "/ready") as pid:
            asyncio.run(drive(base, pid, args))


if __name__ == "__main__":
    main()
