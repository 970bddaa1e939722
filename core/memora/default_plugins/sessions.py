"""The built-in session/round stores: ``jsonl`` (the default) and ``memory``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..hookspecs import hookimpl


def _jsonl(options: Mapping[str, Any]) -> Any:
    from ..memory.sessions import JsonlSessionStore

    if "path" not in options:
        raise ValueError("option 'path' (the data directory) is required")
    return JsonlSessionStore(Path(options["path"]))


def _memory(options: Mapping[str, Any]) -> Any:
    from ..memory.sessions import InMemorySessionStore

    return InMemorySessionStore()


@hookimpl
def register_session_stores(register: Any) -> None:
    register("jsonl", _jsonl)
    register("memory", _memory)
