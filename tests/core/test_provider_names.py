"""`--provider NAME` means the provider the user set (#68 item 5).

A provider made with `memora providers add fast …` was refused as "no provider named 'fast' is
installed", and `--provider openai` — the name `memora init` gives the user's own entry — ignored
that entry and sent the request, with the key, to the public endpoint.  Names now resolve to the
user's providers first, then to plugin types, and a key bound to one endpoint is never sent to
another, whatever flags, names and environment are combined."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from memora import Agent
from memora.cli.run_cmd import choose_provider

from .conftest import Endpoint, start_endpoint

KEY_A = "sk-stored-for-A-0123456789"
ENV_KEY_A = "sk-env-for-A-0123456789"
LOOSE = "sk-unbound-from-MEMORA_API_KEY"
"""``MEMORA_API_KEY``: the environment's key, bound to no endpoint — the one the ``openai``
type sends when no provider of the user's says otherwise."""


@pytest.fixture
def two() -> Iterator[tuple[tuple[str, Endpoint], tuple[str, Endpoint]]]:
    a_url, a, a_httpd = start_endpoint()
    b_url, b, b_httpd = start_endpoint()
    yield (a_url, a), (b_url, b)
    for httpd in (a_httpd, b_httpd):
        httpd.shutdown()
        httpd.server_close()


def _home(home: Path, a_url: str, *, active: str | None) -> None:
    home.mkdir(parents=True, exist_ok=True)
    providers = {
        # made by `memora providers add fast …` + `memora keys set fast`
        "fast": {"type": "openai", "base_url": a_url, "model": "m", "api_key_name": "fast"},
        # made by `memora init --base-url A --api-key-env A_KEY`: named after its type
        "openai": {"type": "openai", "base_url": a_url, "model": "m", "api_key_env": "A_KEY"},
    }
    config: dict[str, object] = {"providers": providers}
    if active:
        config["active_provider"] = active
    (home / "config.json").write_text(json.dumps(config))
    (home / "keys.json").write_text(json.dumps({"fast": KEY_A}))
    os.chmod(home / "keys.json", 0o600)


