"""The built-in project lock: ``file`` (an OS lock on ``<project>/.memora/.lock``; option
``shared`` for a service's workers)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..hookspecs import hookimpl


def _file(options: Mapping[str, Any]) -> Any:
    from ..security.lock import ProjectLock

    if "project" not in options:
        raise ValueError("option 'project' (the project folder) is required")
    return ProjectLock(Path(options["project"]), shared=bool(options.get("shared", False)))


@hookimpl
def register_project_locks(register: Any) -> None:
    register("file", _file)
