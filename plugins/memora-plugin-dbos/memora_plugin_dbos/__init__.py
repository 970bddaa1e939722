"""memora plugin: durable turns on DBOS Transact (``"turn_executor": "dbos"``).

Each turn runs as a DBOS workflow whose steps are the turn's segments — an LLM call and what it
led to, a tool call's result, the intent to make a call that may not be repeated — each kept in
DBOS's system database before the turn goes on: a worker that dies mid-turn leaves a turn
another worker takes over from its last kept step (see :mod:`.executor` and docs/durability.md).

Options (``plugins.dbos``; the user's config only): ``system_database_url`` (default: memora's
PostgreSQL when the storage is ``postgres``, else a file in the user's memora folder — never in
the project's, which a cloned repository fills), ``poll_seconds``.  DBOS is imported when the
executor is made, not when plugins are listed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memora import hookimpl
from memora.plugins import checked_factory

if TYPE_CHECKING:
    from .executor import DbosTurnExecutor

__all__ = ["DbosTurnExecutor", "register_turn_executors"]

OPTIONS = frozenset(
    ["system_database_url", "poll_seconds", "path", "storage", "storage_options", "user_dir"]
)


def _load() -> Any:
    from .executor import DbosTurnExecutor

    return lambda **options: DbosTurnExecutor(options)


def __getattr__(name: str) -> Any:
    if name == "DbosTurnExecutor":
        from .executor import DbosTurnExecutor

        return DbosTurnExecutor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@hookimpl
def register_turn_executors(register: Any) -> None:
    register("dbos", checked_factory("dbos", OPTIONS, _load))
