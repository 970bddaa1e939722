"""Entry point of the ``memora`` command.

Exit codes shared by every command: 0 success, 1 an error (one line on stderr, never a
traceback), 2 a usage error.  ``memora run`` adds 3 (paused without a terminal) and 130
(aborted).  Warnings (plugin load failures, a capability no plugin provides...) go to stderr;
``-v`` shows more, ``-q`` only errors.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from pathlib import Path
from typing import Any

import click

from .. import __version__
from .common import project_option

_handler: logging.Handler | None = None


def _console() -> Any:
    from rich.console import Console

    return Console()


def emit_json(doc: Any) -> None:
    """Print one JSON document on stdout (UTF-8, non-ASCII kept)."""
    click.echo(json.dumps(doc, ensure_ascii=False, indent=2))


class _WarningFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"memora: {record.levelname.lower()}: {record.getMessage()}"


def setup_logging(verbose: int, quiet: bool) -> None:
    """Send the ``memora`` logger to stderr: warnings by default, -v info, -vv debug."""
    global _handler
    logger = logging.getLogger("memora")
    if _handler is not None:
        logger.removeHandler(_handler)
    level = (
        logging.ERROR if quiet else [logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)]
    )
    # other libraries' warnings (psycopg's pool retrying a connection, four lines per failure)
    # are not the user's business unless they ask for more with -v: without a handler of
    # its own, the root logger printed them through logging's last resort
    root = logging.getLogger()
    if not any(isinstance(h, logging.NullHandler) for h in root.handlers):
        root.addHandler(logging.NullHandler())
    # sys.stderr as it is now, inside the command (a test runner swaps it per invocation)
    handler: logging.Handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_WarningFormatter())
    handler.setLevel(level)
    logger.addHandler(handler)
    _handler = handler
    logger.setLevel(level)


class CommandError(click.ClickException):
    """A command's error: ``memora: error: MESSAGE`` on stderr (the form of the warnings, one
    prefix everywhere), exit code 1."""

    def show(self, file: Any = None) -> None:
        from ..security.terminal import clean

        click.echo(f"memora: error: {clean(self.format_message())}", err=True)


class _Group(click.Group):
    """Turns every :class:`memora.MemoraError` and command error into one line on stderr and
    exit code 1 (usage errors stay click's, exit code 2)."""

    def main(
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """click's standalone mode, with every error in one form: ``memora: error: ...``
        (usage errors keep their usage line and exit code 2)."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except click.UsageError as exc:
            if exc.ctx is not None:
                click.echo(exc.ctx.get_usage(), err=True)
                click.echo(f"Try '{exc.ctx.command_path} --help' for help.", err=True)
            click.echo(f"memora: error: {exc.format_message()}", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            CommandError(exc.format_message()).show()
            sys.exit(exc.exit_code)
        except (click.Abort, EOFError):
            click.echo("memora: aborted", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        from ..errors import MemoraError

        try:
            return super().invoke(ctx)
        except MemoraError as exc:
            raise CommandError(str(exc).replace("\n", " ")) from exc
        except click.UsageError:
            raise
        except click.ClickException as exc:
            if isinstance(exc, CommandError):
                raise
            raise CommandError(exc.format_message()) from exc


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="memora")
@click.option("-v", "--verbose", count=True, help="Show more on stderr (-vv: debug).")
@click.option("-q", "--quiet", is_flag=True, help="Show only errors on stderr.")
def cli(verbose: int, quiet: bool) -> None:
    """memora — an embeddable LLM agent kernel."""
    from ..security.terminal import install_guard

    # a lone surrogate in a file's text (a JSON escape like \ud800) is printed as that escape,
    # not a UnicodeEncodeError traceback half-way through the output
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError, OSError):
            stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
    # before anything prints: text from a model, a tool or a file never drives the terminal
    install_guard()
    setup_logging(verbose, quiet)


@cli.command("plugins")
@click.option("--all", "show_all", is_flag=True, help="Include the built-in plugins.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.option("--check", is_flag=True, help="Exit 1 when any plugin failed to load.")
def plugins_cmd(show_all: bool, as_json: bool, check: bool) -> None:
    """List installed plugins, what each provides, load failures and name clashes."""
    from .common import plugin_manager, safe

    plugins = plugin_manager()
    _probe(plugins)  # a plugin whose own imports fail is a failed row, not "ok"
    infos = plugins.plugin_infos(include_builtin=show_all)
    broken = {f.name for f in plugins.failures}
    infos = [i for i in infos if i.name not in broken]
    if as_json:
        emit_json(
            {
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
        )
    else:
        from rich.table import Table

        console = _console()
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
    if check and plugins.failures:
        sys.exit(1)


def _probe(plugins: Any) -> None:
    """``plugins.probe()``, remembered while the installed distributions stay the same (the
    probe imports every plugin's implementation, ~1 s; the check whether anything changed reads
    package metadata only)."""
    import hashlib
    import os

    from ..plugins import PluginFailure
    from ..security.atomic import atomic_write_text
    from ..settings import user_config_dir

    # what is installed, by the metadata folders' names (name-version.dist-info): a listing,
    # not a read of every METADATA file
    installed: list[str] = []
    for entry in sys.path:
        with contextlib.suppress(OSError), os.scandir(entry or ".") as it:
            installed += sorted(
                f"{entry}/{e.name}:{e.stat().st_mtime_ns}"
                for e in it
                if e.name.endswith((".dist-info", ".egg-info", ".egg-link", ".pth"))
            )
    key = hashlib.sha256("\n".join([sys.version, *installed]).encode()).hexdigest()
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


@cli.group("config")
def config_group() -> None:
    """Inspect the effective configuration."""


@config_group.command("show")
@project_option
@click.option(
    "--config-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="The user config folder (default: $MEMORA_HOME, else ~/.config/memora).",
)
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


@cli.command("install")
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


@cli.command("uninstall")
@click.argument("packages", nargs=-1, required=True)
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
def uninstall_cmd(packages: tuple[str, ...], yes: bool) -> None:
    """Uninstall packages from memora's own environment."""
    sys.exit(_pip("uninstall", [*packages, *(["-y"] if yes else [])]))


def _register_commands() -> None:
    from . import (  # noqa: F401  (commands register on import)
        chat_cmd,
        init_cmd,
        mcp_cmd,
        memory_cmd,
        role_pack_cmd,
        run_cmd,
        tools_cmd,
        trust_cmd,
    )


def main(argv: list[str] | None = None) -> None:
    _register_commands()
    try:
        cli.main(args=argv, prog_name="memora", standalone_mode=True)
    except KeyboardInterrupt:  # pragma: no cover - interactive
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover - prefer `python -m memora.cli`
    from memora.cli.main import main as _main  # the commands register on that module's group

    _main()
