"""The ``web:fetch`` service: httpx2 with trafilatura main-text extraction."""

from __future__ import annotations

import asyncio
import json
import logging
import re
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

_TEXT_TYPES = (
    "text/",
    "application/json",
    "application/xml",
    "application/xhtml+xml",
    "application/javascript",
)


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
        """Fetch ``url``: at most ``timeout`` seconds in all, from the address check and the
        connection to the last byte of the last redirect (a head or a body that trickles in, or
        ``100 Continue`` sent forever, is cut too: the read timeout alone restarts with each
        byte), at most ``max_bytes`` read, every hop judged by the address policy."""
        try:
            async with asyncio.timeout(self.timeout):
                return await self._fetch(url, max_chars)
        except TimeoutError as exc:
            raise ToolError(
                ToolErrorCode.TIMEOUT,
                f"fetching {url} took longer than {self.timeout:g} s "
                "(timeout: the whole fetch, from connect to the last byte)",
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
        if ctype == "application/pdf":
            raise _pdf(url)
        if ctype and not ctype.startswith(_TEXT_TYPES) and not ctype.endswith(("+json", "+xml")):
            raise ToolError(
                ToolErrorCode.NOT_AVAILABLE,
                f"{url} is {ctype}, not a text page; web_fetch reads HTML, plain text, JSON and XML",
            )
        body = bytearray()
        truncated = False
        async for piece in response.aiter_bytes():
            body.extend(piece)
            if len(body) > self.max_bytes:
                del body[self.max_bytes :]
                truncated = True
                break
        data = bytes(body)
        if data.startswith(b"%PDF-"):
            raise _pdf(url)
        raw = _decode(data, response.headers.get("content-type", ""), ctype)
        title = author = date = None
        if ctype in ("text/html", "application/xhtml+xml") or (
            not ctype and "<html" in raw[:2000].lower()
        ):
            text, title, author, date = await asyncio.to_thread(_extract_html, raw, url)
            ctype = ctype or "text/html"
        elif ctype == "application/json" or ctype.endswith("+json"):
            text = _pretty_json(raw)
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
            author=author,
            date=date,
        )


def _pdf(url: str) -> ToolError:
    return ToolError(
        ToolErrorCode.NOT_AVAILABLE,
        f"{url} is a PDF document; web_fetch reads web pages and text only (PDFs are not "
        "converted) — look for an HTML version of it",
    )


_META_CHARSET = re.compile(
    rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE
)


def _decode(data: bytes, header: str, ctype: str) -> str:
    """Text from bytes: the charset the header declares, else the one an HTML page declares,
    else UTF-8 when it decodes cleanly, else the best guess (charset-normalizer)."""
    declared = None
    for part in header.split(";")[1:]:
        key, _, value = part.partition("=")
        if key.strip().lower() == "charset" and value.strip():
            declared = value.strip().strip("\"'")
    if declared is None and (ctype in ("text/html", "application/xhtml+xml") or not ctype):
        found = _META_CHARSET.search(data[:4096])
        if found:
            declared = found.group(1).decode("ascii", "ignore")
    if declared:
        try:
            return data.decode(_codec(declared), errors="replace")
        except LookupError:
            pass  # an unknown charset name: guess instead
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    from charset_normalizer import from_bytes

    best = from_bytes(data).best()
    return str(best) if best is not None else data.decode("utf-8", errors="replace")


def _codec(name: str) -> str:
    name = name.lower()
    # pages that say gb2312 are nearly always written in its superset gb18030
    return "gb18030" if name in ("gb2312", "gbk", "x-gbk") else name


def _pretty_json(raw: str) -> str:
    try:
        return json.dumps(json.loads(raw), ensure_ascii=False, indent=2)
    except ValueError:
        return raw


def _extract_html(html: str, url: str) -> tuple[str, str | None, str | None, str | None]:
    """Main text as Markdown (headings, lists, tables, emphasis) with title, author and date."""
    import trafilatura

    doc = trafilatura.bare_extraction(
        html,
        url=url,
        with_metadata=True,
        include_comments=False,
        include_tables=True,
        include_formatting=True,
    )
    if doc is None:
        return "", None, None, None
    text = getattr(doc, "text", None) or ""
    return (
        text,
        getattr(doc, "title", None) or None,
        getattr(doc, "author", None) or None,
        getattr(doc, "date", None) or None,
    )
