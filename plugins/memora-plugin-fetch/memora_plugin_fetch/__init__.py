"""memora plugin providing ``web:fetch`` over httpx2 with trafilatura main-text extraction.

The entry point only registers a factory: httpx2 and trafilatura are imported when an Agent
first fetches, so discovering plugins (``memora plugins``, every Agent's start) stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memora import hookimpl
from memora.plugins import checked_factory
from memora.security.trust import ANY, AtMost

if TYPE_CHECKING:
    from .fetcher import HttpFetcher

__all__ = ["HttpFetcher", "register_web_fetch"]

OPTIONS = frozenset(
    ["allow", "allow_private", "max_bytes", "max_redirects", "timeout", "user_agent"]
)

PROJECT = {
    "timeout": AtMost(20.0),
    "max_bytes": AtMost(1_000_000),
    "max_redirects": AtMost(5),
    "user_agent": ANY,
}
"""What a project's config may set (``allow`` and ``allow_private`` widen the address policy:
user config only)."""


def _load() -> type[HttpFetcher]:
    from .fetcher import HttpFetcher

    return HttpFetcher


def __getattr__(name: str) -> Any:
    if name == "HttpFetcher":
        return _load()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@hookimpl
def register_web_fetch(register: Any) -> None:
    register("fetch", checked_factory("fetch", OPTIONS, _load, project=PROJECT))
