"""memora plugin: memory storage, sessions and the project lock in PostgreSQL.

Select it with ``"storage": "postgres"`` (or ``--storage postgres``): the session store and the
project lock of the same name follow.  Options (``config["plugins"]["postgres"]``): ``dsn``
(no password: passwords come from ``MEMORA_POSTGRES_DSN``, ``PGPASSWORD`` or ``~/.pgpass``;
without ``dsn``, ``MEMORA_POSTGRES_DSN`` is used), ``namespace`` (whose data: hosts serving one
project on several machines set the same; default the data folder / project path),
``pool_size`` (default 5), ``connect_timeout`` (seconds, default 10).

psycopg is imported when a store is created, so discovering plugins stays cheap.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memora import hookimpl
from memora.plugins import probed
from memora.security.trust import AtMost, project_settable

__all__ = ["register_project_locks", "register_session_stores", "register_storage"]

_OPTIONS = {"dsn", "namespace", "pool_size", "connect_timeout", "path", "project", "shared"}

PROJECT = {"pool_size": AtMost(5), "connect_timeout": AtMost(10.0)}
"""What a project's config may set: ``dsn`` and ``namespace`` choose whose database and whose data
(user side only)."""


def _load() -> Any:
    from .storage import PostgresStorage

    return PostgresStorage


def _check(options: Mapping[str, Any]) -> None:
    unknown = set(options) - _OPTIONS - {"read_only"}
    if unknown:
        raise ValueError(
            f"unknown postgres option(s) {', '.join(sorted(unknown))}; legal: "
            + ", ".join(sorted(_OPTIONS - {"path", "project", "shared"}))
        )


def _storage(options: Mapping[str, Any]) -> Any:
    _check(options)
    from .storage import PostgresStorage

    return PostgresStorage.from_options(options)


def _sessions(options: Mapping[str, Any]) -> Any:
    _check(options)
    from .sessions import PostgresSessionStore

    return PostgresSessionStore.from_options(options)


def _lock(options: Mapping[str, Any]) -> Any:
    _check(options)
    from .lock import PostgresProjectLock

    return PostgresProjectLock.from_options(options)


@hookimpl
def register_storage(register: Any) -> None:
    register("postgres", probed(project_settable(_storage, PROJECT), _load))


@hookimpl
def register_session_stores(register: Any) -> None:
    register("postgres", probed(project_settable(_sessions, PROJECT), _load))


@hookimpl
def register_project_locks(register: Any) -> None:
    register("postgres", probed(project_settable(_lock, PROJECT), _load))
