"""Providers, keys and models by command (#41 item 1): `memora providers add/list/remove/
default` edit the user's own config, `memora keys set` keeps a key in a private file (never
printed, never in a config, never a project's to send), and `memora models` asks the endpoint —
then `memora run` works with no file written by hand, sending the stored key."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from .conftest import Endpoint


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMORA_", "OPENAI_"))}
    env["MEMORA_HOME"] = str(tmp_path / "home")
    return env


def _memora(
    env: dict[str, str], *args: str, cwd: Path, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memora", *args],
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_providers_keys_and_models_by_command(
    endpoint: tuple[str, Endpoint], tmp_path: Path
) -> None:
    url, seen = endpoint
    env = _env(tmp_path)
    home = tmp_path / "home"
    project = tmp_path / "shop"
    project.mkdir()

    added = _memora(
        env, "providers", "add", "local", "--base-url", url, "--model", "qwen-7b", cwd=project
    )
    assert added.returncode == 0, added.stderr
    assert "(the default)" in added.stdout
    config_path = home / "config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    assert config["providers"]["local"] == {"type": "openai", "model": "qwen-7b", "base_url": url}
    assert config["active_provider"] == "local"
    assert stat.S_IMODE(config_path.stat().st_mode) == 0o600

    # the key: piped in, stored privately, bound to the provider of that name, never shown
    secret = "sk-test-0123456789"
    stored = _memora(env, "keys", "set", "local", cwd=project, stdin=secret + "\n")
    assert stored.returncode == 0, stored.stderr
    assert secret not in stored.stdout + stored.stderr
    keys = home / "keys.json"
    assert stat.S_IMODE(keys.stat().st_mode) == 0o600
    assert json.loads(keys.read_text(encoding="utf-8")) == {"local": secret}
    config = json.loads(config_path.read_text(encoding="utf-8"))
    assert config["providers"]["local"]["api_key_name"] == "local"
    assert secret not in config_path.read_text(encoding="utf-8")
    listed = _memora(env, "keys", "list", cwd=project)
    assert listed.stdout.split() == ["local"] and secret not in listed.stdout

    # models: the endpoint's list, asked with the stored key
    models = _memora(env, "models", "--json", cwd=project)
    assert models.returncode == 0, models.stderr
    assert json.loads(models.stdout) == {"provider": "local", "models": ["llama-3-8b", "qwen-7b"]}
    assert seen.auth[-1] == f"Bearer {secret}"

    # run: no file written by hand, the stored key sent
    ran = _memora(env, "run", "hello", cwd=project)
    assert ran.returncode == 0, ran.stderr
    assert "hello from the endpoint" in ran.stdout
    assert seen.auth[-1] == f"Bearer {secret}"

    # a second provider as an alias of a model; default; list; remove
    fast = _memora(
        env, "providers", "add", "fast", "--base-url", url, "--model", "llama-3-8b", cwd=project
    )
    assert fast.returncode == 0 and "(the default)" not in fast.stdout
    assert _memora(env, "providers", "default", "fast", cwd=project).returncode == 0
    doc = json.loads(_memora(env, "providers", "list", "--json", cwd=project).stdout)
    assert doc["default"] == "fast"
    rows = {r["name"]: r for r in doc["providers"]}
    assert rows["local"]["key"] == "key 'local' (stored)" and rows["fast"]["default"]
    assert secret not in json.dumps(doc)
    assert "openai" in doc["installed_types"]
    removed = _memora(env, "providers", "remove", "fast", cwd=project)
    assert removed.returncode == 0
    config = json.loads(config_path.read_text(encoding="utf-8"))
    assert "fast" not in config["providers"] and "active_provider" not in config

    # refusals name the way out, and change nothing
    before = config_path.read_text(encoding="utf-8")
    again = _memora(
        env, "providers", "add", "local", "--base-url", url, "--model", "x", cwd=project
    )
    assert again.returncode != 0 and "--replace" in again.stderr
    bad_type = _memora(env, "providers", "add", "x", "--type", "nope", cwd=project)
    assert bad_type.returncode == 2 and "installed" in bad_type.stderr
    no_model = _memora(env, "providers", "add", "x", "--base-url", url, cwd=project)
    assert no_model.returncode == 2 and "--model" in no_model.stderr
    bad_url = _memora(
        env, "providers", "add", "x", "--base-url", "ftp://h", "--model", "m", cwd=project
    )
    assert bad_url.returncode == 2 and "http(s)://" in bad_url.stderr
    empty = _memora(env, "keys", "set", "other", cwd=project, stdin="\n")
    assert empty.returncode != 0 and "empty" in empty.stderr
    assert config_path.read_text(encoding="utf-8") == before


def test_a_project_may_not_bind_a_stored_key(tmp_path: Path) -> None:
    """A project's config naming api_key_name would choose where the user's key goes: refused
    outright (INVALID_CONFIG), as api_key_env and base_url are."""
    env = _env(tmp_path)
    project = tmp_path / "shop"
    (project / ".memora").mkdir(parents=True)
    (project / ".memora" / "config.json").write_text(
        json.dumps(
            {
                "active_provider": "mine",
                "providers": {"mine": {"type": "openai", "model": "m", "api_key_name": "local"}},
            }
        ),
        encoding="utf-8",
    )
    env["MEMORA_BASE_URL"] = "http://127.0.0.1:9/v1"  # nothing leaves this machine
    shown = _memora(env, "run", "hi", cwd=project, stdin="")
    assert shown.returncode != 0
    assert "providers.mine.api_key_name cannot be set in a project's config" in shown.stderr


def test_a_user_config_with_comments_is_not_rewritten(tmp_path: Path) -> None:
    env = _env(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    text = '{\n  // my providers\n  "providers": {}\n}\n'
    (home / "config.json").write_text(text, encoding="utf-8")
    added = _memora(
        env, "providers", "add", "x", "--base-url", "http://h/v1", "--model", "m", cwd=tmp_path
    )
    assert added.returncode != 0 and "has comments" in added.stderr
    assert '"providers": {"x": {"type": "openai"' in added.stderr, "what to add by hand"
    assert (home / "config.json").read_text(encoding="utf-8") == text
