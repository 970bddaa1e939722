from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    """``(project, user config folder)``, both empty."""
    project, user = tmp_path / "project", tmp_path / "user"
    project.mkdir()
    user.mkdir()
    return project, user
