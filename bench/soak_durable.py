"""A soak of durable turns (#71 item 4; not part of `make bench` or `make test`): two `memora
serve` hosts on one PostgreSQL with ``"turn_executor": "dbos"``, many sessions driven at once
through REST, and one host SIGKILLed every ``--kill-every`` seconds (A, then B, ...) and started
again.

The model is scripted (an OpenAI-compatible server on 127.0.0.1, in this process): a turn's
message carries its plan, 3-10 tool steps, and the model calls them one by one — what it answers
depends only on the request (the turn's message and how many tool results follow it), so a turn
taken over on the other host gets the same next step.  The tools count their side effects in a
ledger file (one line an execution: ``tool call-id``):

* ``run``: the built-in ``run_command`` (non-idempotent) appending to the ledger, then sleeping;
* ``charge``: an MCP tool (a stdio server written here, on the ``mcp`` SDK) declared nothing:
  non-idempotent;
* ``sync``: an MCP tool declared ``idempotentHint``: memora may run it again after a kill.

A third of the turns are started with ``"background": true`` (202 and the turn's id) and followed
at their events URL; a client whose stream broke (its host was killed) re-attaches on a live host
with ``Last-Event-ID``.  Printed at the end, with the targets of issue #71 item 4:

* turns acknowledged (200 with the turn's id, or 202) and, of them, lost — never ended ``done``
  or with a clear error (target 0);
* turns running on a host when it was killed, and how many ended ``done`` (target >= 99 %);
* side effects: each call whose result a round kept ran exactly once (``sync`` at most twice),
  a call kept as interrupted ran at most once, no call ran more than allowed (target: 0
  violations); each ``done`` round holds every step of its plan once, and each acknowledged
  turn that ended ``done`` is one round of its session.

Exits non-zero when a target is missed.

Usage: python bench/soak_durable.py [--minutes 30] [--kill-every 60] [--conversations 8]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2

sys.path.insert(0, str(Path(__file__).parent))
from bench_serve import free_port, wait_ready

TOOLS = {"run": "run_command", "charge": "mcp_ledger_charge", "sync": "mcp_ledger_sync"}
"""A plan's step kinds and the tool each calls."""
IDEMPOTENT = {"sync"}
"""Steps whose tool is declared idempotent: run at most twice."""
ENDS = {"done", "aborted", "paused", "error"}
"""Chunk types a turn's stream may end with."""
INTERRUPTED = "interrupted:"
"""How the summary of a call that may not be repeated, left running by a dead worker, begins
(the round keeps it as failed: ``EXECUTION_FAILED``)."""
FOLLOW_SECONDS = 240.0
"""How long a client keeps re-attaching to a turn before it calls it lost."""
PLAN = re.compile(r"soak (\S+): plan=(\S+)")

LEDGER_SERVER = textwrap.dedent(
    '''
    """The soak's MCP tools: each execution appends ``tool call-id`` to the ledger first."""
    import os, sys, anyio
    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations

    LEDGER = sys.argv[1]
    server = MCPServer("ledger")

    def record(tool: str, call: str) -> None:
        # one small O_APPEND write a line: whole even with both hosts' servers writing
        fd = os.open(LEDGER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{tool} {call}\\n".encode())
        finally:
            os.close(fd)

    @server.tool(description="Charge the order named by call (not repeatable).")
    async def charge(call: str, seconds: float) -> str:
        record("charge", call)
        await anyio.sleep(seconds)
        return f"charged {call}"

    @server.tool(
        description="Sync the record named by call (safe to repeat).",
        annotations=ToolAnnotations(idempotent_hint=True),
    )
    async def sync(call: str, seconds: float) -> str:
        record("sync", call)
        await anyio.sleep(seconds)
        return f"synced {call}"

    server.run("stdio")
    '''
)


# -- the scripted model -------------------------------------------------------------------------


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {
        "id": "soak",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "soak",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(body)}\n\n".encode()


