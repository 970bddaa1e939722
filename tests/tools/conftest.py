from __future__ import annotations

from pathlib import Path

import pytest

from memora.tools import ToolContext


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "README.md").write_text("# Demo\nhello world\n", encoding="utf-8")
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("def main():\n    return 42\n", encoding="utf-8")
    (tmp_path / "outside.txt").write_text("SECRET outside the project\n", encoding="utf-8")
    return root


@pytest.fixture
async def ctx(project: Path) -> ToolContext:
    c = ToolContext.for_project(project)
    yield c  # type: ignore[misc]
    await c.background.close()
