"""`memora providers ...`, `memora keys ...` and `memora models`: set up endpoints, keys and
models by command instead of by editing ``config.json``.

Providers and keys are the user's (their own config folder, ``$MEMORA_HOME``): where requests
and keys go is never a project's choice.  A named provider is also the alias of an endpoint and
a model (``memora providers add fast --type openai --model gpt-4o-mini``, then ``memora run
--provider fast``)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import click

from ..security.terminal import clean
from .base import emit_json
from .common import config_dir_option

FAIL_CHARS = 400
"""The most of an error shown on one line: an endpoint's error text is the server's to write."""


def _fail(exc: Exception) -> click.ClickException:
    """The error as one line: an endpoint's answer (a 401's body in ``memora models``) is data
    from a server — no escape sequences, no newlines that would draw a fake prompt, bounded."""
    from ..errors import MemoraError

    message = exc.message if isinstance(exc, MemoraError) else str(exc)
    message = clean(message, newlines=False)
    if len(message) > FAIL_CHARS:
        message = message[: FAIL_CHARS - 1] + "…"
    return click.ClickException(message)


def _user_config(config_dir: Path | None) -> dict[str, Any]:
    from ..settings.edit import user_config_path
    from ..settings.files import read_config_file, strip_json_comments

    path = user_config_path(config_dir)
    if not path.exists():
        return {}
    read_config_file(path)
    data = json.loads(strip_json_comments(path.read_text(encoding="utf-8-sig")))
    return data if isinstance(data, dict) else {}


def _edit(change: Any, config_dir: Path | None) -> Path:
    """``edit_user_config`` with its refusals as the command's error."""
    from ..settings.edit import edit_user_config

    try:
        return edit_user_config(change, config_dir=config_dir)
    except click.ClickException:
        raise
    except Exception as exc:
        raise _fail(exc) from exc


def _installed() -> list[str]:
    from ..plugins import create_plugin_manager

    return sorted(create_plugin_manager().names("provider"))


def _key_source(name: str, entry: dict[str, Any], stored: set[str]) -> str:
    if entry.get("api_key_env"):
        return f"${entry['api_key_env']}"
    if entry.get("api_key_name"):
        held = "stored" if entry["api_key_name"] in stored else "NOT STORED"
        return f"key {entry['api_key_name']!r} ({held})"
    if entry.get("type") == "openai":
        return "$MEMORA_API_KEY or $OPENAI_API_KEY"
    return "-"


@click.group("providers")
def providers_group() -> None:
    """The providers of your user config: list, add, remove, choose the default."""


@providers_group.command("list")
@click.option("--json", "as_json", is_flag=True)
@config_dir_option
def providers_list(as_json: bool, config_dir: Path | None) -> None:
    """Your providers (endpoint, model, where the key comes from) and the installed types."""
    from ..settings.secrets import key_names

    try:
        data = _user_config(config_dir)
        stored = set(key_names(Path(config_dir) if config_dir else None))
    except Exception as exc:
        raise _fail(exc) from exc
    providers = data.get("providers") or {}
    active = data.get("active_provider")
    rows = [
        {
            "name": name,
            "type": entry.get("type"),
            "model": entry.get("model"),
            "base_url": entry.get("base_url"),
            "key": _key_source(name, entry, stored),
            "default": name == active,
        }
        for name, entry in sorted(providers.items())
        if isinstance(entry, dict)
    ]
    if as_json:
        emit_json({"providers": rows, "default": active, "installed_types": _installed()})
        return
    if not rows:
        click.echo(
            "no providers in your user config; add one with `memora providers add NAME --type "
            "openai --base-url URL --model MODEL` (or run on the embedded model)"
        )
    for row in rows:
        mark = "*" if row["default"] else " "
        where = row["base_url"] or "(default endpoint)"
        click.echo(
            clean(
                f"{mark} {row['name']}\t{row['type']}\t{row['model'] or '-'}\t{where}\t{row['key']}"
            )
        )
    click.echo(f"installed types: {', '.join(_installed()) or 'none'}")


