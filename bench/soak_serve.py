"""A soak of `memora serve` (#43 item 4; not part of `make bench` or `make test`): two servers as
two machines on one PostgreSQL (each its own copy of the project), steady load from concurrent
conversations, and server A killed with SIGKILL every ``--kill-every`` seconds and restarted.

Printed at the end:

* acknowledged turns (a `done` event received) and how many of them are missing from their
  session's rounds afterwards (must be 0);
* per kill, how long a client following a turn of the killed server (through server B) waited
  to be told it was lost (`error` with code `TURN_LOST`; goal under 2 s);
* server B — which runs the whole soak — resident memory and open descriptors after the warm-up
  and at the end (goal: within 10 %).

Each conversation starts a new session every ``--turns-per-session`` turns (20), as people do:
a session that only grows would fill its context window and hold ever more history, which
would be measured instead of what the server keeps per turn.

Usage: python bench/soak_serve.py [--minutes 30] [--conversations 20] [--kill-every 60]
       [--turns-per-session 20]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2

sys.path.insert(0, str(Path(__file__).parent))
from _server import postgres_cluster, sse_server
from bench_serve import free_port, wait_ready


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class Server:
    def __init__(self, name: str, root: Path, env: dict[str, str]) -> None:
        self.project = root / name / "shop"
        self.project.mkdir(parents=True)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = root / f"{name}.log"
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = [sys.executable, "-m", "memora", "serve", "--project", str(self.project)]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [*args, "--port", str(self.port)], env=self.env, stdout=out, stderr=out
            )
        wait_ready(self.base + "/ready", self.proc, self.log)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class Soak:
    def __init__(self, a: Server, b: Server, args: argparse.Namespace) -> None:
        self.a, self.b, self.args = a, b, args
        self.acked: list[tuple[str, str]] = []  # (session, the turn's text)
        self.inflight: dict[str, tuple[str, str]] = {}  # turn id -> (session, server base)
        self.told: list[float] = []  # seconds from a kill to a follower told the turn is lost
        self.untold = 0
        self.errors: dict[str, int] = {}
        self.samples: list[tuple[float, int, int]] = []  # (minute, B's RSS kB, B's fds)
        self.stop = asyncio.Event()

    def note(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1

    async def conversation(self, client: httpx2.AsyncClient, n: int) -> None:
        sid = None
        turn = 0
        while not self.stop.is_set():
            server = random.choice((self.a, self.b))
            try:
                if sid is None or turn >= self.args.turns_per_session:
                    turn = 0
                    made = await client.post(server.base + "/v1/projects/shop/sessions", json={})
                    made.raise_for_status()
                    sid = made.json()["id"]
                text = f"c{n} turn {turn} steps=1"
                path = f"{server.base}/v1/projects/shop/sessions/{sid}/turns"
                async with client.stream("POST", path, json={"text": text}) as r:
                    if r.status_code == 409:
                        self.note("busy (409)")
                        await asyncio.sleep(0.2)
                        continue
                    r.raise_for_status()
                    tid = r.headers.get("x-memora-turn", "")
                    self.inflight[tid] = (sid, server.base)
                    try:
                        async for line in r.aiter_lines():
                            if line.startswith("data: ") and '"type":"done"' in line:
                                self.acked.append((sid, text))
                                turn += 1
                    finally:
                        self.inflight.pop(tid, None)
            except (httpx2.HTTPError, OSError) as exc:
                self.note(type(exc).__name__)
                await asyncio.sleep(0.3)

    async def follow(self, client: httpx2.AsyncClient, sid: str, tid: str, killed: float) -> None:
        """Follow a turn of the killed server through B; record when B says it is lost."""
        path = f"{self.b.base}/v1/projects/shop/sessions/{sid}/turns/{tid}/events"
        with contextlib.suppress(httpx2.HTTPError, asyncio.TimeoutError):
            async with asyncio.timeout(30), client.stream("GET", path) as r:
                async for line in r.aiter_lines():
                    if line.startswith("data: ") and '"TURN_LOST"' in line:
                        self.told.append(time.monotonic() - killed)
                        return
                    if line.startswith("data: ") and '"type":"done"' in line:
                        return  # it finished before the kill took it
        self.untold += 1

    async def killer(self, client: httpx2.AsyncClient) -> None:
        started = time.monotonic()
        while not self.stop.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.stop.wait(), self.args.kill_every)
            if self.stop.is_set():
                return
            victims = [(t, s) for t, (s, base) in self.inflight.items() if base == self.a.base]
            self.a.kill()
            killed = time.monotonic()
            followers = [
                asyncio.ensure_future(self.follow(client, sid, tid, killed))
                for tid, sid in victims[:3]
                if tid
            ]
            await asyncio.to_thread(self.a.start)
            await asyncio.gather(*followers)
            print(
                f"  {(time.monotonic() - started) / 60:5.1f} min: killed A ({len(victims)} turns in flight)",
                flush=True,
            )

    async def sampler(self) -> None:
        started = time.monotonic()
        while not self.stop.is_set():
            assert self.b.proc is not None
            pid = self.b.proc.pid
            self.samples.append(((time.monotonic() - started) / 60, rss_kb(pid), fds(pid)))
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.stop.wait(), 10)

    async def run(self) -> None:
        limits = httpx2.Limits(max_connections=self.args.conversations * 3)
        async with httpx2.AsyncClient(timeout=120, limits=limits) as client:
            tasks = [
                asyncio.ensure_future(self.conversation(client, n))
                for n in range(self.args.conversations)
            ]
            tasks += [
                asyncio.ensure_future(self.killer(client)),
                asyncio.ensure_future(self.sampler()),
            ]
            await asyncio.sleep(self.args.minutes * 60)
            self.stop.set()
            await asyncio.gather(*tasks)

    async def missing(self) -> int:
        """Acknowledged turns that are not in their session's rounds (read through B)."""
        by_session: dict[str, list[str]] = {}
        for sid, text in self.acked:
            by_session.setdefault(sid, []).append(text)
        lost = 0
        async with httpx2.AsyncClient(timeout=60) as client:
            for sid, texts in by_session.items():
                r = await client.get(f"{self.b.base}/v1/projects/shop/sessions/{sid}")
                said = [x["user"] for x in r.json().get("rounds", [])]
                lost += sum(1 for t in texts if said.count(t) < 1)
        return lost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--conversations", type=int, default=20)
    parser.add_argument("--kill-every", type=float, default=60.0)
    parser.add_argument("--turns-per-session", type=int, default=20)
    parser.add_argument("--warmup", type=float, default=None, help="minutes (default: 1/6)")
    args = parser.parse_args()
    warmup = args.warmup if args.warmup is not None else min(5.0, args.minutes / 6)
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        dsn = postgres_cluster(stack)
        if dsn is None:
            return
        upstream = stack.enter_context(sse_server())
        root = Path(tmp)
        home = root / "home"
        home.mkdir()
        provider = {"type": "openai", "base_url": upstream, "model": "bench"}
        config = {
            "active_provider": "bench",
            "providers": {"bench": provider},
            "storage": "postgres",
            "plugins": {"postgres": {"namespace": "soak"}},
        }
        (home / "config.json").write_text(json.dumps(config))
        (home / "server.json").write_text(json.dumps({"rate_limit_per_minute": 1_000_000}))
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORA_")}
        env.update(MEMORA_HOME=str(home), MEMORA_POSTGRES_DSN=dsn)
        a, b = Server("a", root, env), Server("b", root, env)
        a.start()
        b.start()
        soak = Soak(a, b, args)
        print(
            f"soak: {args.minutes:g} min, {args.conversations} conversations of "
            f"{args.turns_per_session} turns a session, two servers on one PostgreSQL, server A "
            f"killed (SIGKILL) every {args.kill_every:g} s",
            flush=True,
        )
        try:
            asyncio.run(soak.run())
            lost = asyncio.run(soak.missing())
        finally:
            a.stop()
            b.stop()
    after = [s for s in soak.samples if s[0] >= warmup] or soak.samples
    first, last = after[0], after[-1]
    kills = len(soak.told) + soak.untold
    print(f"acknowledged turns: {len(soak.acked)}; missing from their sessions: {lost}")
    print(f"client errors (retried): {json.dumps(soak.errors, sort_keys=True)}")
    if soak.told:
        print(
            f"followers of a killed turn told (TURN_LOST): {len(soak.told)} of {kills}; "
            f"p50 {statistics.median(soak.told):.2f} s, max {max(soak.told):.2f} s (goal < 2 s)"
        )
    print(
        f"server B resident memory: {first[1] / 1024:.0f} MB at {first[0]:.1f} min -> "
        f"{last[1] / 1024:.0f} MB at {last[0]:.1f} min ({last[1] / max(first[1], 1):.2f}x, goal "
        f"within 10%); open descriptors {first[2]} -> {last[2]}"
    )
    # the whole series after the warm-up, so "flat" can be seen and not only two points
    rss = [s[1] for s in after]
    open_fds = [s[2] for s in after]
    print(
        f"after the warm-up ({len(after)} samples, every 10 s): resident memory "
        f"{min(rss) / 1024:.0f}-{max(rss) / 1024:.0f} MB, open descriptors "
        f"{min(open_fds)}-{max(open_fds)} (median {statistics.median(open_fds):.0f})"
    )
    marks: dict[int, tuple[float, int, int]] = {}
    for sample in after:  # the first sample of every fifth minute
        if int(sample[0]) % 5 == 0:
            marks.setdefault(int(sample[0]), sample)
    print(
        "  every 5 min: "
        + ", ".join(f"{m[0]:.0f} min {m[1] / 1024:.0f} MB {m[2]} fds" for m in marks.values())
    )


if __name__ == "__main__":
    main()
