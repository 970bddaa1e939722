"""Built-in memory storage backends: ``memory``, ``json`` and ``sqlite`` (the default)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..hookspecs import hookimpl
from ._options import flag


def _path(options: Mapping[str, Any], filename: str) -> Path:
    if "file" in options:
        return Path(options["file"])
    if "path" not in options:
        raise ValueError("option 'path' (the data directory) or 'file' is required")
    return Path(options["path"]) / filename


def _memory(options: Mapping[str, Any]) -> Any:
    from ..memory.simple_backends import InMemoryStorage

    return InMemoryStorage()


def _json(options: Mapping[str, Any]) -> Any:
    from ..memory.simple_backends import JsonFileStorage

    return JsonFileStorage(_path(options, "memories.json"))


def _sqlite(options: Mapping[str, Any]) -> Any:
    from ..memory.sqlite_store import open_sqlite_storage

    write_inline = flag(
        options,
        "write_inline",
        default=True,
        off_means="every write of the memory store runs on its worker thread",
    )
    return open_sqlite_storage(
        _path(options, "memory.db"),
        read_only=bool(options.get("read_only", False)),
        write_inline=write_inline,
    )


@hookimpl
def register_storage(register: Any) -> None:
    register("memory", _memory)
    register("json", _json)
    register("sqlite", _sqlite)
