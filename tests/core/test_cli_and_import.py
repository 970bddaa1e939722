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


def _loaded_after(code: str, modules: tuple[str, ...]) -> list[str]:
    """Which of ``modules`` a fresh interpreter has imported after running ``code``."""
    probe = (
        f"{code}\nimport json, sys\nprint(json.dumps([m for m in {modules!r} if m in sys.modules]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    return list(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_from_memora_import_agent_loads_the_facade_only() -> None:
    """Issue #29: the turn loop, the stores, role packs, tools and chunks load with init() and
    the first turn; importing the Agent class does not pay for them."""
    heavy = (
        "memora.agent.loop",
        "memora.agent.record",
        "memora.memory.manager",
        "memora.memory.sessions",
        "memora.role_pack.manager",
        "memora.tools.base",
        "memora.chunks",
        "memora.plugins",
        "pluggy",
    )
    assert _loaded_after("from memora import Agent", heavy) == []
    # and a class of the package still imports from where it is documented
    assert _loaded_after("from memora.agent import TurnEngine", ("memora.agent.loop",)) == [
        "memora.agent.loop"
    ]


def test_memora_plugins_json_imports_no_command_module_nor_asyncio() -> None:
    """``memora plugins --json`` loads its own command module only, and nothing of the
    installed plugins or the built-in tools pulls in asyncio (issue #29's start-up row)."""
    code = (
        "import contextlib, io, sys\n"
        "sys.argv = ['memora', 'plugins', '--json']\n"
        "from memora.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main(['plugins', '--json'])\n"
    )
    modules = ("memora.cli.chat_cmd", "memora.cli.run_cmd", "memora.cli.tools_cmd", "asyncio")
    # the first listing after an install probes every plugin's implementation (remembered while
    # the installed distributions stay the same): what is measured is every later one
    _loaded_after(code, ())
    assert _loaded_after(code, modules) == []
    # issue #70 item 7: the built-in tools are registered by name; their modules, and pydantic's
    # schema machinery they bring, load when a tool is first looked up
    tools = ("memora.tools.base", "memora.tools.files", "memora.tools.privileged", "pydantic")
    assert _loaded_after(code, tools) == []
