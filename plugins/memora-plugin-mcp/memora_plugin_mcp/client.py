"""MCP servers' tools as memora tools (the ``tool_source`` plugin kind).

Servers are configured under ``plugins.mcp.servers`` — ``{"NAME": {"command": ..., "args": [...],
"env": {...}, "cwd": ...}}`` for stdio, ``{"NAME": {"url": "https://..."}}`` for streamable HTTP —
and serve the capability ``mcp:NAME``.  A server starts the first time a role pack that declares
its capability runs a turn; its tool list is read again before every turn, so changes are picked
up.  Its tools are named ``mcp_NAME_TOOL`` and reach the model only through the capability map and
the pre-execution check, like any tool.  A server that fails to start costs only its own
capability (the reason is in the capability map's ``unavailable``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, create_model

from memora.errors import ToolError, ToolErrorCode
from memora.security.network import AddressPolicy
from memora.tools.base import Idempotency, Tool, ToolOutput

__all__ = ["McpTool", "McpToolSource"]

logger = logging.getLogger("memora.plugins.mcp")

_NAME = re.compile(r"[^A-Za-z0-9_-]+")
_ANY_ARGS: type[BaseModel] = create_model("mcp_args", __config__=ConfigDict(extra="allow"))
_SERVER_KEYS = {"command", "args", "env", "cwd", "url", "headers", "timeout"}


def _tool_name(server: str, tool: str) -> str:
    return _NAME.sub("_", f"mcp_{server}_{tool}")[:64]


async def _unused_handler(*args: Any, **kwargs: Any) -> ToolOutput:  # pragma: no cover
    raise AssertionError("McpTool.invoke calls the server")


class McpTool(Tool):
    """One tool of an MCP server: its JSON schema as is, its calls sent to the server."""

    def __init__(self, server: _Server, remote: Any) -> None:
        annotations = getattr(remote, "annotations", None)
        read_only = bool(getattr(annotations, "read_only_hint", False))
        idempotent = bool(getattr(annotations, "idempotent_hint", False))
        idempotency: Idempotency = (
            "read-only" if read_only else "idempotent" if idempotent else "non-idempotent"
        )
        super().__init__(
            name=_tool_name(server.name, remote.name),
            description=(remote.description or remote.name).strip()
            + f" (MCP server {server.name!r})",
            args_model=_ANY_ARGS,
            handler=_unused_handler,
            idempotency=idempotency,
            writes=not read_only,
            capability=f"mcp:{server.name}",
        )
        self.server = server
        self.remote_name = str(remote.name)
        schema = dict(remote.input_schema or {"type": "object"})
        schema.pop("title", None)
        self._schema = schema

    def parse_args(self, raw: str | Mapping[str, Any] | None) -> dict[str, Any]:
        data = super().parse_args(raw)  # a JSON object (the server validates the rest)
        missing = [k for k in self.parameters.get("required", []) if k not in data]
        if missing:
            raise ToolError(
                ToolErrorCode.INVALID_ARGS,
                f"invalid arguments for {self.name}: missing {', '.join(missing)}",
            )
        return data

    async def invoke(self, ctx: Any, args: Mapping[str, Any]) -> ToolOutput:
        return await self.server.call(self.remote_name, dict(args))


class _Server:
    """One configured MCP server: its connection lives in a task of its own, so it can be
    opened in one turn and closed from anywhere."""

    def __init__(
        self, name: str, spec: Mapping[str, Any], timeout: float, policy: AddressPolicy
    ) -> None:
        unknown = set(spec) - _SERVER_KEYS
        if unknown:
            raise ValueError(
                f"plugins.mcp.servers.{name}: unknown key(s) {', '.join(sorted(unknown))}; "
                f"legal: {', '.join(sorted(_SERVER_KEYS))}"
            )
        if ("command" in spec) == ("url" in spec):
            raise ValueError(f"plugins.mcp.servers.{name}: give either 'command' or 'url'")
        self.name = name
        self.spec = dict(spec)
        self.timeout = float(spec.get("timeout", timeout))
        self.policy = policy
        self._client: Any = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._tools: dict[str, McpTool] = {}

    async def _connect_target(self) -> Any:
        from mcp import StdioServerParameters

        if "command" in self.spec:
            return StdioServerParameters(
                command=str(self.spec["command"]),
                args=[str(a) for a in self.spec.get("args", [])],
                env={str(k): str(v) for k, v in (self.spec.get("env") or {}).items()} or None,
                cwd=self.spec.get("cwd"),
            )
        url = str(self.spec["url"])
        await self.policy.judge(url)  # the same address rules as web fetch
        return url

    async def start(self) -> None:
        if self._client is not None:
            return
        from mcp import Client

        target = await self._connect_target()
        ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        async def hold() -> None:
            try:
                async with Client(target, read_timeout_seconds=self.timeout) as client:
                    ready.set_result(client)
                    await self._stop.wait()
            except BaseException as exc:
                if not ready.done():
                    ready.set_exception(exc)
                elif not isinstance(exc, asyncio.CancelledError):
                    logger.warning("MCP server %r stopped: %s", self.name, exc)
                self._client = None

        self._task = asyncio.get_running_loop().create_task(hold(), name=f"mcp-{self.name}")
        try:
            self._client = await asyncio.wait_for(asyncio.shield(ready), self.timeout)
        except BaseException:
            await self.close()
            raise

    async def tools(self) -> list[McpTool]:
        await self.start()
        listed = await asyncio.wait_for(self._client.list_tools(), self.timeout)
        fresh: dict[str, McpTool] = {}
        for remote in listed.tools:
            tool = self._tools.get(remote.name)
            signature = (remote.description, repr(remote.input_schema))
            if tool is None or getattr(tool, "_signature", None) != signature:
                tool = McpTool(self, remote)
                tool._signature = signature  # type: ignore[attr-defined]
            fresh[remote.name] = tool
        self._tools = fresh
        return list(fresh.values())

    async def call(self, tool: str, args: dict[str, Any]) -> ToolOutput:
        if self._client is None:
            raise ToolError(ToolErrorCode.NOT_AVAILABLE, f"MCP server {self.name!r} is not running")
        try:
            result = await asyncio.wait_for(self._client.call_tool(tool, args), self.timeout)
        except TimeoutError as exc:
            raise ToolError(
                ToolErrorCode.TIMEOUT,
                f"MCP server {self.name!r} did not answer within {self.timeout:g} s",
            ) from exc
        texts = [getattr(block, "text", None) for block in result.content]
        content = "\n".join(t for t in texts if t) or str(
            getattr(result, "structured_content", "") or "(no content)"
        )
        if result.is_error:
            raise ToolError(ToolErrorCode.EXECUTION_FAILED, f"{self.name}.{tool}: {content}")
        return ToolOutput(content, content.splitlines()[0][:120] if content else "")

    async def close(self) -> None:
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self._task, 5)
        self._client = None


class McpToolSource:
    """The ``mcp`` tool source: capability ``mcp:NAME`` for each configured server."""

    def __init__(
        self,
        *,
        servers: Mapping[str, Mapping[str, Any]] | None = None,
        timeout: float = 30.0,
        allow: list[str] | None = None,
    ) -> None:
        policy = AddressPolicy(
            list(allow or []),
            hint="to permit it, set plugins.mcp.allow (networks) in your user config",
        )
        self._servers = {
            name: _Server(name, spec, float(timeout), policy)
            for name, spec in (servers or {}).items()
        }

    def capabilities(self) -> list[str]:
        return [f"mcp:{name}" for name in self._servers]

    async def tools(self, capability: str) -> list[Tool]:
        server = self._servers[capability.removeprefix("mcp:")]
        try:
            return list(await server.tools())
        except Exception as exc:
            raise RuntimeError(
                f"MCP server {server.name!r} failed: {type(exc).__name__}: {exc}"
            ) from exc

    async def aclose(self) -> None:
        for server in self._servers.values():
            await server.close()
