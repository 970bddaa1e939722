"""`memora mcp serve`, driven by the official MCP SDK's own client over a real stdio subprocess."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from memora import Agent
from memora.memory.types import NewMemory
from memora.testing import ScriptedProvider, text

mcp = pytest.importorskip("mcp")
from mcp import Client, StdioServerParameters  # noqa: E402


async def _project(tmp_path: Path) -> Path:
    project = tmp_path / "proj"
    project.mkdir()
    packs = project / ".memora" / "role-packs" / "helper"
    packs.mkdir(parents=True)
    (packs / "manifest.json").write_text(
        json.dumps({"name": "helper", "formatVersion": "1.0.0", "description": "Helps"}),
        encoding="utf-8",
    )
    async with Agent(
        project_path=project,
        data_dir=project / ".memora" / "data",
        provider=ScriptedProvider(default=text("The schema has three tables.")),
        load_entrypoints=False,
        strategy_override={"reflect": {"summary": "off"}},
    ) as agent:
        [c async for c in agent.chat("How many tables does the schema have?")]
        await agent.memory.write(
            NewMemory("长期记忆由每一轮的摘要组成 (memory is made of round summaries)")
        )
    return project


def _text(result: Any) -> Any:
    assert not result.is_error, result
    structured = getattr(result, "structured_content", None)
    if structured is not None:
        return structured.get("result", structured)
    return json.loads(result.content[0].text)


async def test_an_mcp_client_reads_the_memory_and_cannot_write(tmp_path: Path) -> None:
    project = await _project(tmp_path)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memora", "mcp", "serve", "--project", str(project)],
        env={"MEMORA_HOME": str(tmp_path / "home"), "PATH": os.environ.get("PATH", "")},
    )
    async with Client(params) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == {"memory_search", "memory_stats", "recent_rounds", "role_packs"}
        hits = _text(await client.call_tool("memory_search", {"query": "记忆 摘要"}))
        assert hits and "round summaries" in hits[0]["content"]
        stats = _text(await client.call_tool("memory_stats", {}))
        assert stats["memories"] == 1 and stats["sessions"] == 1
        rounds = _text(await client.call_tool("recent_rounds", {"limit": 5}))
        assert rounds[0]["user"] == "How many tables does the schema have?"
        assert rounds[0]["assistant"] == "The schema has three tables."
        packs = _text(await client.call_tool("role_packs", {}))
        assert "helper" in {p["name"] for p in packs}
        refused = await client.call_tool("memory_write", {"content": "x"})
        assert refused.is_error
        bad = await client.call_tool("memory_search", {"query": "  "})
        # the server's own message, not "Error executing tool" and a traceback on its stderr
        assert bad.is_error and "query must not be empty" in bad.content[0].text
    # nothing was written: still one memory
    async with Client(params) as client:
        assert _text(await client.call_tool("memory_stats", {}))["memories"] == 1


def test_serve_without_data_says_so(tmp_path: Path) -> None:
    import subprocess

    r = subprocess.run(
        [sys.executable, "-m", "memora", "mcp", "serve", "--project", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 1 and "no memora data" in r.stderr


async def test_mcp_serve_reads_as_the_scope_it_is_given(tmp_path: Path) -> None:
    """`memora mcp serve --scope alice`: alice's memories, rounds and sessions with the
    project's; without --scope, the project's only; never bob's."""
    project = tmp_path / "proj"
    project.mkdir()
    data = project / ".memora" / "data"
    for user, said in (("alice", "my harbor pass is 4711"), ("bob", "my harbor pass is 9999")):
        async with Agent(
            project_path=project,
            data_dir=data,
            provider=ScriptedProvider(default=text("noted")),
            load_entrypoints=False,
            memory_scope=user,
        ) as agent:
            [c async for c in agent.chat(said)]
            await agent.idle()
    async with Agent(
        project_path=project,
        data_dir=data,
        load_entrypoints=False,
        provider=ScriptedProvider(default=text("ok")),
    ) as owner:
        await owner.memory.write(NewMemory("the harbor opens at six"))

    def params(*extra: str) -> StdioServerParameters:
        return StdioServerParameters(
            command=sys.executable,
            args=["-m", "memora", "mcp", "serve", "--project", str(project), *extra],
            env={"MEMORA_HOME": str(tmp_path / "home"), "PATH": os.environ.get("PATH", "")},
        )

    async with Client(params("--scope", "alice")) as client:
        hits = _text(await client.call_tool("memory_search", {"query": "harbor", "limit": 20}))
        contents = " ".join(h["content"] for h in hits)
        assert "4711" in contents and "six" in contents and "9999" not in contents
        stats = _text(await client.call_tool("memory_stats", {}))
        assert stats["memories"] == 2 and stats["sessions"] == 1
        rounds = _text(await client.call_tool("recent_rounds", {"limit": 10}))
        assert [r["user"] for r in rounds] == ["my harbor pass is 4711"]
    async with Client(params()) as client:
        hits = _text(await client.call_tool("memory_search", {"query": "harbor", "limit": 20}))
        assert [h["content"] for h in hits] == ["the harbor opens at six"]
        assert _text(await client.call_tool("recent_rounds", {"limit": 10})) == []
