"""What bench/soak_durable.py found in durable turns (#71 item 4), each as a reproduction that
runs alone (``pytest tests/plugins/server/test_durable_soak_findings.py``; one not fixed yet is a
strict xfail: ``--runxfail`` shows it fail).  Findings 1 and 2 were fixed in a145530.

1. An acknowledged turn is lost when its host dies before the turn's first step is journaled.
   ``POST .../turns`` answers (202 for ``background: true``, the stream's headers otherwise) as
   soon as the turn's task is made; the turn's DBOS workflow is started later, in that task,
   after the turn is made ready (its capability tools loaded — an MCP server started and
   asked for its tools — and its pinned memories read).  A host SIGKILLed in between leaves no
   workflow: no worker takes the turn over, and its followers are told ``TURN_LOST`` after
   the take-over grace (30 s).  Here the window is widened by an MCP server that takes 5 s to
   start; in the soak it was the few milliseconds of a warm host.

2. A turn taken over by a worker that had not opened its session loses its capability tools.
   ``Agent.take_over`` rebuilds the turn from its journal (``_restore_running``) without loading
   the tools of the role pack's capabilities (``exposure.load_capability_tools``, which a new
   turn's ``chat_turn`` does): every later call to an MCP tool ends ``NOT_AVAILABLE`` ("there is
   no tool named ... here") and the model is offered none of them.  In the soak: a few turns a
   3-minute run, each one the taken-over turn of a session the other host had not served yet.

3. (memora-plugin-mcp, met on the way) An MCP server's first start is not safe against
   concurrent first uses: ``_Server.start`` has no lock, so a second caller that arrives while
   the first is starting the server finds it "tried and not running" and resets it — closing
   the connection the first is about to use (``MCPError: Connection closed``) — and starts a
   second process.  In `memora serve`, several sessions' first turns at once: one of them runs
   with no MCP tools (its capability "unavailable").  The soak warms each host up with one
   turn before sending it clients.

4. A turn whose workflow ended on a host killed before it wrote the turn's ``done`` is told
   ``TURN_LOST`` — "the session is as it was before the turn" — though its round is kept,
   ``done``, in the session.  Between the end of the turn's workflow (its round stored, the
   workflow ended and out of the journal) and the ``done`` event, the server settles the session (``_drive``:
   ``_share_outcome``, then the last batch of events and the turn's end); the journal has no
   unfinished workflow there, so no worker takes the turn over, and its followers wait out the
   grace.  In the 30-minute soak: 1 of 105 turns running at a kill (its client had seen 110
   events; its session keeps the round, ``done``).  Here the window is held open by a lock on
   the session's row, taken while the turn's last LLM call streams.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx2
import pytest

from tests.core.test_chat_cli import Script, call, say, server  # noqa: F401
from tests.plugins.server.test_hosts import Host
from tests.plugins.server.test_workers import _events, _free_port

from .conftest import scripted_home

pytestmark = pytest.mark.slow

pytest.importorskip("dbos")
pytest.importorskip("mcp")

SLOW_MCP_SERVER = textwrap.dedent(
    """
    import time
    time.sleep(5)  # a server slow to start: the turn waits for its tools before its first step
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("slow")

    @server.tool(description="Does nothing.")
    def noop() -> str:
        return "nothing done"

    server.run("stdio")
    """
)


class _Host:
    """`memora serve` of its own copy of the project, told where the user's role packs are."""

    def __init__(self, name: str, root: Path, env: dict[str, str]) -> None:
        project = root / name / "shop"
        project.mkdir(parents=True)
        self.base = f"http://127.0.0.1:{_free_port()}"
        self.log = root / f"{name}.log"
        args = ["serve", "--project", str(project), "--port", self.base.rsplit(":", 1)[1]]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "memora", *args, "--config-dir", env["MEMORA_HOME"]],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def wait(self) -> None:
        for _ in range(600):
            try:
                if httpx2.get(self.base + "/ready", timeout=2).status_code == 200:
                    return
            except httpx2.TransportError:
                pass
            assert self.proc.poll() is None, self.log.read_text()
            time.sleep(0.1)
        raise AssertionError("did not start")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def _two_hosts(
    tmp_path: Path, url: str, pg_dsn: str, server_code: str, name: str
) -> tuple[_Host, _Host]:
    """Hosts A and B on one PostgreSQL with durable turns, full-auto approvals, and a role pack
    whose capability ``mcp:NAME`` is the MCP server ``server_code`` (ready, both)."""
    mcp_server = tmp_path / f"{name}_server.py"
    mcp_server.write_text(server_code)
    env = scripted_home(
        tmp_path,
        url,
        storage="postgres",
        plugins={
            "postgres": {"namespace": f"{name}-{os.getpid()}-{time.time_ns()}"},
            "mcp": {"servers": {name: {"command": sys.executable, "args": [str(mcp_server)]}}},
        },
        turn_executor="dbos",
        approvals="full-auto",
        options={"active_role_pack": name},
    )
    pack = tmp_path / "home" / "role-packs" / name
    pack.mkdir(parents=True)
    manifest = {
        "name": name,
        "formatVersion": "1.0.0",
        "capabilities": [{"capability": f"mcp:{name}"}],
        "strategy": {"reflect": {"summary": "off"}},
    }
    (pack / "manifest.json").write_text(json.dumps(manifest))
    env["MEMORA_POSTGRES_DSN"] = pg_dsn
    a, b = _Host("a", tmp_path, env), _Host("b", tmp_path, env)
    try:
        a.wait()
        b.wait()
    except BaseException:
        a.stop()
        b.stop()
        raise
    return a, b


