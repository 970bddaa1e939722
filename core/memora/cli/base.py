"""What every ``memora`` command shares: the group class that turns errors into one line, the
JSON printer, the logging set-up.  Command modules import from here (never from
:mod:`memora.cli.main`, which builds the CLI from them)."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from typing import Any

import click

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


PLUGIN_COMMANDS = {"mcp": "memora-plugin-mcp", "serve": "memora-plugin-server"}
"""Commands that memora's own plugins add, and the distribution to install for each."""


class MemoraGroup(click.Group):
    """Turns every :class:`memora.MemoraError` and command error into one line on stderr and
    exit code 1 (usage errors stay click's, exit code 2).  ``plugin_loader``, when set, adds the
    plugins' commands the first time a name is not found or the list is shown."""

    plugin_loader: Callable[[click.Group], None] | None = None

    def _load_plugins(self) -> None:
        loader, self.plugin_loader = self.plugin_loader, None
        if loader is not None:
            loader(self)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and self.plugin_loader is not None:
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

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._load_plugins()
        return super().list_commands(ctx)

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
