"""The capability plugins together: web search (ddgs, its HTTP layer faked), web fetch (a real
server on 127.0.0.1), the code sandbox and OpenTelemetry, reaching the model only through the
capability map and the pre-execution check."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from memora import Agent, hookimpl
from memora.checks import CheckContext, Deny, ToolCallInfo
from memora.testing import ScriptedProvider, text, tool_call
from tests.loopback import QuietHTTPServer

pytest.importorskip("ddgs")
pytest.importorskip("opentelemetry.sdk")
from ddgs.http_client import HttpClient
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

PAGE = (
    "<html><head><title>Release notes</title></head><body><article><h1>Release notes</h1>"
    + "<p>memora 0.1 ships a step machine for turns and four capability plugins.</p>" * 5
    + "</article></body></html>"
)


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        body = PAGE.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def site() -> Iterator[str]:
    httpd = QuietHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


class _Resp:
    status_code = 200
    content = b""

    def __init__(self, text: str) -> None:
        self.text = text


@pytest.fixture
def search_engine(monkeypatch: pytest.MonkeyPatch, site: str) -> list[str]:
    """ddgs's HTTP layer answers with one result pointing at the local site."""
    seen: list[str] = []
    page = (
        f'<div class="links_main result__body"><h2><a href="{site}/notes">Release notes</a></h2>'
        f'<a class="result__snippet" href="{site}/notes">memora release notes</a></div>'
    )

    def request(self: Any, method: str, url: str, **kwargs: Any) -> _Resp:
        seen.append(str(kwargs.get("data", {}).get("q")))
        return _Resp(f"<html><body>{page}</body></html>")

    monkeypatch.setattr(HttpClient, "request", request)
    return seen


def write_pack(config: Path, name: str, capabilities: list[str]) -> None:
    folder = config / "role-packs" / name
    folder.mkdir(parents=True)
    manifest = {
        "name": name,
        "formatVersion": "1.0.0",
        "capabilities": [{"capability": c} for c in capabilities],
        "strategy": {"reflect": {"summary": "off"}},
    }
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


@pytest.fixture
def config(tmp_path: Path) -> Path:
    root = tmp_path / "config"
    write_pack(root, "researcher", ["web:search", "web:fetch", "code:execute"])
    write_pack(root, "writer", [])
    return root


@pytest.fixture
def project(tmp_path: Path) -> Path:
    p = tmp_path / "project"
    p.mkdir()
    return p


def names(request: Any) -> set[str]:
    return {t.name for t in request.tools}


async def test_a_declared_capability_without_its_plugin_stays_hidden_with_one_warning(
    project: Path, config: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    provider = ScriptedProvider(default=text("ok"))
    with caplog.at_level(logging.WARNING, logger="memora.capabilities"):
        async with Agent(
            project_path=project,
            data_dir=tmp_path / "d1",
            config_dir=config,
            active_role_pack="researcher",
            provider=provider,
            load_entrypoints=False,
        ) as agent:
            [c async for c in agent.chat("q")]
            [c async for c in agent.chat("q again")]
    assert not names(provider.requests[0]) & {"web_search", "web_fetch", "run_code"}
    warned = [r for r in caplog.records if "web:search" in r.getMessage()]
    assert len(warned) == 1 and "no installed plugin provides" in warned[0].getMessage()


async def test_with_the_plugins_the_tools_appear_and_a_pack_switch_removes_them(
    project: Path, config: Path, tmp_path: Path
) -> None:
    provider = ScriptedProvider(default=text("ok"))
    async with Agent(
        project_path=project,
        data_dir=tmp_path / "d2",
        config_dir=config,
        active_role_pack="researcher",
        provider=provider,
        load_entrypoints=True,
    ) as agent:
        [c async for c in agent.chat("q")]
        assert {"web_search", "web_fetch", "run_code"} <= names(provider.requests[-1])
        agent.role_pack.activate("writer")
        [c async for c in agent.chat("q")]
        assert not names(provider.requests[-1]) & {"web_search", "web_fetch", "run_code"}


class NoCode:
    """A plugin's pre-execution check that refuses code execution."""

    @hookimpl
    def pre_execution_check(self, call: ToolCallInfo, context: CheckContext) -> Deny | None:
        return Deny("no code on this machine") if call.name == "run_code" else None


async def test_a_plugin_check_denying_run_code_blocks_it(
    project: Path, config: Path, tmp_path: Path
) -> None:
    provider = ScriptedProvider(
        [tool_call(("run_code", {"code": "open('pwned', 'w')"})), text("fine")]
    )
    async with Agent(
        project_path=project,
        data_dir=tmp_path / "d3",
        config_dir=config,
        active_role_pack="researcher",
        provider=provider,
        load_entrypoints=True,
        plugins=[("no-code", NoCode())],
    ) as agent:
        chunks = [c async for c in agent.chat("run it")]
    (result,) = [c for c in chunks if c.type == "tool_result"]
    assert result.blocked and not result.ok
    assert "tool_start" not in [c.type for c in chunks]
    assert "no-code" in provider.requests[1].messages[-1].content


async def test_the_four_plugins_in_one_turn(
    project: Path, config: Path, tmp_path: Path, site: str, search_engine: list[str]
) -> None:
    exporter = InMemorySpanExporter()
    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(exporter))
    provider = ScriptedProvider(
        [
            tool_call(
                ("web_search", {"query": "memora release notes"}, "s1"),
                ("web_fetch", {"url": f"{site}/notes"}, "f1"),
            ),
            tool_call(("run_code", {"code": "print(sum(range(10)))"}, "c1")),
            text("memora 0.1 ships a step machine; the sum is 45."),
        ]
    )
    async with Agent(
        project_path=project,
        data_dir=tmp_path / "d4",
        config_dir=config,
        active_role_pack="researcher",
        provider=provider,
        load_entrypoints=True,
        plugin_options={
            "fetch": {"allow": ["127.0.0.0/8"]},
            "otel": {"tracer_provider": tracing},
        },
    ) as agent:
        chunks = [c async for c in agent.chat("what is new in memora, and what is sum(range(10))?")]
    results = {c.tool_call_id: c for c in chunks if c.type == "tool_result"}
    assert all(r.ok for r in results.values()), results
    assert search_engine == ["memora release notes"]
    tool_messages = {
        m.tool_call_id: m.content for m in provider.requests[2].messages if m.role == "tool"
    }
    assert f"{site}/notes" in tool_messages["s1"]
    assert "step machine" in tool_messages["f1"] and "# Release notes" in tool_messages["f1"]
    assert "45" in tool_messages["c1"] and "isolation" in tool_messages["c1"]
    assert chunks[-1].type == "done"
    spans = exporter.get_finished_spans()
    (turn,) = [s for s in spans if s.name.startswith("invoke_agent")]
    tools = sorted(s.name for s in spans if s.name.startswith("execute_tool"))
    assert tools == ["execute_tool run_code", "execute_tool web_fetch", "execute_tool web_search"]
    assert len([s for s in spans if s.name.startswith("chat")]) == 3
    assert all(
        s.parent is not None and s.parent.span_id == turn.context.span_id
        for s in spans
        if s is not turn
    )
