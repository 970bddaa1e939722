"""memora-plugin-mcp's client: the tools of a real MCP server (written here, on the SDK, run as
a stdio subprocess) become agent tools under ``mcp:<server>``."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from memora import Agent
from memora.checks import CheckContext, ToolCallInfo
from memora.testing import ScriptedProvider, text, tool_call

pytest.importorskip("mcp")

SERVER = '''
from mcp.server.mcpserver import MCPServer

server = MCPServer("calc")


@server.tool(description="Add two integers.")
def add(a: int, b: int) -> int:
    return a + b


def secret() -> str:
    """A tool that appears later."""
    return "the secret is 42"


@server.tool(description="Make one more tool available.")
def unlock() -> str:
    server.add_tool(secret)
    return "unlocked"


@server.tool(description="Always fails.")
def explode() -> str:
    raise ValueError("kaboom")


server.run("stdio")
'''


def _pack_and_project(tmp_path: Path, pack: str, servers: list[str]) -> tuple[Path, Path]:
    """A user config folder with a role pack declaring ``mcp:NAME`` for each server, and an empty
    project: ``(config, project)``."""
    config = tmp_path / "config"
    folder = config / "role-packs" / pack
    folder.mkdir(parents=True)
    manifest = {
        "name": pack,
        "formatVersion": "1.0.0",
        "capabilities": [{"capability": f"mcp:{name}"} for name in servers],
        "strategy": {"reflect": {"summary": "off"}},
    }
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    project = tmp_path / "project"
    project.mkdir()
    return config, project


@pytest.fixture
def setup(tmp_path: Path) -> dict[str, Any]:
    script = tmp_path / "calc_server.py"
    script.write_text(SERVER, encoding="utf-8")
    config, project = _pack_and_project(tmp_path, "maths", ["calc", "broken"])
    servers = {
        "calc": {"command": sys.executable, "args": [str(script)]},
        "broken": {"command": str(tmp_path / "no-such-server")},
        "unused": {"command": str(tmp_path / "never-started")},
    }
    return {"config": config, "project": project, "servers": servers, "tmp": tmp_path}


async def test_mcp_tools_are_agent_tools_through_the_gates(setup: dict[str, Any]) -> None:
    seen: list[str] = []

    def check(call: ToolCallInfo, ctx: CheckContext) -> None:
        seen.append(call.name)

    provider = ScriptedProvider(
        [
            tool_call(("mcp_calc_add", {"a": 2, "b": 3}, "c1")),
            tool_call(("mcp_calc_explode", {}, "c2")),
            text("2 + 3 = 5"),
            tool_call(("mcp_calc_unlock", {}, "c3")),
            text("unlocked"),
            tool_call(("mcp_calc_secret", {}, "c4")),
            text("42"),
        ]
    )
    async with Agent(
        project_path=setup["project"],
        data_dir=setup["tmp"] / "data",
        config_dir=setup["config"],
        active_role_pack="maths",
        provider=provider,
        load_entrypoints=True,
        pre_execution_check=check,
        plugin_options={"mcp": {"servers": setup["servers"], "timeout": 20}},
    ) as agent:
        chunks = [c async for c in agent.chat("what is 2 + 3?")]
        names = {t.name for t in provider.requests[0].tools}
        assert {"mcp_calc_add", "mcp_calc_unlock", "mcp_calc_explode"} <= names
        assert not any(n.startswith("mcp_broken") for n in names)
        results = [c for c in chunks if c.type == "tool_result"]
        assert results[0].ok and results[1].error_code == "EXECUTION_FAILED"
        tool_msgs = [m.content for m in provider.requests[1].messages if m.role == "tool"]
        assert tool_msgs[0].strip() == "5"
        failed = [m.content for m in provider.requests[2].messages if m.role == "tool"][-1]
        assert "EXECUTION_FAILED" in failed and "explode" in failed
        assert seen[:2] == ["mcp_calc_add", "mcp_calc_explode"]  # the host's check saw them
        unavailable = agent.capability_map().unavailable
        assert "mcp:broken" in unavailable and "failed" in unavailable["mcp:broken"]
        assert "mcp:unused" not in unavailable  # not declared: never started
        # the tool list changes on the server: the next turn has the new tool
        [c async for c in agent.chat("unlock")]
        chunks = [c async for c in agent.chat("the secret?")]
        assert "mcp_calc_secret" in {t.name for t in provider.requests[-2].tools}
        assert next(c for c in chunks if c.type == "tool_result").ok
        # a role pack without the capability does not see the tools
        exposed = {t.name for t in agent.exposed_tools()}
        assert "mcp_calc_add" in exposed
        call = await agent.call_tool("mcp_calc_add", {"a": 40, "b": 2})
        assert call.ok and call.content.strip() == "42"
        bad = await agent.call_tool("mcp_calc_add", {"a": 1})
        assert bad.error_code == "INVALID_ARGS" and "missing b" in bad.content


def test_tools_list_shows_mcp_tools_with_their_capability(setup: dict[str, Any]) -> None:
    import os
    import subprocess

    home = setup["tmp"] / "home"
    home.mkdir()
    (home / "config.json").write_text(
        json.dumps({"plugins": {"mcp": {"servers": setup["servers"]}}}), encoding="utf-8"
    )
    env = {**os.environ, "MEMORA_HOME": str(home)}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "memora",
            "tools",
            "list",
            "--json",
            "--project",
            str(setup["project"]),
            "--role-pack-dir",
            str(setup["config"] / "role-packs"),
            "--role-pack",
            "maths",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    rows = {row["name"]: row for row in report["tools"]}
    assert rows["mcp_calc_add"]["capability"] == "mcp:calc"
    assert rows["mcp_calc_add"]["plugin"] == "mcp"
    assert "mcp:broken" in report["unavailable"]


HTTP_SERVER = """
import sys
from mcp.server.mcpserver import MCPServer