def plan_of(messages: list[dict[str, Any]]) -> tuple[str, list[tuple[str, float]], int] | None:
    """The turn a request belongs to: its tag, its plan, and how many of its steps have a
    result (the tool messages after its message)."""
    for i in range(len(messages) - 1, -1, -1):
        content = messages[i].get("content")
        if messages[i].get("role") != "user" or not isinstance(content, str):
            continue
        found = PLAN.search(content)
        if found is None:
            continue
        steps = []
        for part in found.group(2).split(","):
            kind, _, ms = part.partition("/")
            steps.append((kind, int(ms) / 1000))
        done = sum(1 for m in messages[i + 1 :] if m.get("role") == "tool")
        return found.group(1), steps, done
    return None


def step_call(tag: str, n: int, kind: str, seconds: float, ledger: Path) -> dict[str, Any]:
    """Step ``n`` (1-based) of turn ``tag`` as the model's tool call."""
    cid = f"{tag}-{n}"
    if kind == "run":
        command = f"printf 'run {cid}\\n' >> {ledger} && sleep {seconds:.3f}"
        args: dict[str, Any] = {"command": command, "timeout": 60}
    else:
        args = {"call": cid, "seconds": seconds}
    return {
        "index": 0,
        "id": cid,
        "type": "function",
        "function": {"name": TOOLS[kind], "arguments": json.dumps(args)},
    }


class Model:
    """What the scripted model answers, and how often each of a turn's LLM calls was made."""

    def __init__(self, ledger: Path) -> None:
        self.ledger = ledger
        self.calls: Counter[tuple[str, int]] = Counter()
        self.lock = threading.Lock()

    def answer(self, body: dict[str, Any]) -> Iterator[tuple[bytes, float]]:
        found = plan_of(body.get("messages") or [])
        if found is None:
            words = ["nothing", "to", "do", "here"]
            yield from ((_chunk({"content": w + " "}), 0.01) for w in words)
            yield _chunk({}, "stop"), 0.0
            return
        tag, steps, done = found
        with self.lock:
            self.calls[(tag, done)] += 1
        pause = random.uniform(0.03, 0.08)  # a model that takes its time: kills land here too
        if done < len(steps):
            kind, seconds = steps[done]
            for w in f"step {done + 1} of {len(steps)}:".split():
                yield _chunk({"content": w + " "}), pause
            yield _chunk({"tool_calls": [step_call(tag, done + 1, kind, seconds, self.ledger)]}), 0
            yield _chunk({}, "tool_calls"), 0.0
            return
        for w in f"all {len(steps)} steps of {tag} are done".split():
            yield _chunk({"content": w + " "}), pause
        yield _chunk({}, "stop"), 0.0


def _handler(model: Model) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if not body.get("stream"):  # round summaries, memory notes
                message = {"role": "assistant", "content": "TYPE: fact\nThe user ran a soak turn."}
                self._json(
                    {
                        "id": "s",
                        "object": "chat.completion",
                        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
                    }
                )
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for event, delay in [*model.answer(body), (b"data: [DONE]\n\n", 0.0)]:
                    if delay:
                        time.sleep(delay)
                    self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                pass  # the host asking was killed

        def _json(self, obj: dict[str, Any]) -> None:
            data = json.dumps(obj).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


