"""Protocols of the capability services plugins provide: web search, web fetch, code execution
and project search, plus their result types.

A plugin registers a *factory* for one of these (see :mod:`memora.hookspecs`); the agent calls the
factory once at ``init()`` with the plugin's options (``config["plugins"][name]``) and wraps the
object in the matching privileged or resident tool.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

__all__ = [
    "CodeExecutor",
    "ExecutionResult",
    "FetchResult",
    "ProjectMatch",
    "ProjectSearch",
    "SearchHit",
    "WebFetch",
    "WebSearch",
]


@dataclass(frozen=True, slots=True)
class SearchHit:
    title: str
    url: str
    snippet: str = ""


@dataclass(frozen=True, slots=True)
class FetchResult:
    url: str
    """The final URL after redirects."""
    status: int
    content_type: str
    text: str
    """Main text of the page (boilerplate removed for HTML), capped at ``max_chars``."""
    title: str | None = None
    truncated: bool = False


@dataclass(frozen=True, slots=True)
class ExecutionResult:
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    truncated: bool = False


@dataclass(frozen=True, slots=True)
class ProjectMatch:
    path: str
    """Relative to the searched root, with forward slashes."""
    line: int
    text: str


@runtime_checkable
class WebSearch(Protocol):
    async def search(self, query: str, *, max_results: int = 5) -> list[SearchHit]: ...


@runtime_checkable
class WebFetch(Protocol):
    async def fetch(self, url: str, *, max_chars: int = 20_000) -> FetchResult: ...


@runtime_checkable
class CodeExecutor(Protocol):
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
