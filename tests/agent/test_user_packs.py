"""The user's own role packs (`<user config folder>/role-packs/`) are found by an Agent given no
``config_dir``, as docs/configuration.md says: the user config folder is ``config_dir``, else
``$MEMORA_HOME``, else ``~/.config/memora`` — `memora role-pack list` found them and `memora serve`
did not (met by the #71 soak)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memora import ProjectRuntime
from memora.testing import ScriptedProvider, text

from .conftest import write_pack


async def test_the_users_own_packs_are_found_without_a_config_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    write_pack(home, "mine", {"reflect": {"summary": "off"}})
    monkeypatch.setenv("MEMORA_HOME", str(home))
    project = tmp_path / "p"
    project.mkdir()
    async with ProjectRuntime(
        project_path=project,
        data_dir=tmp_path / "data",
        provider=ScriptedProvider([text("x")]),
        active_role_pack="mine",
        load_entrypoints=False,
    ) as runtime:
        agent = await runtime.agent()
        assert "mine" in agent.role_pack.names()
        assert agent.role_pack.active.name == "mine"