async def test_a_key_bound_to_one_endpoint_never_reaches_another(
    tmp_path: Path,
    two: tuple[tuple[str, Endpoint], tuple[str, Endpoint]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (a_url, a), (b_url, b) = two
    monkeypatch.setenv("A_KEY", ENV_KEY_A)
    monkeypatch.setenv("MEMORA_API_KEY", LOOSE)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    project = tmp_path / "p"
    project.mkdir()
    tried = 0
    for active, named, flag, env in itertools.product(
        ("fast", "openai", None), ("fast", "openai", None), (b_url, None), (b_url, None)
    ):
        home = tmp_path / f"home-{tried}"
        _home(home, a_url, active=active)
        monkeypatch.setenv("MEMORA_HOME", str(home))
        if env:
            monkeypatch.setenv("MEMORA_BASE_URL", env)
        else:
            monkeypatch.delenv("MEMORA_BASE_URL", raising=False)
        if not (active or named or flag or env):
            continue  # nothing names an endpoint: the embedded model
        name, options = choose_provider(named, flag, "m")  # as `memora run` reads its flags
        combo = f"active={active} --provider={named} --base-url={flag} MEMORA_BASE_URL={env}"
        a.auth.clear()
        b.auth.clear()
        kwargs = {"provider": name} if name else {}
        async with Agent(
            project_path=project,
            data_dir=tmp_path / f"data-{tried}",
            config_dir=home,
            provider_options=options,
            load_entrypoints=True,
            **kwargs,
        ) as agent:
            answer = await agent.chat_text("hello")
        tried += 1
        assert "hello from the endpoint" in answer, combo
        assert not {f"Bearer {KEY_A}", f"Bearer {ENV_KEY_A}"} & set(b.auth), combo
        if named is not None and flag is None:
            # a name the user set means that provider: its endpoint and its own key
            assert b.auth == [] and a.auth, combo
            assert set(a.auth) == {f"Bearer {KEY_A if named == 'fast' else ENV_KEY_A}"}, combo
        if b.auth:
            assert set(b.auth) == {f"Bearer {LOOSE}"}, combo
    assert tried == 35


def _memora(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memora", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_run_v_says_which_provider_it_chose(tmp_path: Path, endpoint: tuple[str, Endpoint]) -> None:
    url, _ = endpoint
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMORA_", "OPENAI_"))}
    env["MEMORA_HOME"] = str(tmp_path / "home")
    project = tmp_path / "p"
    project.mkdir()
    added = _memora(env, "providers", "add", "fast", "--base-url", url, "--model", "m", cwd=project)
    assert added.returncode == 0, added.stderr
    ran = _memora(env, "-v", "run", "--provider", "fast", "hello", cwd=project)
    assert ran.returncode == 0, ran.stderr
    assert "hello from the endpoint" in ran.stdout
    assert f"chat provider: your provider 'fast' (openai at {url}" in ran.stderr
    missing = _memora(env, "run", "--provider", "nowhere", "hello", cwd=project)
    assert missing.returncode == 1
    assert "nowhere" in missing.stderr and "fast" in missing.stderr, missing.stderr


def test_models_shows_a_hostile_401_as_one_clean_line(tmp_path: Path) -> None:
    """(low) `memora models` printed a server's 401 body as it came: escape sequences that
    clear the screen and retitle the terminal, newlines that draw a fake prompt."""
    import threading
    from http.server import BaseHTTPRequestHandler

    from tests.loopback import QuietHTTPServer

    body = json.dumps(
        {
            "error": {
                "message": "\x1b[2J\x1b[31mHACKED\x1b]0;pwned\x07\n\nuser@host:~$ " + "x" * 5000
            }
        }
    ).encode()

    class Hostile(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = QuietHTTPServer(("127.0.0.1", 0), Hostile)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMORA_", "OPENAI_"))}
        env["MEMORA_HOME"] = str(tmp_path / "home")
        env["MEMORA_API_KEY"] = "sk-x"
        project = tmp_path / "p"
        project.mkdir()
        added = _memora(
            env, "providers", "add", "evil", "--base-url", url, "--model", "m", cwd=project
        )
        assert added.returncode == 0, added.stderr
        shown = _memora(env, "models", "evil", cwd=project)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert shown.returncode == 1
    assert "HACKED" in shown.stderr  # what the server said, as text
    assert "\x1b" not in shown.stderr and "\x07" not in shown.stderr
    assert shown.stderr.count("\n") == 1 and len(shown.stderr) < 600, shown.stderr


def test_default_means_what_it_says(tmp_path: Path, endpoint: tuple[str, Endpoint]) -> None:
    """`memora init` pinned a project to the user's provider of the day, so a later `memora
    providers default` was silently shadowed there; removing the default left no provider and no
    hint.  Now init leaves the choice to the user's default, a project that names one is said
    when the default changes, and removing the default says what happens next."""
    url, _ = endpoint
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMORA_", "OPENAI_"))}
    env["MEMORA_HOME"] = str(tmp_path / "home")
    project = tmp_path / "p"
    project.mkdir()
    for name in ("one", "two"):
        added = _memora(
            env, "providers", "add", name, "--base-url", url, "--model", name, cwd=project
        )
        assert added.returncode == 0, added.stderr
    assert _memora(env, "init", cwd=project).returncode == 0
    assert '"active_provider"' not in (project / ".memora" / "config.json").read_text().replace(
        '"active_provider": "NAME"', ""
    )
    switched = _memora(env, "providers", "default", "two", cwd=project)
    assert switched.returncode == 0 and "wins here" not in switched.stderr
    ran = _memora(env, "-v", "run", "hello", cwd=project)
    assert ran.returncode == 0, ran.stderr
    assert "your provider 'two'" in ran.stderr

    pinned = tmp_path / "pinned"
    pinned.mkdir()
    assert _memora(env, "init", "--provider", "one", cwd=pinned).returncode == 0
    said = _memora(env, "providers", "default", "two", cwd=pinned)
    assert said.returncode == 0
    assert "names provider 'one', which wins here" in said.stderr, said.stderr

    gone = _memora(env, "providers", "remove", "two", cwd=project)
    assert gone.returncode == 0
    assert "was the default" in gone.stderr and "memora providers default NAME (one)" in gone.stderr
