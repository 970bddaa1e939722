"""The provider's HTTP transport: httpcore2's pool on :class:`~.net.AsyncioBackend`, split in
several pools when large.

httpx2's own transport builds its httpcore2 pool itself and takes no network backend, so
:class:`AsyncioTransport` builds the pool (``httpcore2.AsyncConnectionPool(network_backend=...)``,
httpcore2's public seam) and speaks to it as httpx2's transport does: the same request and
response, httpcore2's errors raised as httpx2's.  :func:`transport_for` makes the transport of a
client the provider makes: one such pool, or for a large one several (:class:`Shards`:
httpcore2's pool walks all its connections per request).  A ``transport=`` a host passes in is
used as it is.

Measured against httpx2's own transport and pool (issue #70 item 3, docs/benchmarks.md):
``memora serve`` under 100 concurrent conversations spends 1.22-1.24x the CPU a turn on
httpx2's, a conversation's client 1.07-1.18x a step.  What lets them go: :class:`AsyncioTransport` and :mod:`.net` when httpx2's
automatic backend is the native asyncio one (pydantic/httpx2 pull request #1170, "Add a native
asyncio network backend"); :class:`Shards` when httpx2's pool keeps its state incrementally
instead of walking every connection per request (pydantic/httpx2 pull request #1169, "Track
connection pool state incrementally").
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from typing import Any

import httpcore2
import httpx2

from .net import AsyncioBackend

__all__ = ["MAX_SHARDS", "SHARD_SIZE", "AsyncioTransport", "Shards", "transport_for"]

SHARD_SIZE = 25
"""A provider's pool is one pool per this many idle connections it keeps (100 by default:
four), each keeping its share."""

MAX_SHARDS = 8
"""The most pools one provider's requests are spread over."""

_LIMITS = httpx2.Limits(max_connections=100, max_keepalive_connections=20)

_ERRORS: tuple[tuple[type[Exception], type[httpx2.HTTPError]], ...] = (
    # the most specific first: a ReadTimeout is httpx2's ReadTimeout, not its TimeoutException
    (httpcore2.ConnectTimeout, httpx2.ConnectTimeout),
    (httpcore2.ReadTimeout, httpx2.ReadTimeout),
    (httpcore2.WriteTimeout, httpx2.WriteTimeout),
    (httpcore2.PoolTimeout, httpx2.PoolTimeout),
    (httpcore2.TimeoutException, httpx2.TimeoutException),
    (httpcore2.ConnectError, httpx2.ConnectError),
    (httpcore2.ReadError, httpx2.ReadError),
    (httpcore2.WriteError, httpx2.WriteError),
    (httpcore2.NetworkError, httpx2.NetworkError),
    (httpcore2.ProxyError, httpx2.ProxyError),
    (httpcore2.UnsupportedProtocol, httpx2.UnsupportedProtocol),
    (httpcore2.LocalProtocolError, httpx2.LocalProtocolError),
    (httpcore2.RemoteProtocolError, httpx2.RemoteProtocolError),
    (httpcore2.ProtocolError, httpx2.ProtocolError),
)
"""httpcore2's errors and httpx2's, as httpx2's own transport maps them."""


def _as_httpx2(exc: Exception) -> httpx2.HTTPError | None:
    for theirs, ours in _ERRORS:
        if isinstance(exc, theirs):
            return ours(str(exc))
    return None  # not httpcore2's: raised as it is


class _Body(httpx2.AsyncByteStream):
    """A response's body from the pool, its errors raised as httpx2's."""

    __slots__ = ("_stream",)

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for part in self._stream:
                yield part
        except Exception as exc:
            if (mapped := _as_httpx2(exc)) is None:
                raise
            raise mapped from exc

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        except Exception as exc:
            if (mapped := _as_httpx2(exc)) is None:
                raise
            raise mapped from exc


class AsyncioTransport(httpx2.AsyncBaseTransport):
    """httpx2's ``AsyncHTTPTransport`` (no proxy) on an httpcore2 pool of ``backend``'s
    connections, by default :class:`~.net.AsyncioBackend`'s; ``limits`` by default httpx2's
    (100 connections, 20 kept idle)."""

    def __init__(
        self,
        *,
        verify: ssl.SSLContext | bool = True,
        http1: bool = True,
        http2: bool = False,
        limits: httpx2.Limits = _LIMITS,
        backend: httpcore2.AsyncNetworkBackend | None = None,
    ) -> None:
        self.pool = httpcore2.AsyncConnectionPool(
            ssl_context=httpx2.create_ssl_context(verify=verify, trust_env=False),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            http1=http1,
            http2=http2,
            network_backend=backend or AsyncioBackend(),
        )

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        try:
            response = await self.pool.handle_async_request(
                httpcore2.Request(
                    method=request.method,
                    url=httpcore2.URL(
                        scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path
                    ),
                    headers=request.headers.raw,
                    content=request.stream,
                    extensions=request.extensions,
                )
            )
        except Exception as exc:
            if (mapped := _as_httpx2(exc)) is None:
                raise
            raise mapped from exc
        return httpx2.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_Body(response.stream),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.pool.aclose()


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

    def __init__(self, transports: list[httpx2.AsyncBaseTransport]) -> None:
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
    """The transport of a client the provider makes: an :class:`AsyncioTransport`; for a pool
    that keeps twice :data:`SHARD_SIZE` idle connections or more (and allows twice as many
    requests in flight), one per :data:`SHARD_SIZE` of each (:class:`Shards`; at most
    :data:`MAX_SHARDS`) whose limits add up to ``max_connections`` and
    ``max_keepalive_connections``.  One TLS context (the system's trust) and one network
    backend serve them all."""
    # a request waits for its own pool's connections: each pool keeps room for many
    count = max(
        1,
        min(MAX_SHARDS, max_keepalive_connections // SHARD_SIZE, max_connections // SHARD_SIZE),
    )
    context = httpx2.create_ssl_context(trust_env=False)
    shared = AsyncioBackend()  # one poll answers the idle checks of every pool
    transports: list[httpx2.AsyncBaseTransport] = [
        AsyncioTransport(
            verify=context,
            http2=http2,
            limits=httpx2.Limits(max_connections=conns, max_keepalive_connections=idle),
            backend=shared,
        )
        for conns, idle in zip(
            _shares(max_connections, count), _shares(max_keepalive_connections, count), strict=True
        )
    ]
    return transports[0] if count == 1 else Shards(transports)
