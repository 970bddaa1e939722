"""`memora mcp serve`: a project's memory, read-only, for any MCP client (Claude Desktop, IDEs).

The server is built on the official ``mcp`` SDK (``MCPServer``) and talks over stdio.  Its
tools only read: keyword search over the memory (round summaries, registered works), memory
statistics, the recent rounds of the project's sessions, and the role packs' metadata.  The
storage is opened through :class:`memora.memory.storage.ReadOnlyView` (and SQLite in read-only
mode), so no tool can write, whatever a client sends.  With ``--scope NAME`` the server reads
as that user, tenant or agent: its memories and the project's unscoped ones, and its sessions
only (the filter is in the storage's own queries); without, the unscoped memories and sessions.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer

from memora import __version__
from memora.errors import NotFoundError
from memora.memory.manager import MemoryManager
from memora.memory.ranking import DEFAULT_SESSION_WEIGHT, PASSAGE_WEIGHT
from memora.memory.storage import ReadOnlyView

__all__ = ["MemoryServer", "build_server"]

logger = logging.getLogger("memora.plugins.mcp")


@dataclass
class MemoryServer:
    """What the MCP tools read from (opened once, closed when the server stops)."""

    storage: ReadOnlyView
    sessions: Any
    role_packs: Any
    project: Path
    scope: str | None = None
    """Whose memory and sessions the tools read (``None``: the project's unscoped)."""
    session_weight: float = DEFAULT_SESSION_WEIGHT
    passage_weight: float = PASSAGE_WEIGHT
    """How searches rank (the config's options, as an Agent ranks; see memora.memory.ranking)."""

    def __post_init__(self) -> None:
        # reads only, through the view of the scope: every query carries its filter
        # a manager that is only ever asked to read: its write methods would find no writes
        self.memory = MemoryManager(
            self.storage,  # type: ignore[arg-type]
            session_weight=self.session_weight,
            passage_weight=self.passage_weight,
        ).for_scope(self.scope)

    async def _sessions(self) -> list[Any]:
        return [
            s
            for s in await self.sessions.list(include_archived=True)
            if getattr(s, "scope", None) == self.scope
        ]

    async def search(self, query: str, limit: int, source: str | None) -> list[dict[str, Any]]:
        hits = await self.memory.search(query, limit=limit, source=source)
        return [
            {
                "id": h.record.id,
                "content": h.record.content,
                "source": h.record.source,
                "name": h.record.name,
                "summary_type": h.record.summary_type,
                "session_id": h.record.session_id,
                "score": round(h.score, 4),
                "created_at": h.record.created_at,
            }
            for h in hits
        ]

    async def stats(self) -> dict[str, Any]:
        sources = ("round_summary", "work", "manual")
        return {
            "project": str(self.project),
            "memories": await self.memory.count(),
            "by_source": {s: await self.memory.count(s) for s in sources},
            "sessions": len(await self._sessions()),
        }

    async def recent_rounds(self, limit: int, session_id: str | None) -> list[dict[str, Any]]:
        if session_id is not None:
            info = await self.sessions.get(session_id)
            if getattr(info, "scope", None) != self.scope:
                raise NotFoundError(f"no session {session_id!r}")
            ids = [session_id]
        else:
            ids = [s.id for s in await self._sessions()][:5]
        rounds: list[dict[str, Any]] = []
        for sid in ids:
            for r in await self.sessions.rounds(sid):
                rounds.append(
                    {
                        "session_id": sid,
                        "round_id": r.round_id,
                        "user": r.user,
                        "assistant": r.assistant,
                        "status": r.status,
                        "ended_at": r.ended_at,
                    }
                )
        rounds.sort(key=lambda r: r["ended_at"] or 0, reverse=True)
        return rounds[:limit]

    def packs(self) -> list[dict[str, Any]]:
        return [m.to_dict() for m in self.role_packs.list_meta()]


def _answer(work: Any) -> Any:
    """Run a tool's work; an anticipated failure (a bad argument, a memora error naming what
    is wrong) goes back to the client as the tool's own error message (``ToolError``) — any
    other exception became "Error executing tool" and a traceback on the server's stderr."""
    from mcp.server.mcpserver.exceptions import ToolError

    from memora.errors import MemoraError

    async def run() -> Any:
        try:
            return await work()
        except (MemoraError, ValueError) as exc:
            raise ToolError(str(exc)) from exc

    return run()


def build_server(open_memory: Any) -> MCPServer:
    """The MCP server; ``open_memory()`` is an async context manager yielding a
    :class:`MemoryServer` (opened when a client connects)."""
    state: dict[str, MemoryServer] = {}

    @asynccontextmanager
    async def lifespan(_: MCPServer) -> AsyncIterator[dict[str, Any]]:
        async with open_memory() as memory:
            state["memory"] = memory
            yield {}

    server = MCPServer(
        "memora",
        version=__version__,
        instructions=(
            "Read-only access to a memora project's long-term memory: search it by keywords "
            "(Chinese works too), see its size, the recent conversation rounds and the role packs."
        ),
        lifespan=lifespan,
    )

    @server.tool(description="Search the project's memory (round summaries, works) by keywords.")
    async def memory_search(
        query: str, limit: int = 10, source: str | None = None
    ) -> list[dict[str, Any]]:
        async def work() -> list[dict[str, Any]]:
            if not query.strip():
                raise ValueError("query must not be empty: give one or more keywords")
            return await state["memory"].search(query, max(1, min(limit, 50)), source)

        return await _answer(work)  # type: ignore[no-any-return]

    @server.tool(description="How many memories the project has, by source, and its sessions.")
    async def memory_stats() -> dict[str, Any]:
        return await _answer(state["memory"].stats)  # type: ignore[no-any-return]

    @server.tool(description="The most recent conversation rounds (question and answer).")
    async def recent_rounds(limit: int = 10, session_id: str | None = None) -> list[dict[str, Any]]:
        async def work() -> list[dict[str, Any]]:
            return await state["memory"].recent_rounds(max(1, min(limit, 100)), session_id)

        return await _answer(work)  # type: ignore[no-any-return]

    @server.tool(description="The project's role packs: names, descriptions, capabilities.")
    async def role_packs() -> list[dict[str, Any]]:
        return state["memory"].packs()

    return server
