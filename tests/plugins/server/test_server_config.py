"""``server.json`` and its tokens (memora_plugin_server.config) piece by piece (#43 item 6: the
mutation runner found these behaviours unpinned): what a file may say, the limits' bounds and
defaults, what a token may do, and how tokens are stored."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from memora.errors import InvalidConfigError, InvalidInputError
from memora_plugin_server.config import (
    ServerSettings,
    TokenEntry,
    add_token,
    hash_token,
    load_server_settings,
    new_token,
    revoke_token,
    save_server_settings,
)


def _load(tmp_path: Path, data: object) -> ServerSettings:
    (tmp_path / "server.json").write_text(json.dumps(data), encoding="utf-8")
    return load_server_settings(tmp_path)


def test_defaults_and_bounds_of_the_limits(tmp_path: Path) -> None:
    settings = _load(tmp_path, {})
    assert settings.max_body_bytes == 1_048_576 and settings.rate_limit_per_minute == 600
    for key, good, bad in (
        ("max_body_bytes", [1024, 64 * 1_048_576], [1023, 64 * 1_048_576 + 1]),
        ("rate_limit_per_minute", [1, 1_000_000], [0, 1_000_001]),
    ):
        for value in good:
            assert getattr(_load(tmp_path, {key: value}), key) == value
        for value in bad:
            with pytest.raises(InvalidConfigError, match=key):
                _load(tmp_path, {key: value})


def test_a_misspelt_key_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError, match="rate_limit") as caught:
        _load(tmp_path, {"rate_limit": 60})
    assert "server.json" in caught.value.message
    entry = {"name": "alice", "hash": hash_token("t"), "acess": "read"}
    with pytest.raises(InvalidConfigError, match="acess"):
        _load(tmp_path, {"tokens": [entry]})


def test_token_names_and_scopes_are_checked(tmp_path: Path) -> None:
    ok = {"hash": hash_token("t")}
    assert _load(tmp_path, {"tokens": [{**ok, "name": "a" * 64}]}).tokens[0].name == "a" * 64
    for name in ("", "a" * 65, "has space", "semi;colon"):
        with pytest.raises(InvalidConfigError, match="name"):
            _load(tmp_path, {"tokens": [{**ok, "name": name}]})
    with pytest.raises(InvalidConfigError, match="scope"):
        _load(tmp_path, {"tokens": [{**ok, "name": "a", "scope": "x" * 201}]})
    assert (
        _load(tmp_path, {"tokens": [{**ok, "name": "a", "scope": "王芳"}]}).tokens[0].scope
        == "王芳"
    )


def test_what_a_token_may_do() -> None:
    reader = TokenEntry(name="r", hash=hash_token("t"), access="read", projects=["shop"])
    assert reader.allows("shop", write=False)
    assert not reader.allows("shop", write=True)
    assert not reader.allows("other", write=False)
    full = TokenEntry(name="f", hash=hash_token("t"))
    assert full.allows("anything", write=True)


def test_tokens_are_long_random_and_stored_hashed(tmp_path: Path) -> None:
    token = new_token()
    assert token.startswith("mem_") and len(token) >= 4 + 43  # 32 random bytes, URL-safe
    assert new_token() != token
    home = tmp_path / "new" / "home"  # made, private
    token, path = add_token(home, "alice", projects=["项目"], access="full")
    assert path == home / "server.json"
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text(encoding="utf-8")
    assert token not in text and hash_token(token) in text
    assert "项目" in text  # written as UTF-8, readable
    entry = load_server_settings(home).tokens[0]
    assert (entry.scope, entry.act_for_users) == ("alice", False)
    with pytest.raises(InvalidInputError, match="exists"):
        add_token(home, "alice", projects=[], access="read")
    with pytest.raises(InvalidInputError, match="token") as caught:
        add_token(home, "bad name", projects=[], access="read")
    assert "name" in caught.value.message
    assert revoke_token(home, "nobody") is False
    assert revoke_token(home, "alice") is True
    assert load_server_settings(home).tokens == []


def test_an_older_file_is_narrowed_when_saved(tmp_path: Path) -> None:
    (tmp_path / "server.json").write_text("{}")
    (tmp_path / "server.json").chmod(0o644)
    save_server_settings(tmp_path, ServerSettings(rate_limit_per_minute=60))
    assert stat.S_IMODE((tmp_path / "server.json").stat().st_mode) == 0o600
    assert load_server_settings(tmp_path).rate_limit_per_minute == 60
