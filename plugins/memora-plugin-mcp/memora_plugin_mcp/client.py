"""MCP servers' tools as memora tools (the ``tool_source`` plugin kind).

Servers are configured under ``plugins.mcp.servers`` — ``{"NAME": {"command": ..., "args": [...],
"env": {...}, "cwd": ...}}`` for stdio, ``{"NAME": {"url": "https://..."}}`` for streamable HTTP —
and serve the capability ``mcp:NAME``.  A server starts the first time a role pack that declares
its capability runs a turn; its tool list is read again before every turn, so changes are picked
up.  Its tools are named ``mcp_NAME_TOOL`` and reach the model only through the capability map and
the pre-execution check, like any tool.  A server that fails to start costs only its own
capability (the reason, with the first line the server wrote to its stderr, is in the capability
map's ``unavailable``).

A server is outside code: its stderr goes to a log file with a size cap
(``<user config dir>/logs/mcp-NAME.log``, 0600), never to memora's terminal; a tool result is
capped like a command's output (head and tail, with a marker saying how much was left out); a
server that dies is started again on its next use, with a growing pause between attempts (1 s,
2 s, 4 s ... 60 s), and a warning says so once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from pydantic import BaseModel, ConfigDict, create_model

from memora.errors import ToolError, ToolErrorCode
from memora.security.network import AddressPolicy
from memora.tools.base import Idempotency, Tool, ToolOutput

__all__ = ["McpTool", "McpToolSource"]

logger = logging.getLogger("memora.plugins.mcp")

_NAME = re.compile(r"[^A-Za-z0-9_-]+")
_ANY_ARGS: type[BaseModel] = create_model("mcp_args", __config__=ConfigDict(extra="allow"))
_SERVER_KEYS = {"command", "args", "env", "cwd", "url", "headers", "timeout"}
_CONNECTION_CLOSED = -32000  # mcp_types.CONNECTION_CLOSED
MAX_RESULT_CHARS = 64_000
MAX_TOOLS = 128
"""Tools taken from one server's ``tools/list``; the rest are left out, with a warning."""
MAX_TOOL_BYTES = 256 * 1024
"""Description and schema bytes taken from one server's ``tools/list``: every tool offered is
sent to the model with every request, so a server cannot fill the context (or the memory)."""
MAX_DESCRIPTION_CHARS = 2_000
"""A tool result past this many characters keeps its head and tail (as commands' output does)."""
STDERR_LOG_BYTES = 1 << 20
"""A server's stderr log keeps this many bytes per run; the rest is counted and dropped."""
_BACKOFF_MAX = 60.0


