"""`memora init [DIR]`: scaffold a project's `.memora/` — a commented config and a starter role
pack — refusing to overwrite anything."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from ..errors import ErrorCode, MemoraError
from .common import find_project_root

CONFIG_TEMPLATE = """{{
  // memora project configuration (JSON with comments). Values here are overridden by
  // MEMORA_* environment variables and Agent options; see `memora config show`.

  // The model memora talks to. "llamacpp" is the embedded model (no server, no key).
  // For an OpenAI-compatible API set "type": "openai" and a "model"; the endpoint and key
  // belong to your user config or the environment (MEMORA_BASE_URL, MEMORA_API_KEY), never
  // to a project file others may clone.
{provider_block}

  // Where memory (round summaries) and sessions live: sqlite (default), json, memory,
  // or an installed plugin such as postgres.
  "storage": "sqlite",

  // Plugin options by plugin name, e.g. "ddgs": {{"region": "uk-en"}}.
  "plugins": {{}},

  // Agent options a project may set (see docs/configuration.md).
  "options": {{
    "active_role_pack": {role_pack}
    // "max_context_tokens": 120000,
    // "archive_mode": "full"
  }}
}}
"""

PERSONA = """---
traits:
  precision: 0.8
  warmth: 0.6
---
You are {title}, the assistant of this project. You read the project's files before you
answer, say which files you used, and keep answers short.
"""

RULES = """# Rules

- Read the relevant files before answering questions about the project.
- Never change a file without saying which file and why.
- When you are unsure, say so and ask.
"""

SKILL = """---
name: summarise-file
description: Summarise one project file for a newcomer
---

