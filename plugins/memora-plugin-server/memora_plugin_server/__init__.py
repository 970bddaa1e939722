"""memora plugin: the kernel as a web service.

- ``memora serve`` (added to the ``memora`` command through ``register_commands``,
  :mod:`memora_plugin_server.cli`) runs it with uvicorn;
- :func:`create_app` returns the ASGI app for a host's own server;
- ``memora serve-tokens`` manages the bearer tokens in the user's ``server.json``.

The web stack (Starlette, uvicorn) is imported when a command or the app is used, not when the
plugin is loaded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memora import hookimpl

from ._version import __version__

if TYPE_CHECKING:
    from .app import create_app

__all__ = ["__version__", "create_app", "register_commands"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@hookimpl
def register_commands(cli: Any) -> None:
    from .cli import serve_cmd, tokens_group

    cli.add_command(serve_cmd)
    cli.add_command(tokens_group)
