"""The provider's connection pool, made cheaper: its size, its network, its idle check.

:func:`transport_for` makes the transport of a client the provider makes: a large pool split
in several (:class:`Shards`: httpcore2's pool walks all its connections per request), each on
:class:`~.net.AsyncioBackend` (connections on asyncio's own transports: no anyio machinery per
read or per request, and the idle check below answered from what the connection holds).
:func:`install` does the latter for an httpx2 client's own pool; a pool whose backend is not
httpcore2's automatic choice keeps it, wrapped in :class:`CheapReadable`.

Before it gives a request a connection, httpcore2's pool asks every idle connection whether
the server closed it: is its socket readable?  With anyio (the backend under asyncio), each
such question builds the stream's whole attribute table — a ``getpeername`` system call and a
dozen closures — to find the socket.  A server answering 100 conversations keeps up to 20 idle
connections to its model endpoint (httpx2's default) and asks twice per request: 8% of the
samples of ``memora serve``'s event-loop thread in a py-spy profile of ``bench_serve``'s load.

:class:`CheapReadable` wraps the pool's network backend: each stream finds its socket once,
then asks ``poll`` directly — the same question, with the same answer (a socket that is gone
counts as readable, so the pool drops the connection).  Everything else goes to the wrapped
backend and streams unchanged.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Iterable
from typing import Any

import httpcore2
import httpx2

from .net import AsyncioBackend, socket_readable

try:  # httpcore2's automatic choice (anyio under asyncio), the backend this replaces
    from httpcore2._backends.auto import AutoBackend
except ImportError:  # pragma: no cover - an httpcore2 laid out otherwise: CheapReadable only
    AutoBackend = None  # type: ignore[assignment,misc]

__all__ = ["MAX_SHARDS", "SHARD_SIZE", "CheapReadable", "Shards", "install", "transport_for"]

SHARD_SIZE = 25
"""A provider's pool is one pool per this many idle connections it keeps (100 by default:
four), each keeping its share."""

MAX_SHARDS = 8
"""The most pools one provider's requests are spread over."""


