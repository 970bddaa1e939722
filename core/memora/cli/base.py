"""What every ``memora`` command shares: the group class that turns errors into one line, the
JSON printer, the logging set-up.  Command modules import from here (never from
:mod:`memora.cli.main`, which builds the CLI from them)."""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import sys
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any

import click

_handler: logging.Handler | None = None


def rich_console() -> Any:
    """A rich Console (rich is imported when a command first prints a table)."""
    from rich.console import Console

    return Console()


def emit_json(doc: Any) -> None:
    """Print one JSON document on stdout (UTF-8, non-ASCII kept)."""
    click.echo(json.dumps(doc, ensure_ascii=False, indent=2))


class _WarningFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        from ..security.terminal import clean

        # a message may carry outside text (a plugin's or a server's error, a tool's output in
        # an exception): never its escape sequences on the terminal
        message = record.getMessage()
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None:
            # a logged exception's reason is the line's point ("persisting round r-1 failed"
            # alone does not say a planted link was refused); the traceback stays out
            reason = str(exc) or type(exc).__name__
            if reason not in message:
                message = f"{message}: {reason}"
        return f"memora: {record.levelname.lower()}: {clean(message)}"


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


PLUGIN_COMMANDS = {
    "mcp": "memora-plugin-mcp",
    "serve": "memora-plugin-server",
    "serve-tokens": "memora-plugin-server",
}
"""Commands that memora's own plugins add, and the distribution to install for each."""


def installed_key() -> str:
    """A key that changes when a distribution is installed, removed or upgraded (the metadata
    folders' names and times: a listing, not a read of every METADATA file), or when
    ``MEMORA_LOAD_PLUGINS`` picks other plugins."""
    import hashlib
    import os

    installed: list[str] = []
    for entry in sys.path:
        with contextlib.suppress(OSError), os.scandir(entry or ".") as it:
            installed += sorted(
                f"{entry}/{e.name}:{e.stat().st_mtime_ns}"
                for e in it
                if e.name.endswith((".dist-info", ".egg-info", ".egg-link", ".pth"))
            )
    extra = [sys.version, os.environ.get("MEMORA_LOAD_PLUGINS", "")]
    return hashlib.sha256("\n".join([*extra, *installed]).encode()).hexdigest()


def _listing_cache() -> Any:
    from ..security.state import user_config_dir

    return user_config_dir() / "cache" / "plugin-commands.json"


class LazyCommands(MutableMapping[str, click.Command]):
    """A group's commands, each imported the first time it is looked up: ``memora plugins``
    does not import the chat command's modules.  ``"module:attribute"`` names a command not
    loaded yet; listing the names (``in``, iterating) imports nothing."""

    def __init__(self, commands: Mapping[str, click.Command | str]) -> None:
        self._entries: dict[str, click.Command | str] = dict(commands)

    def __getitem__(self, name: str) -> click.Command:
        entry = self._entries[name]
        if isinstance(entry, str):
            module, _, attribute = entry.partition(":")
            entry = getattr(importlib.import_module(module), attribute)
            if not isinstance(entry, click.Command):
                raise TypeError(f"{module}:{attribute} is not a click command")
            self._entries[name] = entry
        return entry

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._entries[name] = command

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries


class MemoraGroup(click.Group):
    """Turns every :class:`memora.MemoraError` and command error into one line on stderr and
    exit code 1 (usage errors stay click's, exit code 2).

    ``plugin_loader``, when set, adds the plugins' commands the first time a name is not
    found.  The command list (``memora --help``) comes from a cache of the plugin commands'
    names and one-line help, kept while the installed distributions stay the same, so showing
    it imports no plugin; running a plugin command loads the plugins for real."""

    plugin_loader: Callable[[click.Group], None] | None = None
    cache_listing: bool = False
    _placeholders: dict[str, str] | None = None

    def _load_plugins(self) -> None:
        loader, self.plugin_loader = self.plugin_loader, None
        self._placeholders = None
        if loader is None:
            return
        kernel = set(self.commands)
        loader(self)
        if self.cache_listing:
            added = {name: self.commands[name] for name in self.commands if name not in kernel}
            listing = {
                name: cmd.get_short_help_str(60) for name, cmd in added.items() if not cmd.hidden
            }
            with contextlib.suppress(OSError):
                from ..security.atomic import atomic_write_text

                path = _listing_cache()
                path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                atomic_write_text(path, json.dumps({"key": installed_key(), "commands": listing}))

    def _cached_listing(self) -> dict[str, str] | None:
        if self._placeholders is None and self.cache_listing and self.plugin_loader is not None:
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                saved = json.loads(_listing_cache().read_text(encoding="utf-8"))
                if saved["key"] == installed_key():
                    self._placeholders = {
                        str(k): str(v)
                        for k, v in dict(saved["commands"]).items()
                        if k not in self.commands
                    }
        return self._placeholders

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and self.plugin_loader is not None:
            listed = self._cached_listing()
            if listed is not None and cmd_name in listed:
                # for the command list only: resolve_command loads the real one to run it
                return click.Command(cmd_name, help=listed[cmd_name], short_help=listed[cmd_name])
            self._load_plugins()
            command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in PLUGIN_COMMANDS and ctx.parent is None:
            dist = PLUGIN_COMMANDS[cmd_name]
            raise click.UsageError(
                f"`memora {cmd_name}` comes with the {dist} plugin, which is not installed: "
                f"memora install {dist}",
                ctx,
            )
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] not in self.commands and self.plugin_loader is not None:
            self._load_plugins()  # a plugin command is about to run: the real one
        return super().resolve_command(ctx, args)

    def list_commands(self, ctx: click.Context) -> list[str]:
        listed = self._cached_listing()
        if listed is None:
            self._load_plugins()
            return super().list_commands(ctx)
        return sorted({*self.commands, *listed})

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
            from ..security.terminal import clean  # as CommandError.show: at the error only

            # a usage error may quote what it was given (a file's text, a server's words)
            click.echo(f"memora: error: {clean(exc.format_message())}", err=True)
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
