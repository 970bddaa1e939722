"""Memory and persistence: the storage protocol, backends, keywords, sessions and rounds."""

from .keywords import extract_keywords, index_tokens, query_terms
from .manager import MemoryManager, MemorySnapshot
from .sessions import InMemorySessionStore, JsonlSessionStore, RoundRecord, SessionInfo
from .simple_backends import InMemoryStorage, JsonFileStorage
from .storage import MemoryStorage, ReadOnlyMemoryStorage, ReadOnlyView
from .types import SOURCE_LABELS, MemoryRecord, NewMemory, ScoredMemory

__all__ = [
    "SOURCE_LABELS",
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
    "extract_keywords",
    "index_tokens",
    "query_terms",
]
