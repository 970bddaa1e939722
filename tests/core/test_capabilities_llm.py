from __future__ import annotations

import logging

import pytest

from memora.capabilities import PRIVILEGED, compute_capability_map
from memora.errors import MemoraError
from memora.llm import LLMRequest, Message, ProviderError, ProviderRouter, TextDelta, ToolCallDelta
from memora.llm.types import FinishDelta, ReasoningDelta, UsageDelta
from memora.testing import ScriptedProvider, reasoning, text, tool_call

ALL = {"web_search": ["ddgs"], "web_fetch": ["fetch"], "code_executor": ["sandbox"]}


def test_privileged_need_declaration_and_plugin() -> None:
    cmap = compute_capability_map("reviewer", ["web:search", "web:fetch", "code:execute"], ALL)
    assert cmap.privileged_tools == {"web_search", "web_fetch", "run_code"}
    cmap = compute_capability_map("plain", [], ALL)
    assert cmap.privileged_tools == frozenset()
    assert "web_search" not in cmap.privileged_tools  # resident tools need no declaration


def test_declared_but_not_installed_is_hidden_with_reason(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="memora.capabilities"):
        cmap = compute_capability_map("reviewer", ["web:search", "web:fetch"], {"web_fetch": ["f"]})
    assert cmap.privileged_tools == {"web_fetch"}
    assert "web:search" in cmap.unavailable
    assert "reviewer" in caplog.text


def test_unknown_capability_warns_with_pack_name(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="memora.capabilities"):
        cmap = compute_capability_map("novelist", ["time:travel", "file:*", "memory:recall"], ALL)
    assert cmap.privileged_tools == frozenset()
    assert len(cmap.warnings) == 1
    assert "novelist" in cmap.warnings[0] and "time:travel" in cmap.warnings[0]
    assert "novelist" in caplog.text


def test_recomputed_per_pack() -> None:
    a = compute_capability_map("a", ["web:fetch"], ALL)
    b = compute_capability_map("b", ["code:execute"], ALL)
    assert a.privileged_tools == {"web_fetch"} and b.privileged_tools == {"run_code"}
    assert set(PRIVILEGED) == {"web:search", "web:fetch", "code:execute"}


def test_router_defaults_and_fixed() -> None:
    main, cheap = ScriptedProvider(name="main"), ScriptedProvider(name="cheap")
    r = ProviderRouter(main)
    assert r.for_task("chat") is main and r.for_task("summary") is main
    r = ProviderRouter(main, background=cheap)
    assert r.for_task("background") is cheap and r.for_task("summary") is cheap
    r2 = ProviderRouter(main, background=cheap, routes={"summary": main})
    assert r2.for_task("summary") is main
    fixed = r.with_fixed(True)
    assert fixed.for_task("background") is main and r.for_task("background") is cheap
    assert r.providers() == [main, cheap]
    with pytest.raises(MemoraError, match="unknown task type"):
        ProviderRouter(main, routes={"poetry": cheap})


async def _collect(p: ScriptedProvider, req: LLMRequest) -> list[object]:
    return [d async for d in p.stream(req)]


async def test_scripted_provider_replays_and_records() -> None:
    p = ScriptedProvider(
        [
            text("hello world", chunks=3),
            tool_call(("read_file", {"path": "注意.md"}), preface="Let me look.", split_args=3),
            reasoning("think", "answer"),
        ]
    )
    req = LLMRequest([Message.user("hi")])
    out = await _collect(p, req)
    assert "".join(d.text for d in out if isinstance(d, TextDelta)) == "hello world"
    assert isinstance(out[-2], FinishDelta) and isinstance(out[-1], UsageDelta)
    out = await _collect(p, req)
    frags = [d for d in out if isinstance(d, ToolCallDelta)]
    assert len(frags) == 3 and frags[0].name == "read_file" and frags[1].name is None
    assert "".join(f.arguments for f in frags) == '{"path": "注意.md"}'
    out = await _collect(p, req)
    assert isinstance(out[0], ReasoningDelta)
    assert len(p.requests) == 3
    with pytest.raises(ProviderError, match="ran out"):
        await _collect(p, req)


async def test_scripted_provider_function_and_error() -> None:
    def echo(req: LLMRequest):  # type: ignore[no-untyped-def]
        return text(req.messages[-1].content.upper())

    p = ScriptedProvider([echo], default=text("default"))
    out = await _collect(p, LLMRequest([Message.user("abc")]))
    assert out[0] == TextDelta("ABC")
    out = await _collect(p, LLMRequest([Message.user("abc")]))
    assert out[0] == TextDelta("default")
    from memora.testing import ScriptedResponse

    p = ScriptedProvider(
        [ScriptedResponse([TextDelta("part")], error=ProviderError("x", retryable=True))]
    )
    with pytest.raises(ProviderError):
        await _collect(p, LLMRequest([]))
