"""The CLI with broken plugins installed, config show, --storage, warnings and errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import make_dist
from tests.core.test_plugin_isolation import EXPLODING, GOOD, MISSPELT, WRONG_ARGS


def _memora(
    args: list[str], site: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full = dict(os.environ)
    if site is not None:
        full["PYTHONPATH"] = str(site) + os.pathsep + full.get("PYTHONPATH", "")
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "memora", *args],
        capture_output=True,
        text=True,
        env=full,
        timeout=120,
        check=False,
    )


@pytest.fixture
def broken_site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    make_dist(site, "memora-exploding", {"exploding": "c_exploding"}, {"c_exploding": EXPLODING})
    make_dist(site, "memora-misspelt", {"misspelt": "c_misspelt"}, {"c_misspelt": MISSPELT})
    make_dist(site, "memora-wrongargs", {"wrongargs": "c_wrongargs"}, {"c_wrongargs": WRONG_ARGS})
    make_dist(site, "memora-good", {"good": "c_good"}, {"c_good": GOOD})
    make_dist(site, "memora-twin", {"twin": "c_twin"}, {"c_twin": GOOD})
    make_dist(site, "memora-noimport", {"noimport": "c_noimport"}, {"c_noimport": "import nope\n"})
    return site


def test_memory_commands_work_next_to_broken_plugins(broken_site: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"source": "persona", "content": "短回答"}) + "\n", encoding="utf-8")
    r = _memora(["memory", "import", str(src), "--data-dir", str(data)], broken_site)
    assert r.returncode == 0, r.stderr
    r = _memora(["memory", "stats", "--data-dir", str(data), "--json"], broken_site)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["total"] == 1
    # each failure is said once on stderr, as a warning line, never a traceback
    assert "Traceback" not in r.stderr
    for name in ("exploding", "misspelt", "wrongargs", "noimport"):
        assert f"memora: warning: plugin {name!r}" in r.stderr, r.stderr


def test_plugins_lists_failures_as_rows_and_json(broken_site: Path) -> None:
    r = _memora(["plugins", "--json"], broken_site)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    failures = {f["name"]: f for f in doc["failures"]}
    assert set(failures) == {"exploding", "misspelt", "wrongargs", "noimport"}
    assert failures["exploding"]["distribution"] == "memora-exploding"
    assert failures["noimport"]["stage"] == "import"
    plugins = {p["name"]: p for p in doc["plugins"]}
    assert plugins["good"]["provides"] == {"web_search": ["fake-search"]}
    assert plugins["twin"]["lost_names"] == [
        {"kind": "web_search", "name": "fake-search", "kept_by": "good"}
    ]
    human = _memora(["plugins"], broken_site, {"COLUMNS": "200"})
    assert human.returncode == 0 and "Traceback" not in human.stderr
    assert "memora-exploding" in human.stdout and "failed (hook)" in human.stdout
    assert "name clash" in human.stdout
    check = _memora(["plugins", "--check"], broken_site)
    assert check.returncode == 1
    assert _memora(["plugins", "--check"]).returncode == 0


def test_strict_mode_is_one_line_and_exit_1(broken_site: Path, tmp_path: Path) -> None:
    for args in (
        ["plugins"],
        ["plugins", "--json"],
        ["memory", "stats", "--data-dir", str(tmp_path)],
    ):
        r = _memora(args, broken_site, {"MEMORA_STRICT_PLUGINS": "1"})
        assert r.returncode == 1, (args, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr
        errors = [line for line in r.stderr.splitlines() if line.startswith("memora: error:")]
        assert len(errors) == 1 and "PLUGIN" in errors[0]
        assert r.stdout == ""


def test_config_show_with_origins(tmp_path: Path) -> None:
    project, home = tmp_path / "p", tmp_path / "home"
    (project / ".memora").mkdir(parents=True)
    home.mkdir()
    (home / "config.json").write_text(json.dumps({"plugins": {"fetch": {"timeout": 3}}}))
    (project / ".memora" / "config.json").write_text(json.dumps({"storage": "json"}))
    env = {"MEMORA_HOME": str(home)}
    r = _memora(["config", "show", "--project", str(project), "--json"], env=env)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["settings"]["storage"] == "json"
    assert doc["origins"]["storage"].startswith("project config ")
    assert doc["origins"]["plugins.fetch.timeout"].startswith("user config ")
    assert doc["files"] == [str(home / "config.json"), str(project / ".memora" / "config.json")]
    r = _memora(
        ["config", "show", "--project", str(project)], env={**env, "MEMORA_STORAGE": "memory"}
    )
    line = next(x for x in r.stdout.splitlines() if x.startswith("storage"))
    assert '"memory"' in line and "environment MEMORA_STORAGE" in line
    r = _memora(["config", "show", "--project", str(project), "--storage", "sqlite"], env=env)
    line = next(x for x in r.stdout.splitlines() if x.startswith("storage"))
    assert '"sqlite"' in line and "command line" in line


def test_storage_follows_config_and_flag(tmp_path: Path) -> None:
    project = tmp_path / "p"
    (project / ".memora").mkdir(parents=True)
    (project / ".memora" / "config.json").write_text(json.dumps({"storage": "json"}))
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"source": "persona", "content": "x"}) + "\n", encoding="utf-8")
    r = _memora(["memory", "import", str(src), "--project", str(project)])
    assert r.returncode == 0, r.stderr
    data = project / ".memora" / "data"
    assert (data / "memories.json").is_file() or any(p.suffix == ".json" for p in data.iterdir())
    assert not any(p.suffix in (".db", ".sqlite") for p in data.iterdir())
    r = _memora(["memory", "stats", "--project", str(project), "--json"])
    assert json.loads(r.stdout)["total"] == 1
    r = _memora(["memory", "stats", "--project", str(project), "--storage", "memory", "--json"])
    assert r.returncode == 0 and json.loads(r.stdout)["total"] == 0
    r = _memora(["memory", "stats", "--project", str(project), "--storage", "sqlite"])
    assert r.returncode == 1 and "no memory database" in r.stderr  # sqlite has none here
    r = _memora(["memory", "stats", "--project", str(project), "--storage", "nosuch"])
    assert r.returncode == 1 and "no storage named 'nosuch'" in r.stderr
    assert "Traceback" not in r.stderr


def test_run_unknown_role_pack_is_an_error(tmp_path: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    r = _memora(
        [
            "run",
            "hello",
            "--project",
            str(project),
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--role-pack",
            "no-such-pack",
        ]
    )
    assert r.returncode == 1
    assert "role pack 'no-such-pack' does not exist" in r.stderr
    assert "memora-default" in r.stderr  # what exists is named


def test_run_warns_about_a_capability_no_plugin_provides(tmp_path: Path) -> None:
    project, config = tmp_path / "p", tmp_path / "cfg"
    project.mkdir()
    pack = config / "role-packs" / "searcher"
    pack.mkdir(parents=True)
    (pack / "manifest.json").write_text(
        json.dumps(
            {
                "name": "searcher",
                "formatVersion": "1.0.0",
                "capabilities": [{"capability": "web:search"}],
            }
        )
    )
    r = _memora(
        [
            "run",
            "hello",
            "--project",
            str(project),
            "--config-dir",
            str(config),
            "--role-pack",
            "searcher",
            "--base-url",
            "http://127.0.0.1:9/v1",
        ],
        env={"MEMORA_LOAD_PLUGINS": "openai"},
    )
    # the turn fails (nothing listens on port 9) but the warning was said first
    assert "memora: warning: role pack 'searcher' declares 'web:search'" in r.stderr, r.stderr


def test_python_dash_m_memora_and_help() -> None:
    r = _memora(["--help"])
    assert r.returncode == 0
    for command in ("config", "install", "uninstall", "plugins", "run", "memory"):
        assert command in r.stdout


def test_role_pack_validate_reports_unprovided_and_unknown_capabilities(tmp_path: Path) -> None:
    pack = tmp_path / "p1"
    pack.mkdir()
    (pack / "manifest.json").write_text(
        json.dumps(
            {
                "name": "p1",
                "formatVersion": "1.0.0",
                "capabilities": [{"capability": "code:execute"}, {"capability": "astro:gaze"}],
            }
        )
    )
    # only the fetch plugin is loaded: nothing provides code execution
    r = _memora(
        ["role-pack", "validate", str(pack), "--json"], env={"MEMORA_LOAD_PLUGINS": "fetch"}
    )
    assert r.returncode == 0, r.stderr
    (report,) = json.loads(r.stdout)["packs"]
    warnings = {w["path"]: w["message"] for w in report["warnings"]}
    assert "no installed plugin provides 'code_executor'" in warnings["capabilities[0].capability"]
    assert "unknown capability 'astro:gaze'" in warnings["capabilities[1].capability"]


LAZY_BROKEN = """
from memora import hookimpl
from memora.plugins import checked_factory


def _load():
    from mcp import NoSuchClientInThisVersion  # the dependency is there, of the wrong version

    return NoSuchClientInThisVersion


@hookimpl
def register_web_search(register):
    register("lazy", checked_factory("lazy", {"region"}, _load))
"""


def test_a_plugin_whose_own_imports_fail_is_a_failed_row(tmp_path: Path) -> None:
    """Its entry point imports fine (the implementation is loaded lazily), so before the probe
    `memora plugins` said "ok" until the first use failed."""
    site = tmp_path / "site"
    make_dist(site, "memora-lazy", {"lazy": "c_lazy"}, {"c_lazy": LAZY_BROKEN})
    home = tmp_path / "home"
    for _ in range(2):  # the second run answers from the probe cache: the same
        r = _memora(["plugins", "--json"], site, {"MEMORA_HOME": str(home)})
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        failures = {f["name"]: f for f in doc["failures"]}
        assert failures["lazy"]["stage"] == "probe"
        assert "NoSuchClientInThisVersion" in failures["lazy"]["error"]
        assert "lazy" not in {p["name"] for p in doc["plugins"]}
    r = _memora(["plugins", "--check"], site, {"MEMORA_HOME": str(home)})
    assert r.returncode == 1 and "failed (probe)" in r.stdout
