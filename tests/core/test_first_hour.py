"""The first hour, as a user lives it: where state lives, which conversation you are in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memora.cli.common import find_project_root


def _memora(cwd: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memora", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "MEMORA_HOME": str(home)},
        timeout=120,
        check=False,
    )


def test_the_project_is_found_upwards_as_git_finds_dot_git(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "repo"
    deep = repo / "src" / "pkg"
    deep.mkdir(parents=True)
    (repo / ".git").mkdir()
    assert find_project_root(deep) == repo  # no .memora anywhere: the repository's root
    (repo / "src" / ".memora").mkdir()
    assert find_project_root(deep) == repo / "src"  # the nearest .memora wins
    outside = tmp_path / "loose"
    outside.mkdir()
    assert find_project_root(outside) == outside
    # the user's own config folder is no project, even when it is called .memora
    monkeypatch.setenv("MEMORA_HOME", str(tmp_path / ".memora"))
    (tmp_path / ".memora").mkdir()
    assert find_project_root(outside) == outside


def test_a_subfolder_uses_the_projects_state(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    sub = repo / "docs" / "api"
    sub.mkdir(parents=True)
    (repo / ".git").mkdir()
    home = tmp_path / "home"
    made = _memora(sub, home, "init")
    assert made.returncode == 0, made.stderr
    assert (repo / ".memora" / "config.json").exists() and not (sub / ".memora").exists()
    shown = json.loads(_memora(sub, home, "config", "show", "--json").stdout)
    assert shown["files"] == [str(repo / ".memora" / "config.json")]
    listed = _memora(sub, home, "sessions", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert not (sub / ".memora").exists() and not (repo / "docs" / ".memora").exists()