class _Quiet(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a host killed mid-request resets its connection: expected here, not news


@contextlib.contextmanager
def model_server(model: Model) -> Iterator[str]:
    httpd = _Quiet(("127.0.0.1", 0), _handler(model))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()


# -- the hosts ----------------------------------------------------------------------------------


class Host:
    """One `memora serve` process as one machine (its own copy of the project folder)."""

    def __init__(self, name: str, root: Path, env: dict[str, str]) -> None:
        self.name = name
        self.project = root / name / "shop"
        self.project.mkdir(parents=True)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = root / f"{name}.log"
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.up = False
        self.starts: list[float] = []  # seconds each start took to be ready

    def start(self) -> None:
        # -v: the hosts log each turn they take over (INFO), which the report counts
        args = [sys.executable, "-m", "memora", "-v", "serve", "--project", str(self.project)]
        # --config-dir: `memora serve` finds the user's role packs only where it is told
        args += ["--config-dir", self.env["MEMORA_HOME"]]
        t = time.monotonic()
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [*args, "--port", str(self.port)], env=self.env, stdout=out, stderr=out
            )
        wait_ready(self.base + "/ready", self.proc, self.log)
        self.starts.append(time.monotonic() - t)
        self.warm()
        self.up = True

    def warm(self) -> None:
        """One turn calling the ledger's MCP server before any client is sent here: the
        server's start (a Python process) is not in a measured turn.  (It also kept soak
        finding 3 — concurrent first uses of an MCP server saw no tools, fixed in 0981fd2 —
        out of the figures.)"""
        with httpx2.Client(base_url=self.base, timeout=120) as c:
            made = c.post("/v1/projects/shop/sessions", json={})
            made.raise_for_status()
            path = f"/v1/projects/shop/sessions/{made.json()['id']}/turns"
            text = f"soak warm-{self.name}-{len(self.starts)}: plan=sync/10"
            r = c.post(path, json={"text": text})
            if r.status_code != 200 or '"synced warm' not in r.text:
                raise RuntimeError(
                    f"warming {self.name} up failed: {r.status_code} {r.text[-500:]}"
                )

    def kill(self) -> None:
        assert self.proc is not None
        self.up = False
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        self.up = False
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def config_home(root: Path, upstream: str, ledger_server: Path, ledger: Path) -> Path:
    """The user's memora folder both hosts share: the scripted model, PostgreSQL storage, the
    dbos turn executor, full-auto approvals, and a role pack that offers the ledger's MCP
    tools."""
    home = root / "home"
    pack = home / "role-packs" / "soak"
    pack.mkdir(parents=True)
    manifest = {
        "name": "soak",
        "formatVersion": "1.0.0",
        "capabilities": [{"capability": "mcp:ledger"}],
        "strategy": {"reflect": {"summary": "off"}},
    }
    (pack / "manifest.json").write_text(json.dumps(manifest))
    server = {"command": sys.executable, "args": [str(ledger_server), str(ledger)]}
    config = {
        "active_provider": "soak",
        "providers": {"soak": {"type": "openai", "base_url": upstream, "model": "soak"}},
        "storage": "postgres",
        "turn_executor": "dbos",
        "approvals": "full-auto",
        "options": {"active_role_pack": "soak"},
        "plugins": {
            "postgres": {"namespace": "soak-durable"},
            "mcp": {"servers": {"ledger": server}, "timeout": 60},
        },
    }
    (home / "config.json").write_text(json.dumps(config))
    (home / "server.json").write_text(json.dumps({"rate_limit_per_minute": 1_000_000}))
    return home


# -- the clients --------------------------------------------------------------------------------


@dataclass
class Turn:
    tag: str
    session: str
    text: str
    plan: list[tuple[str, float]]
    background: bool
    runner: str
    """The host believed to run it: where it started, the other one once that was killed."""
    turn_id: str = ""
    last_event: str | None = None
    last_type: str = ""
    end: str | None = None
    """How it ended as its client saw it: ``done``, ``error:<code>``, ... (None: not yet)."""
    acked_at: float = 0.0
    killed_at: float | None = None
    """When a host running it was killed (the first time)."""
    events: int = 0
    """Events its client received (before the kill: ``events_at_kill``)."""
    events_at_kill: int = 0
    resumed_after: float | None = None
    """Seconds from that kill to the next event its client received."""
    reattached: int = 0


@dataclass
class Kill:
    at: float
    victim: str
    running: int
    restart: float = 0.0


@dataclass
class Tally:
    errors: Counter[str] = field(default_factory=Counter)

    def note(self, what: str) -> None:
        self.errors[what] += 1


