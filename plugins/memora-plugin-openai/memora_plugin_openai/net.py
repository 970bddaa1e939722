"""The provider's connections on asyncio's own transports, without anyio in between.

httpcore2 reaches the network through a backend; under asyncio its default is anyio's, and
each read there enters an exception map (a generator context manager), a cancel scope with a
deadline (a timer scheduled and cancelled) and anyio's checkpoint machinery — per read, which
for a streamed answer is per token.  A profile of a conversation put that machinery at about a
tenth of a request's client CPU.

:class:`AsyncioBackend` gives httpcore2 the same streams on ``loop.create_connection`` and
``loop.start_tls``: a protocol buffers what arrives, and a read that finds data returns it at
once — no timer, no scope.  A read that must wait arms (at most) one timer per connection,
kept across reads and moved only when a read's deadline is earlier; it fails the read with
``ReadTimeout`` when nothing arrived by that read's deadline.  Errors are httpcore2's, as from
its own backends: ``ConnectError``/``ConnectTimeout`` (connecting, TLS), ``ReadError``/
``ReadTimeout``, ``WriteError``/``WriteTimeout``; a closed connection reads as ``b""``.
Reading pauses when more than :data:`HIGH_WATER` bytes wait unread (a slow reader does not
buffer a fast server's whole answer) and resumes under :data:`LOW_WATER`.

The pool's idle check (``is_readable``: did the server close this idle connection?) is asked
of every idle connection each time a request starts or ends — a ``poll`` system call each, 7%
of ``memora serve``'s event loop under 100 concurrent conversations.  A connection answers from
what its protocol holds (data, or the close the loop has seen), else from one ``poll`` of all
the backend's connections, taken at most every :data:`IDLE_CHECK_AGE` seconds.

This is the design of httpx2's own pending native asyncio backend (pydantic/httpx2 pull request
#1170, "Add a native asyncio network backend", by its maintainer): when an httpx2 release picks
that backend under asyncio, this module and :class:`~.pool.AsyncioTransport` go, and the
provider uses httpx2's own transport.  Until then it earns its place: measured against httpx2's
own backend and pool (issue #70 item 3, docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import select
import ssl
import sys
import time
from collections.abc import Iterable
from typing import Any

import httpcore2

__all__ = [
    "HIGH_WATER",
    "IDLE_CHECK_AGE",
    "LOW_WATER",
    "AsyncioBackend",
    "AsyncioStream",
    "socket_readable",
]

HIGH_WATER = 256 * 1024
"""Unread bytes past which the connection stops reading from its socket."""

LOW_WATER = 64 * 1024
"""Unread bytes under which a paused connection reads again."""

IDLE_CHECK_AGE = 0.001
"""How long one ``poll`` of a backend's connections answers the pool's idle checks (seconds):
a close that arrives later is seen by the next poll, as one that arrives just after a poll of
the connection alone would be."""


def socket_readable(sock: Any) -> bool:
    """Whether the socket has something to read (for an idle connection: the server's close);
    a socket that is gone, or unknown, counts as readable, as in httpcore2."""
    try:
        fd = sock.fileno() if sock is not None else -1
    except (OSError, ValueError):
        return True
    if fd < 0:
        return True
    if sys.platform == "win32" or not hasattr(select, "poll"):  # pragma: no cover
        return bool(select.select([fd], [], [], 0)[0])
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


class _Sockets:
    """The sockets of one backend's open connections, registered in one ``poll`` object, so
    the pool's idle checks of many connections cost one system call, not one each."""

    def __init__(self) -> None:
        self._poll = select.poll() if hasattr(select, "poll") else None
        self._owners: dict[int, _Protocol] = {}
        self._ready: set[int] = set()
        self._at = -math.inf

    def add(self, fd: int, owner: _Protocol) -> None:
        if self._poll is None or fd < 0:
            return
        self._poll.register(fd, select.POLLIN)  # a number reused by a new socket: its own now
        self._owners[fd] = owner
        owner.watched = (self, fd)

    def remove(self, fd: int, owner: _Protocol) -> None:
        if self._owners.get(fd) is owner:
            del self._owners[fd]
            if self._poll is not None:
                with contextlib.suppress(KeyError, ValueError, OSError):
                    self._poll.unregister(fd)

    def readable(self, fd: int, owner: _Protocol) -> bool | None:
        """Whether ``fd`` has something to read, from a poll at most :data:`IDLE_CHECK_AGE`
        old; ``None`` when it is not (or no longer) watched here: ask the socket alone."""
        if self._poll is None or self._owners.get(fd) is not owner:
            return None
        now = time.monotonic()
        if now - self._at > IDLE_CHECK_AGE:
            self._ready = {ready for ready, _ in self._poll.poll(0)}
            self._at = now
        return fd in self._ready


class _Protocol(asyncio.Protocol):
    """What arrives on one connection, and who waits for it."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.chunks: collections.deque[bytes] = collections.deque()
        self.size = 0
        self.eof = False
        self.error: BaseException | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.reading_paused = False
        self.writing_paused = False
        self.drained: asyncio.Future[None] | None = None
        self.watched: tuple[_Sockets, int] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.chunks.append(data)
        self.size += len(data)
        if self.size > HIGH_WATER and not self.reading_paused and self.transport is not None:
            self.reading_paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False  # the transport closes itself: nothing is written after the answer

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        if self.watched is not None:
            sockets, fd = self.watched
            self.watched = None
            sockets.remove(fd, self)
        if exc is not None:
            self.error = exc
        self._wake()
        self.writing_paused = False
        self._release_writers()

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        self._release_writers()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _release_writers(self) -> None:
        drained = self.drained
        if drained is not None and not drained.done():
            drained.set_result(None)

    def readable(self) -> bool:
        return bool(self.chunks) or self.eof


def _expire(stream: AsyncioStream) -> None:
    """The connection's timer: fail the waiting read past its deadline, or wait on for it."""
    stream._timer = None
    waiter = stream._protocol.waiter
    if waiter is None or waiter.done():
        return  # nobody waits: the next read that waits arms it again
    deadline = stream._deadline
    if deadline is None:
        return  # this read waits without a deadline
    if stream._loop.time() >= deadline:
        waiter.set_exception(httpcore2.ReadTimeout("timed out reading from the server"))
    else:  # armed for an earlier read: this one's deadline is later
        stream._timer = stream._loop.call_at(deadline, _expire, stream)


class AsyncioStream(httpcore2.AsyncNetworkStream):
    """One connection (plain or TLS) for httpcore2, on an asyncio transport."""

    def __init__(
        self,
        transport: asyncio.Transport,
        protocol: _Protocol,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._transport = transport
        self._protocol = protocol
        self._loop = loop
        self._timer: asyncio.TimerHandle | None = None
        self._deadline: float | None = None
        protocol.transport = transport

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        protocol = self._protocol
        chunks = protocol.chunks
        while not chunks:
            if protocol.error is not None:
                raise httpcore2.ReadError(str(protocol.error) or type(protocol.error).__name__)
            if protocol.eof:
                return b""
            await self._wait(timeout)
        data = chunks.popleft()
        if len(data) > max_bytes:
            chunks.appendleft(data[max_bytes:])
            data = data[:max_bytes]
        elif chunks and len(data) + len(chunks[0]) <= max_bytes:
            # what arrived since the last read goes on together
            parts = [data]
            size = len(data)
            while chunks and size + len(chunks[0]) <= max_bytes:
                part = chunks.popleft()
                parts.append(part)
                size += len(part)
            data = b"".join(parts)
        protocol.size -= len(data)
        if protocol.reading_paused and protocol.size <= LOW_WATER:
            protocol.reading_paused = False
            if not self._transport.is_closing():
                self._transport.resume_reading()
        return data

    async def _wait(self, timeout: float | None) -> None:
        protocol = self._protocol
        if protocol.waiter is not None:  # httpcore2 reads a connection from one task at a time
            raise RuntimeError("another task is already reading from this connection")
        waiter = self._loop.create_future()
        protocol.waiter = waiter
        if timeout is None:
            self._deadline = None
        else:
            deadline = self._deadline = self._loop.time() + timeout
            timer = self._timer
            if timer is None or timer.when() > deadline:
                if timer is not None:
                    timer.cancel()
                self._timer = self._loop.call_at(deadline, _expire, self)
        try:
            await waiter
        finally:
            protocol.waiter = None

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        protocol = self._protocol
        if protocol.error is not None or self._transport.is_closing():
            raise httpcore2.WriteError("the connection is closed")
        try:
            self._transport.write(buffer)
        except (OSError, RuntimeError) as exc:
            raise httpcore2.WriteError(str(exc)) from exc
        if not protocol.writing_paused:
            return
        if protocol.drained is not None:  # as reads: one writing task at a time
            raise RuntimeError("another task is already writing to this connection")
        drained = protocol.drained = self._loop.create_future()
        try:
            async with asyncio.timeout(timeout):
                await drained
        except TimeoutError:
            raise httpcore2.WriteTimeout("timed out writing to the server") from None
        finally:
            protocol.drained = None
        if protocol.error is not None:
            raise httpcore2.WriteError(str(protocol.error) or type(protocol.error).__name__)

    async def aclose(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        transport = self._transport
        if transport.is_closing():
            return
        # as anyio's own close: what was written goes out, the loop runs once (the socket is
        # closed there), and whatever is left is dropped
        transport.close()
        await asyncio.sleep(0)
        transport.abort()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                transport = await self._loop.start_tls(
                    self._transport,
                    self._protocol,
                    ssl_context,
                    server_hostname=server_hostname,
                )
        except TimeoutError:
            self._transport.abort()
            raise httpcore2.ConnectTimeout("timed out in the TLS handshake") from None
        except (OSError, ssl.SSLError, ConnectionError, RuntimeError) as exc:
            self._transport.abort()
            raise httpcore2.ConnectError(str(exc)) from exc
        except BaseException:
            self._transport.abort()
            raise
        if transport is None:  # the connection closed during the handshake
            raise httpcore2.ConnectError("the connection closed during the TLS handshake")
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        return AsyncioStream(transport, self._protocol, self._loop)

    def get_extra_info(self, info: str) -> Any:
        transport = self._transport
        if info == "ssl_object":
            return transport.get_extra_info("ssl_object")
        if info == "client_addr":
            return transport.get_extra_info("sockname")
        if info == "server_addr":
            return transport.get_extra_info("peername")
        if info == "socket":
            return transport.get_extra_info("socket")
        if info == "is_readable":
            return self._is_readable()
        return None

    def _is_readable(self) -> bool:
        """Whether an idle connection has something to read — for httpcore2's pool, the sign
        that the server closed it: what the protocol holds, else the socket itself (a close
        the event loop has not seen yet)."""
        protocol = self._protocol
        if protocol.readable() or protocol.error is not None or self._transport.is_closing():
            return True
        if protocol.watched is not None:
            sockets, fd = protocol.watched
            answer = sockets.readable(fd, protocol)
            if answer is not None:
                return answer
        return socket_readable(self._transport.get_extra_info("socket"))


class AsyncioBackend(httpcore2.AsyncNetworkBackend):
    """httpcore2's network on asyncio's transports (see the module's doc)."""

    def __init__(self) -> None:
        self._sockets = _Sockets()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        extra: dict[str, Any] = {}
        if isinstance(loop, asyncio.BaseEventLoop):  # the standard library's (uvloop has none)
            extra["happy_eyeballs_delay"] = 0.25  # IPv6 and IPv4 tried as anyio's connect_tcp
        try:
            async with asyncio.timeout(timeout):
                transport, protocol = await loop.create_connection(
                    _Protocol,
                    host,
                    port,
                    local_addr=(local_address, 0) if local_address else None,
                    **extra,
                )
        except TimeoutError:
            raise httpcore2.ConnectTimeout(f"timed out connecting to {host}:{port}") from None
        except OSError as exc:
            raise httpcore2.ConnectError(str(exc)) from exc
        return self._stream(transport, protocol, loop, socket_options, self._sockets)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport, protocol = await loop.create_unix_connection(_Protocol, path)
        except TimeoutError:
            raise httpcore2.ConnectTimeout(f"timed out connecting to {path}") from None
        except OSError as exc:
            raise httpcore2.ConnectError(str(exc)) from exc
        return self._stream(transport, protocol, loop, socket_options, self._sockets)

    @staticmethod
    def _stream(
        transport: asyncio.BaseTransport,
        protocol: _Protocol,
        loop: asyncio.AbstractEventLoop,
        socket_options: Iterable[Any] | None,
        sockets: _Sockets,
    ) -> AsyncioStream:
        sock = transport.get_extra_info("socket")
        if not transport.is_closing() and sock is not None:
            # no descriptor to watch: its idle check polls the socket alone
            with contextlib.suppress(OSError, ValueError):
                sockets.add(sock.fileno(), protocol)
        if socket_options:
            try:
                for option in socket_options:
                    sock.setsockopt(*option)
            except (OSError, AttributeError) as exc:
                transport.abort()  # type: ignore[attr-defined]
                raise httpcore2.ConnectError(f"socket option refused: {exc}") from exc
        return AsyncioStream(transport, protocol, loop)  # type: ignore[arg-type]

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