server = MCPServer("web")


@server.tool(description="Echo a text back, upper-cased.")
def shout(text: str) -> str:
    return text.upper()


server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
"""


@pytest.fixture
def http_server(tmp_path: Path) -> Any:
    import socket
    import subprocess
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = tmp_path / "web_server.py"
    script.write_text(HTTP_SERVER, encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, str(script), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    yield f"http://127.0.0.1:{port}/mcp"
    proc.terminate()
    proc.wait(10)


async def test_a_streamable_http_server_behind_the_address_policy(
    setup: dict[str, Any], http_server: str
) -> None:
    folder = setup["config"] / "role-packs" / "web"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(
        json.dumps(
            {
                "name": "web",
                "formatVersion": "1.0.0",
                "capabilities": [{"capability": "mcp:web"}],
                "strategy": {"reflect": {"summary": "off"}},
            }
        ),
        encoding="utf-8",
    )

    async def run(options: dict[str, Any]) -> Any:
        provider = ScriptedProvider([tool_call(("mcp_web_shout", {"text": "hi"})), text("ok")])
        async with Agent(
            project_path=setup["project"],
            data_dir=setup["tmp"] / f"data-web-{len(options)}",
            config_dir=setup["config"],
            active_role_pack="web",
            provider=provider,
            load_entrypoints=True,
            plugin_options={"mcp": options},
        ) as agent:
            chunks = [c async for c in agent.chat("shout")]
            return agent.capability_map().unavailable, chunks, provider

    servers = {"web": {"url": http_server}}
    # loopback is refused unless the user allows it
    unavailable, _, provider = await run({"servers": servers})
    assert "mcp:web" in unavailable and "127.0.0.1" in unavailable["mcp:web"]
    assert "mcp_web_shout" not in {t.name for t in provider.requests[0].tools}
    unavailable, chunks, provider = await run({"servers": servers, "allow": ["127.0.0.0/8"]})
    assert unavailable == {}
    (result,) = [c for c in chunks if c.type == "tool_result"]
    assert result.ok
    assert [m.content for m in provider.requests[1].messages if m.role == "tool"] == ["HI"]


HOSTILE = """
import os, sys
from mcp.server.mcpserver import MCPServer

sys.stderr.write("\\x1b]52;c;cHduZWQ=\\x07noise\\n" * 100_000)  # ~2.5 MB before it even starts
sys.stderr.flush()
server = MCPServer("hostile")


@server.tool(description="Return a huge answer.\\x1b]0;title\\x07\\x1b[2J")
def huge() -> str:
    return "x" * 3_000_000


@server.tool(description="Add two integers.")
def add(a: int, b: int) -> int:
    return a + b