class Soak:
    def __init__(self, hosts: list[Host], args: argparse.Namespace) -> None:
        self.hosts = hosts
        self.args = args
        self.turns: list[Turn] = []
        self.sessions: list[str] = []
        self.kills: list[Kill] = []
        self.tally = Tally()
        self.stop = asyncio.Event()
        self.started = time.monotonic()

    def live(self, avoid: str | None = None) -> Host:
        """A host that is up, other than ``avoid`` when there is one: one host is killed at a
        time, and only while the other is up."""
        up = [h for h in self.hosts if h.up]
        assert up, "both hosts are down"
        return random.choice([h for h in up if h.name != avoid] or up)

    # one conversation: a session of ``turns_per_session`` turns, then a new one
    async def conversation(self, client: httpx2.AsyncClient, n: int) -> None:
        sid: str | None = None
        count = seq = 0
        while not self.stop.is_set():
            host = self.live()
            try:
                if sid is None or count >= self.args.turns_per_session:
                    made = await client.post(host.base + "/v1/projects/shop/sessions", json={})
                    made.raise_for_status()
                    sid, count = made.json()["id"], 0
                    self.sessions.append(sid)
                seq += 1
                turn = self.new_turn(f"c{n}t{seq}", sid, host.name)
                if not await self.start(client, host, turn):
                    continue
            except (httpx2.HTTPError, OSError) as exc:
                self.tally.note(f"start: {type(exc).__name__}")
                await asyncio.sleep(0.5)
                continue
            await self.follow(client, turn)
            count += 1

    def new_turn(self, tag: str, sid: str, host: str) -> Turn:
        plan = [
            (random.choice(list(TOOLS)), random.uniform(0.05, 0.6))
            for _ in range(random.randint(3, 10))
        ]
        text = f"soak {tag}: plan=" + ",".join(f"{k}/{int(s * 1000)}" for k, s in plan)
        return Turn(tag, sid, text, plan, random.random() < 1 / 3, host)

    async def start(self, client: httpx2.AsyncClient, host: Host, turn: Turn) -> bool:
        """Start ``turn`` on ``host``; False when it was not acknowledged (the session busy)."""
        path = f"{host.base}/v1/projects/shop/sessions/{turn.session}/turns"
        body: dict[str, Any] = {"text": turn.text}
        if turn.background:
            body["background"] = True
            r = await client.post(path, json=body)
            if r.status_code == 409:  # a turn the soak did not see acknowledged still runs
                self.tally.note("busy (409)")
                await asyncio.sleep(1.0)
                return False
            if r.status_code != 202:
                raise httpx2.HTTPError(f"background start: {r.status_code} {r.text[:200]}")
            turn.turn_id = r.json()["turn_id"]
            turn.acked_at = time.monotonic()
            self.turns.append(turn)
            return True
        async with client.stream("POST", path, json=body) as r:
            if r.status_code == 409:
                self.tally.note("busy (409)")
                await asyncio.sleep(1.0)
                return False
            if r.status_code != 200:
                raise httpx2.HTTPError(f"start: {r.status_code} {(await r.aread())[:200]!r}")
            turn.turn_id = r.headers["x-memora-turn"]
            turn.acked_at = time.monotonic()
            self.turns.append(turn)
            with contextlib.suppress(httpx2.HTTPError, OSError):
                await self.read(r, turn)
        return True

    async def read(self, response: httpx2.Response, turn: Turn) -> None:
        """Read a turn's events to the end of the stream; ``turn.end`` set when the stream
        ended whole on an event that ends a turn."""
        event_id: str | None = None
        async for line in response.aiter_lines():
            if line.startswith("id: "):
                event_id = line[4:]
            elif line.startswith("data: "):
                chunk = json.loads(line[6:])
                turn.events += 1
                turn.last_type = chunk.get("type", "")
                if turn.last_type == "error":
                    turn.last_type = f"error:{chunk.get('code')}"
                if turn.killed_at is not None and turn.resumed_after is None:
                    turn.resumed_after = time.monotonic() - turn.killed_at
            elif line == "" and event_id is not None:
                turn.last_event, event_id = event_id, None
        if turn.last_type.split(":")[0] in ENDS:
            turn.end = turn.last_type

    async def follow(self, client: httpx2.AsyncClient, turn: Turn) -> None:
        """Follow ``turn`` at its events URL until it ends, re-attaching on a live host from
        the last event seen whenever a stream breaks."""
        deadline = time.monotonic() + FOLLOW_SECONDS
        avoid: str | None = None
        first = not turn.background
        while turn.end is None and time.monotonic() < deadline:
            if first:  # a foreground turn's own stream broke: go to the other host
                avoid, first = turn.runner, False
            host = self.live(avoid)
            path = (
                f"{host.base}/v1/projects/shop/sessions/{turn.session}/turns/{turn.turn_id}/events"
            )
            headers = {"Last-Event-ID": turn.last_event} if turn.last_event else {}
            turn.reattached += 1
            try:
                async with client.stream("GET", path, headers=headers) as r:
                    if r.status_code != 200:
                        self.tally.note(f"follow: {r.status_code}")
                    else:
                        await self.read(r, turn)
            except (httpx2.HTTPError, OSError) as exc:
                self.tally.note(f"follow: {type(exc).__name__}")
            if turn.end is None:
                avoid = host.name
                await asyncio.sleep(0.3)
        if turn.end is None:
            self.tally.note("followed past the deadline")

    async def killer(self) -> None:
        n = 0
        while not self.stop.is_set():
            # kills on a fixed schedule (every kill_every s from the start), whatever a
            # restart took
            due = self.started + (n + 1) * self.args.kill_every - time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), max(due, 0.0))
            if self.stop.is_set():
                return
            victim = self.hosts[n % 2]
            other = self.hosts[(n + 1) % 2]
            n += 1
            if not victim.up or not other.up:
                continue
            running = [
                t for t in self.turns if t.end is None and t.turn_id and t.runner == victim.name
            ]
            victim.kill()
            killed = time.monotonic()
            for t in running:
                t.runner = other.name
                if t.killed_at is None:
                    t.killed_at, t.events_at_kill = killed, t.events
            kill = Kill(killed - self.started, victim.name, len(running))
            self.kills.append(kill)
            await asyncio.to_thread(victim.start)
            kill.restart = victim.starts[-1]
            print(
                f"  {kill.at / 60:5.1f} min: killed {victim.name} ({len(running)} turns running "
                f"there), up again in {kill.restart:.1f} s; {len(self.turns)} turns so far",
                flush=True,
            )

    async def run(self) -> None:
        limits = httpx2.Limits(max_connections=self.args.conversations * 4)
        timeout = httpx2.Timeout(120, connect=10)
        async with httpx2.AsyncClient(timeout=timeout, limits=limits) as client:
            tasks = [
                asyncio.ensure_future(self.conversation(client, n))
                for n in range(self.args.conversations)
            ]
            killer = asyncio.ensure_future(self.killer())
            await asyncio.sleep(self.args.minutes * 60)
            self.stop.set()
            await killer
            await asyncio.gather(*tasks)  # each finishes the turn it follows


