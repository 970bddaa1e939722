from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from memora.cli.main import cli
from tests.conftest import REPO

from .helpers import write_pack


def test_validate_examples_json() -> None:
    result = CliRunner().invoke(cli, ["role-pack", "validate", str(REPO / "role_packs"), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert {p["name"] for p in doc["packs"]} >= {"novelist", "code-reviewer", "plain-designer"}
    for pack in doc["packs"]:
        assert set(pack) == {"path", "name", "errors", "warnings"}


def test_validate_reports_errors_with_exit_1(tmp_path: Path) -> None:
    folder = write_pack(
        tmp_path, "bad", {"name": "bad", "strategy": {"global": {"contextLimit": 50000}}}
    )
    result = CliRunner().invoke(cli, ["role-pack", "validate", str(folder), "--json"])
    assert result.exit_code == 1
    (pack,) = json.loads(result.stdout)["packs"]
    assert pack["errors"] == [
        {
            "path": "strategy.global.contextLimit",
            "message": "strategy.global.contextLimit = 50000 is outside the legal range 0 or [120000, 2000000]",
        }
    ]
    human = CliRunner().invoke(cli, ["role-pack", "validate", str(folder)])
    assert human.exit_code == 1 and "FAIL" in human.output


def test_check_and_new(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["role-pack", "new", "my-helper", "--dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert runner.invoke(cli, ["role-pack", "validate", str(tmp_path / "my-helper")]).exit_code == 0
    check = runner.invoke(cli, ["role-pack", "check", str(tmp_path), "--json"])
    assert check.exit_code == 0 and json.loads(check.output)["packs"][0]["errors"] == []
    assert (
        runner.invoke(cli, ["role-pack", "new", "my-helper", "--dir", str(tmp_path)]).exit_code != 0
    )
    assert (
        runner.invoke(cli, ["role-pack", "new", "Bad Name", "--dir", str(tmp_path)]).exit_code != 0
    )
    (tmp_path / "my-helper" / "persona.md").write_text("uses `missing-one`", encoding="utf-8")
    check = runner.invoke(cli, ["role-pack", "check", str(tmp_path / "my-helper"), "--json"])
    assert check.exit_code == 1


def test_list_shows_the_global_pool_with_the_built_in_skills(tmp_path: Path) -> None:
    r = CliRunner().invoke(
        cli,
        ["role-pack", "list", "--json", "--project", str(tmp_path), "--config-dir", str(tmp_path)],
    )
    assert r.exit_code == 0, r.output
    pool = {s["name"]: s for s in json.loads(r.stdout)["global_skills"]}
    assert {"code-review", "summarize", "web-search", "role-pack-creator"} <= set(pool)
    assert all(pool[n]["builtin"] for n in ("code-review", "role-pack-creator"))


def test_new_scaffolds_where_the_project_looks(tmp_path: Path, monkeypatch: Any) -> None:
    """#41: `role-pack new NAME` wrote into the working folder, where the project does not
    look; now into the project's .memora/role-packs (from a subfolder too), and --user into
    the user's own role-packs; `role-pack list` shows it."""
    project = tmp_path / "proj"
    (project / ".memora").mkdir(parents=True)
    (project / "src").mkdir()
    home = tmp_path / "home"
    monkeypatch.setenv("MEMORA_HOME", str(home))
    monkeypatch.chdir(project / "src")
    runner = CliRunner()
    made = runner.invoke(cli, ["role-pack", "new", "reviewer"])
    assert made.exit_code == 0, made.output
    assert (project / ".memora" / "role-packs" / "reviewer" / "manifest.json").exists()
    assert "this project's role packs" in made.output
    assert not (project / "src" / "reviewer").exists()
    listed = runner.invoke(cli, ["role-pack", "list", "--project", str(project)])
    assert "reviewer" in listed.output
    mine = runner.invoke(cli, ["role-pack", "new", "helper", "--user"])
    assert mine.exit_code == 0 and (home / "role-packs" / "helper" / "manifest.json").exists()
