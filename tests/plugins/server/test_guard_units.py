"""The server's guard piece by piece (#43 item 6: the mutation runner found these behaviours
unpinned): whose allowance a request draws on, what counts as this machine, who may see the
project names on ``/ready``, the bearer scheme, and ``server.json`` followed while running."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest

from memora.testing import ScriptedProvider, text
from memora_plugin_server import create_app
from memora_plugin_server.config import (
    ServerSettings,
    TokenEntry,
    add_token,
    hash_token,
    load_server_settings,
)
from memora_plugin_server.guard import Guard, client_key, host_name, is_loopback, scope_for

from .conftest import project_dir, scripted


def test_whose_allowance_a_request_draws_on() -> None:
    assert client_key(None) == "ip:?" and client_key("") == "ip:?"
    assert client_key("testclient") == "ip:testclient"  # not an address: itself
    assert client_key("198.51.100.7") == "ip:198.51.100.7"
    assert client_key("127.0.0.2") == client_key("::1") == "ip:loopback"
    assert client_key("::ffff:198.51.100.7") == "ip:198.51.100.7"
    assert client_key("[2001:db8::1]") == client_key("2001:db8::ffff") == "ip:2001:db8::/64"


def test_what_is_this_machine() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("[::1]") and is_loopback("localhost")
    assert not is_loopback("") and not is_loopback(None) and not is_loopback("evil.test")
    assert not is_loopback("localhost.evil.test")
    assert host_name("localhost:8000") == "localhost"
    assert host_name("[::1]:8000") == "[::1]"
    assert host_name("127.0.0.1:80@evil.test") == ""
    assert host_name("a b") == ""


def test_acting_for_a_user_names_the_refusal() -> None:
    owner = TokenEntry(name="owner", hash=hash_token("t"), scope=None)
    with pytest.raises(Exception, match="it acts as the project"):
        scope_for(owner, "alice")
    alice = TokenEntry(name="alice", hash=hash_token("t"), scope="alice")
    with pytest.raises(Exception, match="it acts as alice"):
        scope_for(alice, "bob")
    assert scope_for(alice, "alice") == "alice"


def _client(app: Any, host: str = "127.0.0.1") -> httpx2.AsyncClient:
    transport = httpx2.ASGITransport(app=app, client=(host, 4242))
    return httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1")


def _app(tmp_path: Path, **kwargs: Any) -> Any:
    return create_app(
        project_dir(tmp_path),
        **kwargs,
        **scripted(tmp_path, ScriptedProvider([], default=text("hi"))),
    )


async def test_ready_names_the_projects_to_this_machine_only(tmp_path: Path) -> None:
    app = _app(tmp_path)
    async with app.router.lifespan_context(app):
        async with _client(app) as local:
            assert "projects" in (await local.get("/ready")).json()
            proxied = await local.get("/ready", headers={"X-Forwarded-For": "203.0.113.9"})
            assert proxied.json() == {"status": "ready"}
            rebound = await local.get("/ready", headers={"Host": "evil.test"})
            assert rebound.json() == {"status": "ready"}
        async with _client(app, "198.51.100.7") as remote:
            assert (await remote.get("/ready")).json() == {"status": "ready"}


async def test_a_valid_token_in_another_scheme_is_refused(tmp_path: Path) -> None:
    settings = ServerSettings(tokens=[TokenEntry(name="admin", hash=hash_token("tok-admin"))])
    app = _app(tmp_path, settings=settings)
    async with app.router.lifespan_context(app), _client(app) as c:
        basic = await c.get("/v1/projects", headers={"Authorization": "Basic tok-admin"})
        assert basic.status_code == 401
        assert "a bearer token is required" in basic.json()["error"]["message"]
        assert basic.headers["www-authenticate"] == 'Bearer realm="memora"'
        empty = await c.get("/v1/projects", headers={"Authorization": "Bearer "})
        assert empty.status_code == 401 and "required" in empty.json()["error"]["message"]
        wrong = await c.get("/v1/projects", headers={"Authorization": "Bearer nope"})
        assert wrong.json()["error"]["message"] == "unknown token"
        assert 'error="invalid_token"' in wrong.headers["www-authenticate"]
        # the token shows the names; a wrong one does not
        ok = {"Authorization": "Bearer tok-admin"}
        assert "projects" in (await c.get("/ready", headers=ok)).json()
        assert (
            "projects" not in (await c.get("/ready", headers={"Authorization": "Bearer x"})).json()
        )
        assert (
            "projects" not in (await c.get("/ready", headers={"Authorization": "tok-admin"})).json()
        )


async def test_the_refusals_say_the_allowance(tmp_path: Path) -> None:
    settings = ServerSettings(
        tokens=[TokenEntry(name="admin", hash=hash_token("tok-admin"))], rate_limit_per_minute=60
    )
    app = _app(tmp_path, settings=settings)
    async with app.router.lifespan_context(app), _client(app, "198.51.100.8") as c:
        ok = {"Authorization": "Bearer tok-admin"}
        codes = [(await c.get("/v1/projects", headers=ok)).status_code for _ in range(11)]
        assert codes == [200] * 10 + [429]
        limited = await c.get("/v1/projects", headers=ok)
        assert limited.json()["error"]["message"] == "more than 60 requests a minute"
        for _ in range(10):
            await c.get("/v1/projects", headers={"Authorization": "Bearer guess"})
        guessed = await c.get("/v1/projects", headers={"Authorization": "Bearer guess"})
        assert guessed.json()["error"]["message"] == (
            "more than 30 requests without a valid token a minute"
        )


def _write(folder: Path, data: dict[str, Any]) -> None:
    path = folder / "server.json"
    path.write_text(json.dumps(data))
    os.utime(path, ns=(time.time_ns(), time.time_ns()))


async def test_server_json_is_followed_while_running(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    home = tmp_path / "home"
    home.mkdir()  # no server.json yet: the defaults, and no failure looking for one
    token, _ = add_token(home, "alice", projects=["*"], access="full")
    app = _app(tmp_path, settings=load_server_settings(home), settings_dir=home)
    alice = {"Authorization": f"Bearer {token}"}
    async with app.router.lifespan_context(app), _client(app) as c:
        assert (await c.get("/v1/projects", headers=alice)).status_code == 200
        bob, _ = add_token(home, "bob", projects=["*"], access="full")
        time.sleep(1.1)  # looked at once a second at most, however long since the last request
        assert (
            await c.get("/v1/projects", headers={"Authorization": f"Bearer {bob}"})
        ).status_code == 200
        # a lower limit applies to the buckets at once
        data = json.loads((home / "server.json").read_text())
        data["rate_limit_per_minute"] = 60
        _write(home, data)
        time.sleep(1.1)
        codes = [(await c.get("/v1/projects", headers=alice)).status_code for _ in range(12)]
        assert codes[-1] == 429 and codes.count(200) == 10, codes
        # an unchanged file is not read again
        caplog.set_level(logging.INFO, logger="memora.server")
        caplog.clear()
        time.sleep(1.1)
        await c.get("/v1/projects", headers={"Authorization": f"Bearer {bob}"})
        assert not [r for r in caplog.records if "read again" in r.getMessage()]
        # a broken edit keeps the settings in force, said once
        (home / "server.json").write_text("{not json")
        time.sleep(1.1)
        assert (
            await c.get("/v1/projects", headers={"Authorization": f"Bearer {bob}"})
        ).status_code == 200
        time.sleep(1.1)
        await c.get("/v1/projects", headers={"Authorization": f"Bearer {bob}"})
        warned = [r for r in caplog.records if "keeps its previous settings" in r.getMessage()]
        assert len(warned) == 1, [r.getMessage() for r in caplog.records]
        # fixed again: read, and said so
        data["tokens"] = [t for t in data["tokens"] if t["name"] != "bob"]
        _write(home, data)
        time.sleep(1.1)
        gone = await c.get("/v1/projects", headers={"Authorization": f"Bearer {bob}"})
        assert gone.status_code == 401
        assert [r for r in caplog.records if "read again" in r.getMessage()]


def test_closing_the_guard_lets_go_of_the_rate_file(tmp_path: Path) -> None:
    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = open_fds()
    guard = Guard(ServerSettings(), rate_file=tmp_path / "rate")
    assert open_fds() > before  # the file (and the map's own copy of it)
    guard.close()
    assert open_fds() == before


async def test_a_server_started_without_server_json_follows_the_first_one(tmp_path: Path) -> None:
    home = tmp_path / "empty"
    home.mkdir()
    app = _app(tmp_path, settings_dir=home)
    async with app.router.lifespan_context(app), _client(app) as c:
        assert (await c.get("/v1/projects")).status_code == 200  # this machine, no token yet
        token, _ = add_token(home, "alice", projects=["*"], access="full")
        time.sleep(1.1)
        assert (await c.get("/v1/projects")).status_code == 401  # tokens now: one is needed
        ok = await c.get("/v1/projects", headers={"Authorization": f"Bearer {token}"})
        assert ok.status_code == 200