# -- the checks ---------------------------------------------------------------------------------


@dataclass
class Findings:
    lines: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    def bad(self, what: str) -> None:
        self.violations.append(what)


def read_ledger(ledger: Path) -> Counter[tuple[str, str]]:
    if not ledger.exists():
        return Counter()
    return Counter(tuple(line.split()[:2]) for line in ledger.read_text().splitlines() if line)  # type: ignore[misc]


async def read_rounds(base: str, sessions: list[str]) -> dict[str, list[dict[str, Any]]]:
    async with httpx2.AsyncClient(base_url=base, timeout=120) as client:
        out = {}
        for sid in sessions:
            r = await client.get(f"/v1/projects/shop/sessions/{sid}")
            r.raise_for_status()
            out[sid] = r.json().get("rounds", [])
        return out


def check_calls(
    rounds: dict[str, list[dict[str, Any]]], ledger: Counter[tuple[str, str]], f: Findings
) -> Counter[str]:
    """Each call against the ledger; how many calls of each outcome."""
    seen: set[str] = set()
    outcome: Counter[str] = Counter()
    for round_ in (r for rs in rounds.values() for r in rs):
        for e in round_.get("events", []):
            if e.get("type") != "tool_result":
                continue
            cid = str(e.get("tool_call_id"))
            kind = _kind(e.get("name", ""))
            seen.add(cid)
            ran = ledger[(kind, cid)]
            most = 2 if kind in IDEMPOTENT else 1
            if str(e.get("summary", "")).startswith(INTERRUPTED):
                what, least = "kept as interrupted", 0
            elif e.get("ok"):
                what, least = "kept", 1
            else:  # a failed call (its tool unavailable, its server gone): it may have run
                what, least = f"failed ({e.get('error_code')})", 0
            outcome[what] += 1
            if what.startswith("failed"):
                f.lines.append(f"call {cid} ({kind}) failed, ran {ran} times: {_short(e)}")
            if ran == 2:
                outcome["ran twice"] += 1
            if not least <= ran <= most:
                f.bad(f"call {cid} ({kind}) ran {ran} times; its result is {_short(e)}")
    for (kind, cid), ran in ledger.items():
        if cid in seen or cid.startswith("warm-"):
            continue
        outcome["ran, no result kept"] += 1
        if ran > (2 if kind in IDEMPOTENT else 1):
            f.bad(f"call {cid} ({kind}) ran {ran} times and no round kept its result")
    return outcome


