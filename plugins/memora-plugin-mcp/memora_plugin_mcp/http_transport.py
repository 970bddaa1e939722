"""MCP over streamable HTTP with each request bounded from connect to the last byte.

The SDK sends each request (a tool call, ``tools/list``, the handshake) as a POST of its own, in
a task of its own, and waits for the answer on a stream.  A call that times out stops waiting,
but the POST goes on: under the SDK's client, a response whose head trickles in one byte at a
time, or that answers ``100 Continue`` forever, or whose body trickles, is read for as long as
the server keeps sending (its read timeout restarts with each byte), and every call that timed
out keeps one more connection open.  :class:`TotalTimeout` ends each such request ``seconds``
after it began.  The server's event stream (the GET the SDK keeps open to hear from the server
between calls) is left to the client's read timeout: it is meant to last, and no call waits on
it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp.client.streamable_http import streamable_http_client

__all__ = ["LISTEN_READ_TIMEOUT", "TotalTimeout", "streamable_http"]

LISTEN_READ_TIMEOUT = 300.0
"""The longest silence on the server's event stream (the SDK's own default)."""


class _Bounded(httpx2.AsyncByteStream):
    """A response body whose reads end at the request's deadline."""

    def __init__(
        self,
        stream: httpx2.AsyncByteStream,
        deadline: float,
        error: Callable[[], httpx2.ReadTimeout],
    ) -> None:
        self._stream = stream
        self._deadline = deadline
        self._error = error

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = aiter(self._stream)
        while True:
            # a timeout around each read, not around the loop: the consumer runs between the
            # yields, and a timeout that fired there would cancel the consumer's code
            try:
                async with asyncio.timeout_at(self._deadline):
                    chunk = await anext(chunks)
            except StopAsyncIteration:
                return
            except TimeoutError as exc:
                raise self._error() from exc
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


class TotalTimeout(httpx2.AsyncBaseTransport):
    """``inner`` with each request but a GET (the server's event stream) ended ``seconds`` after
    it began, as :class:`httpx2.ReadTimeout`: connecting, the head (``100 Continue`` included)
    and the body share the one clock."""

    def __init__(self, seconds: float, inner: httpx2.AsyncBaseTransport | None = None) -> None:
        self._seconds = seconds
        self._inner = inner if inner is not None else httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.method == "GET":
            return await self._inner.handle_async_request(request)

        def error() -> httpx2.ReadTimeout:
            return httpx2.ReadTimeout(
                f"{request.method} {request.url} took longer than {self._seconds:g} s "
                "(the MCP timeout, from connect to the last byte)",
                request=request,
            )

        deadline = asyncio.get_running_loop().time() + self._seconds
        try:
            async with asyncio.timeout_at(deadline):
                response = await self._inner.handle_async_request(request)
        except TimeoutError as exc:
            raise error() from exc
        stream = response.stream
        assert isinstance(stream, httpx2.AsyncByteStream)  # an async transport's body
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=_Bounded(stream, deadline, error),
            extensions=response.extensions,
            request=request,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


@asynccontextmanager
async def streamable_http(
    url: str, seconds: float, headers: dict[str, str] | None = None
) -> AsyncIterator[Any]:
    """The SDK's streamable HTTP transport for ``url`` on a client of our own: its requests
    bounded by :class:`TotalTimeout`, sent with the server's ``headers`` (the user's config:
    an ``Authorization``, say), otherwise as the SDK's default client (connect, write and pool
    timeouts ``seconds``; redirects left to the SDK, which follows them within the origin)."""
    client = httpx2.AsyncClient(
        timeout=httpx2.Timeout(seconds, read=LISTEN_READ_TIMEOUT),
        transport=TotalTimeout(seconds),
        headers=headers,
    )
    async with client, streamable_http_client(url, http_client=client) as streams:
        yield streams
