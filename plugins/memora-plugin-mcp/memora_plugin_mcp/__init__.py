"""memora plugin for the Model Context Protocol, on the official ``mcp`` SDK.

- ``memora mcp serve`` (:mod:`memora_plugin_mcp.server`): a project's memory, read-only, for
  any MCP client.

The entry point registers nothing at discovery: the SDK is imported only by the command.
"""

from __future__ import annotations

__all__: list[str] = []
