"""`memora mcp serve`: a project's memory, read-only, over MCP (stdio).  The server lives in the
``memora-plugin-mcp`` distribution; this command only wires the project's storage to it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from ..errors import ErrorCode, MemoraError
from .common import StorageTarget, location_options, storage_option
from .main import cli


@cli.group("mcp")
def mcp_group() -> None:
    """memora and the Model Context Protocol."""


@mcp_group.command("serve")
@location_options
@storage_option
def serve_cmd(
    project: Path, data_dir: Path | None, config_dir: Path | None, storage: str | None
) -> None:
    """Serve the project's memory read-only over MCP on stdin/stdout: keyword search, stats,
    recent rounds, role packs.  For Claude Desktop-style clients:
    {"command": "memora", "args": ["mcp", "serve", "--project", "/path/to/project"]}"""
    try:
        from memora_plugin_mcp.server import MemoryServer, build_server
    except ImportError as exc:
        raise MemoraError(
            ErrorCode.NOT_AVAILABLE,
            f"memora mcp serve needs the MCP plugin: pip install memora-plugin-mcp ({exc})",
        ) from exc
    from ..memory.storage import ReadOnlyView
    from ..role_pack.manager import RolePackManager
    from ..settings import user_config_dir

    target = StorageTarget(project, data_dir, config_dir, storage)
    if not target.data_dir.is_dir():
        raise MemoraError(
            ErrorCode.NOT_FOUND,
            f"no memora data in {target.data_dir}; pass --data-dir, or run memora in the project first",
        )

    @contextlib.asynccontextmanager
    async def open_memory() -> AsyncIterator[Any]:
        storage_obj = target.open(read_only=True)
        sessions = target.open_sessions()
        packs = RolePackManager(user_config_dir(config_dir), project_path=target.project)
        try:
            yield MemoryServer(ReadOnlyView(storage_obj), sessions, packs, target.project)
        finally:
            for closer in (storage_obj, sessions):
                with contextlib.suppress(Exception):
                    await closer.close()

    build_server(open_memory).run("stdio")