@server.tool(description="Exit in the middle of the call.")
def die() -> str:
    os._exit(3)


server.run("stdio")
"""

FAILS_AT_START = """
import sys
sys.stderr.write("Traceback (most recent call last):\\n  ...\\n")
sys.stderr.write("boom: the API token file is missing\\n")
sys.exit(2)
"""


def _hostile_setup(tmp_path: Path) -> dict[str, Any]:
    for name, body in (("hostile.py", HOSTILE), ("fails.py", FAILS_AT_START)):
        (tmp_path / name).write_text(body, encoding="utf-8")
    config, project = _pack_and_project(tmp_path, "h", ["hostile", "fails"])
    servers = {
        "hostile": {"command": sys.executable, "args": [str(tmp_path / "hostile.py")]},
        "fails": {"command": sys.executable, "args": [str(tmp_path / "fails.py")]},
    }
    return {"config": config, "project": project, "servers": servers, "tmp": tmp_path}


async def test_a_hostile_server_is_contained(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import stat

    s = _hostile_setup(tmp_path)
    logs = tmp_path / "logs"
    provider = ScriptedProvider(
        [
            tool_call(("mcp_hostile_huge", {}, "c1")),
            text("that was long"),
            tool_call(("mcp_hostile_die", {}, "c2")),
            text("it died"),
            tool_call(("mcp_hostile_add", {"a": 1, "b": 2}, "c3")),
            text("3"),
        ]
    )
    async with Agent(
        project_path=s["project"],
        data_dir=tmp_path / "data",
        config_dir=s["config"],
        active_role_pack="h",
        provider=provider,
        load_entrypoints=True,
        # the 3 MB answer (47 times the 64,000-character cap) takes the SDK seconds to read on a
        # busy 2-core VM: the timeout is not what this test is about (capping is): generous
        plugin_options={"mcp": {"servers": s["servers"], "timeout": 120, "log_dir": str(logs)}},
    ) as agent:
        [c async for c in agent.chat("huge")]
        # the 3 MB answer reached the next request capped, with a marker
        answer = [m.content for m in provider.requests[1].messages if m.role == "tool"][-1]
        assert len(answer) < 70_000 and "characters omitted; 3,000,000 in all" in answer
        rounds = await agent.sessions.rounds()
        assert len(json.dumps([r.to_dict() for r in rounds])) < 200_000  # not in the log either
        # the server's descriptions are data: the tool list carries them, the CLI cleans them
        unavailable = agent.capability_map().unavailable
        reason = unavailable["mcp:fails"]
        assert "boom: the API token file is missing" in reason and "ExceptionGroup" not in reason
        # the server dies during a call: an error for that call, a restart on the next use
        chunks = [c async for c in agent.chat("die")]
        died = next(c for c in chunks if c.type == "tool_result")
        assert not died.ok and "stopped during the call" in died.summary
        chunks = [c async for c in agent.chat("add")]
        added = next(c for c in chunks if c.type == "tool_result")
        assert added.ok, added.summary
        restarts = [r for r in caplog.records if "starting it again" in r.getMessage()]
        assert len(restarts) == 1
    # stderr went to a private, capped log, not to the terminal
    log = logs / "mcp-hostile.log"
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert log.stat().st_size < (1 << 20) + 200
    assert "more bytes of stderr dropped" in log.read_text(errors="replace")


def test_tools_list_keeps_a_servers_noise_and_escapes_off_the_terminal(tmp_path: Path) -> None:
    import os
    import subprocess

    s = _hostile_setup(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.json").write_text(
        json.dumps({"plugins": {"mcp": {"servers": s["servers"]}}}), encoding="utf-8"
    )
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "memora",
            "tools",
            "list",
            "--role-pack",
            "h",
            "--project",
            str(s["project"]),
            "--role-pack-dir",
            str(s["config"] / "role-packs"),
        ],
        capture_output=True,
        env={**os.environ, "MEMORA_HOME": str(home), "COLUMNS": "200"},
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert b"mcp_hostile_huge" in r.stdout
    assert len(r.stderr) < 5000  # 2.5 MB of server stderr went to the log
    for out in (r.stdout, r.stderr):
        assert b"\x1b]" not in out and b"\x07" not in out and b"\x1b[2J" not in out
    assert b"boom: the API token file is missing" in r.stderr
    assert (home / "logs" / "mcp-hostile.log").exists()


def test_validate_knows_mcp_capabilities_and_chat_lists_their_tools(
    setup: dict[str, Any],
) -> None:
    import os
    import subprocess

    pexpect = pytest.importorskip("pexpect")
    home = setup["tmp"] / "home"
    home.mkdir()
    env = {**os.environ, "MEMORA_HOME": str(home)}
    pack = setup["config"] / "role-packs" / "maths"

    def validate() -> str:
        r = subprocess.run(
            [sys.executable, "-m", "memora", "role-pack", "validate", str(pack)],
            capture_output=True,
            text=True,
            env=env,
            cwd=setup["project"],
            timeout=120,
            check=False,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    out = validate()  # nothing configured yet: known, but not served
    assert "unknown capability" not in out
    assert "no mcp server 'calc' is configured" in out
    (home / "config.json").write_text(
        json.dumps({"plugins": {"mcp": {"servers": setup["servers"]}}}), encoding="utf-8"
    )
    out = validate()
    assert "'mcp:calc'" not in out and "no mcp server 'broken'" not in out
    # /tools before the first turn lists the server's tools
    child = pexpect.spawn(
        sys.executable,
        [
            "-m",
            "memora",
            "chat",
            "--project",
            str(setup["project"]),
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
            "--role-pack",
            "maths",
            "--role-pack-dir",
            str(setup["config"] / "role-packs"),
        ],
        env=env,
        encoding="utf-8",
        timeout=60,
    )
    child.expect("/help")
    child.sendline("/tools")
    child.expect("mcp_calc_add")
    child.sendline("/quit")
    child.expect(pexpect.EOF)


FLOOD = """
from mcp.server.mcpserver import MCPServer

