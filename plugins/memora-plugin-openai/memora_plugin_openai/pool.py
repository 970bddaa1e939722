"""The provider's connection pool, made cheaper: its network, and its idle-connection check.

:func:`install` gives the pool of a client the provider made :class:`~.net.AsyncioBackend`
(connections on asyncio's own transports: no anyio machinery per read or per request, and the
idle check below answered from what the connection holds).  A pool whose backend is not
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

import select
import ssl
import sys
from collections.abc import Iterable
from typing import Any

import httpcore2
import httpx2

from .net import AsyncioBackend

try:  # httpcore2's automatic choice (anyio under asyncio), the backend this replaces
    from httpcore2._backends.auto import AutoBackend
except ImportError:  # pragma: no cover - an httpcore2 laid out otherwise: CheapReadable only
    AutoBackend = None  # type: ignore[assignment,misc]

__all__ = ["CheapReadable", "install"]


def _readable(sock: Any) -> bool:
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
            return _readable(self._socket)
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


def install(client: httpx2.AsyncClient) -> bool:
    """Give ``client``'s own pool :class:`~.net.AsyncioBackend` (or, when its backend is not
    httpcore2's automatic one, that backend with the cheaper check); ``False`` (nothing
    changed, the client works as before) when the client has another transport, httpx2 is
    built differently, or this was done already.

    httpx2 does not take a network backend, so this reaches the pool its default transport
    made; the pool keeps every setting it was made with (TLS, limits, HTTP/2)."""
    transport = getattr(client, "_transport", None)
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
        AsyncioBackend() if type(backend) is AutoBackend else CheapReadable(backend)
    )
    return True
