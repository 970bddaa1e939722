"""What the chat provider and the embedder share: one OpenAI-compatible server's client
(its key, pool and timeouts), capped reads, classified errors and the total-timeout error."""

from __future__ import annotations

import asyncio
import json
import math
import os
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx2

from memora.llm import ProviderError
from memora.settings.secrets import stored_key

from . import pool

__all__ = [
    "MAX_CONNECTIONS",
    "MAX_KEEPALIVE",
    "HTTPEndpoint",
    "default_base_url",
    "endpoint_client",
    "endpoint_url",
    "seconds",
]

_RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529})
_ERROR_BODY_LIMIT = 64 * 1024
"""How much of an HTTP error body is read (its message is shown, 500 characters of it)."""


def _retry_after(headers: Mapping[str, str]) -> float | None:
    raw = headers.get("retry-after")
    if not raw:
        ms = headers.get("retry-after-ms")
        return float(ms) / 1000 if ms and ms.replace(".", "", 1).isdigit() else None
    raw = raw.strip()
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        return max(0.0, (parsedate_to_datetime(raw) - datetime.now(UTC)).total_seconds())
    except (TypeError, ValueError):
        return None


MAX_CONNECTIONS = 1000
"""Requests one provider has in flight at once, by default: a server's concurrent turns share
its project's provider, and httpx2's own default (100) made the 101st concurrent turn wait for
a connection, and fail after ``connect_timeout`` when the streams ahead of it ran longer (the
OpenAI Python SDK's default is the same 1000)."""

MAX_KEEPALIVE = 100
"""Idle connections kept for the next requests, by default (httpx2's is 20: under 100
concurrent turns, most requests opened a new connection, a TLS handshake each on a hosted
API)."""


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a whole number of at least 1, not {value!r}")
    return value


def seconds(name: str, value: object) -> float:
    """A timeout option: a number of seconds above zero (``name`` is said when it is not)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ValueError(f"{name} must be a number of seconds above 0, not {value!r}")
    return float(value)


class HTTPEndpoint:
    """What the chat provider and the embedder share: capped reads and classified errors of
    one OpenAI-compatible server (``base_url``, ``model``), each request within
    ``total_timeout`` seconds from connect to the last byte."""

    base_url: str
    model: str
    total_timeout: float
    max_connections: int = MAX_CONNECTIONS
    _client: httpx2.AsyncClient

    async def _fetch(
        self,
        method: str,
        url: str | httpx2.URL,
        limit: int,
        *,
        what: str,
        content: bytes | None = None,
    ) -> tuple[bytes, bool]:
        """One request's body (at most ``limit`` bytes of it, and whether there was more): an
        error status, a failed connection, and a request past ``total_timeout`` as
        :class:`ProviderError`."""
        try:
            # connect and read timeouts restart with each byte: a head or a body that trickles
            # in, or `100 Continue` sent forever, ends here
            async with asyncio.timeout(self.total_timeout):
                async with self._client.stream(method, url, content=content) as response:
                    if response.status_code >= 400:
                        raise await self._http_error(response)
                    return await self._read_capped(response, limit)
        except TimeoutError:
            raise self._past_total(what) from None
        except httpx2.HTTPError as exc:
            raise self._transport_error(exc) from exc

    def _past_total(self, what: str) -> ProviderError:
        return ProviderError(
            f"{what} from {self.base_url} took longer than {self.total_timeout:g} s "
            "(total_timeout: from connect to the last byte)",
            category="timeout",
        )

    async def _read_capped(self, response: httpx2.Response, limit: int) -> tuple[bytes, bool]:
        """At most ``limit`` bytes of the (decompressed) body, and whether there was more.
        ``aread()`` would hold all of it: a gzip bomb of a few kilobytes inflates to gigabytes."""
        parts: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            parts.append(chunk)
            size += len(chunk)
            if size > limit:
                await response.aclose()
                return b"".join(parts)[:limit], True
        return b"".join(parts), False

    async def _http_error(self, response: httpx2.Response) -> ProviderError:
        # an error body is only read for its message: a small cap, whatever the server sends
        try:
            raw, _ = await self._read_capped(response, _ERROR_BODY_LIMIT)
            body = raw.decode("utf-8", errors="replace")
        except httpx2.HTTPError:
            body = ""
        message = body[:500]
        try:
            parsed = json.loads(body)
            err = parsed.get("error") if isinstance(parsed, dict) else None
            if isinstance(err, dict) and err.get("message"):
                message = str(err["message"])
            elif isinstance(err, str):
                message = err
        except ValueError:
            pass
        status = response.status_code
        hint = ""
        if status in (401, 403):
            hint = " (check MEMORA_API_KEY / OPENAI_API_KEY)"
        elif status == 404:
            hint = f" (check the base URL {self.base_url} and the model {self.model!r})"
        return ProviderError(
            f"HTTP {status} from {self.base_url}: {message}{hint}",
            category="unknown",
            retryable=status in _RETRYABLE_STATUS,
            retry_after=_retry_after(response.headers),
            status=status,
        )

    def _transport_error(self, exc: Exception) -> ProviderError:
        if isinstance(exc, httpx2.PoolTimeout):
            return ProviderError(
                f"no free connection to {self.base_url} within {self._client.timeout.pool:g} s: "
                f"all {self.max_connections} are in use (the provider's max_connections)",
                category="timeout",
                retryable=True,
            )
        if isinstance(exc, httpx2.TimeoutException):
            kind = "connect" if isinstance(exc, httpx2.ConnectTimeout) else "stall"
            what = "connecting to" if kind == "connect" else "waiting for tokens from"
            return ProviderError(
                f"timed out {what} {self.base_url}", category="timeout", retryable=True
            )
        return ProviderError(
            f"connection to {self.base_url} failed: {type(exc).__name__}: {exc}",
            category="connection",
            retryable=True,
        )


def default_base_url(base_url: str | None) -> str:
    """``base_url``, else ``MEMORA_BASE_URL``, else OpenAI's; without a trailing slash."""
    return (base_url or os.environ.get("MEMORA_BASE_URL") or "https://api.openai.com/v1").rstrip(
        "/"
    )


