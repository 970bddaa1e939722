"""The ``web:search`` service on ddgs.

ddgs is synchronous (it runs its engines on threads over its own HTTP client); each search runs
on a worker thread so the event loop never blocks, bounded by ``timeout``.  Results are cached
per turn (:func:`memora.services.current_round_id`): the model repeating a query in one turn
costs no second request.  Failures become tool errors with advice the model can act on.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from typing import Any

from memora.errors import ToolError, ToolErrorCode
from memora.services import SearchHit, current_round_id

__all__ = ["DdgsSearch"]

logger = logging.getLogger("memora.plugins.ddgs")

_SAFESEARCH = ("on", "moderate", "off")
_TIMELIMITS = ("d", "w", "m", "y")


class DdgsSearch:
    """Web search through ddgs's text search."""

    def __init__(
        self,
        *,
        backend: str = "duckduckgo",
        region: str = "us-en",
        safesearch: str = "moderate",
        timeout: float = 10.0,
        proxy: str | None = None,
        cache_rounds: int = 8,
    ) -> None:
        if safesearch not in _SAFESEARCH:
            raise ValueError(f"ddgs safesearch must be one of {', '.join(_SAFESEARCH)}")
        if float(timeout) <= 0:
            raise ValueError("ddgs timeout must be a positive number of seconds")
        self.backend = backend
        self.region = region
        self.safesearch = safesearch
        self.timeout = float(timeout)
        self.proxy = proxy
        self._cache_rounds = max(int(cache_rounds), 0)
        self._cache: OrderedDict[str, dict[tuple[Any, ...], list[SearchHit]]] = OrderedDict()
        self._ddgs: Any = None

    def _client(self) -> Any:
        if self._ddgs is None:
            from ddgs import DDGS

            self._ddgs = DDGS(proxy=self.proxy, timeout=max(int(self.timeout), 1))
        return self._ddgs

    async def search(
        self,
        query: str,
        *,
        max_results: int = 5,
        region: str | None = None,
        safesearch: str | None = None,
        timelimit: str | None = None,
    ) -> list[SearchHit]:
        if safesearch is not None and safesearch not in _SAFESEARCH:
            raise ToolError(
                ToolErrorCode.INVALID_ARGS, f"safesearch must be one of {', '.join(_SAFESEARCH)}"
            )
        if timelimit is not None and timelimit not in _TIMELIMITS:
            raise ToolError(
                ToolErrorCode.INVALID_ARGS, f"time_limit must be one of {', '.join(_TIMELIMITS)}"
            )
        params = {
            "region": region or self.region,
            "safesearch": safesearch or self.safesearch,
            "timelimit": timelimit,
            "max_results": max_results,
            "backend": self.backend,
        }
        key = (query, *sorted(params.items(), key=lambda kv: kv[0]))
        round_id = current_round_id()
        cached = self._cached(round_id, key)
        if cached is not None:
            return cached
        try:
            async with asyncio.timeout(self.timeout + 5):
                rows = await asyncio.to_thread(self._search, query, params)
        except TimeoutError as exc:
            raise ToolError(
                ToolErrorCode.TIMEOUT,
                f"the web search took longer than {self.timeout:g} s; try again, or a shorter query",
            ) from exc
        hits = [
            SearchHit(
                title=str(r.get("title") or "").strip(),
                url=str(r.get("href") or r.get("url") or "").strip(),
                snippet=str(r.get("body") or "").strip(),
            )
            for r in rows
            if r.get("href") or r.get("url")
        ][:max_results]
        self._store(round_id, key, hits)
        return hits

    def _search(self, query: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        from ddgs.exceptions import DDGSException, RatelimitException, TimeoutException

        try:
            try:
                return list(self._client().text(query, **params))
            except DDGSException as exc:
                # ddgs wraps an engine's failure in a plain DDGSException: unwrap it
                inner = exc.args[0] if exc.args and isinstance(exc.args[0], Exception) else None
                text = str(exc).lower()
                if isinstance(inner, RatelimitException) or "ratelimit" in text or " 429" in text:
                    raise RatelimitException(str(exc)) from exc
                if isinstance(inner, TimeoutException) and type(exc) is DDGSException:
                    raise TimeoutException(str(exc)) from exc
                raise
        except RatelimitException as exc:
            raise ToolError(
                ToolErrorCode.RATE_LIMITED,
                "the search engine is rate-limiting requests; wait before searching again, or "
                "answer with what you already know",
            ) from exc
        except TimeoutException as exc:
            raise ToolError(
                ToolErrorCode.TIMEOUT, f"the web search timed out ({exc}); try again"
            ) from exc
        except DDGSException as exc:
            if "no results" in str(exc).lower():
                return []  # ddgs reports an empty answer as an exception
            raise ToolError(
                ToolErrorCode.NETWORK_ERROR,
                f"the web search failed: {exc}; try again later or rephrase the query",
            ) from exc

    # -- the per-turn cache ----------------------------------------------------------------------

    def _cached(self, round_id: str | None, key: tuple[Any, ...]) -> list[SearchHit] | None:
        if round_id is None or not self._cache_rounds:
            return None
        hits = self._cache.get(round_id, {}).get(key)
        return list(hits) if hits is not None else None

    def _store(self, round_id: str | None, key: tuple[Any, ...], hits: list[SearchHit]) -> None:
        if round_id is None or not self._cache_rounds:
            return
        self._cache.setdefault(round_id, {})[key] = list(hits)
        self._cache.move_to_end(round_id)
        while len(self._cache) > self._cache_rounds:
            self._cache.popitem(last=False)