@providers_group.command("add")
@click.argument("name")
@click.option("--type", "kind", default="openai", show_default=True, help="The provider plugin.")
@click.option("--base-url", default=None, help="The endpoint (OpenAI-compatible: http(s)://…/v1).")
@click.option("--model", default=None, help="The model the endpoint serves.")
@click.option("--api-key-env", default=None, help="The environment variable holding its key.")
@click.option(
    "--api-key-name",
    default=None,
    help="A key stored with `memora keys set NAME` (default: NAME, when such a key is stored).",
)
@click.option("--default", "make_default", is_flag=True, help="Make it the default provider.")
@click.option("--replace", is_flag=True, help="Replace a provider of that name.")
@config_dir_option
def providers_add(
    name: str,
    kind: str,
    base_url: str | None,
    model: str | None,
    api_key_env: str | None,
    api_key_name: str | None,
    make_default: bool,
    replace: bool,
    config_dir: Path | None,
) -> None:
    """Add a provider to your user config (also the alias of an endpoint and a model: `memora
    run --provider NAME`)."""
    from ..settings.secrets import key_names

    _check_add(name, kind, base_url, model, api_key_env, api_key_name)
    entry: dict[str, Any] = {"type": kind}
    for key, value in (("model", model), ("base_url", base_url), ("api_key_env", api_key_env)):
        if value:
            entry[key] = value
    stored = key_names(Path(config_dir) if config_dir else None)
    if api_key_name or (not api_key_env and name in stored and kind == "openai"):
        entry["api_key_name"] = api_key_name or name

    def change(data: dict[str, Any]) -> str | None:
        providers = data.setdefault("providers", {})
        if name in providers and providers[name] != entry and not replace:
            raise click.ClickException(
                f"a provider {name!r} exists; pass --replace to replace it, or another name"
            )
        providers[name] = entry
        if make_default or not data.get("active_provider"):
            data["active_provider"] = name
        return f'add "providers": {{{json.dumps(name)}: {json.dumps(entry)}}} yourself'

    path = _edit(change, config_dir)
    default = " (the default)" if _user_config(config_dir).get("active_provider") == name else ""
    click.echo(f"provider {name!r}{default} is in {path}")
    if entry.get("api_key_name") and entry["api_key_name"] not in stored:
        click.echo(f"store its key with: memora keys set {entry['api_key_name']}", err=True)


def _check_add(
    name: str,
    kind: str,
    base_url: str | None,
    model: str | None,
    api_key_env: str | None,
    api_key_name: str | None,
) -> None:
    """``providers add``'s arguments, each refused with what is legal."""
    from ..settings.secrets import check_name

    try:
        check_name(name)
    except Exception as exc:
        raise click.BadParameter(str(_fail(exc).message), param_hint="NAME") from exc
    installed = _installed()
    if kind not in installed:
        raise click.BadParameter(
            f"{kind!r} is not an installed provider type; installed: "
            f"{', '.join(installed) or 'none'} (memora install memora-plugin-openai)",
            param_hint="--type",
        )
    if base_url is not None and not base_url.startswith(("http://", "https://")):
        raise click.BadParameter(
            "an http(s):// URL, e.g. http://127.0.0.1:8080/v1", param_hint="--base-url"
        )
    if kind == "openai" and not model:
        raise click.UsageError("--type openai needs --model NAME: the model the endpoint serves")
    if api_key_env and api_key_name:
        raise click.UsageError("--api-key-env and --api-key-name exclude each other")


@providers_group.command("remove")
@click.argument("name")
@config_dir_option
def providers_remove(name: str, config_dir: Path | None) -> None:
    """Remove a provider from your user config (its stored key stays: `memora keys remove`)."""

    found = name in (_user_config(config_dir).get("providers") or {})
    if not found:
        raise click.ClickException(f"no provider {name!r} in your user config")

    def change(data: dict[str, Any]) -> str | None:
        data.get("providers", {}).pop(name, None)
        if data.get("active_provider") == name:
            data.pop("active_provider")
        return f"remove providers.{name} yourself"

    was_default = _user_config(config_dir).get("active_provider") == name
    _edit(change, config_dir)
    click.echo(f"provider {name!r} removed")
    if was_default:
        left = sorted(_user_config(config_dir).get("providers") or {})
        click.echo(
            f"memora: note: {name!r} was the default; with none, memora answers with the "
            "embedded model. "
            + (
                f"Choose another: memora providers default NAME ({', '.join(left)})"
                if left
                else "Add one: memora providers add NAME --base-url URL --model MODEL --default"
            ),
            err=True,
        )


@providers_group.command("default")
@click.argument("name")
@config_dir_option
def providers_default(name: str, config_dir: Path | None) -> None:
    """Make NAME the provider memora uses when nothing else says."""

    providers = _user_config(config_dir).get("providers") or {}
    if name not in providers and name not in _installed():
        raise click.ClickException(
            f"no provider {name!r}: yours are {', '.join(sorted(providers)) or 'none'}, the "
            f"installed types {', '.join(_installed()) or 'none'}"
        )

    def change(data: dict[str, Any]) -> str | None:
        data["active_provider"] = name
        return f'set "active_provider": {json.dumps(name)} yourself'

    _edit(change, config_dir)
    click.echo(f"default provider: {name}")
    pinned = _project_pin()
    if pinned is not None and pinned[1] != name:
        path, other = pinned
        click.echo(
            clean(
                f"memora: note: this project ({path}) names provider {other!r}, which wins "
                f"here: remove its active_provider line to use {name!r} in it too",
                newlines=False,
            ),
            err=True,
        )


