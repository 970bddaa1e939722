"""Plugins seen from a live Agent: wrappers in a turn, registration after init(), lazy services."""

from __future__ import annotations

from typing import Any

from memora import hookimpl
from memora.checks import Deny
from memora.testing import ScriptedProvider, text, tool_call
from tests.agent.conftest import collect
from tests.core.test_plugin_isolation import Wrappers


async def test_wrapper_check_in_a_real_turn(make_agent: Any) -> None:
    wrappers = Wrappers()
    provider = ScriptedProvider([tool_call(("run_command", {"command": "ls"})), text("done")])
    agent = await make_agent(provider, plugins=[wrappers])
    chunks = await collect(agent.chat("go"))
    result = next(c for c in chunks if c.type == "tool_result")
    assert result.blocked and "the wrapper says no" in result.summary  # type: ignore[union-attr]
    assert chunks[-1].type == "done"


async def test_plugin_registered_after_init_is_fully_effective(make_agent: Any) -> None:
    from memora import tool

    @tool(idempotency="read-only")
    async def late_echo(ctx: Any, word: str) -> str:
        """Echo a word."""
        return f"echo: {word}"

    class Search:
        def __init__(self) -> None:
            self.queries: list[str] = []

        async def search(self, query: str, *, max_results: int = 5) -> list[Any]:
            from memora.services import SearchHit

            self.queries.append(query)
            return [SearchHit("T", "https://example.invalid/", "snippet")]

    search = Search()

    class Late:
        @hookimpl
        def register_tools(self, register: Any) -> None:
            register(late_echo)

        @hookimpl
        def register_web_search(self, register: Any) -> None:
            register("late-search", lambda options: search)

        @hookimpl
        def pre_execution_check(self, call: Any, context: Any) -> Any:
            return Deny("late check") if call.name == "list_dir" else None

    provider = ScriptedProvider(
        [
            tool_call(
                ("late_echo", {"word": "hi"}),
                ("web_search", {"query": "memora"}),
                ("list_dir", {}),
            ),
            text("done"),
        ]
    )
    agent = await make_agent(provider, capabilities=["web:search"])
    assert "late_echo" not in agent.tools
    agent.plugins.register(Late())
    assert "late_echo" in agent.tools
    chunks = await collect(agent.chat("go"))
    sent = {spec.name for spec in provider.requests[0].tools}
    assert {"late_echo", "web_search"} <= sent  # the capability map was recomputed
    results = {c.name: c for c in chunks if c.type == "tool_result"}  # type: ignore[union-attr]
    assert results["late_echo"].ok
    assert results["web_search"].ok and search.queries == ["memora"]
    assert results["list_dir"].blocked
    agent.plugins.unregister("Late")
    assert "late_echo" not in agent.tools


async def test_service_factory_failing_costs_only_its_tool(make_agent: Any) -> None:
    class BadSearch:
        @hookimpl
        def register_web_search(self, register: Any) -> None:
            def factory(options: Any) -> Any:
                raise RuntimeError("no API key for the search engine")

            register("bad-search", factory)

    provider = ScriptedProvider(
        [tool_call(("web_search", {"query": "x"}), ("list_dir", {})), text("done")]
    )
    agent = await make_agent(provider, plugins=[BadSearch()], capabilities=["web:search"])
    chunks = await collect(agent.chat("go"))
    results = {c.name: c for c in chunks if c.type == "tool_result"}  # type: ignore[union-attr]
    assert not results["web_search"].ok
    assert results["web_search"].error_code == "NOT_AVAILABLE"
    told = {m.name: m.content for m in provider.requests[1].messages if m.role == "tool"}
    assert "no API key for the search engine" in told["web_search"]
    assert "'BadSearch'" in told["web_search"]
    assert results["list_dir"].ok
    assert chunks[-1].type == "done"
