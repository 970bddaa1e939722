"""The house stays calm: no module past 700 lines in the kernel or a plugin.

A module that grows past it is a design question (shared/ARCHITECTURE.md), not a place to add
more: split it by what it owns.  The complexity ceiling is ruff's ``C901`` (mccabe, at most 20
a function; see ``[tool.ruff.lint.mccabe]`` in pyproject.toml), run by ``make lint``.
"""

from __future__ import annotations

from pathlib import Path

import memora

ROOT = Path(memora.__file__).parent
PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
MAX_LINES = 700


def _modules() -> list[Path]:
    return [
        *sorted(ROOT.rglob("*.py")),
        *sorted(p for p in PLUGINS.rglob("*.py") if "/build/" not in str(p)),
    ]


def test_no_module_is_past_700_lines() -> None:
    too_long = {
        str(path): lines
        for path in _modules()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert too_long == {}


def test_the_check_sees_the_kernel_and_the_plugins() -> None:
    found = {p.name for p in _modules()}
    assert {"agent.py", "machinery.py", "hub.py", "provider.py"} <= found
