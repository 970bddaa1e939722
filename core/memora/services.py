"""Protocols of the capability services plugins provide: web search, web fetch, code execution
and project search, plus their result types.

A plugin registers a *factory* for one of these (see :mod:`memora.hookspecs`).  The agent keeps
them in a :class:`LazyServices` table and calls a factory the first time a tool uses the service,
with the plugin's options (``config["plugins"][name]``): a service that fails to start costs only
the tool calls that need it, never the Agent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "CodeExecutor",
    "ExecutionResult",
    "FetchResult",
    "LazyServices",
    "ProjectMatch",
    "ProjectSearch",
    "SearchHit",
    "ToolSource",
    "WebFetch",
    "WebSearch",
    "current_round_id",
]


ROUND_ID: ContextVar[str | None] = ContextVar("memora_round_id", default=None)
"""The round a tool runs for: set by the turn loop in the tool's task, read by services
through :func:`current_round_id`."""


def current_round_id() -> str | None:
    """The round (turn) a service call is made for, while the loop runs a tool; ``None``
    outside a turn.  Services use it for per-turn state, e.g. a result cache."""
    return ROUND_ID.get()


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One web search result."""

    title: str
    url: str
    snippet: str = ""


@dataclass(frozen=True, slots=True)
class FetchResult:
    """A fetched web page, reduced to its main text."""

    url: str
    """The final URL after redirects."""
    status: int
    content_type: str
    text: str
    """Main text of the page (boilerplate removed for HTML, as Markdown when the plugin can),
    capped at ``max_chars``."""
    title: str | None = None
    truncated: bool = False
    author: str | None = None
    date: str | None = None
    """Publication date as the page states it (ISO ``YYYY-MM-DD`` when known)."""


@dataclass(frozen=True, slots=True)
class ExecutionResult:
    """The outcome of running a code snippet with the code executor."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    truncated: bool = False
    isolation: str | None = None
    """How the snippet was isolated (user, network, limits), in words; shown with every result."""


@dataclass(frozen=True, slots=True)
class ProjectMatch:
    """One line of the project that matched a search."""

    path: str
    """Relative to the searched root, with forward slashes."""
    line: int
    text: str


@runtime_checkable
class WebSearch(Protocol):
    """``search(query, *, max_results)``; a service may also accept the keyword arguments
    ``region`` (``us-en``, ``cn-zh``…), ``safesearch`` (``on`` / ``moderate`` / ``off``) and
    ``timelimit`` (``d`` / ``w`` / ``m`` / ``y``): the ``web_search`` tool passes them only when
    the model sets them."""

    async def search(self, query: str, *, max_results: int = 5) -> list[SearchHit]: ...


@runtime_checkable
class ToolSource(Protocol):
    """Tools that appear at run time (the ``tool_source`` plugin kind), under capabilities the
    source names."""

    def capabilities(self) -> list[str]:
        """The capabilities this source serves (``mcp:github``...), known without starting
        anything."""
        ...

    async def tools(self, capability: str) -> list[Any]:
        """The :class:`memora.tools.Tool` objects of ``capability`` now (started on first use;
        called before each turn in which the active role pack declares it).  Raise to report
        that the capability is unavailable; the message reaches the host."""
        ...


@runtime_checkable
class WebFetch(Protocol):
    async def fetch(self, url: str, *, max_chars: int = 20_000) -> FetchResult: ...


@runtime_checkable
class CodeExecutor(Protocol):
    """Runs a snippet (``run_code``).  An executor used by one of several people's Agents
    (``isolate_tools``) is called with ``hide=`` — folders (memora's data, the user's config
    folder) the snippet must find empty or unreadable; one whose ``execute`` takes no ``hide``
    keyword is refused there, never run unhidden."""

    async def execute(
        self, code: str, *, language: str = "python", timeout: float = 30.0
    ) -> ExecutionResult: ...


@runtime_checkable
class ProjectSearch(Protocol):
    async def search(
        self,
        root: Path,
        pattern: str,
        *,
        regex: bool = False,
        glob: str | None = None,
        max_results: int = 200,
    ) -> list[ProjectMatch]: ...


logger = logging.getLogger("memora.services")


class LazyServices(Mapping[str, Any]):
    """Service objects by kind, created on first use.

    ``sources`` maps a kind (``web_search``...) to either a ready object or a zero-argument
    factory (marked by wrapping it in :meth:`deferred`).  :meth:`available` answers without
    creating anything; ``table[kind]`` / ``table.get(kind)`` create the service once and keep it.
    A factory that raises raises again on every use (it is not retried silently) and is logged
    once.
    """

    def __init__(self, sources: Mapping[str, Any] | None = None) -> None:
        self._sources: dict[str, Any] = dict(sources or {})
        self._made: dict[str, Any] = {}
        self._failed: dict[str, BaseException] = {}

    @staticmethod
    def deferred(key: object, factory: Callable[[], Any]) -> _Deferred:
        """A factory called on first use; ``key`` (e.g. kind, name, plugin) identifies it, so
        :meth:`replace` keeps a created service whose source did not change."""
        return _Deferred(key, factory)

    def available(self) -> set[str]:
        """The kinds that have a service (created or not)."""
        return {k for k, v in self._sources.items() if v is not None}

    def created(self) -> list[Any]:
        """The services created so far (for closing them)."""
        return list(self._made.values())

    def replace(self, sources: Mapping[str, Any]) -> list[Any]:
        """Swap in new sources; returns the created services that are no longer wanted."""
        keep = {k: v for k, v in self._made.items() if _same(sources.get(k), self._sources[k])}
        stale = [obj for kind, obj in self._made.items() if kind not in keep]
        self._sources = dict(sources)
        self._made = keep
        self._failed = {k: e for k, e in self._failed.items() if k in keep}
        return stale

    def __getitem__(self, kind: str) -> Any:
        if kind in self._made:
            return self._made[kind]
        source = self._sources.get(kind)
        if source is None:
            raise KeyError(kind)
        if not isinstance(source, _Deferred):
            self._made[kind] = source
            return source
        if kind in self._failed:
            raise self._failed[kind]
        try:
            made = source.factory()
        except Exception as exc:
            logger.warning("the %s service failed to start: %s", kind, exc)
            self._failed[kind] = exc
            raise
        self._made[kind] = made
        return made

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self.available()))

    def __len__(self) -> int:
        return len(self.available())

    def __contains__(self, kind: object) -> bool:
        return isinstance(kind, str) and kind in self.available()


@dataclass(frozen=True, slots=True)
class _Deferred:
    """A service factory called on first use; ``key`` identifies it across replacements."""

    key: object
    factory: Callable[[], Any] = field(compare=False)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, _Deferred) and isinstance(b, _Deferred):
        return a == b
    return a is b
