"""``memora plugins``, ``memora config show``, ``memora install`` / ``uninstall``: the commands
about memora itself."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import click

from .base import emit_json, rich_console
from .common import config_dir_option, project_option


@click.command("plugins")
@click.option("--all", "show_all", is_flag=True, help="Include the built-in plugins.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.option("--check", is_flag=True, help="Exit 1 when any plugin failed to load.")
def plugins_cmd(show_all: bool, as_json: bool, check: bool) -> None:
    """List installed plugins, what each provides, load failures and name clashes."""
    from .common import plugin_manager

    plugins = plugin_manager()
    _probe(plugins)  # a plugin whose own imports fail is a failed row, not "ok"
    infos = plugins.plugin_infos(include_builtin=show_all)
    broken = {f.name for f in plugins.failures}
    infos = [i for i in infos if i.name not in broken]
    if as_json:
        emit_json(_plugins_doc(plugins, infos))
    else:
        _plugins_table(plugins, infos, show_all)
    if check and plugins.failures:
        sys.exit(1)


def _plugins_doc(plugins: Any, infos: list[Any]) -> dict[str, Any]:
    """``memora plugins --json``."""
    return {
        "plugins": [
            {
                "name": i.name,
                "distribution": i.distribution,
                "version": i.version,
                "origin": i.origin,
                "builtin": i.builtin,
                "hooks": list(i.hooks),
                "provides": {k: list(v) for k, v in i.registers.items()},
                "lost_names": [
                    {"kind": c.kind, "name": c.name, "kept_by": c.kept}
                    for c in plugins.clashes
                    if c.dropped == i.name
                ],
            }
            for i in infos
        ],
        "failures": [
            {
                "name": f.name,
                "distribution": f.distribution,
                "stage": f.stage,
                "error": f.error,
            }
            for f in plugins.failures
        ],
    }


def _plugins_table(plugins: Any, infos: list[Any], show_all: bool) -> None:
    """``memora plugins``: a table, then the name clashes."""
    from rich.table import Table

    from .common import safe

    console = rich_console()
    table = Table(title="memora plugins")
    # names whole (a folded "memora.default_p/lugins.checks" reads as a cut name); the
    # other columns wrap at word boundaries
    table.add_column("name", no_wrap=True)
    for col in ("distribution", "version", "provides", "status"):
        table.add_column(col, overflow="fold")
    for i in infos:
        provides = "; ".join(
            f"{k}: {', '.join(v) if len(v) <= 4 else f'{len(v)} ({v[0]}, …)'}"
            for k, v in sorted(i.registers.items())
        )
        status = "built-in" if i.builtin else "ok"
        # names and errors come from third-party packages: no markup, no control sequences
        table.add_row(
            safe(i.name),
            safe(i.distribution or "-"),
            safe(i.version or "-"),
            safe(provides or "-"),
            status,
        )
    for f in plugins.failures:
        table.add_row(
            safe(f.name),
            safe(f.distribution or "?"),
            "-",
            "-",
            f"[red]failed ({f.stage}): {safe(f.error)}[/red]",
        )
    console.print(table)
    for c in plugins.clashes:
        console.print(
            f"[yellow]name clash[/yellow] {c.kind} {safe(repr(c.name))}: "
            f"{safe(repr(c.kept))} kept it, {safe(repr(c.dropped))} did not"
        )
    if not show_all:
        console.print("[dim]built-in plugins hidden; use --all to show them[/dim]")


def _probe(plugins: Any) -> None:
    """``plugins.probe()``, remembered while the installed distributions stay the same (the
    probe imports every plugin's implementation, ~1 s; the check whether anything changed reads
    package metadata only)."""
    from ..plugins import PluginFailure
    from ..security.atomic import atomic_write_text
    from ..security.state import user_config_dir
    from .base import installed_key

    key = installed_key()
    cache = user_config_dir() / "cache" / "plugin-probe.json"
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        saved = json.loads(cache.read_text(encoding="utf-8"))
        if saved["key"] == key:
            plugins.failures.extend(PluginFailure(**f) for f in saved["failures"])
            return
    found = plugins.probe()
    with contextlib.suppress(OSError):
        cache.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        failures = [
            {"name": f.name, "distribution": f.distribution, "error": f.error, "stage": f.stage}
            for f in found
        ]
        atomic_write_text(cache, json.dumps({"key": key, "failures": failures}))


@click.group("config")
def config_group() -> None:
    """Inspect the effective configuration."""


@config_group.command("show")
@project_option
@config_dir_option
@click.option("--storage", default=None, help="As on other commands: shows its effect.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def config_show(project: Path, config_dir: Path | None, storage: str | None, as_json: bool) -> None:
    """Print every effective setting and where it came from (flag, environment, file, default)."""
    from .common import settings_for

    settings = settings_for(project.resolve(), config_dir, storage=storage)
    if as_json:
        emit_json(settings.to_json())
        return
    width = max(len(key) for key, _, _ in settings.rows())
    for key, value, origin in settings.rows():
        shown = json.dumps(value, ensure_ascii=False)
        click.echo(f"{key:<{width}}  {shown:<24}  {origin}")
    for key, value in sorted(settings.ignored.items()):
        shown = json.dumps(value, ensure_ascii=False)
        click.echo(f"{key:<{width}}  {shown:<24}  left off: asked for by the project, not allowed")
    if settings.ignored:
        click.echo("(review with `memora trust show`, allow with `memora trust allow`)", err=True)
    click.echo(f"(user config folder: {settings.user_dir})", err=True)


def _pip(action: str, args: list[str]) -> int:
    """Run pip in memora's own environment (uv's pip when that environment has no pip)."""
    import importlib.util
    import shutil
    import subprocess

    if importlib.util.find_spec("pip") is not None:
        cmd = [sys.executable, "-m", "pip", action, *args]
    elif uv := shutil.which("uv"):
        cmd = [uv, "pip", action, "--python", sys.executable, *[a for a in args if a != "-y"]]
    else:
        raise click.ClickException(
            f"neither pip nor uv is available for {sys.executable}; install pip there first"
        )
    return subprocess.call(cmd)


@click.command("install")
@click.argument("packages", nargs=-1, required=True)
@click.option("-U", "--upgrade", is_flag=True, help="Upgrade to the newest version.")
@click.option(
    "-e", "--editable", is_flag=True, help="Install the (local folder) packages editable."
)
@click.option("--force-reinstall", is_flag=True)
def install_cmd(
    packages: tuple[str, ...], upgrade: bool, editable: bool, force_reinstall: bool
) -> None:
    """Install plugins (or any package) into memora's own environment, like `llm install`."""
    args: list[str] = []
    if upgrade:
        args.append("--upgrade")
    if force_reinstall:
        args.append("--force-reinstall")
    for package in packages:
        args += ["-e", package] if editable else [package]
    before = _installed_plugins()
    code = _pip("install", args)
    if code == 0:
        _say_what_was_added(before)
    sys.exit(code)