def _project_pin() -> tuple[Path, str] | None:
    """The project config of the working folder's project and the provider it names, if it
    names one (it shadows the user's default there)."""
    from ..settings.files import read_config_file
    from .common import find_project_root

    path = find_project_root(Path.cwd()) / ".memora" / "config.json"
    try:
        if not path.is_file():
            return None
        name = read_config_file(path).active_provider
    except Exception:  # a broken project config is `memora config show`'s to report
        return None
    return (path, name) if name else None


@click.group("keys")
def keys_group() -> None:
    """API keys kept outside the config: a private file in your memora folder."""


@keys_group.command("set")
@click.argument("name")
@config_dir_option
def keys_set(name: str, config_dir: Path | None) -> None:
    """Store the key NAME: typed at a hidden prompt, or read from stdin when piped
    (`pass show x | memora keys set x`).  Never printed back.  A provider of your config named
    NAME (with no key set another way) sends it from now on."""
    from ..settings.edit import edit_user_config
    from ..settings.secrets import set_key

    if sys.stdin.isatty():
        secret = click.prompt(f"key {name}", hide_input=True, confirmation_prompt=False)
    else:
        secret = sys.stdin.readline()
    user_dir = Path(config_dir) if config_dir else None
    try:
        path = set_key(name, secret, user_dir)
    except Exception as exc:
        raise _fail(exc) from exc
    click.echo(f"key {name!r} stored in {path} (0600)")
    entry = (_user_config(config_dir).get("providers") or {}).get(name)
    if (
        isinstance(entry, dict)
        and entry.get("type") == "openai"
        and not entry.get("api_key_env")
        and not entry.get("api_key_name")
    ):

        def change(data: dict[str, Any]) -> str | None:
            data["providers"][name]["api_key_name"] = name
            return f'add "api_key_name": {json.dumps(name)} to providers.{name} yourself'

        try:
            edit_user_config(change, config_dir=config_dir)
            click.echo(f"provider {name!r} sends it")
        except Exception as exc:  # a config with comments: said, the key is stored anyway
            click.echo(f"memora: {_fail(exc).message}", err=True)


@keys_group.command("list")
@click.option("--json", "as_json", is_flag=True)
@config_dir_option
def keys_list(as_json: bool, config_dir: Path | None) -> None:
    """The names of the stored keys (never the keys)."""
    from ..settings.secrets import key_names

    try:
        names = key_names(Path(config_dir) if config_dir else None)
    except Exception as exc:
        raise _fail(exc) from exc
    if as_json:
        emit_json({"keys": names})
        return
    click.echo("\n".join(names) if names else "no keys stored (memora keys set NAME)")


@keys_group.command("remove")
@click.argument("name")
@config_dir_option
def keys_remove(name: str, config_dir: Path | None) -> None:
    """Delete the stored key NAME."""
    from ..settings.secrets import delete_key

    try:
        gone = delete_key(name, Path(config_dir) if config_dir else None)
    except Exception as exc:
        raise _fail(exc) from exc
    if not gone:
        raise click.ClickException(f"no key named {name!r}")
    click.echo(f"key {name!r} removed")


@click.command("models")
@click.argument("provider", required=False)
@click.option("--json", "as_json", is_flag=True)
@config_dir_option
def models_cmd(provider: str | None, as_json: bool, config_dir: Path | None) -> None:
    """The models PROVIDER serves (default: your default provider): an OpenAI-compatible
    endpoint's /models, the embedded model's file."""
    from ..plugins import create_plugin_manager
    from ..settings import create_provider_from_config, load_config
    from ..settings.edit import user_config_path

    async def main() -> tuple[str, list[str]]:
        config = load_config(user_config_path(config_dir))
        name = provider or config.active_provider or (_installed() or ["llamacpp"])[0]
        if name in config.providers:
            made = create_provider_from_config(name, config)
        elif name in _installed():
            made = create_plugin_manager().create("provider", name, {})
        else:
            raise click.ClickException(
                f"no provider {name!r}: yours are {', '.join(config.providers) or 'none'}, the "
                f"installed types {', '.join(_installed()) or 'none'}"
            )
        try:
            lister = getattr(made, "list_models", None)
            if lister is None:
                raise click.ClickException(
                    f"provider {name!r} ({type(made).__name__}) cannot list its models"
                )
            return name, [str(m) for m in await lister()]
        finally:
            closer = getattr(made, "aclose", None)
            if closer is not None:
                await closer()

    try:
        name, models = asyncio.run(main())
    except click.ClickException:
        raise
    except Exception as exc:
        raise _fail(exc) from exc
    if as_json:
        emit_json({"provider": name, "models": models})
        return
    for model in models:
        click.echo(clean(model, newlines=False))
    if not models:
        click.echo(f"{name} lists no models", err=True)