def _kind(name: str) -> str:
    return next((k for k, tool in TOOLS.items() if tool == name), name)


def _short(event: dict[str, Any]) -> str:
    return json.dumps({k: event.get(k) for k in ("ok", "summary", "error_code")})[:300]


def check_rounds(rounds: dict[str, list[dict[str, Any]]], turns: list[Turn], f: Findings) -> int:
    """Each acknowledged turn that ended done is one done round of its session holding its
    plan's steps once each; how many such turns are missing from their sessions."""
    missing = 0
    for t in turns:
        if t.end != "done":
            continue
        mine = [r for r in rounds.get(t.session, []) if r.get("user") == t.text]
        if not mine:
            missing += 1
            f.bad(f"turn {t.tag} ({t.turn_id}) ended done but its session holds no round of it")
            continue
        if len(mine) > 1:
            f.bad(f"turn {t.tag} is {len(mine)} rounds of its session")
        ids = [
            e.get("tool_call_id")
            for e in mine[0].get("events", [])
            if e.get("type") == "tool_result"
        ]
        want = [f"{t.tag}-{n}" for n in range(1, len(t.plan) + 1)]
        if ids != want:
            f.bad(f"turn {t.tag}: its round's results are {ids}, its plan {want}")
        if mine[0].get("status") != "done":
            f.bad(f"turn {t.tag} ended done; its round is {mine[0].get('status')}")
    return missing