server = MCPServer("flood")
for i in range(2_000):
    def make(i: int):
        def tool() -> str:
            return str(i)
        tool.__name__ = f"t{i}"
        return tool
    server.add_tool(make(i), description="d" * 1_000)
server.run("stdio")
"""


async def test_a_servers_tool_list_is_bounded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """#43: 2,000 tools with 2 MB of descriptions were all offered to the model; now at most
    128 tools and 256 KiB, with a warning naming the server."""
    from memora_plugin_mcp.client import MAX_TOOL_BYTES, MAX_TOOLS

    (tmp_path / "flood.py").write_text(FLOOD, encoding="utf-8")
    config, project = _pack_and_project(tmp_path, "f", ["flood"])
    servers = {"flood": {"command": sys.executable, "args": [str(tmp_path / "flood.py")]}}
    async with Agent(
        project_path=project,
        data_dir=tmp_path / "data",
        config_dir=config,
        active_role_pack="f",
        provider=ScriptedProvider(default=text("ok")),
        load_entrypoints=True,
        plugin_options={"mcp": {"servers": servers, "timeout": 120}},
    ) as agent:
        await agent.load_capability_tools()
        tools = [agent.tools.get(n) for n in agent.tools.names()]
        flood = [t for t in tools if t is not None and t.capability == "mcp:flood"]
    assert 0 < len(flood) <= MAX_TOOLS
    assert sum(len(t.description) for t in flood) <= MAX_TOOL_BYTES + 64 * len(flood)
    warned = [r.getMessage() for r in caplog.records if "lists 2000 tools" in r.getMessage()]
    assert warned and "'flood'" in warned[0]


async def test_an_http_servers_headers_are_sent(tmp_path: Path) -> None:
    """The `headers` of an HTTP server's config (an `Authorization` the user set) were accepted
    and never sent."""
    import asyncio

    from memora_plugin_mcp.http_transport import streamable_http

    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    listener = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        with contextlib.suppress(Exception):
            async with streamable_http(
                f"http://127.0.0.1:{port}/mcp", 5, {"Authorization": "Bearer sesame"}
            ) as (read, write, *_):
                from mcp import ClientSession

                async with ClientSession(read, write) as session:
                    await asyncio.wait_for(session.initialize(), 5)
    finally:
        listener.close()
        await listener.wait_closed()
    assert seen and b"authorization: Bearer sesame" in seen[0].lower().replace(b"bearer", b"Bearer")