1. Read the file with read_file (in parts when it is long).
2. Say what it is for, its main parts, and what to read next.
"""


def _provider_block(provider: str | None, model: str | None) -> tuple[str, str]:
    """The config's provider lines and the provider type they lead to.  A provider your user
    config defines is referred to by name, never copied (a copy would shadow your entry and
    lose its endpoint); a new entry is written only for a provider type that is installed."""
    from ..plugins import create_plugin_manager
    from ..settings import resolve_settings

    user = resolve_settings(None).config
    installed = create_plugin_manager().names("provider")
    if provider is None and (user.active_provider or "llamacpp" in installed):
        return _follow_default(user)
    named = _users_entry(user, provider, model)
    if named is not None:
        return _refer(user, named)
    return _new_entry(_installed_type(provider, installed, user), model)


def _follow_default(user: Any) -> tuple[str, str]:
    """Nothing asked: the project follows the user's default (a pin here would shadow
    `memora providers default` in this project, silently), else the embedded model."""
    now = (
        f"{user.active_provider!r} now" if user.active_provider else "none yet: the embedded model"
    )
    default = user.providers.get(user.active_provider or "")
    kind = default.type if default is not None else (user.active_provider or "llamacpp")
    return (
        f"  // your user config's default provider ({now}; `memora providers default NAME`\n"
        '  // changes it); to pin this project to one: "active_provider": "NAME",',
        kind,
    )


def _users_entry(user: Any, provider: str | None, model: str | None) -> str | None:
    """The user's provider ``--provider`` names: by its name, or — ``--provider openai``
    without ``--model`` — the one entry of that type."""
    if provider is None:
        return None
    if provider in user.providers:
        return provider
    same = [n for n, e in user.providers.items() if e.type == provider]
    return same[0] if not model and len(same) == 1 else None


def _refer(user: Any, name: str) -> tuple[str, str]:
    kind = user.providers[name].type
    return (
        f"  // your user config's provider {name!r} ({kind}): its endpoint and key stay there\n"
        f'  "active_provider": {json.dumps(name)},',
        kind,
    )


def _installed_type(provider: str | None, installed: list[str], user: Any) -> str:
    """``--provider`` as an installed type (none asked: the first installed one)."""
    if provider is None:
        choices = [p for p in ("llamacpp", "openai") if p in installed] or installed
        if not choices:
            raise MemoraError(
                ErrorCode.NOT_AVAILABLE,
                "no provider plugin is installed; install one, e.g. "
                "`memora install memora-plugin-llamacpp` (the embedded model) or "
                "memora-plugin-openai (any OpenAI-compatible API)",
            )
        return choices[0]
    if provider not in installed:
        raise MemoraError(
            ErrorCode.NOT_AVAILABLE,
            f"--provider {provider!r} is neither installed ({', '.join(installed) or 'none'}) "
            f"nor a provider of your user config ({', '.join(user.providers) or 'none'})",
        )
    return provider


def _new_entry(provider: str, model: str | None) -> tuple[str, str]:
    if provider == "openai" and not model:
        raise MemoraError(
            ErrorCode.INVALID_INPUT,
            "--provider openai needs --model NAME (or define the provider, with its endpoint, "
            "in your user config and pass its name)",
        )
    entry: dict[str, Any] = {"type": provider, **({"model": model} if model else {})}
    return (
        f'  "active_provider": {json.dumps(provider)},\n'
        f'  "providers": {{\n    {json.dumps(provider)}: {json.dumps(entry)}\n  }},',
        provider,
    )


def _user_provider(name: str, base_url: str, model: str | None, key_env: str | None) -> str:
    """``memora init --base-url``: the endpoint as provider ``name`` of the user's own config
    (where endpoints and keys belong: a project's config may not choose where requests go);
    returns the name for the project to refer to.  A user config with comments is not
    rewritten (they would be lost): the line to add is printed instead."""
    from ..plugins import create_plugin_manager
    from ..settings.edit import edit_user_config, user_config_path

    if "openai" not in create_plugin_manager().names("provider"):
        raise MemoraError(
            ErrorCode.NOT_AVAILABLE,
            "--base-url needs the openai provider: pip install memora-plugin-openai",
        )
    if not base_url.startswith(("http://", "https://")):
        raise click.BadParameter(
            "an http(s):// URL, e.g. http://127.0.0.1:8080/v1", param_hint="--base-url"
        )
    if not model:
        raise click.UsageError("--base-url needs --model NAME: the model that endpoint serves")
    entry: dict[str, Any] = {"type": "openai", "model": model, "base_url": base_url}
    if key_env:
        entry["api_key_env"] = key_env

    def change(data: dict[str, Any]) -> str | None:
        existing = (data.get("providers") or {}).get(name)
        if existing is not None and existing != entry:
            raise MemoraError(
                ErrorCode.INVALID_INPUT,
                f"your user config ({user_config_path()}) already has a provider {name!r}; pass "
                "--provider ANOTHER_NAME, or leave out --base-url to use it as it is",
            )
        data.setdefault("providers", {})[name] = entry
        data.setdefault("active_provider", name)
        return f'add this provider to it yourself: "providers": {{{json.dumps(name)}: {json.dumps(entry)}}}'

    path = edit_user_config(change)
    click.echo(f"provider {name!r} ({base_url}, {model}) is in {path}")
    return name


def _manifest(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "displayName": name.replace("-", " ").title(),
        "description": "The starter role pack `memora init` created for this project.",
        "version": "0.1.0",
        "formatVersion": "1.0.0",
        "capabilities": [],
        "strategy": {
            "act": {"temperature": 0.4},
            "reflect": {"userFollowup": "ask", "summary": "on"},
        },
    }


@click.command("init")
@click.argument(
    "directory", required=False, default=None, type=click.Path(path_type=Path, file_okay=False)
)
@click.option(
    "--provider",
    default=None,
    help="llamacpp (the embedded model), openai (any OpenAI-compatible API), or the name of a "
    "provider in your user config.  Default: your user config's active provider, else an "
    "installed one (llamacpp first).",
)
@click.option("--model", default=None, help="Model name (openai) or GGUF path (llamacpp).")
@click.option(
    "--base-url",
    default=None,
    help="An OpenAI-compatible endpoint (http(s)://host/v1): written as a provider of your user "
    "config (named by --provider, default openai), which the project then names.",
)
@click.option(
    "--api-key-env",
    default=None,
    help="The environment variable holding that endpoint's key (default MEMORA_API_KEY, else "
    "OPENAI_API_KEY).",
)
@click.option(
    "--role-pack",
    "role_pack",
    default="assistant",
    show_default=True,
    help="Name of the starter role pack (kebab-case).",
)
def init_cmd(
    directory: Path | None,
    provider: str | None,
    model: str | None,
    base_url: str | None,
    api_key_env: str | None,
    role_pack: str,
) -> None:
    """Scaffold DIR/.memora: a commented config.json and a starter role pack.  Without DIR, the
    project the other commands would find (the nearest folder with .memora/, else the git
    repository's root, else the working folder).

    Nothing is overwritten: when any of the files exists, nothing is written."""
    from ..role_pack.text import KEBAB_NAME

    if not KEBAB_NAME.match(role_pack):
        raise MemoraError(
            ErrorCode.INVALID_INPUT,
            f"--role-pack {role_pack!r} must be kebab-case (a-z, 0-9, '-'), e.g. assistant",
        )
    root = (directory if directory is not None else find_project_root(Path.cwd())).resolve()
    if base_url is not None:
        provider = _user_provider(provider or "openai", base_url, model, api_key_env)
    elif api_key_env is not None:
        raise click.UsageError("--api-key-env goes with --base-url")
    memora_dir = root / ".memora"
    pack = memora_dir / "role-packs" / role_pack
    block, provider_type = _provider_block(provider, model)
    files = {
        memora_dir / "config.json": CONFIG_TEMPLATE.format(
            provider_block=block, role_pack=json.dumps(role_pack)
        ),
        pack / "manifest.json": json.dumps(_manifest(role_pack), indent=2) + "\n",
        pack / "persona.md": PERSONA.format(title=role_pack.replace("-", " ").title()),
        pack / "rules.md": RULES,
        pack / "skills" / "summarise-file.md": SKILL,
    }
    existing = [p for p in files if p.exists()]
    if existing:
        raise MemoraError(
            ErrorCode.INVALID_INPUT,
            "memora init does not overwrite; already there: "
            + ", ".join(str(p.relative_to(root)) for p in existing),
        )
    from ..security.atomic import atomic_write_text

    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)
    from ..role_pack.validator import validate

    report = validate(pack)
    if report.errors:  # our own template: a bug, not the user's problem
        raise MemoraError(ErrorCode.INVALID_CONFIG, f"the starter pack is invalid: {report}")
    click.echo(f"created in {root}:")
    for path in files:
        click.echo(f"  {path.relative_to(root)}")
    click.echo(
        "next: `memora chat` to talk"
        + (
            f" (the key comes from ${api_key_env or 'MEMORA_API_KEY'})"
            if provider_type == "openai" and base_url is not None
            else " (set MEMORA_BASE_URL and MEMORA_API_KEY, or the endpoint in your user config)"
            if provider_type == "openai"
            else ""
        )
        + f", `memora tools list --project {root}` to see the tools"
    )
    sys.stdout.flush()
