"""memora plugin providing ``web:fetch`` over httpx2 with trafilatura main-text extraction.

The entry point only registers a factory: httpx2 and trafilatura are imported when an Agent
first fetches, so discovering plugins (``memora plugins``, every Agent's start) stays cheap.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from memora import hookimpl

if TYPE_CHECKING:
    from .fetcher import HttpFetcher

__all__ = ["HttpFetcher", "register_web_fetch"]

_OPTIONS = {"timeout", "max_bytes", "allow_private", "allow", "user_agent", "max_redirects"}


def __getattr__(name: str) -> Any:
    if name == "HttpFetcher":
        from .fetcher import HttpFetcher

        return HttpFetcher
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _factory(options: Mapping[str, Any]) -> HttpFetcher:
    unknown = set(options) - _OPTIONS
    if unknown:
        raise ValueError(
            f"unknown fetch option(s) {', '.join(sorted(unknown))}; legal: {', '.join(sorted(_OPTIONS))}"
        )
    from .fetcher import HttpFetcher

    return HttpFetcher(**options)


@hookimpl
def register_web_fetch(register: Any) -> None:
    register("fetch", _factory)
