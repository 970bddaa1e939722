"""`memora tools list` and `memora tools call`, run as a user would (a subprocess), and the
argument parsing of `tools call` as a property."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from memora.cli.tools_cmd import parse_call_args
from memora.errors import MemoraError


def memora(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> Any:
    full = {**os.environ, "MEMORA_HOME": str(cwd / "home"), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "memora", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=full,
        timeout=120,
    )


def write_pack(root: Path, name: str, capabilities: list[str], strategy: dict[str, Any]) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    manifest = {
        "name": name,
        "formatVersion": "1.0.0",
        "capabilities": [{"capability": c} for c in capabilities],
        "strategy": strategy,
    }
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "notes.txt").write_text("第一行\nsecond line\n", encoding="utf-8")
    packs = tmp_path / "packs"
    write_pack(packs, "coder", ["code:execute"], {"act": {"toolReadonly": "readonly"}})
    write_pack(packs, "plain", [], {})
    return tmp_path


def test_tools_list_shows_what_the_model_sees(project: Path) -> None:
    r = memora(
        ["tools", "list", "--json", "--role-pack-dir", "packs", "--role-pack", "coder"], project
    )
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["role_pack"] == "coder"
    rows = {row["name"]: row for row in report["tools"]}
    assert rows["read_file"]["capability"] == "resident"
    assert rows["run_code"]["capability"] == "code:execute"
    assert rows["run_code"]["service"] == "sandbox"
    assert "web_search" not in rows  # not declared by the pack
    r = memora(
        ["tools", "list", "--json", "--role-pack-dir", "packs", "--role-pack", "plain"], project
    )
    assert "run_code" not in {row["name"] for row in json.loads(r.stdout)["tools"]}
    r = memora(["tools", "list", "--role-pack-dir", "packs", "--role-pack", "nope"], project)
    assert r.returncode == 1 and "available:" in r.stderr


def test_tools_call_runs_through_the_gates(project: Path) -> None:
    r = memora(["tools", "call", "read_file", "--arg", "path=notes.txt"], project)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["ok"] and "第一行" in out["content"]
    # the read-only role pack refuses a write through the same gate as the loop
    r = memora(
        [
            "tools",
            "call",
            "write_file",
            "--args",
            '{"path": "x.txt", "content": "y"}',
            "--role-pack-dir",
            "packs",
            "--role-pack",
            "coder",
        ],
        project,
    )
    assert r.returncode == 1
    out = json.loads(r.stdout)
    assert out["blocked"] and out["error_code"] == "PERMISSION_DENIED" and not out["started"]
    assert not (project / "x.txt").exists()
    r = memora(
        [
            "tools",
            "call",
            "run_code",
            "--args",
            '{"code": "print(6 * 7)"}',
            "--yes",  # running code asks first, as in a turn (test below)
            "--role-pack-dir",
            "packs",
            "--role-pack",
            "coder",
        ],
        project,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert "42" in out["content"] and "isolation" in out["content"]
    r = memora(["tools", "call", "read_file", "--args", "[1, 2]"], project)
    assert r.returncode == 1 and "--args must be a JSON object" in r.stderr


def test_tools_call_asks_like_the_loop(project: Path) -> None:
    """#41: `tools call write_file` wrote in approval mode `ask` without asking, while `tools
    list` said it asks; now it exits 3 with the way out, and --yes is the user's word."""
    call = ["tools", "call", "write_file", "--args", '{"path": "y.txt", "content": "1"}']
    r = memora(call, project)
    assert r.returncode == 3, r.stdout + r.stderr
    assert json.loads(r.stdout)["error_code"] == "NEEDS_APPROVAL"
    assert "--yes" in r.stderr and not (project / "y.txt").exists()
    r = memora([*call, "--yes"], project)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (project / "y.txt").read_text() == "1"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
keys = st.text(min_size=1, max_size=12).filter(lambda k: "=" not in k and k.strip() == k and k)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(keys, json_values, max_size=5))
def test_args_json_round_trips(obj: dict[str, Any]) -> None:
    assert parse_call_args(json.dumps(obj, ensure_ascii=False)) == obj


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(keys, json_values, max_size=4), st.dictionaries(keys, json_values, max_size=4)
)
def test_arg_pairs_win_over_args_json(base: dict[str, Any], pairs: dict[str, Any]) -> None:
    given_pairs = [f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in pairs.items()]
    assert parse_call_args(json.dumps(base), given_pairs) == {**base, **pairs}


@settings(max_examples=200, deadline=None)
@given(keys, st.text(max_size=30))
def test_a_pair_value_that_is_not_json_stays_a_string(key: str, value: str) -> None:
    try:
        expected: Any = json.loads(value)
    except ValueError:
        expected = value
    assert parse_call_args(None, [f"{key}={value}"]) == {key: expected}


@given(json_values.filter(lambda v: not isinstance(v, dict)))
def test_args_that_are_not_an_object_are_refused(value: Any) -> None:
    with pytest.raises(MemoraError, match="--args must be a JSON object"):
        parse_call_args(json.dumps(value))


@pytest.mark.parametrize("bad", ["{", "{'a': 1}", "nope"])
def test_args_that_are_not_json_are_refused(bad: str) -> None:
    with pytest.raises(MemoraError, match="--args is not valid JSON"):
        parse_call_args(bad)


@pytest.mark.parametrize("pair", ["novalue", "=x", " =x"])
def test_malformed_pairs_are_refused(pair: str) -> None:
    with pytest.raises(MemoraError, match="expected KEY=VALUE"):
        parse_call_args(None, [pair])


def test_role_pack_list_finds_project_and_extra_packs(project: Path) -> None:
    r = memora(["init", ".", "--role-pack", "helper"], project)
    assert r.returncode == 0, r.stderr
    r = memora(["role-pack", "list", "--json", "--role-pack-dir", "packs"], project)
    assert r.returncode == 0, r.stderr
    packs = {p["name"]: p for p in json.loads(r.stdout)["role_packs"]}
    assert {"helper", "coder", "plain", "memora-default"} <= set(packs)
    assert packs["coder"]["strategy"]["toolReadonly"] == "readonly"
    assert packs["memora-default"]["builtin"] and not packs["helper"]["builtin"]


def test_memory_export_and_import_round_trip_without_a_terminal(project: Path) -> None:
    lines = "".join(
        json.dumps({"content": f"记忆 {i}", "source": "manual", "id": f"m{i}"}) + "\n"
        for i in range(1500)
    )
    (project / "in.jsonl").write_text(lines, encoding="utf-8")
    r = memora(["memory", "import", "in.jsonl"], project)
    assert r.returncode == 0 and "imported 1500 new" in r.stdout, r.stderr
    assert "\x1b[" not in r.stderr  # no progress bar drawn into a pipe
    r = memora(["memory", "export"], project)
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 1500


def test_tools_list_fits_80_columns(project: Path) -> None:
    """#41: `tools list` wrapped the kernel's module path through every row; now the kernel's
    tools say built-in and the table keeps to the terminal's 80 columns."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "COLUMNS": "80", "MEMORA_HOME": str(project.parent / "home")}
    r = subprocess.run(
        [sys.executable, "-m", "memora", "tools", "list", "--project", str(project)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert max(len(line) for line in r.stdout.splitlines()) <= 80
    assert "built-in" in r.stdout and "memora.default_plugins" not in r.stdout
