"""Entry point of the ``memora`` command: :func:`build_cli` makes the click group.

Exit codes shared by every command: 0 success, 1 an error (one line on stderr, never a
traceback), 2 a usage error.  ``memora run`` adds 3 (paused without a terminal) and 130
(aborted).  Warnings (plugin load failures, a capability no plugin provides...) go to stderr;
``-v`` shows more, ``-q`` only errors.

The kernel's own commands are added by :func:`build_cli`; an installed plugin adds its own
through the ``register_commands(cli)`` hook (``memora mcp serve`` comes from memora-plugin-mcp
that way).  Plugin commands are looked up when a name is not a kernel command, or when the
command list is shown, so ``memora chat`` does not import every plugin to start.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable
from typing import Any

import click

from .. import __version__
from .base import CommandError, LazyCommands, MemoraGroup, emit_json, setup_logging

__all__ = ["CommandError", "build_cli", "cli", "emit_json", "main", "setup_logging"]

log = logging.getLogger("memora")


def _root(verbose: int, quiet: bool) -> None:
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


KERNEL_COMMANDS: dict[str, str] = {
    "chat": "memora.cli.chat_cmd:chat_cmd",
    "config": "memora.cli.admin_cmd:config_group",
    "init": "memora.cli.init_cmd:init_cmd",
    "install": "memora.cli.admin_cmd:install_cmd",
    "logs": "memora.cli.logs_cmd:logs_cmd",
    "keys": "memora.cli.providers_cmd:keys_group",
    "memory": "memora.cli.memory_cmd:memory_group",
    "models": "memora.cli.providers_cmd:models_cmd",
    "plugins": "memora.cli.admin_cmd:plugins_cmd",
    "providers": "memora.cli.providers_cmd:providers_group",
    "role-pack": "memora.cli.role_pack_cmd:role_pack_group",
    "run": "memora.cli.run_cmd:run_cmd",
    "runs": "memora.cli.runs_cmd:runs_group",
    "sessions": "memora.cli.memory_cmd:sessions_group",
    "tools": "memora.cli.tools_cmd:tools_group",
    "trust": "memora.cli.trust_cmd:trust_group",
    "uninstall": "memora.cli.admin_cmd:uninstall_cmd",
}
"""The kernel's commands: name -> ``module:attribute``, imported when the command runs (or
its help is shown), so a command does not pay for the others' imports."""


def _plugin_commands(plugins: Any) -> Callable[[click.Group], None]:
    def load(group: click.Group) -> None:
        from ..plugins import create_plugin_manager

        manager = plugins if plugins is not None else create_plugin_manager()
        manager.register_commands(group)

    return load


def build_cli(*, plugins: Any = None, plugin_commands: bool = True) -> click.Group:
    """A new ``memora`` click group: the kernel's commands, and those the installed plugins
    (or ``plugins``, a :class:`~memora.plugins.Plugins`) add through ``register_commands`` —
    loaded when first needed.  A plugin whose registration raises loses only its commands (a
    warning names it); it cannot replace a kernel command."""
    group = MemoraGroup(
        name="memora",
        callback=_root,
        help=_root.__doc__,
        context_settings={"help_option_names": ["-h", "--help"]},
        commands=LazyCommands(KERNEL_COMMANDS),
        params=[
            click.Option(["-v", "--verbose"], count=True, help="Show more on stderr (-vv: debug)."),
            click.Option(["-q", "--quiet"], is_flag=True, help="Show only errors on stderr."),
        ],
    )
    click.version_option(__version__, prog_name="memora")(group)
    if plugin_commands:
        group.plugin_loader = _plugin_commands(plugins)
        group.cache_listing = plugins is None  # the installed plugins' commands, remembered
    return group


cli = build_cli()
"""The ``memora`` command as a click group (hosts may embed it, tests invoke it)."""


def main(argv: list[str] | None = None) -> None:
    try:
        cli.main(args=argv, prog_name="memora", standalone_mode=True)
    except KeyboardInterrupt:  # pragma: no cover - interactive
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover - prefer `python -m memora.cli`
    main()
