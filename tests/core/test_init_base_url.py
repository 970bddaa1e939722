"""`memora init --base-url URL --model NAME` (issue #41, item 1): a working set-up without
hand-editing — the endpoint goes to the user's own config (a project's may not choose where
requests go), the project names it, and `memora run` then works with no flag."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

from tests.core.test_chat_cli import Script, _env, say, server  # noqa: F401


def _memora(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memora", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def test_init_with_an_endpoint_then_run(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    url, script = server
    env = _env(tmp_path)
    env["MY_KEY"] = "sk-test"
    project = tmp_path / "shop"
    project.mkdir()
    made = _memora(
        env, "init", "--base-url", url, "--model", "m", "--api-key-env", "MY_KEY", cwd=project
    )
    assert made.returncode == 0, made.stderr
    assert "None" not in made.stdout  # the hint names the project, never None
    user = Path(env["MEMORA_HOME"]) / "config.json"
    config = json.loads(user.read_text(encoding="utf-8"))
    assert config["providers"]["openai"] == {
        "type": "openai",
        "model": "m",
        "base_url": url,
        "api_key_env": "MY_KEY",
    }
    assert config["active_provider"] == "openai"
    assert stat.S_IMODE(user.stat().st_mode) == 0o600
    project_config = (project / ".memora" / "config.json").read_text(encoding="utf-8")
    assert url not in project_config and '"active_provider": "openai"' in project_config

    script.answers.append(say("Hello from the endpoint"))
    ran = _memora(env, "run", "hello", cwd=project)
    assert ran.returncode == 0, ran.stderr
    assert "Hello from the endpoint" in ran.stdout

    # another endpoint under the same name is refused, naming the way out
    again = _memora(
        env,
        "init",
        str(tmp_path / "other"),
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--model",
        "x",
        cwd=tmp_path,
    )
    assert again.returncode == 1 and "--provider ANOTHER_NAME" in again.stderr
    bad = _memora(env, "init", str(tmp_path / "third"), "--base-url", url, cwd=tmp_path)
    assert bad.returncode == 2 and "--model" in bad.stderr


def test_without_the_embedded_model_the_error_names_the_fix() -> None:
    """#41: without llamacpp, the error said to install memora-plugin-openai — installed."""
    import pytest

    from memora.errors import NotAvailableError
    from memora.plugins import create_plugin_manager

    plugins = create_plugin_manager(load_entrypoints=False, extra=[_FakeOpenAI()])
    with pytest.raises(NotAvailableError) as info:
        plugins.get("provider", "llamacpp")
    assert "memora init --base-url URL --model NAME" in info.value.message
    assert "pip install memora-plugin-openai" not in info.value.message


class _FakeOpenAI:
    """A plugin registering a provider named openai (the real plugin is not needed here)."""

    from memora import hookimpl

    @hookimpl
    def register_providers(self, register: object) -> None:
        register("openai", lambda options: None)  # type: ignore[operator]
