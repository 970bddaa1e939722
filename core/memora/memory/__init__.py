"""Memory and persistence: the storage protocol, backends, keywords, sessions and rounds."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

_LAZY: dict[str, str] = {
    "InMemorySessionStore": "memora.memory.sessions",
    "InMemoryStorage": "memora.memory.simple_backends",
    "JsonFileStorage": "memora.memory.simple_backends",
    "JsonlSessionStore": "memora.memory.sessions",
    "MemoryManager": "memora.memory.manager",
    "MemoryRecord": "memora.memory.types",
    "MemorySnapshot": "memora.memory.manager",
    "MemoryStorage": "memora.memory.storage",
    "NewMemory": "memora.memory.types",
    "ReadOnlyMemoryStorage": "memora.memory.storage",
    "ReadOnlyView": "memora.memory.storage",
    "RoundRecord": "memora.memory.sessions",
    "SOURCE_LABELS": "memora.memory.types",
    "ScoredMemory": "memora.memory.types",
    "SessionInfo": "memora.memory.sessions",
    "UNSCOPED": "memora.memory.types",
    "check_scope": "memora.memory.types",
    "extract_keywords": "memora.memory.keywords",
    "index_tokens": "memora.memory.keywords",
    "query_terms": "memora.memory.keywords",
}

__all__ = [
    "SOURCE_LABELS",
    "UNSCOPED",
    "InMemorySessionStore",
    "InMemoryStorage",
    "JsonFileStorage",
    "JsonlSessionStore",
    "MemoryManager",
    "MemoryRecord",
    "MemorySnapshot",
    "MemoryStorage",
    "NewMemory",
    "ReadOnlyMemoryStorage",
    "ReadOnlyView",
    "RoundRecord",
    "ScoredMemory",
    "SessionInfo",
    "check_scope",
    "extract_keywords",
    "index_tokens",
    "query_terms",
]

if TYPE_CHECKING:  # "X as X": explicit re-exports for type checkers
    from .keywords import (
        extract_keywords as extract_keywords,
        index_tokens as index_tokens,
        query_terms as query_terms,
    )
    from .manager import (
        MemoryManager as MemoryManager,
        MemorySnapshot as MemorySnapshot,
    )
    from .sessions import (
        InMemorySessionStore as InMemorySessionStore,
        JsonlSessionStore as JsonlSessionStore,
        RoundRecord as RoundRecord,
        SessionInfo as SessionInfo,
    )
    from .simple_backends import (
        InMemoryStorage as InMemoryStorage,
        JsonFileStorage as JsonFileStorage,
    )
    from .storage import (
        MemoryStorage as MemoryStorage,
        ReadOnlyMemoryStorage as ReadOnlyMemoryStorage,
        ReadOnlyView as ReadOnlyView,
    )
    from .types import (
        SOURCE_LABELS as SOURCE_LABELS,
        UNSCOPED as UNSCOPED,
        MemoryRecord as MemoryRecord,
        NewMemory as NewMemory,
        ScoredMemory as ScoredMemory,
        check_scope as check_scope,
    )

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