class _Stream(httpcore2.AsyncNetworkStream):
    __slots__ = ("_inner", "_socket")

    def __init__(self, inner: httpcore2.AsyncNetworkStream) -> None:
        self._inner = inner
        self._socket: Any = None

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        return _Stream(await self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            if self._socket is None:
                self._socket = self._inner.get_extra_info("socket")
                if self._socket is None:  # a backend that shows no socket: ask it, as before
                    return self._inner.get_extra_info("is_readable")
            return socket_readable(self._socket)
        return self._inner.get_extra_info(info)


class CheapReadable(httpcore2.AsyncNetworkBackend):
    """A network backend whose streams answer ``is_readable`` with one ``poll`` (see the
    module's doc); the rest is ``inner``'s."""

    def __init__(self, inner: httpcore2.AsyncNetworkBackend) -> None:
        self.inner = inner

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        stream = await self.inner.connect_tcp(host, port, timeout, local_address, socket_options)
        return _Stream(stream)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        return _Stream(await self.inner.connect_unix_socket(path, timeout, socket_options))

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


class Shards(httpx2.AsyncBaseTransport):
    """Requests spread over several transports, each a pool of its own with its share of the
    limits.

    httpcore2's pool walks all its connections each time a request starts or ends (closed?
    expired? idle? available?): with the 100 connections of 100 concurrent turns, 16% of
    ``memora serve``'s event loop in a py-spy profile.  Pools of a quarter the size walk a
    quarter as far.  A request goes to the pool with the fewest requests in flight, the first
    of them on a tie: requests one after another (a conversation's steps) all go to the first
    pool and keep its one connection; concurrent ones spread evenly, so the pools' limits add
    up to the provider's."""

    def __init__(self, transports: list[httpx2.AsyncHTTPTransport]) -> None:
        self.transports = transports
        self._busy = [0] * len(transports)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        busy = self._busy
        index = busy.index(min(busy))
        busy[index] += 1
        try:
            response = await self.transports[index].handle_async_request(request)
        except BaseException:
            busy[index] -= 1
            raise
        response.stream = _Counted(response.stream, busy, index)
        return response

    @property
    def in_flight(self) -> list[int]:
        """Requests in flight in each pool (sent, their answer not yet closed)."""
        return list(self._busy)

    async def aclose(self) -> None:
        for transport in self.transports:
            await transport.aclose()


class _Counted(httpx2.AsyncByteStream):
    """A response's body that tells its pool's count when it is closed (once)."""

    __slots__ = ("_busy", "_index", "_stream")

    def __init__(self, stream: Any, busy: list[int], index: int) -> None:
        self._stream = stream
        self._busy: list[int] | None = busy
        self._index = index

    def __aiter__(self) -> AsyncIterator[bytes]:
        iterator: AsyncIterator[bytes] = self._stream.__aiter__()
        return iterator  # the body's own iterator: no layer per chunk

    async def aclose(self) -> None:
        busy, self._busy = self._busy, None
        if busy is not None:
            busy[self._index] -= 1
        await self._stream.aclose()


def _shares(total: int, count: int) -> list[int]:
    return [total // count + (1 if i < total % count else 0) for i in range(count)]


def transport_for(
    *, http2: bool, max_connections: int, max_keepalive_connections: int
) -> httpx2.AsyncBaseTransport:
    """The transport of a client the provider makes: httpx2's own, on
    :class:`~.net.AsyncioBackend`; for a pool that keeps twice :data:`SHARD_SIZE` idle
    connections or more (and allows twice as many requests in flight), one per
    :data:`SHARD_SIZE` of each (:class:`Shards`; at most :data:`MAX_SHARDS`) whose limits add up to
    ``max_connections`` and ``max_keepalive_connections``.  One TLS context (the system's
    trust) serves them all."""
    # a request waits for its own pool's connections: each pool keeps room for many
    count = max(
        1,
        min(MAX_SHARDS, max_keepalive_connections // SHARD_SIZE, max_connections // SHARD_SIZE),
    )
    context = httpx2.create_ssl_context(trust_env=False)
    transports = [
        httpx2.AsyncHTTPTransport(
            verify=context,
            http2=http2,
            trust_env=False,
            limits=httpx2.Limits(max_connections=conns, max_keepalive_connections=idle),
        )
        for conns, idle in zip(
            _shares(max_connections, count), _shares(max_keepalive_connections, count), strict=True
        )
    ]
    shared = AsyncioBackend()  # one poll answers the idle checks of every pool
    for transport in transports:
        _install(transport, shared)
    return transports[0] if count == 1 else Shards(transports)


def install(client: httpx2.AsyncClient) -> bool:
    """Give ``client``'s own pool :class:`~.net.AsyncioBackend` (or, when its backend is not
    httpcore2's automatic one, that backend with the cheaper check); ``False`` (nothing
    changed, the client works as before) when the client has another transport, httpx2 is
    built differently, or this was done already.

    httpx2 does not take a network backend, so this reaches the pool its default transport
    made; the pool keeps every setting it was made with (TLS, limits, HTTP/2)."""
    transport = getattr(client, "_transport", None)
    if isinstance(transport, Shards):
        return any([_install(t) for t in transport.transports])
    return _install(transport)


def _install(transport: object, backend_for_auto: AsyncioBackend | None = None) -> bool:
    pool = getattr(transport, "_pool", None)
    if type(transport) is not httpx2.AsyncHTTPTransport or not isinstance(
        pool, httpcore2.AsyncConnectionPool
    ):
        return False
    backend = getattr(pool, "_network_backend", None)
    if not isinstance(backend, httpcore2.AsyncNetworkBackend) or isinstance(
        backend, (CheapReadable, AsyncioBackend)
    ):
        return False
    pool._network_backend = (
        (backend_for_auto or AsyncioBackend())
        if type(backend) is AutoBackend
        else CheapReadable(backend)
    )
    return True