def _installed_plugins() -> dict[str, dict[str, list[str]]]:
    """Plugin -> what it provides, read in a fresh process (this one's entry points are the ones
    it started with)."""
    import subprocess

    r = subprocess.run(
        [sys.executable, "-m", "memora", "plugins", "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    try:
        doc = json.loads(r.stdout)
    except ValueError:
        return {}
    return {p["name"]: p["provides"] for p in doc.get("plugins", [])}


def _say_what_was_added(before: dict[str, dict[str, list[str]]]) -> None:
    """What each new plugin provides and how it reaches the model: a capability tool appears
    only for role packs that declare its capability."""
    from ..capabilities import PRIVILEGED

    after = _installed_plugins()
    by_kind = {spec.service_kind: (cap, spec.tool) for cap, spec in PRIVILEGED.items()}
    for name, provides in sorted(after.items()):
        if name in before:
            continue
        for kind, names in sorted(provides.items()):
            line = f"{name}: {kind} {', '.join(names)}"
            if kind in by_kind:
                cap, tool = by_kind[kind]
                line += (
                    f" — the tool {tool} appears only for role packs that declare the "
                    f"capability {cap!r}"
                )
            elif kind == "tool_source":
                line += (
                    f" — its tools appear for role packs that declare '{names[0]}:NAME' for a "
                    f"server NAME configured under plugins.{names[0]} in your user config"
                )
            elif kind in ("provider", "storage", "session_store", "project_lock"):
                line += " — select it by name in your config (see memora config show)"
            click.echo(line)


@click.command("uninstall")
@click.argument("packages", nargs=-1, required=True)
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
def uninstall_cmd(packages: tuple[str, ...], yes: bool) -> None:
    """Uninstall packages from memora's own environment."""
    sys.exit(_pip("uninstall", [*packages, *(["-y"] if yes else [])]))
