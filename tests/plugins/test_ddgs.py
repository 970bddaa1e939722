"""memora-plugin-ddgs: ddgs's real engines and parsers, with its HTTP layer faked (the tests never
reach the internet)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from memora import Agent
from memora.errors import PluginError, ToolError, ToolErrorCode
from memora.plugins import create_plugin_manager
from memora.testing import ScriptedProvider, text, tool_call

ddgs = pytest.importorskip("ddgs")
from ddgs.exceptions import RatelimitException, TimeoutException  # noqa: E402
from ddgs.http_client import HttpClient  # noqa: E402

from memora_plugin_ddgs import DdgsSearch  # noqa: E402


def ddg_page(results: list[tuple[str, str, str]]) -> str:
    """A page shaped like html.duckduckgo.com's answer."""
    items = "".join(
        f"""<div class="result results_links web-result"><div class="links_main result__body">
        <h2 class="result__title"><a class="result__a" href="{url}">{title}</a></h2>
        <a class="result__snippet" href="{url}">{snippet}</a></div></div>"""
        for title, url, snippet in results
    )
    return f"<html><body><div id='links'>{items}</div></body></html>"


class FakeResponse:
    def __init__(self, status: int, body: str) -> None:
        self.status_code = status
        self.text = body
        self.content = body.encode()


class FakeWeb:
    """Stands in for ddgs's HTTP client (``HttpClient.request``)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.answer: Any = FakeResponse(
            200,
            ddg_page(
                [
                    ("Memora agent kernel", "https://example.org/memora", "memora is a kernel"),
                    ("记忆 内核", "https://example.cn/jiyi", "中文 结果 memora"),
                    ("Another memora page", "https://example.net/more", "more about memora"),
                ]
            ),
        )

    def request(self, client: Any, method: str, url: str, **kwargs: Any) -> Any:
        self.requests.append({"method": method, "url": url, **kwargs})
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


@pytest.fixture
def web(monkeypatch: pytest.MonkeyPatch) -> FakeWeb:
    fake = FakeWeb()
    monkeypatch.setattr(HttpClient, "request", lambda self, *a, **k: fake.request(self, *a, **k))
    return fake


async def test_results_are_parsed_by_ddgs_and_options_reach_the_engine(web: FakeWeb) -> None:
    search = DdgsSearch(region="uk-en")
    hits = await search.search("memora", max_results=2, timelimit="w")
    assert len(hits) == 2
    assert {h.url for h in hits} <= {
        "https://example.org/memora",
        "https://example.cn/jiyi",
        "https://example.net/more",
    }
    assert all(h.title and h.snippet for h in hits)
    (req,) = web.requests
    assert urlparse(req["url"]).hostname == "html.duckduckgo.com"
    assert req["data"]["q"] == "memora" and req["data"]["l"] == "uk-en"
    assert req["data"]["df"] == "w"
    hits = await search.search("记忆", region="cn-zh")
    assert web.requests[-1]["data"]["l"] == "cn-zh"
    assert any(h.title == "记忆 内核" for h in hits)


async def test_no_results_is_an_empty_list(web: FakeWeb) -> None:
    web.answer = FakeResponse(200, "<html><body>No results.</body></html>")
    assert await DdgsSearch().search("nothing here") == []


@pytest.mark.parametrize(
    ("failure", "code"),
    [
        (RatelimitException("429 ratelimit"), ToolErrorCode.RATE_LIMITED),
        (TimeoutException("request timed out"), ToolErrorCode.TIMEOUT),
        (ConnectionError("connection refused"), ToolErrorCode.NETWORK_ERROR),
    ],
)
async def test_failures_are_tool_errors_with_advice(
    web: FakeWeb, failure: BaseException, code: ToolErrorCode
) -> None:
    web.answer = failure
    with pytest.raises(ToolError) as info:
        await DdgsSearch(timeout=2).search("memora")
    assert info.value.code == code
    assert "again" in info.value.message or "wait" in info.value.message


async def test_bad_options_are_refused_clearly(web: FakeWeb) -> None:
    plugins = create_plugin_manager()
    with pytest.raises(PluginError, match="unknown ddgs option"):
        plugins.create("web_search", "ddgs", {"regoin": "us-en"})
    with pytest.raises(PluginError, match="safesearch must be one of"):
        plugins.create("web_search", "ddgs", {"safesearch": "strict"})
    with pytest.raises(ToolError) as info:
        await DdgsSearch().search("x", timelimit="decade")
    assert info.value.code == ToolErrorCode.INVALID_ARGS


def _write_pack(config: Path, name: str, capabilities: list[str], limit: int = 5) -> None:
    folder = config / "role-packs" / name
    folder.mkdir(parents=True)
    manifest = {
        "name": name,
        "formatVersion": "1.0.0",
        "capabilities": [{"capability": c} for c in capabilities],
        "strategy": {"global": {"webSearchLimit": limit}, "reflect": {"summary": "off"}},
    }
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


async def test_through_an_agent_cached_per_turn_and_capped(web: FakeWeb, tmp_path: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    config = tmp_path / "config"
    _write_pack(config, "researcher", ["web:search"], limit=2)
    same = {"query": "memora kernel"}
    provider = ScriptedProvider(
        [
            tool_call(("web_search", same, "s1")),
            tool_call(("web_search", same, "s2")),  # the same query again: served from cache
            tool_call(("web_search", {"query": "other"}, "s3")),  # over the cap of 2: blocked
            text("found it"),
            tool_call(("web_search", same, "s4")),  # a new turn: a new request
            text("again"),
        ]
    )
    async with Agent(
        project_path=project,
        data_dir=tmp_path / "data",
        config_dir=config,
        active_role_pack="researcher",
        provider=provider,
        load_entrypoints=True,
    ) as agent:
        chunks = [c async for c in agent.chat("search")]
        names = {t.name for t in provider.requests[0].tools}
        assert "web_search" in names
        results = [c for c in chunks if c.type == "tool_result"]
        assert [r.ok for r in results] == [True, True, False]
        assert results[2].blocked
        assert len(web.requests) == 1
        assert "example.org/memora" in provider.requests[1].messages[-1].content
        chunks = [c async for c in agent.chat("search again")]
        assert len(web.requests) == 2
