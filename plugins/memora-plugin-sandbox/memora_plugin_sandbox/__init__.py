"""memora plugin providing ``code:execute`` (the ``run_code`` tool): Python and shell snippets in
a subprocess with a temporary folder, a wall-clock timeout, CPU / memory / file-size /
process-count limits, capped output, a scrubbed environment and no network where the platform
allows it.  Every result says how it was isolated.

Options (``plugins.sandbox``): ``memory_mb``, ``file_size_mb``, ``max_processes``,
``max_output``, ``network`` (``"off"`` or ``"on"``; user config only), ``require_isolation``,
``python``, ``env``, ``user`` (``auto``: a dedicated uid per run when memora runs as root,
else the host user; ``dedicated``; ``host``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memora import hookimpl
from memora.plugins import checked_factory
from memora.security.trust import AtMost, OneOf

if TYPE_CHECKING:
    from .sandbox import SubprocessSandbox

__all__ = ["SubprocessSandbox", "register_code_executors"]

OPTIONS = frozenset(
    [
        "env",
        "file_size_mb",
        "max_output",
        "max_processes",
        "memory_mb",
        "network",
        "python",
        "require_isolation",
        "user",
    ]
)

PROJECT = {
    "memory_mb": AtMost(512),
    "file_size_mb": AtMost(16),
    "max_processes": AtMost(32),
    "max_output": AtMost(64_000),
    "require_isolation": OneOf(True),
}
"""What a project's config may set: only tighter limits.  ``user``, ``python`` and ``env`` change
who runs a snippet and with what (a request the user must allow); ``network`` is user config
only."""


def _load() -> type[SubprocessSandbox]:
    from .sandbox import SubprocessSandbox

    return SubprocessSandbox


def __getattr__(name: str) -> Any:
    if name == "SubprocessSandbox":
        return _load()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@hookimpl
def register_code_executors(register: Any) -> None:
    register("sandbox", checked_factory("sandbox", OPTIONS, _load, project=PROJECT))
