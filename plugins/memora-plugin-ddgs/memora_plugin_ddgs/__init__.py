"""memora plugin providing ``web:search`` on `ddgs <https://pypi.org/project/ddgs/>`_ (the
maintained successor of ``duckduckgo-search``).

The entry point only registers a factory: ddgs (and its HTTP client) is imported when an Agent
first searches, so discovering plugins stays cheap.  Options (``plugins.ddgs`` in the config):
``backend`` (``duckduckgo`` by default; any ddgs text backend, comma-separated, or ``auto``),
``region``, ``safesearch``, ``timeout``, ``proxy`` (user config only), ``cache_rounds``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from memora import hookimpl

if TYPE_CHECKING:
    from .search import DdgsSearch

__all__ = ["DdgsSearch", "register_web_search"]

_OPTIONS = {"backend", "region", "safesearch", "timeout", "proxy", "cache_rounds"}


def __getattr__(name: str) -> Any:
    if name == "DdgsSearch":
        from .search import DdgsSearch

        return DdgsSearch
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _factory(options: Mapping[str, Any]) -> DdgsSearch:
    unknown = set(options) - _OPTIONS
    if unknown:
        raise ValueError(
            f"unknown ddgs option(s) {', '.join(sorted(unknown))}; legal: "
            f"{', '.join(sorted(_OPTIONS))}"
        )
    from .search import DdgsSearch

    return DdgsSearch(**options)


@hookimpl
def register_web_search(register: Any) -> None:
    register("ddgs", _factory)
