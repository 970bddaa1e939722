"""The server's own settings: ``server.json`` in the user's memora folder (never a project's).

What may reach the service and what it may do is the user's choice, so it is read only from the
user config folder (``$MEMORA_HOME``, else ``~/.config/memora``), next to ``config.json``:

.. code-block:: json

    {
      "tokens": [{"name": "alice", "hash": "sha256:…", "projects": ["*"], "access": "full",
                  "scope": "alice", "act_for_users": false}],
      "cors_origins": ["https://app.example.com"],
      "max_body_bytes": 1048576,
      "rate_limit_per_minute": 600
    }

Tokens are stored as their SHA-256 (a token is 32 random bytes: no salt or slow hash needed to
keep it from being guessed); ``memora serve-tokens add`` prints a new token once and stores only
its hash.  The file is written atomically and private (0600).

A token names its user: ``scope`` is the memory scope its requests act in (``memora
serve-tokens add alice`` makes scope ``alice``; ``--no-scope``: the project's unscoped memory and
sessions).  ``act_for_users`` lets a backend that serves many people act for any of them by
naming the user on each request (the ``X-Memora-User`` header, a body's ``user``, A2A message
metadata ``user``, AG-UI ``forwardedProps.user``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from memora import check_scope
from memora.errors import (
    InvalidConfigError,
    InvalidInputError,
    MemoraError,
    describe_validation_error,
)
from memora.security.atomic import atomic_write_bytes

__all__ = [
    "FILE_NAME",
    "MAX_OPEN_SESSIONS",
    "ServerSettings",
    "TokenEntry",
    "hash_token",
    "load_server_settings",
    "new_token",
    "save_server_settings",
]

FILE_NAME = "server.json"
MAX_OPEN_SESSIONS = 256
"""The default cap on the sessions whose Agent a server process keeps open between requests
(``memora serve --max-open-sessions``; see :class:`~.hub.Hub`)."""
TOKEN_PREFIX = "mem_"


class TokenEntry(BaseModel):
    """One bearer token: who it is (``name``), its hash, the projects it may use (``*``: all),
    whether it may change anything (``full``) or only read (``read``), the memory scope it acts
    in (``scope``; ``None``: the project's unscoped) and whether it may act for other users
    (``act_for_users``)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.@-]+$")
    hash: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    projects: list[str] = Field(default_factory=lambda: ["*"])
    access: Literal["read", "full"] = "full"
    created_at: float = 0.0
    scope: str | None = None
    """The user (memory scope) this token's requests act in; ``None``: unscoped (a token from
    before scopes, or one added with ``--no-scope``)."""
    act_for_users: bool = False
    """May name another user on a request and act in that user's scope (a backend serving
    many people)."""

    @field_validator("scope")
    @classmethod
    def _scope(cls, value: str | None) -> str | None:
        try:
            return check_scope(value, "scope")
        except MemoraError as exc:
            raise ValueError(exc.message) from None

    def allows(self, project: str, *, write: bool) -> bool:
        if write and self.access != "full":
            return False
        return "*" in self.projects or project in self.projects


class ServerSettings(BaseModel):
    """``server.json``: tokens, CORS origins and limits (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    tokens: list[TokenEntry] = Field(default_factory=list)
    cors_origins: list[str] = Field(default_factory=list)
    max_body_bytes: int = Field(default=1_048_576, ge=1024, le=64 * 1_048_576)
    rate_limit_per_minute: int = Field(default=600, ge=1, le=1_000_000)
    """Requests per minute per token (or per client address without one); bursts up to a
    tenth of it (at least 10)."""

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, value: list[str]) -> list[str]:
        for origin in value:
            if origin != "*" and not origin.startswith(("http://", "https://")):
                raise ValueError(f"{origin!r} is not an origin (http(s)://host[:port]) or '*'")
        return [o.rstrip("/") for o in value]

    def token_for(self, presented: str) -> TokenEntry | None:
        """The entry whose hash is ``presented``'s (compared in constant time), else None."""
        digest = hash_token(presented)
        found = None
        for entry in self.tokens:
            if hmac.compare_digest(entry.hash, digest):
                found = entry
        return found


def hash_token(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def settings_path(user_dir: Path) -> Path:
    return user_dir / FILE_NAME


def load_server_settings(user_dir: Path) -> ServerSettings:
    """``server.json`` from ``user_dir`` (defaults when there is none); a malformed file is an
    ``INVALID_CONFIG`` naming the file and the field."""
    path = settings_path(user_dir)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return ServerSettings()
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise InvalidConfigError(f"{path}: not JSON ({exc})", context={"path": str(path)}) from exc
    try:
        return ServerSettings.model_validate(data)
    except ValidationError as exc:
        raise InvalidConfigError(
            f"{path}: " + describe_validation_error(exc, "(top level)", limit=1),
            context={"path": str(path)},
        ) from exc


def save_server_settings(user_dir: Path, settings: ServerSettings) -> Path:
    """Write ``server.json`` atomically, readable by its owner only."""
    path = settings_path(user_dir)
    user_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    data = json.dumps(settings.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n"
    atomic_write_bytes(path, data.encode("utf-8"))
    os.chmod(path, 0o600)
    return path


_SAME: Any = object()


def add_token(
    user_dir: Path,
    name: str,
    *,
    projects: list[str],
    access: Literal["read", "full"],
    scope: str | None = _SAME,
    act_for_users: bool = False,
) -> tuple[str, Path]:
    """A new token for ``name``: stored hashed, returned once (the caller shows it).  Its
    requests act in memory scope ``scope`` (default: ``name``; ``None``: unscoped)."""
    settings = load_server_settings(user_dir)
    if any(t.name == name for t in settings.tokens):
        raise InvalidInputError(
            f"a token named {name!r} exists; revoke it first (memora serve-tokens revoke {name})",
            context={"name": name},
        )
    token = new_token()
    try:
        entry = TokenEntry(
            name=name,
            hash=hash_token(token),
            projects=projects or ["*"],
            access=access,
            created_at=time.time(),
            scope=name if scope is _SAME else scope,
            act_for_users=act_for_users,
        )
    except ValidationError as exc:
        raise InvalidInputError(
            "token " + describe_validation_error(exc, "token", limit=1), context={"name": name}
        ) from exc
    settings.tokens.append(entry)
    return token, save_server_settings(user_dir, settings)


def revoke_token(user_dir: Path, name: str) -> bool:
    settings = load_server_settings(user_dir)
    kept = [t for t in settings.tokens if t.name != name]
    if len(kept) == len(settings.tokens):
        return False
    settings.tokens = kept
    save_server_settings(user_dir, settings)
    return True


def describe(settings: ServerSettings) -> list[dict[str, Any]]:
    """The tokens without their hashes (for ``memora serve-tokens list``)."""
    return [
        {
            "name": t.name,
            "projects": t.projects,
            "access": t.access,
            "scope": t.scope,
            "act_for_users": t.act_for_users,
            "created_at": t.created_at,
        }
        for t in settings.tokens
    ]
