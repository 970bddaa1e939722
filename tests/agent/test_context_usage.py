"""The context window's occupancy snapshot (#69 item 6; the seed's 占用快照): a host reads how
full the window is, by part, against the effective window — the provider's, capped by
`max_context_tokens` and the role pack's `contextLimit` — as truncation counts it."""

from __future__ import annotations

from pathlib import Path

from memora import Agent
from memora.testing import ScriptedProvider, text

from .conftest import write_pack


async def test_a_host_reads_the_windows_occupancy_by_part(tmp_path: Path, project: Path) -> None:
    config = tmp_path / "config"
    write_pack(config, "big", {"global": {"contextLimit": 150_000}})
    provider = ScriptedProvider(default=text("fine"), context_window=1_000_000)
    async with Agent(
        project_path=project,
        data_dir=tmp_path / "data",
        config_dir=config,
        active_role_pack="big",
        max_context_tokens=500_000,
        provider=provider,
        load_entrypoints=False,
    ) as agent:
        before = agent.context_usage()
        assert before.window == 150_000, "min(provider 1M, max_context_tokens 500k, contextLimit)"
        assert before.history == 0 and before.system > 0 and before.tools > 0
        assert before.used == before.system + before.tools
        await agent.chat_text("please remember the blue kayak " * 20)
        after = agent.context_usage()
        assert after.history > 100 and after.trimmed == 0
        assert after.free == after.window - after.used - after.reserve
        assert 0 < after.share < 0.1
        doc = after.to_dict()
        assert set(doc["parts"]) == {"system", "notice", "plan", "history", "tools", "reserve"}


async def test_a_small_window_shows_the_trim(tmp_path: Path, project: Path) -> None:
    provider = ScriptedProvider(default=text("ok " * 40), context_window=6_000)
    async with Agent(
        project_path=project,
        data_dir=tmp_path / "data",
        provider=provider,
        resident_tools=[],
        max_tokens=200,
        load_entrypoints=False,
    ) as agent:
        for n in range(30):
            await agent.chat_text(f"turn {n}: " + "words to fill the window " * 30)
        usage = agent.context_usage()
    assert usage.window == 6_000 and usage.reserve == 200
    assert usage.trimmed > 0 and usage.notice > 0, "history was trimmed and the notice counted"
    assert usage.used <= usage.window * 0.9 + 50, "the request fit the window"
