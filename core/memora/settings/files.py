"""Config files: ``config.json`` of the user and of a project, read and validated.

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
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..errors import ErrorCode, MemoraError, describe_validation_error
from .keys import CONFIG_OPTIONS, USER_SIDE_KEYS

__all__ = [
    "EmbedderConfig",
    "MemoraConfig",
    "ProviderConfig",
    "check_secrets",
    "format_config_error",
    "read_config_file",
    "read_layer",
    "refuse_user_side_keys",
    "strip_json_comments",
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
    turn_executor: str | None = None
    """Durable turns (off when unset): the turn executor plugin that runs each turn and keeps
    its steps (``dbos``).  It decides where the turns' state goes and how a tool call left by a
    dead worker is treated, so only the user's side may set it."""
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


def refuse_user_side_keys(config: MemoraConfig, path: Path, user_dir: Path) -> None:
    found = [
        f"providers.{name}.{key}"
        for name, entry in config.providers.items()
        for key in entry.options()
        if key in USER_SIDE_KEYS
    ] + [
        f"plugins.{name}.{key}"
        for name, options in config.plugins.items()
        for key in options
        if key in USER_SIDE_KEYS
    ]
    if config.embedder is not None:
        found += [f"embedder.{key}" for key in config.embedder.options() if key in USER_SIDE_KEYS]
    if found:
        raise MemoraError(
            ErrorCode.INVALID_CONFIG,
            f"{path}: {found[0]} cannot be set in a project's config: a cloned project could "
            "send your keys to a host of its choosing. Set it in your user config "
            f"({user_dir / 'config.json'}), with a MEMORA_* variable, an Agent option or a "
            "command-line flag"
            + (
                " (the embedder, and where it sends memory text, is yours to choose)"
                if found[0].startswith("embedder.")
                else "; the project may then pick that provider by name"
            ),
            context={"path": str(path), "keys": found},
        )


def read_layer(path: Path, project_of: Path | None = None) -> dict[str, Any] | None:
    """One config file as the dict it sets (validated), or None when it does not exist.
    ``project_of`` (the user config folder) marks a project's file: user-side keys refused."""
    if not path.exists():
        return None
    if not path.is_file():
        raise MemoraError(
            ErrorCode.INVALID_CONFIG, f"{path} is not a file", context={"path": str(path)}
        )
    config = read_config_file(path)
    if project_of is not None:
        refuse_user_side_keys(config, path, project_of)
    unknown = sorted(set(config.options) - CONFIG_OPTIONS)
    if unknown:
        raise MemoraError(
            ErrorCode.INVALID_CONFIG,
            f"{path}: options.{unknown[0]} cannot be set in a config file; allowed: "
            + ", ".join(sorted(CONFIG_OPTIONS)),
            context={"path": str(path), "key": unknown[0]},
        )
    return config.model_dump(exclude_unset=True)