def endpoint_url(client: httpx2.AsyncClient, path: str) -> httpx2.URL:
    """``path`` under ``client``'s base URL, as the client itself would merge it per request."""
    return client.build_request("GET", path).url


def endpoint_client(
    base_url: str,
    *,
    api_key_env: str | None,
    headers: Mapping[str, str] | None,
    accept: str,
    api_key_name: str | None = None,
    connect_timeout: float,
    read_timeout: float,
    http2: bool = False,
    transport: httpx2.AsyncBaseTransport | None = None,
    max_connections: int = MAX_CONNECTIONS,
    max_keepalive_connections: int = MAX_KEEPALIVE,
) -> httpx2.AsyncClient:
    """An httpx2 client for ``base_url``: the key from the environment (``api_key_env``), else
    the key the user stored as ``api_key_name`` (``memora keys set``; a user-side option only),
    else ``MEMORA_API_KEY`` then ``OPENAI_API_KEY``; no proxy from the environment, an
    uncompressed answer (a compressed one could expand without bound); ``read_timeout`` is the
    longest silence while reading an answer.  ``max_connections``: the most requests in flight
    at once (a server's concurrent turns share one provider); ``max_keepalive_connections``:
    the idle connections kept for the next requests."""
    if api_key_env:
        key = os.environ.get(api_key_env)
    elif api_key_name:
        key = stored_key(api_key_name)
        if key is None:
            raise ProviderError(
                f"no key {api_key_name!r} is stored; store it with `memora keys set "
                f"{api_key_name}`",
                category="unknown",
                retryable=False,
            )
    else:
        key = os.environ.get("MEMORA_API_KEY") or os.environ.get("OPENAI_API_KEY")
    hdrs = {"Content-Type": "application/json", "Accept": accept, "Accept-Encoding": "identity"}
    if key:
        hdrs["Authorization"] = f"Bearer {key}"
    hdrs.update(headers or {})
    limits = {
        "max_connections": _positive("max_connections", max_connections),
        "max_keepalive_connections": _positive(
            "max_keepalive_connections", max_keepalive_connections
        ),
    }
    return httpx2.AsyncClient(
        base_url=base_url,
        headers=hdrs,
        timeout=httpx2.Timeout(
            connect=connect_timeout, read=read_timeout, write=30.0, pool=connect_timeout
        ),
        http2=http2,
        # a host's transport as it is; else the provider's pools, on asyncio's own network
        # with the cheaper idle check (see .pool and .net)
        transport=transport or pool.transport_for(http2=http2, **limits),
        trust_env=False,
        limits=httpx2.Limits(**limits),
    )