def test_a_background_turn_acknowledged_then_its_host_killed_before_its_first_step(
    server: tuple[str, Script],  # noqa: F811
    pg_dsn: str,
    tmp_path: Path,
) -> None:
    url, script = server
    a, b = _two_hosts(tmp_path, url, pg_dsn, SLOW_MCP_SERVER, "slow")
    try:
        sessions = "/v1/projects/shop/sessions"
        sid = httpx2.post(a.base + sessions, json={}, timeout=60).json()["id"]
        # twice: A may have begun the LLM call before it was killed (B makes it again)
        script.answers += [say("answered after all"), say("answered after all")]
        started = httpx2.post(
            f"{a.base}{sessions}/{sid}/turns",
            json={"text": "hello", "background": True},
            timeout=60,
        )
        assert started.status_code == 202, started.text  # acknowledged: it runs unattended
        # at once: before a145530 the turn was then still waiting for its MCP server, before
        # its workflow was started (no LLM call had begun); now the 202 comes once it is
        a.proc.kill()
        a.proc.wait()
        with (
            httpx2.Client(base_url=b.base, timeout=120) as cb,
            cb.stream("GET", started.json()["events"]) as follower,
        ):
            chunks = [chunk for _, chunk in _events(follower.iter_lines())]
        # before a145530 (what the soak saw): {"type": "error", "code": "TURN_LOST"} after 30 s
        assert chunks[-1]["type"] == "done", chunks[-3:]
        assert chunks[-1]["answer"] == "answered after all"
    finally:
        a.stop()
        b.stop()


MCP_SERVER = textwrap.dedent(
    """
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("fast")

    @server.tool(description="Says which step it is.")
    def step(n: int) -> str:
        return f"step {n} done"

    server.run("stdio")
    """
)


def test_a_turn_taken_over_keeps_its_mcp_tools(
    server: tuple[str, Script],  # noqa: F811
    pg_dsn: str,
    tmp_path: Path,
) -> None:
    url, script = server
    a, b = _two_hosts(tmp_path, url, pg_dsn, MCP_SERVER, "fast")
    try:
        sessions = "/v1/projects/shop/sessions"
        sid = httpx2.post(a.base + sessions, json={}, timeout=60).json()["id"]
        script.answers += [
            call("mcp_fast_step", {"n": 1}, "m1"),
            say("still thinking " * 300, delay=0.05),  # host A dies in this LLM call
            call("mcp_fast_step", {"n": 2}, "m2"),
            say("both steps done"),
        ]
        started = httpx2.post(
            f"{a.base}{sessions}/{sid}/turns",
            json={"text": "two steps", "background": True},
            timeout=60,
        )
        assert started.status_code == 202, started.text
        for _ in range(600):  # the second LLM call has begun on A: step 1 is journaled
            if len([q for q in script.requests if q.get("stream")]) >= 2:
                break
            time.sleep(0.05)
        a.proc.kill()
        a.proc.wait()
        with (
            httpx2.Client(base_url=b.base, timeout=120) as cb,
            cb.stream("GET", started.json()["events"]) as follower,
        ):
            chunks = [chunk for _, chunk in _events(follower.iter_lines())]
        assert chunks[-1]["type"] == "done", chunks[-3:]
        results = {c["tool_call_id"]: c for c in chunks if c["type"] == "tool_result"}
        # before a145530, B went on without the MCP tools: {"ok": false, "error_code":
        # "NOT_AVAILABLE", "summary": "NOT_AVAILABLE: there is no tool named 'mcp_fast_step' here"}
        assert results["m2"]["ok"], json.dumps(results["m2"])
        # and the model was offered them again after the take-over
        offered = [t["function"]["name"] for t in script.requests[-1].get("tools", [])]
        assert "mcp_fast_step" in offered
    finally:
        a.stop()
        b.stop()


