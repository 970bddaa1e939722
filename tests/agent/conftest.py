from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from memora.agent import Agent
from memora.chunks import AgentChunk
from memora.testing import ScriptedProvider


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "notes.txt").write_text("alpha\nbeta\n", encoding="utf-8")
    return root


def write_pack(
    root: Path,
    name: str,
    strategy: dict[str, Any] | None = None,
    capabilities: list[str] | None = None,
    persona: str = "",
) -> None:
    folder = root / "role-packs" / name
    folder.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, Any] = {"name": name, "formatVersion": "1.0.0"}
    if strategy:
        manifest["strategy"] = strategy
    if capabilities:
        manifest["capabilities"] = [{"capability": c} for c in capabilities]
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    if persona:
        (folder / "persona.md").write_text(persona, encoding="utf-8")


@pytest.fixture
async def make_agent(tmp_path: Path, project: Path) -> AsyncIterator[Callable[..., Any]]:
    agents: list[Agent] = []

    async def make(
        provider: ScriptedProvider,
        *,
        strategy: dict[str, Any] | None = None,
        capabilities: list[str] | None = None,
        **kwargs: Any,
    ) -> Agent:
        config = tmp_path / "config"
        write_pack(config, "test", strategy or {"reflect": {"summary": "off"}}, capabilities)
        opts: dict[str, Any] = {
            "project_path": project,
            "data_dir": tmp_path / "data",
            "provider": provider,
            "config_dir": config,
            "active_role_pack": "test",
            "load_entrypoints": False,
            "retry_base_delay": 0.01,
        }
        opts.update(kwargs)
        agent = Agent(**opts)
        await agent.init()
        agents.append(agent)
        return agent

    yield make  # type: ignore[misc]
    for agent in agents:
        await agent.close()


async def collect(it: AsyncIterator[AgentChunk]) -> list[AgentChunk]:
    return [c async for c in it]


def types(chunks: list[AgentChunk]) -> list[str]:
    return [c.type for c in chunks]


def text_of(chunks: list[AgentChunk], stage: str = "answer") -> str:
    return "".join(c.content for c in chunks if c.type == "text" and c.stage == stage)  # type: ignore[union-attr]


def team_agent(
    tmp_path: Path, project: Path, provider: ScriptedProvider, strategy: dict[str, Any]
) -> Agent:
    """An Agent whose active pack ``lead`` leads a team with one member, ``helper``."""
    config = tmp_path / "config"
    for name in ("lead", "helper"):
        write_pack(config, name, strategy)
    return Agent(
        project_path=project,
        data_dir=tmp_path / "data",
        provider=provider,
        config_dir=config,
        active_role_pack="lead",
        role_pack_teams=[{"leader": "lead", "members": ["helper"]}],
        load_entrypoints=False,
    )
