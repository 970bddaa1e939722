"""memora-plugin-mcp's client: the tools of a real MCP server (written here, on the SDK, run as
a stdio subprocess) become agent tools under ``mcp:<server>``."""

from __future__ import annotations

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


@pytest.fixture
def setup(tmp_path: Path) -> dict[str, Any]:
    script = tmp_path / "calc_server.py"
    script.write_text(SERVER, encoding="utf-8")
    config = tmp_path / "config"
    folder = config / "role-packs" / "maths"
    folder.mkdir(parents=True)
    manifest = {
        "name": "maths",
        "formatVersion": "1.0.0",
        "capabilities": [{"capability": "mcp:calc"}, {"capability": "mcp:broken"}],
        "strategy": {"reflect": {"summary": "off"}},
    }
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    project = tmp_path / "project"
    project.mkdir()
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