NOOP_SERVER = textwrap.dedent(
    """
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("x")

    @server.tool(description="Does nothing.")
    def noop() -> str:
        return "nothing done"

    server.run("stdio")
    """
)


async def test_concurrent_first_uses_of_an_mcp_server_all_get_its_tools(tmp_path: Path) -> None:
    from memora_plugin_mcp.client import McpToolSource

    script = tmp_path / "x_server.py"
    script.write_text(NOOP_SERVER)
    source = McpToolSource(
        servers={"x": {"command": sys.executable, "args": [str(script)]}},
        log_dir=tmp_path / "logs",
        timeout=60,
    )
    try:
        listed = await asyncio.gather(
            *(source.tools("mcp:x") for _ in range(3)), return_exceptions=True
        )
    finally:
        await source.aclose()
    # today: [RuntimeError("MCP server 'x' failed: MCPError: Connection closed"), [...], [...]]
    assert all(not isinstance(r, BaseException) for r in listed), listed
    assert [[t.name for t in r] for r in listed] == [["mcp_x_noop"]] * 3


def test_a_turn_whose_workflow_ended_before_its_host_died_ends_done(
    server: tuple[str, Script],  # noqa: F811
    pg_dsn: str,
    tmp_path: Path,
) -> None:
    import psycopg
    from dbos import DBOSClient

    from memora_plugin_dbos.executor import system_database_url

    url, script = server
    env = scripted_home(
        tmp_path,
        url,
        storage="postgres",
        plugins={"postgres": {"namespace": f"finding4-{os.getpid()}-{time.time_ns()}"}},
        turn_executor="dbos",
        approvals="full-auto",
    )
    env["MEMORA_POSTGRES_DSN"] = pg_dsn
    a, b = Host("a", tmp_path, env), Host("b", tmp_path, env)
    journal = DBOSClient(
        system_database_url=system_database_url(
            {"storage": "postgres", "storage_options": {"dsn": pg_dsn}}
        )
    )
    try:
        a.wait()
        b.wait()
        sessions = "/v1/projects/shop/sessions"
        sid = a.request("POST", sessions, json={}).json()["id"]
        script.answers.append(say("the answer " * 20, delay=0.05))
        started = a.request(
            "POST", f"{sessions}/{sid}/turns", json={"text": "hello", "background": True}
        )
        assert started.status_code == 202, started.text
        for _ in range(600):  # the turn's LLM call streams on A
            if [q for q in script.requests if q.get("stream")]:
                break
            time.sleep(0.05)
        with psycopg.connect(pg_dsn) as lock:
            # the session's row held: A's turn ends its workflow, then waits to settle the
            # session before it writes `done`
            lock.execute(
                "SELECT 1 FROM memora_server_sessions WHERE session_id = %s FOR UPDATE", (sid,)
            )
            seen = ended = False
            for _ in range(600):  # its workflow ran and ended (an ended one leaves the journal)
                mine = [
                    w.status
                    for w in journal.list_workflows(load_input=False, load_output=False)
                    if f"memora:{sid}:" in w.workflow_id
                ]
                seen = seen or bool(mine)
                ended = seen and mine in ([], ["SUCCESS"])
                if ended:
                    break
                time.sleep(0.05)
            assert ended, "the turn's workflow did not end while the session's row was held"
            a.proc.kill()
            a.proc.wait()
            lock.rollback()
        rounds = b.request("GET", f"{sessions}/{sid}").json()["rounds"]
        assert [r["status"] for r in rounds] == ["done"]  # the turn's round is kept
        with (
            httpx2.Client(base_url=b.base, timeout=120) as cb,
            cb.stream("GET", started.json()["events"]) as follower,
        ):
            chunks = [chunk for _, chunk in _events(follower.iter_lines())]
        # today, after the 30 s grace: {"type": "error", "code": "TURN_LOST", "message": "the
        # worker running this turn stopped; the session is as it was before the turn"}
        assert chunks[-1]["type"] == "done", chunks[-1]
    finally:
        journal.destroy()
        a.stop()
        b.stop()