def cap_text(text: str, limit: int) -> str:
    """``text`` whole when it fits, else its head and tail around a marker that says how much
    was left out."""
    if len(text) <= limit:
        return text
    head, tail = text[: limit * 3 // 4], text[-(limit // 4) :]
    skipped = len(text) - len(head) - len(tail)
    return f"{head}\n[... {skipped:,} characters omitted; {len(text):,} in all ...]\n{tail}"


def _default_log_dir() -> Path:
    from memora.settings import user_config_dir

    return user_config_dir() / "logs"


class _StderrLog:
    """A pipe the server writes its stderr to, drained by a thread into a private log file: the
    first ``limit`` bytes are kept, the rest counted and dropped, so a chatty or hostile server
    neither fills the disk nor reaches memora's terminal, and never blocks on a full pipe."""

    def __init__(self, path: Path, limit: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.path = path
        self.limit = limit
        self.first_line = ""
        read_fd, write_fd = os.pipe()
        self.writer: TextIO = os.fdopen(write_fd, "w")
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
        self._log = os.fdopen(os.open(path, flags, 0o600), "wb")
        self._thread = threading.Thread(
            target=self._drain, args=(read_fd,), name=f"mcp-stderr-{path.stem}", daemon=True
        )
        self._thread.start()

    def _drain(self, fd: int) -> None:
        kept = dropped = 0
        start = tail = b""
        try:
            while chunk := os.read(fd, 65536):
                if len(start) < 4096:
                    start += chunk[:4096]
                tail = (tail + chunk)[-4096:]
                room = self.limit - kept
                if room > 0:
                    self._log.write(chunk[:room])
                    self._log.flush()
                    kept += min(room, len(chunk))
                dropped += max(0, len(chunk) - max(room, 0))
        except OSError:
            pass
        finally:
            os.close(fd)
            self.first_line = _error_line(start, tail)
            if dropped:
                self._log.write(f"\n[... {dropped:,} more bytes of stderr dropped]\n".encode())
            self._log.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.writer.close()
        self._thread.join(timeout=2)


def _error_line(start: bytes, tail: bytes) -> str:
    """The line that names a server's error: its first line, or the last one of a Python
    traceback (which starts with "Traceback" and ends with the exception)."""
    from memora.security.terminal import clean

    def lines(data: bytes) -> list[str]:
        text = data.decode("utf-8", errors="replace")
        return [clean(line.strip(), newlines=False) for line in text.splitlines() if line.strip()]

    first, last = lines(start), lines(tail)
    if first and first[0].startswith("Traceback") and last:
        return last[-1][:300]
    return first[0][:300] if first else ""


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
            description=cap_text((remote.description or remote.name).strip(), MAX_DESCRIPTION_CHARS)
            + f" (MCP server {server.name!r})",
            args_model=_ANY_ARGS,
            handler=_unused_handler,
            idempotency=idempotency,
            writes=not read_only,
            capability=f"mcp:{server.name}",
        )
        self.server = server
        self.remote_name = str(remote.name)
        self.signature = (remote.description, repr(remote.input_schema))
        """What the server said of the tool: listed again unchanged, the same tool is kept."""
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
    opened in one turn and closed from anywhere; a server that stopped is started again on its
    next use, no sooner than its back-off allows."""

    def __init__(
        self,
        name: str,
        spec: Mapping[str, Any],
        timeout: float,
        policy: AddressPolicy,
        *,
        log_dir: Path | None = None,
        max_result_chars: int = MAX_RESULT_CHARS,
        stderr_bytes: int = STDERR_LOG_BYTES,
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
        self.log_dir = log_dir
        self.max_result_chars = max_result_chars
        self.stderr_bytes = stderr_bytes
        self.stderr: _StderrLog | None = None
        self.starts = 0
        self._client: Any = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._tools: dict[str, McpTool] = {}
        self._failures = 0
        self._next_start = 0.0
        self._tried = False  # a start was attempted: later ones wait for the back-off
        self._starting = asyncio.Lock()
        """One start at a time: a caller arriving while the server starts waits for it (seen
        alone, "tried and not running", it would reset the connection about to be used)."""
        self._served = False  # it answered once: a later start is a restart (warned once)
        self._warned = False

    @property
    def log_path(self) -> Path:
        return (self.log_dir or _default_log_dir()) / f"mcp-{_NAME.sub('_', self.name)}.log"

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

    def _transport(self, target: Any) -> Any:
        """A stdio server's transport with its stderr sent to the capped log; an HTTP server's
        with each request ended ``timeout`` seconds after it began (see :mod:`.http_transport`:
        a call that timed out leaves no request behind it, whatever the server trickles)."""
        from mcp import StdioServerParameters

        if not isinstance(target, StdioServerParameters):
            from .http_transport import streamable_http

            headers = {str(k): str(v) for k, v in (self.spec.get("headers") or {}).items()}
            return streamable_http(target, self.timeout, headers or None)
        from mcp.client.stdio import stdio_client

        self.stderr = _StderrLog(self.log_path, self.stderr_bytes)
        return stdio_client(target, errlog=self.stderr.writer)

    @property
    def running(self) -> bool:
        return self._client is not None and self._task is not None and not self._task.done()

    async def start(self) -> None:
        if self.running:
            return
        async with self._starting:
            if not self.running:  # the start waited for may have made it run
                await self._start()

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        if self._tried:  # it was started before and is not running: wait for the back-off
            await self._reset()
            wait = self._next_start - loop.time()
            if wait > 0:
                state = "stopped" if self._served else "failed to start"
                raise ToolError(
                    ToolErrorCode.NOT_AVAILABLE,
                    f"MCP server {self.name!r} {state}; it is tried again in {wait:.0f} s "
                    f"(its stderr: {self.log_path})",
                )
            if self._served and not self._warned:
                self._warned = True
                logger.warning(
                    "MCP server %r stopped; starting it again (stderr: %s)",
                    self.name,
                    self.log_path,
                )
        self._tried = True
        try:
            await self._open(loop)
        except BaseException as exc:
            self._failures += 1
            self._next_start = loop.time() + min(_BACKOFF_MAX, 2.0 ** (self._failures - 1))
            if isinstance(exc, Exception) and not isinstance(exc, ToolError):
                raise RuntimeError(self._failure_text(exc)) from exc
            raise
        self._served = True

    def _failure_text(self, exc: BaseException) -> str:
        while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
            exc = exc.exceptions[0]  # the SDK's task groups wrap the one real error
        said = self.stderr.first_line if self.stderr is not None else ""
        if isinstance(exc, TimeoutError):
            text = f"it did not answer within {self.timeout:g} s (timeout)"
        else:
            text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return text + (f"; its stderr: {said}" if said else "")

    async def _open(self, loop: asyncio.AbstractEventLoop) -> None:
        from mcp import Client

        target = self._transport(await self._connect_target())
        ready: asyncio.Future[Any] = loop.create_future()
        self._stop = asyncio.Event()
        self.starts += 1

        async def hold() -> None:
            try:
                async with Client(target, read_timeout_seconds=self.timeout) as client:
                    ready.set_result(client)
                    await self._stop.wait()
            except BaseException as exc:
                if not ready.done():
                    ready.set_exception(exc)
                elif not isinstance(exc, asyncio.CancelledError):
                    logger.info("MCP server %r stopped: %s", self.name, _describe(exc))
                self._client = None

        self._task = loop.create_task(hold(), name=f"mcp-{self.name}")
        try:
            self._client = await asyncio.wait_for(asyncio.shield(ready), self.timeout)
        except BaseException:
            # a start that failed or timed out is stopped now: its task may still be inside
            # the handshake, where the stop event does not reach it, and the start ends at
            # `timeout`, not when the handshake gives up (nor is its late error left unread)
            ready.cancel()
            self._task.cancel()
            await self._reset()
            raise

    async def tools(self) -> list[McpTool]:
        await self.start()
        try:
            listed = await asyncio.wait_for(self._client.list_tools(), self.timeout)
        except Exception as exc:
            await self._mark_dead()
            if isinstance(exc, TimeoutError):
                raise RuntimeError(
                    f"tools/list: it did not answer within {self.timeout:g} s (timeout)"
                ) from exc
            raise
        fresh: dict[str, McpTool] = {}
        spent = 0
        offered = list(listed.tools)
        for remote in offered:
            size = len(str(remote.description or "")) + len(json.dumps(remote.input_schema or {}))
            if len(fresh) >= MAX_TOOLS or spent + size > MAX_TOOL_BYTES:
                logger.warning(
                    "MCP server %r lists %d tools (%s bytes and more of descriptions and "
                    "schemas); only the first %d are offered (at most %d tools, %d bytes)",
                    self.name,
                    len(offered),
                    spent + size,
                    len(fresh),
                    MAX_TOOLS,
                    MAX_TOOL_BYTES,
                )
                break
            spent += size
            tool = self._tools.get(remote.name)
            signature = (remote.description, repr(remote.input_schema))
            if tool is None or tool.signature != signature:
                tool = McpTool(self, remote)
            fresh[remote.name] = tool
        self._tools = fresh
        self._failures = 0  # it answered: the back-off starts over
        return list(fresh.values())

    async def call(self, tool: str, args: dict[str, Any]) -> ToolOutput:
        if not self.running:
            try:
                await self.start()
            except ToolError:
                raise
            except Exception as exc:
                raise ToolError(
                    ToolErrorCode.NOT_AVAILABLE, f"MCP server {self.name!r} is not running: {exc}"
                ) from exc
        try:
            result = await asyncio.wait_for(self._client.call_tool(tool, args), self.timeout)
        except TimeoutError as exc:
            raise ToolError(
                ToolErrorCode.TIMEOUT,
                f"MCP server {self.name!r} did not answer within {self.timeout:g} s",
            ) from exc
        except Exception as exc:
            if not await self._died(exc):
                raise ToolError(
                    ToolErrorCode.EXECUTION_FAILED, f"{self.name}.{tool}: {exc}"
                ) from exc
            raise ToolError(
                ToolErrorCode.EXECUTION_FAILED,
                f"MCP server {self.name!r} stopped during the call to {tool!r} (whether it ran "
                "is unknown); it is started again on its next use",
            ) from exc
        texts = [getattr(block, "text", None) for block in result.content]
        content = "\n".join(t for t in texts if t) or str(
            getattr(result, "structured_content", "") or "(no content)"
        )
        # a server's answer is outside text of any size: capped before it reaches the model,
        # the next request and the session log
        content = cap_text(content, self.max_result_chars)
        if result.is_error:
            raise ToolError(ToolErrorCode.EXECUTION_FAILED, f"{self.name}.{tool}: {content}")
        return ToolOutput(content, content.splitlines()[0][:120] if content else "")

    async def _died(self, exc: BaseException) -> bool:
        """Whether ``exc`` means the connection is gone (then the server is marked stopped)."""
        closed = getattr(exc, "code", None) == _CONNECTION_CLOSED or isinstance(
            exc, (ConnectionError, EOFError)
        )
        await asyncio.sleep(0)  # let the holder notice an ended transport
        if closed or not self.running:
            await self._mark_dead()
            return True
        return False

    async def _mark_dead(self) -> None:
        await self._reset()
        self._failures += 1
        # the first restart is immediate; a server that keeps dying waits longer each time
        delay = 0.0 if self._failures == 1 else min(_BACKOFF_MAX, 2.0 ** (self._failures - 2))
        self._next_start = asyncio.get_running_loop().time() + delay

    async def _reset(self) -> None:
        """Close the connection task (keeping the record that the server ran)."""
        self._stop.set()
        task = self._task
        try:
            if task is not None and not task.done():
                # asyncio.wait, not wait_for: the task's own end is not raised here, and a
                # cancellation of the caller (a host's timeout) is not swallowed with it
                await asyncio.wait({task}, timeout=5)
                if not task.done():
                    task.cancel()
                    await asyncio.wait({task}, timeout=5)
        finally:
            self._client = None
            if self.stderr is not None:
                await asyncio.to_thread(self.stderr.close)

    async def close(self) -> None:
        await self._reset()


def _describe(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, RuntimeError) and exc.__cause__ is not None:
        return str(exc)  # already described by the server
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class McpToolSource:
    """The ``mcp`` tool source: capability ``mcp:NAME`` for each configured server."""

    def __init__(
        self,
        *,
        servers: Mapping[str, Mapping[str, Any]] | None = None,
        timeout: float = 30.0,
        allow: list[str] | None = None,
        log_dir: str | os.PathLike[str] | None = None,
        max_result_chars: int = MAX_RESULT_CHARS,
    ) -> None:
        policy = AddressPolicy(
            list(allow or []),
            hint="to permit it, set plugins.mcp.allow (networks) in your user config",
        )
        if int(max_result_chars) < 1000:
            raise ValueError("mcp max_result_chars must be at least 1000")
        self._servers = {
            name: _Server(
                name,
                spec,
                float(timeout),
                policy,
                log_dir=Path(log_dir) if log_dir is not None else None,
                max_result_chars=int(max_result_chars),
            )
            for name, spec in (servers or {}).items()
        }

    def capabilities(self) -> list[str]:
        return [f"mcp:{name}" for name in self._servers]

    async def tools(self, capability: str) -> list[Tool]:
        server = self._servers[capability.removeprefix("mcp:")]
        try:
            return list(await server.tools())
        except Exception as exc:
            raise RuntimeError(f"MCP server {server.name!r} failed: {_describe(exc)}") from exc

    async def aclose(self) -> None:
        for server in self._servers.values():
            await server.close()
