"""Who may call `memora serve`: bearer tokens stored hashed (scoped to projects, read-only or
full), this machine only without them (by address and by Host), origins, the rate limit — each
refusal a JSON error with a code; and `memora serve-tokens` managing the user's server.json."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import httpx2
import pytest
from click.testing import CliRunner

from memora.cli.main import cli
from memora.errors import InvalidConfigError
from memora.testing import ScriptedProvider, text
from memora_plugin_server import create_app
from memora_plugin_server.config import (
    ServerSettings,
    TokenEntry,
    hash_token,
    load_server_settings,
)

from .conftest import project_dir, read_events, scripted, serve


def _opts(tmp_path: Path) -> dict[str, Any]:
    return scripted(tmp_path, ScriptedProvider([], default=text("hi")))


def _settings(**kwargs: Any) -> ServerSettings:
    return ServerSettings(
        tokens=[
            TokenEntry(name="admin", hash=hash_token("tok-admin")),
            TokenEntry(name="reader", hash=hash_token("tok-reader"), access="read"),
            TokenEntry(name="other", hash=hash_token("tok-other"), projects=["elsewhere"]),
        ],
        **kwargs,
    )


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_tokens_scope_projects_and_access(tmp_path: Path) -> None:
    project = project_dir(tmp_path)
    async with (
        serve(project, settings=_settings(), **_opts(tmp_path)) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=30) as client,
    ):
        sessions = "/v1/projects/proj/sessions"
        r = await client.get(sessions)
        assert r.status_code == 401 and r.json()["error"]["code"] == "UNAUTHORIZED"
        assert r.headers["www-authenticate"].startswith("Bearer")
        r = await client.get(sessions, headers=_auth("tok-wrong"))
        assert r.status_code == 401 and r.json()["error"]["message"] == "unknown token"
        assert (await client.get("/health")).status_code == 200  # public

        r = await client.post(sessions, json={}, headers=_auth("tok-admin"))
        assert r.status_code == 201
        sid = r.json()["id"]
        assert (await client.get(sessions, headers=_auth("tok-reader"))).status_code == 200
        r = await client.post(sessions, json={}, headers=_auth("tok-reader"))
        assert r.status_code == 403 and "read-only" in r.json()["error"]["message"]
        r = await client.get(sessions, headers=_auth("tok-other"))
        assert r.status_code == 403 and r.json()["error"]["code"] == "FORBIDDEN"
        assert (await client.get("/v1/projects", headers=_auth("tok-other"))).json() == {
            "projects": []
        }

        async with client.stream(
            "POST",
            f"{sessions}/{sid}/turns",
            json={"text": "hello"},
            headers=_auth("tok-admin"),
        ) as r:
            assert (await read_events(r))[-1].type == "done"
        # with a token, a proxied or remote Host is fine
        r = await client.get(sessions, headers={**_auth("tok-admin"), "Host": "memora.example"})
        assert r.status_code == 200


async def test_without_tokens_only_this_machine(tmp_path: Path) -> None:
    project = project_dir(tmp_path)
    async with (
        serve(project, **_opts(tmp_path)) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=30) as client,
    ):
        assert (await client.get("/v1/projects/proj/sessions")).status_code == 200
        # a name that resolves to 127.0.0.1 for an attacker's page (DNS rebinding) is refused
        r = await client.get("/v1/projects/proj/sessions", headers={"Host": "evil.example:80"})
        assert r.status_code == 403 and r.json()["error"]["code"] == "LOOPBACK_ONLY"
        # nor a request a local reverse proxy passed on (it comes from 127.0.0.1 too)
        for header in ("X-Forwarded-For", "Forwarded", "X-Real-IP"):
            r = await client.get("/v1/projects/proj/sessions", headers={header: "203.0.113.9"})
            assert r.status_code == 403 and r.json()["error"]["code"] == "LOOPBACK_ONLY"
        # a page on another origin may not drive it (no CORS configured)
        r = await client.post(
            "/v1/projects/proj/sessions", json={}, headers={"Origin": "https://evil.example"}
        )
        assert r.status_code == 403 and r.json()["error"]["code"] == "ORIGIN_REFUSED"
        own = await client.post("/v1/projects/proj/sessions", json={}, headers={"Origin": srv.url})
        assert own.status_code == 201

    # a client on another machine (simulated at the ASGI level: tests stay on loopback)
    app = create_app(project, **_opts(tmp_path))
    transport = httpx2.ASGITransport(app=app, client=("192.0.2.7", 4242))
    async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1") as remote:
        r = await remote.get("/v1/projects/proj/sessions")
        assert r.status_code == 403 and r.json()["error"]["code"] == "LOOPBACK_ONLY"
        assert "memora serve-tokens add" in r.json()["error"]["message"]


async def test_cors_only_when_configured_and_the_rate_limit(tmp_path: Path) -> None:
    project = project_dir(tmp_path)
    settings = _settings(cors_origins=["https://app.example"], rate_limit_per_minute=60)
    async with (
        serve(project, settings=settings, **_opts(tmp_path)) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=30) as client,
    ):
        pre = await client.options(
            "/v1/projects/proj/sessions",
            headers={
                "Origin": "https://app.example",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization,content-type",
            },
        )
        assert pre.status_code == 200
        assert pre.headers["access-control-allow-origin"] == "https://app.example"
        r = await client.get(
            "/v1/projects/proj/sessions",
            headers={**_auth("tok-admin"), "Origin": "https://app.example"},
        )
        assert r.status_code == 200
        assert r.headers["access-control-allow-origin"] == "https://app.example"

        # 60 a minute: a burst of 10, then refusals with Retry-After; another token is not
        # slowed by the first one's burst
        codes = [
            (await client.get("/v1/projects", headers=_auth("tok-reader"))).status_code
            for _ in range(12)
        ]
        assert codes[:9] == [200] * 9 and codes[-1] == 429
        limited = await client.get("/v1/projects", headers=_auth("tok-reader"))
        assert limited.json()["error"]["code"] == "RATE_LIMITED"
        assert int(limited.headers["retry-after"]) >= 1
        assert (await client.get("/v1/projects", headers=_auth("tok-other"))).status_code == 200


def test_serve_tokens_commands_store_only_hashes(tmp_path: Path) -> None:
    user = tmp_path / "user"
    runner = CliRunner()
    added = runner.invoke(
        cli,
        [
            "serve-tokens",
            "add",
            "ci",
            "--project",
            "proj",
            "--read-only",
            "--config-dir",
            str(user),
        ],
    )
    assert added.exit_code == 0, added.output
    token = added.stdout.strip().splitlines()[-1]
    assert token.startswith("mem_") and len(token) > 40
    path = user / "server.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert token not in path.read_text()
    entry = load_server_settings(user).token_for(token)
    assert entry is not None and entry.access == "read" and entry.projects == ["proj"]

    again = runner.invoke(cli, ["serve-tokens", "add", "ci", "--config-dir", str(user)])
    assert again.exit_code != 0 and "exists" in again.output
    listed = runner.invoke(cli, ["serve-tokens", "list", "--json", "--config-dir", str(user)])
    rows = json.loads(listed.stdout)["tokens"]
    assert [r["name"] for r in rows] == ["ci"] and "hash" not in rows[0]
    # the last token: said, and only with --yes (a running server then refuses everyone)
    last = runner.invoke(cli, ["serve-tokens", "revoke", "ci", "--config-dir", str(user)])
    assert last.exit_code == 2 and "last token" in last.output and "--yes" in last.output
    assert [t.name for t in load_server_settings(user).tokens] == ["ci"]
    revoke = ["serve-tokens", "revoke", "ci", "--yes", "--config-dir", str(user)]
    revoked = runner.invoke(cli, revoke)
    assert revoked.exit_code == 0
    assert "refuse every request" in revoked.stderr
    assert load_server_settings(user).tokens == []
    gone = runner.invoke(cli, ["serve-tokens", "revoke", "ci", "--config-dir", str(user)])
    assert gone.exit_code != 0 and "no token named 'ci'" in gone.output


def test_a_malformed_server_json_names_the_field(tmp_path: Path) -> None:
    (tmp_path / "server.json").write_text('{"tokens": [{"name": "x", "hash": "md5:1"}]}')
    with pytest.raises(InvalidConfigError, match=r"server.json: tokens.0.hash"):
        load_server_settings(tmp_path)
    (tmp_path / "server.json").write_text('{"cors_origins": ["evil.example"]}')
    with pytest.raises(InvalidConfigError, match="cors_origins"):
        load_server_settings(tmp_path)


def test_serve_refuses_to_start_with_one_line(tmp_path: Path) -> None:
    """A project memora cannot open (here: locked by another Agent) is one clear line and exit 1
    before anything listens, not a traceback from a failed server start-up."""
    from memora.security.lock import ProjectLock

    project = project_dir(tmp_path)
    user = tmp_path / "user"
    user.mkdir()
    (user / "config.json").write_text(
        json.dumps(
            {
                "providers": {
                    "local": {"type": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"}
                },
                "active_provider": "local",
            }
        )
    )
    lock = ProjectLock(project)
    lock.acquire()
    try:
        result = CliRunner().invoke(
            cli, ["serve", "--project", str(project), "--port", "1", "--config-dir", str(user)]
        )
    finally:
        lock.release()
    assert result.exit_code == 1, result.output
    assert result.output.startswith("memora: error: [PROJECT_LOCKED] project ")
    assert result.output.count("\n") == 1  # one line


async def test_guessing_tokens_and_flooding_public_routes_are_limited(tmp_path: Path) -> None:
    """#43: requests with a wrong token and the public routes were not rate-limited, and a
    second loopback address or another address of one IPv6 network started afresh."""
    from memora_plugin_server.guard import client_key

    project = project_dir(tmp_path)
    app = create_app(project, settings=_settings(rate_limit_per_minute=60), **_opts(tmp_path))

    def client(host: str) -> httpx2.AsyncClient:
        transport = httpx2.ASGITransport(app=app, client=(host, 4242))
        return httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1")

    async with app.router.lifespan_context(app):
        async with client("198.51.100.7") as guesser:
            codes = [
                (await guesser.get("/v1/projects", headers=_auth(f"tok-{n}"))).status_code
                for n in range(12)
            ]
            assert codes[:10] == [401] * 10 and codes[-1] == 429, codes
            refused = await guesser.get("/v1/projects", headers=_auth("tok-more"))
            assert refused.json()["error"]["code"] == "RATE_LIMITED"
            assert "without a valid token" in refused.json()["error"]["message"]
            assert int(refused.headers["retry-after"]) >= 1
            # a caller with a valid token is not slowed by the guesses of its address
            assert (
                await guesser.get("/v1/projects", headers=_auth("tok-admin"))
            ).status_code == 200
        async with client("198.51.100.8") as honest:
            assert (await honest.get("/v1/projects", headers=_auth("tok-x"))).status_code == 401

        # public routes: bursts of 10 a address at 60 a minute, then 429
        async with client("203.0.113.5") as prober:
            codes = [(await prober.get("/health")).status_code for _ in range(12)]
            assert codes[:9] == [200] * 9 and codes[-1] == 429, codes
        # another address of the same IPv6 /64 shares the allowance; another /64 does not
        async with client("2001:db8:1:2::1") as first:
            for _ in range(10):
                await first.get("/health")
        async with client("2001:db8:1:2::99") as second:
            assert (await second.get("/health")).status_code == 429
        async with client("2001:db8:1:3::1") as elsewhere:
            assert (await elsewhere.get("/health")).status_code == 200

    assert client_key("127.0.0.2") == client_key("127.0.0.1") == client_key("::1")
    assert client_key("::ffff:192.0.2.1") == client_key("192.0.2.1")
