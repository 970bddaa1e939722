"""The first hour, as a user lives it: where state lives, which conversation you are in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memora.cli.common import find_project_root
from tests.core.test_chat_cli import Script, _chat, _env, call, say, server  # noqa: F401


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


def _init(tmp_path: Path, home: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    project = tmp_path / "p"
    project.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "memora", "init", str(project), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "MEMORA_HOME": str(home), **(env or {})},
        timeout=120,
        check=False,
    )


def _config(tmp_path: Path) -> dict[str, Any]:
    from memora.config import strip_json_comments

    text = (tmp_path / "p" / ".memora" / "config.json").read_text(encoding="utf-8")
    return dict(json.loads(strip_json_comments(text)))


def test_init_never_leaves_a_project_that_cannot_run(tmp_path: Path) -> None:
    home = tmp_path / "home"
    only_openai = {"MEMORA_LOAD_PLUGINS": "openai"}
    r = _init(tmp_path, home, env=only_openai)
    assert r.returncode == 1 and "--provider openai needs --model" in r.stderr
    assert not (tmp_path / "p" / ".memora").exists()
    r = _init(tmp_path, home, "--model", "gpt-x", env=only_openai)
    assert r.returncode == 0, r.stderr
    assert _config(tmp_path)["providers"] == {"openai": {"type": "openai", "model": "gpt-x"}}
    r = _init(tmp_path / "other", home, "--provider", "nope")
    assert r.returncode == 1 and "neither installed" in r.stderr


def test_init_refers_to_the_users_provider_instead_of_copying_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    user = {"providers": {"work": {"type": "openai", "base_url": "http://127.0.0.1:9/v1"}}}
    (home / "config.json").write_text(json.dumps(user), encoding="utf-8")
    r = _init(tmp_path, home, "--provider", "openai")
    assert r.returncode == 0, r.stderr
    config = _config(tmp_path)
    assert config["active_provider"] == "work" and "providers" not in config
    shown = json.loads(_memora(tmp_path / "p", home, "config", "show", "--json").stdout)
    assert shown["settings"]["providers"]["work"]["base_url"] == "http://127.0.0.1:9/v1"


def test_config_show_marks_what_a_project_shadows(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    user = {"providers": {"openai": {"type": "openai", "base_url": "http://127.0.0.1:9/v1"}}}
    (home / "config.json").write_text(json.dumps(user), encoding="utf-8")
    project = tmp_path / "p"
    (project / ".memora").mkdir(parents=True)
    (project / ".memora" / "config.json").write_text(
        json.dumps({"providers": {"openai": {"type": "openai", "model": "m"}}}), encoding="utf-8"
    )
    r = _memora(project, home, "config", "show")
    row = next(line for line in r.stdout.splitlines() if line.startswith("providers.openai"))
    assert "project config" in row and "(shadows user config" in row
    doc = json.loads(_memora(project, home, "config", "show", "--json").stdout)
    assert doc["shadowed"]["providers.openai"][0].startswith("user config ")


def test_a_stray_memora_folder_in_a_shared_folder_is_no_project(tmp_path: Path) -> None:
    shared = tmp_path / "scratch"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp
    (shared / ".memora").mkdir()
    work = shared / "me" / "work"
    work.mkdir(parents=True)
    assert find_project_root(work) == work


# -- small terminal glitches ---------------------------------------------------------------------


def test_ctrl_c_prints_the_partial_answer_once_and_no_empty_usage(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    import io
    import re

    pexpect = pytest.importorskip("pexpect")
    url, script = server
    project = tmp_path / "p"
    project.mkdir()
    env = _env(tmp_path)
    child = _chat(project, url, env)
    log = io.StringIO()
    child.logfile_read = log
    script.answers.append(say("alpha beta gamma delta epsilon zeta eta theta", delay=0.3))
    child.sendline("count")
    child.expect("gamma")
    child.sendintr()
    child.expect("stopped")
    child.expect("›")
    seen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", log.getvalue())
    assert "^C" not in seen  # the echo wrapped the padded live line: it was drawn twice
    assert "0 in · 0 out" not in seen
    # a refused call's line has a duration that is not negative
    child.sendline("/quit")
    child.expect(pexpect.EOF)
    script.answers += [call("write_file", {"path": "a.txt", "content": "x"}), say("no")]
    child = pexpect.spawn(
        sys.executable,
        [
            "-m",
            "memora",
            "chat",
            "--project",
            str(project),
            "--base-url",
            url,
            "--model",
            "m",
            "--read-only",
        ],
        env=env,
        encoding="utf-8",
        timeout=60,
        dimensions=(40, 120),
    )
    log = io.StringIO()
    child.logfile_read = log
    child.expect("/help")
    child.sendline("write")
    child.expect("write_file")
    child.expect("›")
    assert "-0 ms" not in log.getvalue()
    child.sendline("/quit")


def test_every_error_has_one_prefix(tmp_path: Path) -> None:
    home = tmp_path / "home"
    usage = _memora(tmp_path, home, "run")
    runtime = _memora(tmp_path, home, "tools", "show", "nope")
    assert usage.returncode == 2 and runtime.returncode == 1
    for r in (usage, runtime):
        lines = [line for line in r.stderr.splitlines() if "rror" in line]
        assert lines and all(line.startswith("memora: error: ") for line in lines), r.stderr


def test_plugins_all_shows_whole_names_at_80_columns(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "memora", "plugins", "--all"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "80", "MEMORA_HOME": str(tmp_path)},
        timeout=120,
        check=False,
    )
    assert "memora.default_plugins.checks" in r.stdout, r.stdout


def test_an_unreachable_postgres_is_one_clear_line(tmp_path: Path) -> None:
    pytest.importorskip("memora_plugin_postgres")
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # the pool tries again until its connect_timeout (default 10 s): 2 s is as unreachable
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.json").write_text(
        json.dumps({"plugins": {"postgres": {"connect_timeout": 2}}}), encoding="utf-8"
    )
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "memora",
            "memory",
            "stats",
            "--storage",
            "postgres",
            "--data-dir",
            str(tmp_path / "d"),
        ],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "MEMORA_HOME": str(home),
            "MEMORA_POSTGRES_DSN": f"host=127.0.0.1 port={port} user=x connect_timeout=2",
        },
        timeout=120,
        check=False,
    )
    assert r.returncode == 1
    assert "error connecting in" not in r.stderr, r.stderr
    assert r.stderr.count("memora: error:") == 1, r.stderr


def test_multi_line_input_paste_multi_fences_and_edit(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    pytest.importorskip("pexpect")
    url, script = server
    project = tmp_path / "p"
    project.mkdir()
    env = _env(tmp_path)
    editor = tmp_path / "editor.py"
    editor.write_text(
        "import sys\nopen(sys.argv[1], 'w').write('from the editor\\nline two\\n')\n",
        encoding="utf-8",
    )
    env["EDITOR"] = f"{sys.executable} {editor}"
    child = _chat(project, url, env)

    def last_user_message() -> str:
        users = [m for m in script.requests[-1]["messages"] if m["role"] == "user"]
        return str(users[-1]["content"])

    script.answers += [say("got 1"), say("got 2"), say("got 3"), say("got 4")]
    # a bracketed paste: one message, newlines kept (not two turns)
    child.send("\x1b[200~first line\rsecond line\x1b[201~\r")
    child.expect("got 1")
    assert last_user_message() == "first line\nsecond line"
    for line in ("/multi", "a", "/b is not a command here", "/end"):
        child.sendline(line)
    child.expect("got 2")
    assert last_user_message() == "a\n/b is not a command here"
    for line in ('"""', "x", "y", '"""'):
        child.sendline(line)
    child.expect("got 3")
    assert last_user_message() == "x\ny"
    child.sendline("/edit")
    child.expect("got 4")
    assert last_user_message() == "from the editor\nline two"
    child.sendline("/quit")
