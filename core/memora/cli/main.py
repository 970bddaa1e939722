"""Entry point of the ``memora`` command."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from .. import __version__


def _console() -> Any:
    from rich.console import Console

    return Console()


def emit_json(doc: Any) -> None:
    """Print one JSON document on stdout (UTF-8, non-ASCII kept)."""
    click.echo(json.dumps(doc, ensure_ascii=False, indent=2))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="memora")
def cli() -> None:
    """memora — an embeddable LLM agent kernel."""


@cli.command("plugins")
@click.option("--all", "show_all", is_flag=True, help="Include the built-in plugins.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def plugins_cmd(show_all: bool, as_json: bool) -> None:
    """List installed plugins, their hooks and load failures."""
    from ..plugins import create_plugin_manager

    plugins = create_plugin_manager()
    infos = plugins.plugin_infos(include_builtin=show_all)
    if as_json:
        emit_json(
            {
                "plugins": [
                    {
                        "name": i.name,
                        "distribution": i.distribution,
                        "version": i.version,
                        "hooks": list(i.hooks),
                        "builtin": i.builtin,
                    }
                    for i in infos
                ],
                "failures": [
                    {"name": f.name, "distribution": f.distribution, "error": f.error}
                    for f in plugins.failures
                ],
            }
        )
        return
    from rich.table import Table

    console = _console()
    table = Table(title="memora plugins")
    for col in ("name", "distribution", "version", "hooks", "builtin"):
        table.add_column(col)
    for i in infos:
        table.add_row(
            i.name,
            i.distribution or "-",
            i.version or "-",
            ", ".join(i.hooks),
            "yes" if i.builtin else "",
        )
    console.print(table)
    if not show_all:
        console.print("[dim]built-in plugins hidden; use --all to show them[/dim]")
    for f in plugins.failures:
        console.print(f"[red]failed to load[/red] {f.name} ({f.distribution or '?'}): {f.error}")


def _register_commands() -> None:
    from . import memory_cmd, role_pack_cmd, run_cmd  # noqa: F401  (commands register on import)


def main(argv: list[str] | None = None) -> None:
    _register_commands()
    try:
        cli.main(args=argv, prog_name="memora", standalone_mode=True)
    except KeyboardInterrupt:  # pragma: no cover - interactive
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover - prefer `python -m memora.cli`
    from memora.cli.main import main as _main  # the commands register on that module's group

    _main()
