"""`memora serve` under 100 concurrent conversations, next to a bare Starlette SSE proxy of the
same scripted provider, measured in the same run.

A conversation is a new session and TURNS messages; each turn is a POST answered with
server-sent events read to their end.  The provider (bench/sse_server.py, its own process)
answers every turn with 50 streamed tokens.  The bare proxy (a Starlette app on uvicorn, its own
process) does what a host's minimal SSE endpoint would: one streamed chat/completions request
per turn through httpx2, each token re-sent as an event; it keeps no history, no sessions, no
memory.  memora runs with its documented defaults (sessions in JSONL files, round summaries in
SQLite, approvals `ask`).

Printed per server: turns per second, wall time per turn (p50/p99) as the client sees it, the
server's CPU per turn (its processes' user+system time from /proc, so the client's own CPU is
not counted), and the ratio of memora's CPU per turn to the proxy's (goal <= 1.3x, issue #26).
Every turn must end with exactly one `done` and every session must hold exactly its turns'
rounds: a lost or duplicated turn fails the run.  Then the same load with each conversation
acting as its own user (`X-Memora-User`) over a project memory of 20,000 memories in 100 scopes,
next to one user over none: one turn's cost should not grow with what the server holds (goal:
about 1x).  Then the same with `--workers 2` and
`"storage": "postgres"` (a throw-away cluster on 127.0.0.1), when PostgreSQL is installed.

``--variants[=RUNS]`` (default 5) runs only issue #70 item 3's comparison: one memora server per
variant of :data:`VARIANTS` (which HTTP transport the provider uses: bench/_variants.py), all
driven by the same load, passes taken in turn, RUNS times; printed: each one's median server
CPU a turn and its ratio to the first's in the same run (paired).  ``--only=a,b`` picks the
variants; ``--only=net,durable`` is issue #71 item 4's: the same server with durable turns.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx2

sys.path.insert(0, str(Path(__file__).parent))
import _variants
from _server import sse_server

CONVERSATIONS = 100
TURNS = 3
ROUNDS = 3
TICK = os.sysconf("SC_CLK_TCK")

PROXY = textwrap.dedent(
    """
    import json, sys
    import httpx2, uvicorn
    from starlette.applications import Starlette
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    UPSTREAM = sys.argv[1]
    # optional: the system prompt and tool schemas to send (memora's own request), from a file
    SAME = json.load(open(sys.argv[3])) if len(sys.argv) > 3 else None
    client = httpx2.AsyncClient(base_url=UPSTREAM, timeout=60,
                                limits=httpx2.Limits(max_connections=200))

    async def turn(request):
        text = (await request.json())["text"]
        system = SAME["system"] if SAME else "You are helpful."
        body = {"model": "m", "stream": True,
                "messages": [{"role": "system", "content": system},
                             {"role": "user", "content": text}]}
        if SAME:
            body["tools"] = SAME["tools"]

        async def events():
            async with client.stream("POST", "/chat/completions", json=body) as r:
                async for line in r.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    choices = json.loads(line[6:]).get("choices") or [{}]
                    delta = choices[0].get("delta", {}).get("content")
                    if delta:
                        yield "data: " + json.dumps({"type": "text", "content": delta}) + "\\n\\n"
            yield 'data: {"type": "done"}\\n\\n'

        return StreamingResponse(events(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/turn", turn, methods=["POST"])])
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
    """
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICK


def machine_busy() -> tuple[float, float]:
    """(busy, all) CPU seconds of the whole machine so far, from /proc/stat."""
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / TICK, sum(fields[:8]) / TICK


def process_tree(pid: int) -> list[int]:
    """``pid`` and its children (uvicorn's workers)."""
    out = [pid]
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return out
    for child in children:
        out += process_tree(int(child))
    return out


def wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited: {log.read_text()[-2000:]}")
        try:
            if httpx2.get(url, timeout=2).status_code < 500:
                return
        except httpx2.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"the server did not start: {log.read_text()[-2000:]}")


@contextmanager
def process(args: list[str], env: dict[str, str], log: Path, ready: str) -> Iterator[int]:
    with log.open("wb") as out:
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_ready(ready, proc, log)
            yield proc.pid
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


async def read_turn(
    client: httpx2.AsyncClient, path: str, text: str, headers: dict[str, str] | None = None
) -> tuple[float, int]:
    """One turn: wall seconds, and how many `done` events it ended with."""
    t = time.perf_counter()
    done = 0
    async with client.stream("POST", path, json={"text": text}, headers=headers) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{path}: {r.status_code} {await r.aread()!r}")
        async for line in r.aiter_lines():
            if line.startswith("data: ") and '"type":"done"' in line.replace(" ", ""):
                done += 1
    return time.perf_counter() - t, done


async def run_conversations(
    conversation: Callable[[int], Awaitable[tuple[list[float], list[int], str]]],
) -> tuple[list[float], list[int], float, list[str]]:
    """CONVERSATIONS conversations at once: every turn's wall time and `done` count, the
    seconds they took together, and their sessions."""
    t = time.perf_counter()
    results = await asyncio.gather(*(conversation(i) for i in range(CONVERSATIONS)))
    elapsed = time.perf_counter() - t
    walls = [w for r in results for w in r[0]]
    dones = [d for r in results for d in r[1]]
    return walls, dones, elapsed, [r[2] for r in results]


class RawConnection:
    """One keep-alive HTTP/1.1 connection spoken by hand: the client of the workers rows.

    httpx2 reading a turn's events line by line costs the client about as much CPU as the server
    spends on the turn, and on a machine whose cores the client shares with the servers that CPU
    is taken from the second worker.  This client sends prebuilt requests and counts `done`
    events in the raw body, a tenth of the cost, so the rows measure the servers.  A
    conversation keeps its connection, as a browser tab or an SDK client does: the worker that
    accepted it runs the session's turns."""

    def __init__(self, base: str) -> None:
        host, _, port = base.removeprefix("http://").partition(":")
        self.host, self.port = host, int(port)
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> bytes:
        """POST ``body``; the whole response body (de-chunked).  Raises unless the answer is
        200 or 201."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.writer.write(
            f"POST {path} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n{extra}\r\n".encode()
            + body
        )
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        lower = head.lower()
        data = bytearray()
        if b"transfer-encoding: chunked" in lower:
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await self.reader.readuntil(b"\r\n")  # no trailers: the blank line
                    break
                data += await self.reader.readexactly(size + 2)
                del data[-2:]
        else:
            length = int(lower.split(b"content-length:")[1].split(b"\r\n")[0])
            data += await self.reader.readexactly(length)
        if status not in (200, 201):
            raise RuntimeError(f"{path}: {status} {bytes(data)[:500]!r}")
        if b"connection: close" in lower:
            await self.close()
        return bytes(data)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()
            self.reader = self.writer = None


async def drive_raw(
    base: str, *, memora: bool, users: bool = False
) -> tuple[list[float], list[int], float, list[str]]:
    """:func:`drive` with :class:`RawConnection`, one per conversation."""

    async def conversation(i: int) -> tuple[list[float], list[int], str]:
        conn = RawConnection(base)
        headers = user_of(i, users)
        try:
            if memora:
                made = await conn.post("/v1/projects/proj/sessions", b"{}", headers)
                sid = json.loads(made)["id"]
                path = f"/v1/projects/proj/sessions/{sid}/turns"
            else:
                sid, path = "", "/turn"
            walls, dones = [], []
            for n in range(TURNS):
                body = json.dumps({"text": f"conversation {i} turn {n} steps=0"}).encode()
                t = time.perf_counter()
                events = await conn.post(path, body, headers)
                walls.append(time.perf_counter() - t)
                dones.append(events.replace(b" ", b"").count(b'"type":"done"'))
            return walls, dones, sid
        finally:
            await conn.close()

    return await run_conversations(conversation)


def user_of(i: int, users: bool) -> dict[str, str]:
    """The header of conversation ``i`` acting as its own user (``users``), else none."""
    return {"X-Memora-User": f"user-{i}"} if users else {}


async def drive(
    base: str, *, memora: bool, users: bool = False
) -> tuple[list[float], list[int], float, list[str]]:
    limits = httpx2.Limits(
        max_connections=CONVERSATIONS * 2, max_keepalive_connections=CONVERSATIONS
    )
    async with httpx2.AsyncClient(base_url=base, timeout=120, limits=limits) as client:

        async def conversation(i: int) -> tuple[list[float], list[int], str]:
            headers = user_of(i, users)
            if memora:
                made = await client.post("/v1/projects/proj/sessions", json={}, headers=headers)
                sid = made.json()["id"]
                path = f"/v1/projects/proj/sessions/{sid}/turns"
            else:
                sid, path = "", "/turn"
            walls, dones = [], []
            for n in range(TURNS):
                wall, done = await read_turn(
                    client, path, f"conversation {i} turn {n} steps=0", headers
                )
                walls.append(wall)
                dones.append(done)
            return walls, dones, sid

        return await run_conversations(conversation)


async def count_rounds(base: str, sessions: list[str], *, users: bool = False) -> list[int]:
    async with httpx2.AsyncClient(base_url=base, timeout=60) as client:
        counts = []
        for i, sid in enumerate(sessions):
            r = await client.get(f"/v1/projects/proj/sessions/{sid}", headers=user_of(i, users))
            counts.append(len(r.json()["rounds"]))
        return counts


def measure(
    label: str, base: str, pids: list[int], *, memora: bool, users: bool = False, raw: bool = False
) -> dict[str, float]:
    """One pass of the conversations (``raw``: through :class:`RawConnection`); raises on a lost
    or duplicated turn."""
    before = cpu_seconds(pids)
    client_before = time.process_time()
    busy_before, all_before = machine_busy()
    walls, dones, elapsed, sessions = asyncio.run(
        (drive_raw if raw else drive)(base, memora=memora, users=users)
    )
    cpu = cpu_seconds(pids) - before
    client = time.process_time() - client_before
    busy_after, all_after = machine_busy()
    turns = len(walls)
    bad = [d for d in dones if d != 1]
    if bad:
        raise SystemExit(f"{label}: {len(bad)} turns did not end with exactly one done")
    if memora:
        rounds = asyncio.run(count_rounds(base, sessions, users=users))
        lost = sum(1 for r in rounds if r != TURNS)
        if lost:
            raise SystemExit(f"{label}: {lost} sessions do not hold exactly {TURNS} rounds")
    walls.sort()
    return {
        "turns/s": turns / elapsed,
        "p50": statistics.median(walls) * 1e3,
        "p99": walls[int(len(walls) * 0.99) - 1] * 1e3,
        "cpu": cpu / turns * 1e3,
        "client": client / turns * 1e3,
        "busy": (busy_after - busy_before) / max(all_after - all_before, 1e-9),
    }


def compare(
    servers: list[tuple[str, str, list[int], bool]],
    users: frozenset[str] = frozenset(),
    *,
    raw: bool = False,
    warm: bool = True,
) -> dict[str, dict[str, float]]:
    """Each server warmed up (unless not ``warm``), then ROUNDS passes taking turns (machine
    noise hits all alike); the medians per server are printed and returned.  The servers
    labelled in ``users`` are driven with each conversation acting as its own user
    (``X-Memora-User``); ``raw``: by the hand-spoken client (:class:`RawConnection`)."""
    for label, base, _, memora in servers if warm else ():
        asyncio.run((drive_raw if raw else drive)(base, memora=memora, users=label in users))
    rows: dict[str, list[dict[str, float]]] = {label: [] for label, *_ in servers}
    for _ in range(ROUNDS):
        for label, base, pids, memora in servers:
            rows[label].append(
                measure(label, base, pids, memora=memora, users=label in users, raw=raw)
            )
    out = {}
    for label, samples in rows.items():
        row = {k: statistics.median(r[k] for r in samples) for k in samples[0]}
        out[label] = row
        print(
            f"  {label:36} {row['turns/s']:7.1f} turns/s   p50 {row['p50']:7.1f} ms   "
            f"p99 {row['p99']:7.1f} ms   server CPU {row['cpu']:6.2f} ms/turn   "
            f"(client {row['client']:5.2f}; machine {100 * row['busy']:3.0f}% busy)"
        )
    return out


async def seed_memories(db: Path, count: int) -> None:
    """A project's memory of ``count`` memories, a fifth unscoped and the rest in 100 scopes
    (``user-0`` … ``user-99``), as a backend serving many people gathers."""
    from memora.memory import NewMemory
    from memora.memory.sqlite_store import SqliteStorage

    db.parent.mkdir(parents=True, exist_ok=True)
    store = SqliteStorage(db)
    try:
        await store.add_many(
            [
                NewMemory(
                    f"round {i}: notes about the harbor office, pier {i}",
                    scope=None if i % 5 == 0 else f"user-{i % 100}",
                )
                for i in range(count)
            ]
        )
    finally:
        await store.close()


def memora_env(tmp: Path, upstream: str, config: dict[str, Any]) -> dict[str, str]:
    home = tmp / "home"
    home.mkdir(parents=True, exist_ok=True)
    provider = {"type": "openai", "base_url": upstream, "model": "bench"}
    (home / "config.json").write_text(
        json.dumps({"active_provider": "bench", "providers": {"bench": provider}, **config})
    )
    # one client address sends every request here: the rate limit is not what is measured
    (home / "server.json").write_text(json.dumps({"rate_limit_per_minute": 1_000_000}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORA_")}
    env["MEMORA_HOME"] = str(home)
    return env


def serve(tmp: Path, env: dict[str, str], workers: int) -> tuple[list[str], str]:
    project = tmp / "proj"
    project.mkdir(exist_ok=True)
    port = free_port()
    args = [
        sys.executable,
        "-m",
        "memora",
        "serve",
        "--project",
        str(project),
        "--port",
        str(port),
        "--workers",
        str(workers),
    ]
    return args, f"http://127.0.0.1:{port}"


VARIANTS = _variants.VARIANTS
"""The servers of ``--variants`` (bench/_variants.py); the first is memora as it is."""


def variants(
    upstream: str, tmp: Path, stack: ExitStack, runs: int, chosen: tuple[str, ...] = VARIANTS
) -> None:
    """Issue #70 item 3: one server per variant of :data:`VARIANTS`, ``runs`` times ROUNDS
    passes taking turns; the median over runs of each server's CPU a turn, and of its ratio to
    the first server's in the same run (paired: a run's noise hits both)."""
    servers = []
    for variant in chosen:
        root = tmp / variant.replace("/", "-")
        env = memora_env(root, upstream, _variants.config(variant))
        args, url = serve(root, env, 1)
        args = _variants.serve_args(variant, args)
        pid = stack.enter_context(process(args, env, root / "serve.log", url + "/ready"))
        servers.append((variant, url, process_tree(pid), True))
    runs_rows = []
    for n in range(runs):
        print(f"  run {n + 1} of {runs}")
        runs_rows.append(compare(servers, warm=n == 0))
    base = chosen[0]
    print(f"  medians of {runs} runs (each the median of {ROUNDS} passes), ratio to {base}:")
    for variant in chosen:
        cpu = [r[variant]["cpu"] for r in runs_rows]
        ratio = sorted(r[variant]["cpu"] / r[base]["cpu"] for r in runs_rows)
        p50 = statistics.median(r[variant]["p50"] for r in runs_rows)
        print(
            f"    {variant:14} server CPU {statistics.median(cpu):6.2f} ms/turn   "
            f"{statistics.median(ratio):5.3f}x (runs {ratio[0]:.3f}-{ratio[-1]:.3f})   "
            f"p50 {p50:6.1f} ms"
        )


def main() -> None:
    if any(a.startswith("--variants") for a in sys.argv):
        runs = next(int(a.split("=")[1]) for a in [*sys.argv, "--variants=5"] if "-variants=" in a)
        only = next((a.split("=")[1] for a in sys.argv if a.startswith("--only=")), "")
        chosen = tuple(only.split(",")) if only else VARIANTS
        print(
            f"{CONVERSATIONS} concurrent conversations x {TURNS} turns per pass; issue #70 "
            "item 3's variants (the provider's HTTP transport), side by side"
        )
        with sse_server() as upstream, tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
            variants(upstream, Path(tmp), stack, runs, chosen)
        return
    print(
        f"{CONVERSATIONS} concurrent conversations x {TURNS} turns, 50-token answers from a "
        f"scripted provider (its own process); medians of {ROUNDS} passes taken in turn"
    )
    with sse_server() as upstream, tempfile.TemporaryDirectory() as tmpdir, ExitStack() as stack:
        tmp = Path(tmpdir)
        port = free_port()
        proxy = f"http://127.0.0.1:{port}"
        proxy_args = [sys.executable, "-c", PROXY, upstream, str(port)]
        proxy_pid = stack.enter_context(
            process(proxy_args, dict(os.environ), tmp / "proxy.log", proxy + "/")
        )
        env = memora_env(tmp / "one", upstream, {})
        args, base = serve(tmp / "one", env, 1)
        pid = stack.enter_context(process(args, env, tmp / "serve.log", base + "/ready"))
        bare_label, one_label = "bare Starlette SSE proxy", "memora serve (1 worker, SQLite)"
        rows = compare(
            [(bare_label, proxy, [proxy_pid], False), (one_label, base, process_tree(pid), True)]
        )
        bare, one = rows[bare_label], rows[one_label]
        print(
            f"  memora / bare: CPU per turn {one['cpu'] / bare['cpu']:.2f}x (goal <= 1.3x), "
            f"p50 {one['p50'] - bare['p50']:+.1f} ms, p99 {one['p99'] - bare['p99']:+.1f} ms; "
            "no turn lost or duplicated"
        )
        # one turn's cost flat in what the server holds: the same load with each conversation
        # acting as its own user (a backend serving many people), over a project memory of
        # 20,000 memories in 100 scopes; every new user's first turn reads that user's pinned
        # memories (it walked the scope's memories before they were read through their index)
        crowd = tmp / "users"
        asyncio.run(seed_memories(crowd / "proj" / ".memora" / "data" / "memory.db", 20_000))
        env = memora_env(crowd, upstream, {})
        args, base_users = serve(crowd, env, 1)
        pid_users = stack.enter_context(
            process(args, env, tmp / "serve-users.log", base_users + "/ready")
        )
        users_label = "memora serve, 100 users, 20k memories"
        rows = compare(
            [
                (one_label, base, process_tree(pid), True),
                (users_label, base_users, process_tree(pid_users), True),
            ],
            users=frozenset({users_label}),
        )
        print(
            "  100 users over 20,000 memories / one user over none: CPU per turn "
            f"{rows[users_label]['cpu'] / rows[one_label]['cpu']:.2f}x (goal: flat, about 1x)"
        )
        # the same comparison with the proxy sending memora's own request (its system prompt
        # and its 16 resident tools' schemas): what memora's machinery costs, apart from what
        # its documented defaults put in every request
        last = httpx2.get(upstream + "/last_request", timeout=10).json()
        same = tmp / "same.json"
        same.write_text(
            json.dumps({"system": last["messages"][0]["content"], "tools": last["tools"]})
        )
        port2 = free_port()
        same_url = f"http://127.0.0.1:{port2}"
        same_pid = stack.enter_context(
            process(
                [sys.executable, "-c", PROXY, upstream, str(port2), str(same)],
                dict(os.environ),
                tmp / "proxy-same.log",
                same_url + "/",
            )
        )
        same_label = "bare proxy, memora's request"
        rows = compare(
            [(same_label, same_url, [same_pid], False), (one_label, base, process_tree(pid), True)]
        )
        print(
            f"  memora / bare proxy sending memora's request ({len(last['tools'])} tools): CPU "
            f"per turn {rows[one_label]['cpu'] / rows[same_label]['cpu']:.2f}x"
        )
        where_it_goes(upstream, tmp, stack, (bare_label, proxy, [proxy_pid], False), base, pid)
        # workers that add up: the same project served by two processes, next to one
        env = memora_env(tmp / "two", upstream, {})
        args, base2 = serve(tmp / "two", env, 2)
        pid2 = stack.enter_context(process(args, env, tmp / "serve-two.log", base2 + "/ready"))
        two_label = "memora serve (2 workers, SQLite)"
        print("  the workers rows: the hand-spoken client, a keep-alive connection a conversation")
        rows = compare(
            [
                (one_label, base, process_tree(pid), True),
                (two_label, base2, process_tree(pid2), True),
            ],
            raw=True,
        )
        workers_line("SQLite", rows[one_label], rows[two_label])
        landing(upstream, tmp / "landing")
        try:
            from memora_plugin_postgres.testing import ClusterUnavailable, temporary_cluster
        except ImportError:
            print("  (memora-plugin-postgres not installed: the PostgreSQL row is skipped)")
            return
        try:
            dsn = stack.enter_context(temporary_cluster({"fsync": "off", "max_connections": "200"}))
        except ClusterUnavailable as exc:
            print(f"  (PostgreSQL row skipped: {exc})")
            return
        pg: list[tuple[str, str, list[int], bool]] = []
        for workers in (1, 2):
            env = memora_env(tmp / f"pg{workers}", upstream, {"storage": "postgres"})
            env["MEMORA_POSTGRES_DSN"] = dsn
            args, url = serve(tmp / f"pg{workers}", env, workers)
            log = tmp / f"serve-pg{workers}.log"
            pid = stack.enter_context(process(args, env, log, url + "/ready"))
            label = f"memora serve ({workers} worker{'s' * (workers > 1)}, PostgreSQL)"
            pg.append((label, url, process_tree(pid), True))
        rows = compare([(bare_label, proxy, [proxy_pid], False), *pg], raw=True)
        one_pg, two_pg = rows[pg[0][0]], rows[pg[1][0]]
        print(
            f"  2 workers on PostgreSQL / bare: CPU per turn {two_pg['cpu'] / rows[bare_label]['cpu']:.2f}x, "
            f"p50 {two_pg['p50'] - rows[bare_label]['p50']:+.1f} ms; no turn lost or duplicated"
        )
        workers_line("PostgreSQL", one_pg, two_pg)


def where_it_goes(
    upstream: str,
    tmp: Path,
    stack: ExitStack,
    bare: tuple[str, str, list[int], bool],
    base: str,
    pid: int,
) -> None:
    """Item 1's gap taken apart: the same load on servers that each leave out one of the two
    durable writes of a turn (the session's JSONL append, the round's memory row), next to the
    proxy and the documented defaults, passes in turn."""
    one_label = "memora serve (1 worker, SQLite)"
    variants = {
        "  ... sessions in memory": {"session_store": "memory"},
        "  ... no round memory": {"options": {"archive_mode": "manual"}},
        "  ... neither": {"session_store": "memory", "options": {"archive_mode": "manual"}},
    }
    servers = [bare, (one_label, base, process_tree(pid), True)]
    for label, config in variants.items():
        root = tmp / label.strip(" .").replace(" ", "-")
        env = memora_env(root, upstream, config)
        args, url = serve(root, env, 1)
        vpid = stack.enter_context(process(args, env, root / "serve.log", url + "/ready"))
        servers.append((label, url, process_tree(vpid), True))
    print("  where memora's CPU a turn goes: the same server leaving out a durable write")
    rows = compare(servers)
    proxy, full = rows[bare[0]]["cpu"], rows[one_label]["cpu"]
    labels = list(variants)
    log, memory, neither = (rows[label]["cpu"] for label in labels)
    print(
        f"  the session's log (JSONL append and fsync on a worker thread) {full - log:.2f} ms a "
        f"turn, the round's memory row (SQLite) {full - memory:.2f} ms; memora with neither "
        f"{neither / proxy:.2f}x the proxy's CPU a turn, with both {full / proxy:.2f}x"
    )


async def landing_pass(upstream: str, root: Path, alternate: bool) -> float:
    """Median CPU of a turn (this process: the client, two shared apps, their agents) over 10
    sessions x 8 turns, every turn on the first app or each on the other app than the last."""
    from memora_plugin_openai.provider import OpenAIProvider
    from memora_plugin_server import create_app
    from memora_plugin_server.config import ServerSettings

    project = root / "proj"
    project.mkdir(parents=True)
    settings = ServerSettings(rate_limit_per_minute=1_000_000)
    apps = [
        create_app(
            project,
            settings=settings,
            shared=True,
            provider=OpenAIProvider(model="bench", base_url=upstream),
            config_dir=root / "user",
            load_entrypoints=False,
        )
        for _ in range(2)
    ]
    async with contextlib.AsyncExitStack() as stack:
        clients = []
        for app in apps:
            await stack.enter_async_context(app.router.lifespan_context(app))
            transport = httpx2.ASGITransport(app=app, client=("127.0.0.1", 4242))
            clients.append(
                await stack.enter_async_context(
                    httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=60)
                )
            )
        made = [await clients[0].post("/v1/projects/proj/sessions", json={}) for _ in range(10)]
        sessions = [r.json()["id"] for r in made]
        took = []
        for n in range(8):
            for sid in sessions:
                client = clients[n % 2] if alternate else clients[0]
                t = time.process_time()
                _wall, done = await read_turn(
                    client, f"/v1/projects/proj/sessions/{sid}/turns", f"turn {n} steps=0"
                )
                if done != 1:
                    raise SystemExit(f"landing: a turn ended with {done} done events")
                if n:
                    took.append(time.process_time() - t)
    return statistics.median(took)


def landing(upstream: str, root: Path) -> None:
    """What a turn costs when it lands on the worker that did not run the session's last one
    (it reads the session the other moved on), against one on the same worker: two shared apps
    in this process, so the turns land where the bench says, not where the OS puts them."""
    same: list[float] = []
    other: list[float] = []
    for i in range(3):
        same.append(asyncio.run(landing_pass(upstream, root / f"same{i}", False)))
        other.append(asyncio.run(landing_pass(upstream, root / f"other{i}", True)))
    print(
        "  a turn landing on the other worker / on the one that ran the session's last turn "
        f"(two shared apps in one process): CPU {statistics.median(other) / statistics.median(same):.2f}x"
    )


def workers_line(storage: str, one: dict[str, float], two: dict[str, float]) -> None:
    """Turns a second of two workers over one's (goal >= 1.6x), and what bounds it here: the
    client, the scripted provider (and PostgreSQL) share the machine's cores with the servers,
    so what they take of each turn is not there for a second worker.  Printed with it: the
    machine's CPU a turn besides the servers', and the most two workers could give over what one
    gave if they kept every core busy at the CPU a turn measured."""
    cores = os.cpu_count() or 1
    rest = [max(r["busy"] * cores / r["turns/s"] * 1e3 - r["cpu"], 0.0) for r in (one, two)]
    ceiling = cores * 1e3 / (two["cpu"] + rest[1]) / one["turns/s"]
    print(
        f"  2 workers / 1 worker on {storage}: {two['turns/s'] / one['turns/s']:.2f}x turns/s "
        f"(goal >= 1.6x), server CPU per turn {two['cpu'] / one['cpu']:.2f}x; the machine "
        f"({cores} cores) was {100 * one['busy']:.0f}% busy with one worker, "
        f"{100 * two['busy']:.0f}% with two; the rest of the machine (client, provider, "
        f"database) took {rest[1]:.2f} ms a turn, so these cores allow at most {ceiling:.2f}x"
    )


if __name__ == "__main__":
    main()