def report(soak: Soak, rounds: dict[str, list[dict[str, Any]]], ledger: Path, model: Model) -> bool:
    """Print the figures; True when every target is met."""
    f = Findings()
    turns = soak.turns
    ends = Counter(t.end or "lost" for t in turns)
    lost = [t for t in turns if t.end is None]
    hit = [t for t in turns if t.killed_at is not None]
    hit_done = [t for t in hit if t.end == "done"]
    outcome = check_calls(rounds, read_ledger(ledger), f)
    missing = check_rounds(rounds, turns, f)
    repeated = sum(n - 1 for n in model.calls.values() if n > 1)
    took_over = sum(h.log.read_text(errors="replace").count("took over turn") for h in soak.hosts)
    print(f"kills: {len(soak.kills)} (SIGKILL, alternately A and B)")
    if soak.kills:
        restarts = [k.restart for k in soak.kills]
        print(f"  a killed host was up again in {statistics.median(restarts):.1f} s (median)")
    print(f"turns acknowledged: {len(turns)}; how they ended: {json.dumps(dict(ends))}")
    print(f"acknowledged turns lost (no done, no clear error): {len(lost)} (target 0)")
    for t in lost[:10]:
        print(f"  lost: {t.tag} turn {t.turn_id} session {t.session}, last event {t.last_type!r}")
    share = 100 * len(hit_done) / len(hit) if hit else 0.0
    print(
        f"turns running on a host when it was killed: {len(hit)}; ended done: {len(hit_done)} "
        f"({share:.1f} %, target >= 99 %); 'took over' in the hosts' logs: {took_over}"
    )
    resumed = sorted(t.resumed_after for t in hit if t.resumed_after is not None)
    if resumed:
        print(
            f"  from the kill to the turn's next event at its client: median "
            f"{statistics.median(resumed):.1f} s, max {resumed[-1]:.1f} s"
        )
    for t in [t for t in hit if t.end != "done"][:10]:
        assert t.killed_at is not None
        kept = [r.get("status") for r in rounds.get(t.session, []) if r.get("user") == t.text]
        print(
            f"  not done: {t.tag} turn {t.turn_id} ({'background' if t.background else 'streamed'}"
            f") ended {t.end!r}; acknowledged {t.killed_at - t.acked_at:.2f} s before the kill, "
            f"{t.events_at_kill} events seen by then; its session keeps rounds {kept} of it"
        )
    steps = sum(len(t.plan) for t in turns)
    print(
        f"tool calls: {steps} planned in acknowledged turns; results kept {outcome.pop('kept', 0)}, "
        f"kept as interrupted {outcome.pop('kept as interrupted', 0)}, ran twice "
        f"{outcome.pop('ran twice', 0)} (idempotent sync: allowed), ran with no result kept "
        f"{outcome.pop('ran, no result kept', 0)}, others {json.dumps(dict(outcome))}; LLM "
        f"calls made again {repeated}"
    )
    for line in f.lines[:10]:
        print(f"  {line}")
    print(f"side-effect and round violations: {len(f.violations)} (target 0)")
    for v in f.violations[:20]:
        print(f"  {v}")
    print(f"client notes (retried): {json.dumps(dict(soak.tally.errors), sort_keys=True)}")
    ok = not lost and not f.violations and not missing and bool(hit) and share >= 99.0
    if not hit:
        print("no turn was running at a kill: nothing was measured (run longer)")
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--kill-every", type=float, default=60.0)
    parser.add_argument("--conversations", type=int, default=8)
    parser.add_argument("--turns-per-session", type=int, default=10)
    parser.add_argument("--keep", action="store_true", help="keep the hosts' logs (printed path)")
    args = parser.parse_args()
    try:
        from memora_plugin_postgres.testing import ClusterUnavailable, temporary_cluster
    except ImportError:
        raise SystemExit("soak_durable needs memora-plugin-postgres (and PostgreSQL)") from None
    tmp = tempfile.mkdtemp(prefix="memora-soak-durable-")
    root = Path(tmp)
    ledger = root / "ledger.txt"
    server_script = root / "ledger_server.py"
    server_script.write_text(LEDGER_SERVER)
    model = Model(ledger)
    hosts: list[Host] = []
    with contextlib.ExitStack() as stack:
        try:
            dsn = stack.enter_context(temporary_cluster({"max_connections": "300"}))
        except ClusterUnavailable as exc:
            raise SystemExit(f"soak_durable needs PostgreSQL: {exc}") from None
        upstream = stack.enter_context(model_server(model))
        home = config_home(root, upstream, server_script, ledger)
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORA_")}
        # unbuffered: a SIGKILLed host's last log lines are what tell what it was doing
        env.update(MEMORA_HOME=str(home), MEMORA_POSTGRES_DSN=dsn, PYTHONUNBUFFERED="1")
        hosts = [Host("a", root, env), Host("b", root, env)]
        for h in hosts:
            stack.callback(h.stop)
            h.start()
        soak = Soak(hosts, args)
        print(
            f"soak_durable: {args.minutes:g} min, {args.conversations} conversations, turns of "
            f"3-10 tool steps, two hosts on one PostgreSQL (turn_executor dbos), one SIGKILLed "
            f"every {args.kill_every:g} s; logs in {root}",
            flush=True,
        )
        asyncio.run(soak.run())
        rounds = asyncio.run(read_rounds(hosts[0].base, soak.sessions))
        ok = report(soak, rounds, ledger, model)
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
