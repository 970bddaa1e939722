"""Project configuration: ``.memora/config.json``.

```json
{
  "active_provider": "local",
  "providers": {
    "local": {"type": "llamacpp"},
    "deepseek": {"type": "openai", "model": "deepseek-chat", "base_url": "https://api.deepseek.com/v1",
                 "api_key_env": "DEEPSEEK_API_KEY"}
  },
  "background_provider": "local",
  "storage": "sqlite",
  "plugins": {"fetch": {"timeout": 10}},
  "options": {"max_context_tokens": 120000}
}
```

Secrets never live here: providers read API keys from the environment.  memora never writes
this file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import ErrorCode, MemoraError, describe_validation_error

__all__ = [
    "EmbedderConfig",
    "MemoraConfig",
    "ProviderConfig",
    "check_secrets",
    "create_provider_from_config",
    "format_config_error",
    "load_config",
    "read_config_file",
]

_SECRET_KEYS = {"api_key", "apikey", "secret", "token", "password"}


class ProviderConfig(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str = Field(description="The provider plugin name: openai, llamacpp, ...")

    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class EmbedderConfig(BaseModel):
    """``"embedder"``: the embedder plugin (``type``) and its options (``model``, ``base_url``,
    ...).  The string ``"openai"`` is short for ``{"type": "openai"}``."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(description="The embedder plugin name: openai, llamacpp, ...")

    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class MemoraConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    active_provider: str | None = None
    background_provider: str | None = None
    providers: dict[str, ProviderConfig] = Field(default_factory=dict)
    storage: str = "sqlite"
    session_store: str | None = None
    """Default: the session store named like ``storage`` when one exists, else ``jsonl``."""
    project_lock: str | None = None
    """Default: the lock named like ``storage`` when one exists, else ``file``."""
    approvals: Literal["read-only", "ask", "auto-edit", "full-auto"] | None = None
    """Which tool calls need the user's word (see :data:`memora.checks.ApprovalMode`).  A
    project's config may only make it stricter than the user's."""
    embedder: EmbedderConfig | None = None
    """Semantic recall (off when unset): which embedder turns memories into vectors.  Memory
    text goes to it, so only the user's side may set it (a project's config asks)."""
    plugins: dict[str, dict[str, Any]] = Field(default_factory=dict)
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("embedder", mode="before")
    @classmethod
    def _embedder_name(cls, value: Any) -> Any:
        return {"type": value} if isinstance(value, str) else value


def format_config_error(exc: ValidationError, source: str | Path) -> str:
    """``SOURCE: field.path: what is wrong`` for a config that failed validation."""
    return f"{source}: " + describe_validation_error(exc, "(root)", limit=10)


def check_secrets(config: MemoraConfig, path: Path) -> None:
    """Refuse a provider entry that holds a secret: keys are read from the environment only."""
    entries: list[tuple[str, ProviderConfig | EmbedderConfig]] = [
        (f"providers.{name}", entry) for name, entry in config.providers.items()
    ]
    if config.embedder is not None:
        entries.append(("embedder", config.embedder))
    for name, provider in entries:
        leaked = _SECRET_KEYS & {k.lower() for k in provider.options()}
        if leaked:
            raise MemoraError(
                ErrorCode.INVALID_CONFIG,
                f"{path}: {name} contains {', '.join(sorted(leaked))}; secrets are read "
                "from the environment only (e.g. MEMORA_API_KEY, or name a variable with "
                "api_key_env)",
                context={"path": str(path)},
            )


def strip_json_comments(text: str) -> str:
    """JSON with ``//`` line comments and ``/* */`` block comments (as ``memora init`` writes
    them) turned into plain JSON; comment markers inside strings are kept.  Line numbers stay
    the same, so JSON errors still point at the right line."""
    out: list[str] = []
    i, n = 0, len(text)
    in_string = False
    while i < n:
        ch = text[i]
        if in_string:
            out.append(ch)
            if ch == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if ch == '"':
                in_string = False
            i += 1
        elif ch == '"':
            in_string = True
            out.append(ch)
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            block = text[i : n if end < 0 else end + 2]
            out.append("\n" * block.count("\n"))
            i = n if end < 0 else end + 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def read_config_file(path: Path) -> MemoraConfig:
    """One config file parsed and validated: ``INVALID_CONFIG`` naming the file and the field
    for bad JSON, a bad field or a secret in a provider entry."""
    try:
        data = json.loads(strip_json_comments(path.read_text(encoding="utf-8-sig")))
    except (OSError, ValueError) as exc:
        raise MemoraError(
            ErrorCode.INVALID_CONFIG,
            f"{path} is not valid JSON: {exc}",
            context={"path": str(path)},
        ) from exc
    try:
        config = MemoraConfig.model_validate(data)
    except ValidationError as exc:
        raise MemoraError(
            ErrorCode.INVALID_CONFIG, format_config_error(exc, path), context={"path": str(path)}
        ) from exc
    check_secrets(config, path)
    return config


def load_config(path: str | Path, *, plugins: Any = None) -> MemoraConfig:
    """Read ``path`` (a ``config.json`` file, or a project folder holding ``.memora/config.json``).

    A missing file gives the defaults; a malformed one raises ``INVALID_CONFIG`` naming the field.
    A project's file (a folder, or a ``.memora/config.json`` outside the user config folder) goes
    through the same guard as the Agent's settings: only what a project may set is returned, plus
    the requests the user allowed for that project (``memora trust``); a key that picks where
    requests go (``base_url``...) is refused with ``INVALID_CONFIG``.  ``plugins``: the plugin
    manager whose factories' declarations say what a project may set (default: the installed
    plugins).
    """
    from .settings import read_project_layer, user_config_dir

    p = Path(path)
    project = p if p.is_dir() else None
    if p.is_dir():
        p = p / ".memora" / "config.json"
    elif p.name == "config.json" and p.parent.name == ".memora":
        user_dir = user_config_dir()
        if os.path.abspath(p.parent) != os.path.abspath(user_dir):
            project = p.parent.parent
    if not p.exists():
        return MemoraConfig()
    if project is not None:
        layer, _, _ = read_project_layer(project, user_config_dir(), plugins=plugins)
        config = MemoraConfig.model_validate(layer or {})
    else:
        config = read_config_file(p)
    if config.active_provider and config.active_provider not in config.providers:
        raise MemoraError(
            ErrorCode.INVALID_CONFIG,
            f"{p}: active_provider {config.active_provider!r} is not one of the providers "
            f"({', '.join(config.providers) or 'none configured'})",
        )
    return config


def create_provider_from_config(name: str | None, config: MemoraConfig, plugins: Any = None) -> Any:
    """Create the provider called ``name`` (default: ``active_provider``) through its plugin."""
    from .plugins import create_plugin_manager

    name = name or config.active_provider
    if not name:
        raise MemoraError(
            ErrorCode.INVALID_CONFIG, "no provider named and no active_provider in the config"
        )
    entry = config.providers.get(name)
    if entry is None:
        raise MemoraError(
            ErrorCode.NOT_FOUND,
            f"no provider {name!r} in the config; configured: {', '.join(config.providers) or 'none'}",
        )
    pm = plugins or create_plugin_manager()
    return pm.create("provider", entry.type, entry.options())
