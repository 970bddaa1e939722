"""A fresh-eyed hostile review of #68 item 5 (names mean what the user set): combinations the
first test did not try, each as a real `Agent` against two OpenAI-compatible endpoints on
127.0.0.1 that record the keys they were sent.

Found: a provider of the user's that binds a key (``api_key_name`` / ``api_key_env``) and names
no ``base_url`` — OpenAI's own endpoint, its type's default — sent that key to whatever
``MEMORA_BASE_URL`` named, with ``--provider NAME`` or as the default provider: the type reads
the variable when the entry gives no endpoint.  A key bound to one endpoint reached another."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memora import Agent
from memora.cli.run_cmd import choose_provider
from memora.errors import MemoraError

from .conftest import Endpoint, start_endpoint

STORED = "sk-stored-for-openai-0123456789"
BOUND_ENV = "sk-env-bound-to-openai-0123456789"
LOOSE = "sk-unbound-from-MEMORA_API_KEY"


@pytest.fixture
def endpoint_b() -> Iterator[tuple[str, Endpoint]]:
    url, seen, httpd = start_endpoint()
    yield url, seen
    httpd.shutdown()
    httpd.server_close()


def _home(home: Path, *, active: str | None) -> None:
    """Two providers of the user's for OpenAI's own endpoint (no ``base_url``: the type's
    default), one with a stored key, one with a key from a variable it names."""
    home.mkdir(parents=True, exist_ok=True)
    providers = {
        "cloud": {"type": "openai", "model": "m", "api_key_name": "cloud"},
        "cloud-env": {"type": "openai", "model": "m", "api_key_env": "CLOUD_KEY"},
    }
    config: dict[str, object] = {"providers": providers}
    if active:
        config["active_provider"] = active
    (home / "config.json").write_text(json.dumps(config))
    (home / "keys.json").write_text(json.dumps({"cloud": STORED}))
    os.chmod(home / "keys.json", 0o600)


async def test_a_key_for_the_default_endpoint_never_follows_memora_base_url(
    tmp_path: Path, endpoint_b: tuple[str, Endpoint], monkeypatch: pytest.MonkeyPatch
) -> None:
    b_url, b = endpoint_b
    monkeypatch.setenv("CLOUD_KEY", BOUND_ENV)
    monkeypatch.setenv("MEMORA_API_KEY", LOOSE)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("MEMORA_BASE_URL", b_url)  # another endpoint, named by the environment
    project = tmp_path / "p"
    project.mkdir()
    combos = list(itertools.product(("cloud", "cloud-env", None), ("cloud", "cloud-env", None)))
    leaks: list[str] = []
    for n, (active, named) in enumerate(combos):
        home = tmp_path / f"home-{n}"
        _home(home, active=active)
        monkeypatch.setenv("MEMORA_HOME", str(home))
        name, options = choose_provider(named, None, "m")  # as `memora run` reads its flags
        kwargs: dict[str, Any] = {"provider": name} if name else {}
        b.auth.clear()
        async with Agent(
            project_path=project,
            data_dir=tmp_path / f"data-{n}",
            config_dir=home,
            provider_options=options,
            load_entrypoints=True,
            **kwargs,
        ) as agent:
            # OpenAI's own endpoint is out of a test's reach (conftest refuses it): what
            # matters is what B was sent
            with contextlib.suppress(MemoraError):
                await agent.chat_text("hello")
        # B is asked (MEMORA_BASE_URL names it), with the environment's loose key only
        if set(b.auth) != {f"Bearer {LOOSE}"}:
            leaks.append(f"active={active} --provider={named}: B got {sorted(map(str, b.auth))}")
    assert leaks == [], "\n".join(leaks)


async def test_the_embedders_key_stays_with_its_endpoint_too(
    tmp_path: Path, endpoint_b: tuple[str, Endpoint], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same rule for the config's ``embedder``: bound to OpenAI's endpoint by its key and
    no ``base_url``, it sent the key where ``MEMORA_BASE_URL`` pointed; and a host's
    ``embedder_options`` naming another ``base_url`` were merged over the entry's key."""
    from memora.memory.types import NewMemory
    from memora.testing import ScriptedProvider

    b_url, b = endpoint_b
    monkeypatch.setenv("MEMORA_API_KEY", LOOSE)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    project = tmp_path / "p"
    project.mkdir()
    for n, (env, host_url) in enumerate(((b_url, None), (None, b_url))):
        home = tmp_path / f"home-{n}"
        home.mkdir()
        embedder = {"type": "openai", "model": "e", "api_key_name": "cloud"}
        (home / "config.json").write_text(json.dumps({"embedder": embedder}))
        (home / "keys.json").write_text(json.dumps({"cloud": STORED}))
        os.chmod(home / "keys.json", 0o600)
        monkeypatch.setenv("MEMORA_HOME", str(home))
        if env:
            monkeypatch.setenv("MEMORA_BASE_URL", env)
        else:
            monkeypatch.delenv("MEMORA_BASE_URL", raising=False)
        b.auth.clear()
        extra: dict[str, Any] = (
            {"embedder": "openai", "embedder_options": {"base_url": host_url}} if host_url else {}
        )
        async with Agent(
            project_path=project,
            data_dir=tmp_path / f"data-{n}",
            config_dir=home,
            provider=ScriptedProvider(),
            load_entrypoints=True,
            **extra,
        ) as agent:
            await agent.memory.write(NewMemory("a note to embed"))
            for _ in range(100):  # embedded in the background, where it is sent
                if b.auth:
                    break
                await asyncio.sleep(0.02)
        # B was asked (the embedder ran), with the environment's loose key, never the bound one
        assert set(b.auth) == {f"Bearer {LOOSE}"}, (env, host_url, b.auth)


def test_models_never_sends_a_bound_key_where_memora_base_url_points(
    tmp_path: Path, endpoint_b: tuple[str, Endpoint]
) -> None:
    """``memora models NAME`` built NAME's provider from its entry alone — a key and no
    ``base_url`` — and the type asked ``MEMORA_BASE_URL``'s endpoint for its models, with the
    key.  Now it says why it does not."""
    b_url, b = endpoint_b
    home = tmp_path / "home"
    _home(home, active="cloud")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMORA_", "OPENAI_"))}
    env.update({"MEMORA_HOME": str(home), "MEMORA_BASE_URL": b_url, "CLOUD_KEY": BOUND_ENV})
    project = tmp_path / "p"
    project.mkdir()
    for name in ("cloud", "cloud-env"):
        shown = subprocess.run(
            [sys.executable, "-m", "memora", "models", name],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert shown.returncode == 1, shown.stdout + shown.stderr
        assert "MEMORA_BASE_URL" in shown.stderr and "base_url" in shown.stderr, shown.stderr
    assert b.auth == []  # not asked at all
