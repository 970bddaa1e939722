"""memora's data folder inside a project keeps itself out of git (a `.gitignore` of `*`, as
pytest's and ruff's caches do): committing the project does not publish its conversations."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from memora import Agent
from memora.security.state import keep_out_of_git
from memora.testing import ScriptedProvider, text

GIT = shutil.which("git")


def _git(project: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    done = subprocess.run(
        ["git", *args], cwd=project, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout


@pytest.mark.skipif(GIT is None, reason="git is not installed")
async def test_a_project_commit_leaves_the_conversations_out(tmp_path: Path) -> None:
    project = tmp_path / "shop"
    project.mkdir()
    (project / "app.py").write_text("print('hi')\n", encoding="utf-8")
    _git(project, "init", "-q")
    agent = Agent(
        project_path=project,
        data_dir=project / ".memora" / "data",  # where the CLI and `memora serve` keep it
        provider=ScriptedProvider(default=text("a secret answer")),
        load_entrypoints=False,
        config_dir=tmp_path / "user",
    )
    await agent.init()
    async for _ in agent.chat("my card number is 4111"):
        pass
    await agent.close()
    data = project / ".memora" / "data"
    assert any((data / "sessions").iterdir())  # the conversation is on disk...
    listed = _git(project, "status", "--porcelain", "--untracked-files=all")
    assert "app.py" in listed
    assert ".memora/data" not in listed  # ...and not offered to a commit
    assert ".memora/.lock" not in listed  # nor the lock (who held it, on which host)
    (project / ".memora" / "config.json").write_text("{}", encoding="utf-8")
    listed = _git(project, "status", "--porcelain", "--untracked-files=all")
    assert ".memora/config.json" in listed  # the project's config is still committable
    assert (data / ".gitignore").stat().st_mode & 0o777 == 0o600


def test_an_existing_gitignore_is_the_users_and_a_link_is_not_followed(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    assert keep_out_of_git(folder)
    assert (folder / ".gitignore").read_text(encoding="utf-8").splitlines()[-1] == "*"
    (folder / ".gitignore").write_text("", encoding="utf-8")  # the user decided otherwise
    assert not keep_out_of_git(folder)
    assert (folder / ".gitignore").read_text(encoding="utf-8") == ""
    other = tmp_path / "other"
    other.mkdir()
    victim = tmp_path / "victim.txt"
    (other / ".gitignore").symlink_to(victim)  # dangling: O_EXCL refuses to create through it
    assert not keep_out_of_git(other)
    assert not victim.exists()


async def test_a_data_folder_outside_the_project_gets_none(tmp_path: Path) -> None:
    project = tmp_path / "shop"
    project.mkdir()
    agent = Agent(
        project_path=project,
        data_dir=tmp_path / "elsewhere",
        provider=ScriptedProvider(default=text("ok")),
        load_entrypoints=False,
        config_dir=tmp_path / "user",
    )
    await agent.init()
    await agent.close()
    assert not (tmp_path / "elsewhere" / ".gitignore").exists()
