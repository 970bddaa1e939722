"""The ``web:fetch`` service: httpx2 with trafilatura main-text extraction."""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import urljoin

from memora.errors import ToolError, ToolErrorCode
from memora.security.network import AddressPolicy
from memora.services import FetchResult

try:
    import httpx2
except ImportError as exc:  # pragma: no cover - exercised only without the dependency
    raise ImportError("memora-plugin-fetch needs httpx2: pip install memora-plugin-fetch") from exc

__all__ = ["HttpFetcher"]

logger = logging.getLogger("memora.plugins.fetch")

_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/xhtml+xml")


class HttpFetcher:
    """Fetch a URL and return its main text."""

    def __init__(
        self,
        *,
        timeout: float = 20.0,
        max_bytes: int = 1_000_000,
        allow_private: bool = False,
        allow: list[str] | None = None,
        user_agent: str = "memora-fetch/0.1 (+https://pypi.org/project/memora-plugin-fetch)",
        max_redirects: int = 5,
        resolver: Any = None,
    ) -> None:
        self.timeout = float(timeout)
        self.max_bytes = int(max_bytes)
        self.max_redirects = int(max_redirects)
        networks = list(allow or [])
        if allow_private:
            networks += ["0.0.0.0/0", "::/0"]
        # the kernel's address policy: judged after resolution, on every hop; we connect to the
        # very address it judged (no second resolution between the check and the connection)
        self.policy = AddressPolicy(
            networks,
            resolver=resolver,
            hint="to permit it, set plugins.fetch.allow (networks) or allow_private in your user "
            "config",
        )
        self._client = httpx2.AsyncClient(
            timeout=httpx2.Timeout(self.timeout, connect=min(10.0, self.timeout)),
            follow_redirects=False,
            headers={"User-Agent": user_agent, "Accept": "text/html,text/plain;q=0.9,*/*;q=0.5"},
            trust_env=False,
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def fetch(self, url: str, *, max_chars: int = 20_000) -> FetchResult:
        """Fetch ``url``: at most ``timeout`` seconds in all (a server that trickles bytes is cut
        too), at most ``max_bytes`` read, every hop judged by the address policy."""
        try:
            async with asyncio.timeout(self.timeout):
                return await self._fetch(url, max_chars)
        except TimeoutError as exc:
            raise ToolError(
                ToolErrorCode.TIMEOUT, f"fetching {url} took longer than {self.timeout:g} s"
            ) from exc

    async def _fetch(self, url: str, max_chars: int) -> FetchResult:
        current = url
        for _hop in range(self.max_redirects + 1):
            target = await self.policy.judge(current)
            extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
            try:
                async with self._client.stream(
                    "GET",
                    target.connect_url,
                    headers={"Host": target.host_header},
                    extensions=extensions,
                ) as response:
                    if response.is_redirect and "location" in response.headers:
                        current = urljoin(current, response.headers["location"])
                        continue
                    return await self._read(current, response, max_chars)
            except httpx2.TimeoutException as exc:
                raise ToolError(ToolErrorCode.TIMEOUT, f"fetching {current} timed out") from exc
            except (httpx2.TransportError, httpx2.InvalidURL) as exc:
                raise ToolError(
                    ToolErrorCode.NETWORK_ERROR, f"fetching {current} failed: {exc}"
                ) from exc
        raise ToolError(
            ToolErrorCode.NETWORK_ERROR, f"more than {self.max_redirects} redirects from {url}"
        )

    async def _read(self, url: str, response: Any, max_chars: int) -> FetchResult:
        status = response.status_code
        ctype = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if status == 429:
            raise ToolError(ToolErrorCode.RATE_LIMITED, f"{url} answered 429 Too Many Requests")
        if status >= 400:
            raise ToolError(
                ToolErrorCode.FILE_NOT_FOUND
                if status in (404, 410)
                else ToolErrorCode.NETWORK_ERROR,
                f"{url} answered HTTP {status}",
            )
        if ctype and not ctype.startswith(_TEXT_TYPES):
            raise ToolError(
                ToolErrorCode.NOT_AVAILABLE,
                f"{url} is {ctype}, not a text page; web_fetch only reads HTML and text",
            )
        body = bytearray()
        truncated = False
        async for piece in response.aiter_bytes():
            body.extend(piece)
            if len(body) > self.max_bytes:
                del body[self.max_bytes :]
                truncated = True
                break
        encoding = response.encoding or "utf-8"
        raw = bytes(body).decode(encoding, errors="replace")
        title: str | None = None
        if ctype in ("text/html", "application/xhtml+xml") or (
            not ctype and "<html" in raw[:2000].lower()
        ):
            text, title = await asyncio.to_thread(_extract_html, raw, url)
        else:
            text = raw
        if len(text) > max_chars:
            text = text[:max_chars]
            truncated = True
        return FetchResult(
            url=url,
            status=status,
            content_type=ctype or "text/plain",
            text=text,
            title=title,
            truncated=truncated,
        )


def _extract_html(html: str, url: str) -> tuple[str, str | None]:
    import trafilatura

    doc = trafilatura.bare_extraction(
        html, url=url, with_metadata=True, include_comments=False, include_tables=True
    )
    if doc is None:
        return "", None
    text = getattr(doc, "text", None) or ""
    title = getattr(doc, "title", None)
    return text, title
