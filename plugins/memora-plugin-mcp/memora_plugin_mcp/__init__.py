"""memora plugin for the Model Context Protocol, on the official ``mcp`` SDK.

- **client** (:mod:`memora_plugin_mcp.client`): the tools of MCP servers configured under
  ``plugins.mcp.servers`` become agent tools under the capability ``mcp:<server>``.
- **server** (:mod:`memora_plugin_mcp.server`): ``memora mcp serve`` (added to the ``memora``
  command through ``register_commands``, :mod:`memora_plugin_mcp.cli`) exposes a project's
  memory read-only.

The entry point only registers a factory: the SDK is imported when a server is first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memora import hookimpl
from memora.plugins import checked_factory
from memora.security.trust import AtMost

if TYPE_CHECKING:
    from .client import McpToolSource

__all__ = ["McpToolSource", "register_commands", "register_tool_sources"]

OPTIONS = frozenset(["allow", "log_dir", "max_result_chars", "servers", "timeout"])

PROJECT = {"timeout": AtMost(30.0)}
"""What a project's config may set on its own.  ``servers`` runs programs or reaches hosts: from a
project it is a request the user must allow (``memora trust``); ``allow`` is user config only."""


def _load() -> type[McpToolSource]:
    from .client import McpToolSource

    return McpToolSource


def __getattr__(name: str) -> Any:
    if name == "McpToolSource":
        return _load()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@hookimpl
def register_tool_sources(register: Any) -> None:
    register("mcp", checked_factory("mcp", OPTIONS, _load, project=PROJECT))


@hookimpl
def register_commands(cli: Any) -> None:
    from .cli import mcp_group

    cli.add_command(mcp_group)
