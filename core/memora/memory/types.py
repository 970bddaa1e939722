"""Memory records and the source labels."""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Final

from ..errors import InvalidInputError

__all__ = [
    "SOURCE_LABELS",
    "UNSCOPED",
    "MemoryRecord",
    "NewMemory",
    "ScoredMemory",
    "check_scope",
    "check_source",
    "new_id",
    "now",
    "visible_scopes",
]

logger = logging.getLogger("memora.memory")

SOURCE_LABELS: Final[tuple[str, ...]] = (
    "persona",
    "rule",
    "skill",
    "work_projection",
    "round_summary",
    "unknown",
)
"""Known ``source`` labels.  Any other label is accepted with a warning (never blocks a write)."""

MAX_CONTENT_CHARS: Final = 1_000_000
"""Longest content a memory may hold; longer writes are refused with a clear error."""


def check_source(source: str) -> str:
    if source not in SOURCE_LABELS:
        logger.warning(
            "memory source label %r is not one of %s; stored anyway",
            source,
            ", ".join(SOURCE_LABELS),
        )
    return source


UNSCOPED: Final = ""
"""The scope key of a memory that belongs to no scope (the whole project's); in a ``scopes``
filter it admits the unscoped memories."""

MAX_SCOPE_CHARS: Final = 200


def check_scope(scope: object, field: str = "memory_scope") -> str | None:
    """``scope`` as a scope name (``None``: unscoped), or ``INVALID_INPUT`` naming ``field``:
    a scope is 1-200 characters of text without control characters or surrounding spaces (a
    user id, a tenant, an agent name; any script)."""
    if scope is None:
        return None
    if not isinstance(scope, str):
        raise InvalidInputError(
            f"{field} must be a string (a user, tenant or agent name), not {type(scope).__name__}",
            context={"field": field},
        )
    if (
        not scope
        or len(scope) > MAX_SCOPE_CHARS
        or scope != scope.strip()
        or any(ord(c) < 32 or 127 <= ord(c) < 160 for c in scope)
    ):
        raise InvalidInputError(
            f"{field} {scope[:40]!r} is not a scope name: use 1-{MAX_SCOPE_CHARS} characters, "
            "no control characters, no leading or trailing spaces",
            context={"field": field},
        )
    return scope


def visible_scopes(scope: str | None) -> tuple[str, ...]:
    """The scope keys a reader of ``scope`` sees: its own and the unscoped memories (an
    unscoped reader: only the unscoped)."""
    return (UNSCOPED,) if scope is None else (UNSCOPED, scope)


def new_id() -> str:
    return uuid.uuid4().hex


def now() -> float:
    return time.time()


@dataclass(frozen=True, slots=True)
class NewMemory:
    """What a caller writes.  ``id`` and ``created_at`` are filled in when absent (import sets
    them to stay idempotent)."""

    content: str
    source: str = "round_summary"
    name: str = ""
    summary_type: str | None = None
    session_id: str | None = None
    round_id: str | None = None
    id: str | None = None
    created_at: float | None = None
    superseded_by: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    scope: str | None = None
    """The user, tenant or agent the memory belongs to (``None``: the whole project's)."""


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """One long-term memory, as a store keeps it."""

    id: str
    content: str
    source: str
    name: str
    created_at: float
    updated_at: float
    summary_type: str | None = None
    session_id: str | None = None
    round_id: str | None = None
    superseded_by: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    scope: str | None = None
    """The user, tenant or agent the memory belongs to (``None``: the whole project's); only
    readers of that scope recall it."""

    @staticmethod
    def from_new(item: NewMemory) -> MemoryRecord:
        t = item.created_at if item.created_at is not None else now()
        return MemoryRecord(
            id=item.id or new_id(),
            content=item.content,
            source=item.source,
            name=item.name,
            created_at=t,
            updated_at=t,
            summary_type=item.summary_type,
            session_id=item.session_id,
            round_id=item.round_id,
            superseded_by=item.superseded_by,
            meta=dict(item.meta),
            scope=item.scope or None,
        )

    @property
    def scope_key(self) -> str:
        """The scope as a filter compares it (:data:`UNSCOPED` for none)."""
        return self.scope or UNSCOPED

    def with_changes(self, **changes: Any) -> MemoryRecord:
        return replace(self, **changes, updated_at=now())

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "source": self.source,
            "name": self.name,
            "content": self.content,
            "summary_type": self.summary_type,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "superseded_by": self.superseded_by,
            "session_id": self.session_id,
            "round_id": self.round_id,
            "meta": self.meta,
            "scope": self.scope,
        }

    @staticmethod
    def from_dict(data: dict[str, Any]) -> MemoryRecord:
        return MemoryRecord(
            id=str(data["id"]),
            content=str(data.get("content", "")),
            source=str(data.get("source", "unknown")),
            name=str(data.get("name", "")),
            created_at=float(data.get("created_at") or 0.0),
            updated_at=float(data.get("updated_at") or data.get("created_at") or 0.0),
            summary_type=data.get("summary_type"),
            session_id=data.get("session_id"),
            round_id=data.get("round_id"),
            superseded_by=data.get("superseded_by"),
            meta=dict(data.get("meta") or {}),
            scope=data.get("scope") or None,
        )


@dataclass(frozen=True, slots=True)
class ScoredMemory:
    """A memory found by a search, with its relevance."""

    record: MemoryRecord
    score: float
    """Relevance; higher is better (BM25 for the SQLite backend)."""
