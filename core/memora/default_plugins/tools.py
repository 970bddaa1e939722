"""Built-in tools and the built-in project search, registered like any plugin's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..hookspecs import hookimpl


@hookimpl
def register_tools(register: Any) -> None:
    from ..tools import resident_tools
    from ..tools.privileged import PRIVILEGED_TOOLS

    for t in [*resident_tools(), *PRIVILEGED_TOOLS]:
        register(t)


def _builtin_search(options: Mapping[str, Any]) -> Any:
    from ..tools.project_search import BuiltinProjectSearch

    return BuiltinProjectSearch(**dict(options))


@hookimpl
def register_project_search(register: Any) -> None:
    register("builtin", _builtin_search)
