"""Built-in tools and the built-in project search, registered like any plugin's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..hookspecs import hookimpl


@hookimpl
def register_tools(register: Any) -> None:
    # by name: each tool's module (and pydantic with it) is imported when the tool is looked up
    from ..tools import builtin_tools

    for t in builtin_tools():
        register(t)


def _builtin_search(options: Mapping[str, Any]) -> Any:
    from ..tools.project_search import BuiltinProjectSearch

    return BuiltinProjectSearch(**dict(options))


@hookimpl
def register_project_search(register: Any) -> None:
    register("builtin", _builtin_search)
