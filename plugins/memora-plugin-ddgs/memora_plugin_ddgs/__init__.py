"""memora plugin providing ``web:search`` on `ddgs <https://pypi.org/project/ddgs/>`_ (the
maintained successor of ``duckduckgo-search``).

The entry point only registers a factory: ddgs (and its HTTP client) is imported when an Agent
first searches, so discovering plugins stays cheap.  Options (``plugins.ddgs`` in the config):
``backend`` (``duckduckgo`` by default; any ddgs text backend, comma-separated, or ``auto``),
``region``, ``safesearch``, ``timeout``, ``proxy`` (user config only), ``cache_rounds``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memora import hookimpl
from memora.plugins import checked_factory
from memora.security.trust import ANY, AtMost, OneOf

if TYPE_CHECKING:
    from .search import DdgsSearch

__all__ = ["DdgsSearch", "register_web_search"]

OPTIONS = frozenset(["backend", "cache_rounds", "proxy", "region", "safesearch", "timeout"])

PROJECT = {
    "region": ANY,
    "safesearch": OneOf("on", "moderate"),
    "timeout": AtMost(10.0),
    "cache_rounds": ANY,
}
"""What a project's config may set (``backend`` picks where queries go; ``proxy`` is the
user's): see :mod:`memora.settings`."""


def _load() -> type[DdgsSearch]:
    from .search import DdgsSearch

    return DdgsSearch


def __getattr__(name: str) -> Any:
    if name == "DdgsSearch":
        return _load()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@hookimpl
def register_web_search(register: Any) -> None:
    register("ddgs", checked_factory("ddgs", OPTIONS, _load, project=PROJECT))
