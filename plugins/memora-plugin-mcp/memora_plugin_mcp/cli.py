"""`memora mcp serve`: a project's memory, read-only, over MCP (stdio).  Added to the ``memora``
command by this plugin's ``register_commands`` hook; the server is in :mod:`.server`."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import click

from memora.cli.common import StorageTarget, location_options, scope_option, storage_option
from memora.errors import NotFoundError


@click.group("mcp")
def mcp_group() -> None:
    """memora and the Model Context Protocol."""


@mcp_group.command("serve")
@location_options
@storage_option
@scope_option
def serve_cmd(
    project: Path,
    data_dir: Path | None,
    config_dir: Path | None,
    storage: str | None,
    scope: str | None,
) -> None:
    """Serve the project's memory read-only over MCP on stdin/stdout: keyword search, stats,
    recent rounds, role packs — the project's unscoped memory and sessions, or with --scope
    NAME that user's too.  For Claude Desktop-style clients:
    {"command": "memora", "args": ["mcp", "serve", "--project", "/path/to/project"]}"""
    from memora.memory.storage import ReadOnlyView
    from memora.role_pack.manager import RolePackManager
    from memora.settings import user_config_dir

    from .server import MemoryServer, build_server

    target = StorageTarget(project, data_dir, config_dir, storage, scope=scope)
    if not target.data_dir.is_dir():
        raise NotFoundError(
            f"no memora data in {target.data_dir}; pass --data-dir, or run memora in the project first"
        )
    session_weight, passage_weight = target.ranking_weights()

    @contextlib.asynccontextmanager
    async def open_memory() -> AsyncIterator[Any]:
        storage_obj = target.open(read_only=True)
        sessions = target.open_sessions()
        packs = RolePackManager(user_config_dir(config_dir), project_path=target.project)
        try:
            yield MemoryServer(
                ReadOnlyView(storage_obj),
                sessions,
                packs,
                target.project,
                scope=scope,
                session_weight=session_weight,
                passage_weight=passage_weight,
            )
        finally:
            for closer in (storage_obj, sessions):
                with contextlib.suppress(Exception):
                    await closer.close()

    build_server(open_memory).run("stdio")
