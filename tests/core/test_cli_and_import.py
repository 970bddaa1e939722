from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import make_dist

BROKEN = "raise ImportError('missing dependency xyz')\n"


def _run(args: list[str], extra_path: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if extra_path is not None:
        env["PYTHONPATH"] = str(extra_path) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-m", "memora.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_plugins_json_lists_builtins_and_failures(tmp_path: Path) -> None:
    site = make_dist(
        tmp_path / "site",
        "memora-broken",
        {"broken": "memora_broken_cli"},
        {"memora_broken_cli": BROKEN},
    )
    proc = _run(["plugins", "--all", "--json"], site)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert set(doc) == {"plugins", "failures"}
    builtins = [p for p in doc["plugins"] if p["builtin"]]
    assert builtins and all(
        set(p) >= {"name", "distribution", "version", "hooks", "builtin"} for p in doc["plugins"]
    )
    assert any("pre_execution_check" in p["hooks"] for p in builtins)
    assert any(p["name"] == "fetch" and not p["builtin"] for p in doc["plugins"])
    (failure,) = doc["failures"]
    assert failure["name"] == "broken" and "missing dependency xyz" in failure["error"]


def test_plugins_without_all_hides_builtins() -> None:
    proc = _run(["plugins", "--json"])
    doc = json.loads(proc.stdout)
    assert doc["plugins"] and not any(p["builtin"] for p in doc["plugins"])
    human = _run(["plugins"])
    assert human.returncode == 0 and "fetch" in human.stdout


def test_import_memora_is_lazy() -> None:
    """`import memora` must not drag in pydantic, stevedore or rich (import-time budget)."""
    code = (
        "import sys, memora\n"
        "heavy = [m for m in ('pydantic', 'stevedore', 'rich', 'click', 'httpx2') if m in sys.modules]\n"
        "print(heavy)\n"
        "assert memora.MemoraError.__name__ == 'MemoraError'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]"
