"""The storage protocol every memory backend implements, a read-only view, and the shared
relevance scorer of the non-SQL backends.

Methods are ``async`` so a networked backend fits the same protocol; the embedded backends do
their (local, short) I/O on a worker thread.  Semantics every backend shares (and the conformance
suite in :mod:`memora.testing.storage_conformance` checks):

* ``add`` with an ``id`` that already exists returns the stored record unchanged (idempotent
  import);
* superseded memories are excluded from ``search_by_keyword`` unless ``include_superseded``;
* ``scopes`` (on ``list``, ``search_by_keyword``, ``count``, ``count_by_source`` and
  ``search_by_vector``): ``None`` reads every memory; otherwise only memories whose scope key
  (:data:`~memora.memory.types.UNSCOPED`, ``""``, for none) is one of them — part of the
  backend's own query, so a limit counts only visible memories and nothing of another scope is
  ever read back (a third-party backend without the parameter cannot be given a scoped agent);
* search input is capped (:data:`~memora.memory.keywords.MAX_QUERY_CHARS`) and never raises on any
  string: a query with no searchable characters returns ``[]``.
"""

from __future__ import annotations

import builtins
import inspect
import json
import math
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from typing import Any, Final, Protocol, runtime_checkable

from ..errors import ErrorCode, MemoraError
from .keywords import QueryTerm, index_tokens, query_terms
from .types import MAX_CONTENT_CHARS, MemoryRecord, NewMemory, ScoredMemory, check_scope

__all__ = [
    "ROW_LEN",
    "MemoryStorage",
    "PinnedStorage",
    "ReadOnlyMemoryStorage",
    "ReadOnlyView",
    "accepts_keyword",
    "accepts_scopes",
    "check_new",
    "record_from_row",
    "record_to_row",
    "scope_keys",
    "score_records",
]


@runtime_checkable
class ReadOnlyMemoryStorage(Protocol):
    """The read half of :class:`MemoryStorage` (no write methods at all)."""

    async def get(self, memory_id: str) -> MemoryRecord | None: ...

    async def list(
        self,
        *,
        source: str | None = None,
        limit: int = 50,
        offset: int = 0,
        include_superseded: bool = True,
        scopes: Collection[str] | None = None,
    ) -> builtins.list[MemoryRecord]:
        """Newest first, paged."""
        ...

    async def search_by_keyword(
        self,
        query: str,
        *,
        source: str | None = None,
        limit: int = 10,
        include_superseded: bool = False,
        round_ids: Collection[str] | None = None,
        scopes: Collection[str] | None = None,
    ) -> builtins.list[ScoredMemory]:
        """Most relevant first.  ``round_ids`` restricts the search to memories of those rounds
        (the rounds of one session branch)."""
        ...

    async def count(self, *, scopes: Collection[str] | None = None) -> int: ...

    async def count_by_source(
        self, source: str, *, scopes: Collection[str] | None = None
    ) -> int: ...

    async def history(self, memory_id: str) -> builtins.list[MemoryRecord]:
        """The supersede chain containing ``memory_id``, oldest first."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class PinnedStorage(Protocol):
    """What a backend implements to list pinned memories with an index rather than a scan
    (optional: :class:`~memora.memory.manager.MemoryManager` scans ``list`` without it)."""

    async def pinned(
        self, *, scopes: Collection[str] | None = None, limit: int = 10
    ) -> builtins.list[MemoryRecord]:
        """The current (not superseded) memories whose ``meta`` has ``"pinned"``, newest
        first, of ``scopes``."""
        ...


@runtime_checkable
class MemoryStorage(ReadOnlyMemoryStorage, Protocol):
    async def add(self, item: NewMemory) -> MemoryRecord: ...

    async def add_many(self, items: Sequence[NewMemory]) -> builtins.list[MemoryRecord]:
        """Add several memories in one transaction."""
        ...

    async def update(
        self,
        memory_id: str,
        *,
        content: str | None = None,
        name: str | None = None,
        summary_type: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> MemoryRecord: ...

    async def delete(self, memory_id: str) -> bool: ...

    async def supersede(self, old_id: str, new: NewMemory) -> MemoryRecord:
        """Write ``new`` and mark ``old_id`` as ``superseded_by`` it, atomically."""
        ...


class ReadOnlyView:
    """Wrap any storage so only the read methods are reachable."""

    __slots__ = ("_inner",)

    def __init__(self, inner: ReadOnlyMemoryStorage) -> None:
        self._inner = inner

    async def get(self, memory_id: str) -> MemoryRecord | None:
        return await self._inner.get(memory_id)

    async def list(
        self,
        *,
        source: str | None = None,
        limit: int = 50,
        offset: int = 0,
        include_superseded: bool = True,
        scopes: Collection[str] | None = None,
    ) -> builtins.list[MemoryRecord]:
        return await self._inner.list(
            source=source,
            limit=limit,
            offset=offset,
            include_superseded=include_superseded,
            **_scoped(scopes),
        )

    async def search_by_keyword(
        self,
        query: str,
        *,
        source: str | None = None,
        limit: int = 10,
        include_superseded: bool = False,
        round_ids: Collection[str] | None = None,
        scopes: Collection[str] | None = None,
    ) -> builtins.list[ScoredMemory]:
        return await self._inner.search_by_keyword(
            query,
            source=source,
            limit=limit,
            include_superseded=include_superseded,
            round_ids=round_ids,
            **_scoped(scopes),
        )

    async def count(self, *, scopes: Collection[str] | None = None) -> int:
        return await self._inner.count(**_scoped(scopes))

    async def count_by_source(self, source: str, *, scopes: Collection[str] | None = None) -> int:
        return await self._inner.count_by_source(source, **_scoped(scopes))

    async def history(self, memory_id: str) -> builtins.list[MemoryRecord]:
        return await self._inner.history(memory_id)

    async def pinned(
        self, *, scopes: Collection[str] | None = None, limit: int = 10
    ) -> builtins.list[MemoryRecord]:
        if isinstance(self._inner, PinnedStorage):
            return await self._inner.pinned(limit=limit, **_scoped(scopes))
        current = await self._inner.list(limit=1000, include_superseded=False, **_scoped(scopes))
        return [r for r in current if "pinned" in r.meta][: clamp_limit(limit)]

    async def close(self) -> None:
        await self._inner.close()


def _scoped(scopes: Collection[str] | None) -> dict[str, Any]:
    """``scopes=`` only when set: a view over a backend without scopes still reads it whole."""
    return {} if scopes is None else {"scopes": scopes}


def accepts_scopes(storage: object) -> bool:
    """Whether ``storage`` filters by scope in its own queries (its ``search_by_keyword`` takes
    ``scopes``); a view answers for what it wraps."""
    inner = getattr(storage, "_inner", None)
    if isinstance(storage, ReadOnlyView) and inner is not None:
        return accepts_scopes(inner)
    return accepts_keyword(getattr(storage, "search_by_keyword", None), "scopes")


def accepts_keyword(fn: object, name: str) -> bool:
    """Whether the callable ``fn`` takes the keyword argument ``name`` (a backend's optional
    capability, told by its signature)."""
    if not callable(fn):
        return False
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def scope_keys(scopes: Collection[str] | None) -> builtins.list[str] | None:
    """``scopes`` as a list for an SQL parameter (``None``: no filter)."""
    return None if scopes is None else [str(s) for s in scopes]


def record_to_row(record: MemoryRecord) -> tuple[Any, ...]:
    """The record's values in the SQL column order of :func:`record_from_row` (``meta`` as JSON
    text)."""
    return (
        record.id,
        record.source,
        record.name,
        record.content,
        record.summary_type,
        record.created_at,
        record.updated_at,
        record.superseded_by,
        record.session_id,
        record.round_id,
        json.dumps(record.meta, ensure_ascii=False),
        record.scope_key,
    )


def record_from_row(row: Sequence[Any]) -> MemoryRecord:
    """A record from a row in the column order every SQL backend uses: id, source, name,
    content, summary_type, created_at, updated_at, superseded_by, session_id, round_id, meta,
    scope (``meta`` a dict, or its JSON text; scope ``""`` for none).  The row has
    :data:`ROW_LEN` values."""
    meta = row[10]
    if isinstance(meta, str):
        try:
            meta = json.loads(meta) if meta and meta != "{}" else {}
        except ValueError:
            meta = {}
    return MemoryRecord(
        id=row[0],
        source=row[1],
        name=row[2],
        content=row[3],
        summary_type=row[4],
        created_at=row[5],
        updated_at=row[6],
        superseded_by=row[7],
        session_id=row[8],
        round_id=row[9],
        meta=dict(meta or {}) if isinstance(meta, dict) else {},
        scope=row[11] or None,
    )


ROW_LEN: Final = 12
"""How many values :func:`record_to_row` gives and :func:`record_from_row` reads."""


def check_new(item: NewMemory) -> None:
    if not isinstance(item.content, str):
        raise MemoraError(ErrorCode.INVALID_INPUT, "memory content must be a string")
    check_scope(item.scope, "scope")
    for label in ("id", "session_id", "round_id", "superseded_by", "summary_type"):
        value = getattr(item, label, None)
        if value is not None and not isinstance(value, str):
            # an id that is a list or an object (an import line) would reach a dict or an SQL
            # parameter as it is: a TypeError deep in a backend instead of this
            raise MemoraError(
                ErrorCode.INVALID_INPUT,
                f"memory {label} must be a string, not {type(value).__name__}; nothing was stored",
                context={"field": label},
            )
    if item.id is not None and not item.id.strip():
        raise MemoraError(
            ErrorCode.INVALID_INPUT, "memory id must not be empty", context={"field": "id"}
        )
    if len(item.content) > MAX_CONTENT_CHARS:
        raise MemoraError(
            ErrorCode.INVALID_INPUT,
            f"memory content has {len(item.content)} characters; the limit is {MAX_CONTENT_CHARS}",
        )
    for label, value in (("content", item.content), ("name", item.name)):
        try:
            value.encode("utf-8")
        except (UnicodeEncodeError, AttributeError) as exc:
            raise MemoraError(
                ErrorCode.INVALID_INPUT,
                f"memory {label} is not valid Unicode text (a lone surrogate at position "
                f"{getattr(exc, 'start', '?')}); nothing was stored",
            ) from exc
    if "\x00" in item.content or "\x00" in item.name:
        raise MemoraError(
            ErrorCode.INVALID_INPUT, "memory content and name must not contain NUL bytes"
        )


def update_changes(
    content: str | None, name: str | None, summary_type: str | None, meta: dict[str, Any] | None
) -> dict[str, Any]:
    """The fields an ``update`` call changes, checked like new content."""
    changes: dict[str, Any] = {}
    if content is not None:
        check_new(NewMemory(content=content))
        changes["content"] = content
    if name is not None:
        changes["name"] = name
    if summary_type is not None:
        changes["summary_type"] = summary_type
    if meta is not None:
        changes["meta"] = dict(meta)
    return changes


def clamp_limit(limit: int, maximum: int = 1000) -> int:
    return max(0, min(int(limit), maximum))


def _term_count(term: QueryTerm, tokens: Counter[str], text: str) -> int:
    if len(term.tokens) == 1 and not term.prefix:
        return tokens.get(term.tokens[0], 0)
    if term.prefix and term.text.isascii():
        # an English stem: the words that start with it (as FTS5's "stem"* counts them); the
        # substring test first skips, in C, the memories that cannot hold one
        if term.text not in text:
            return 0
        return sum(n for token, n in tokens.items() if token.startswith(term.text))
    return text.count(term.text)


def score_records(
    records: Iterable[tuple[MemoryRecord, str, Counter[str], int]],
    query: str,
    limit: int,
    total_docs: int,
    avg_len: float,
) -> builtins.list[ScoredMemory]:
    """BM25 over pre-tokenised records ``(record, normalised_text, token_counts, length)``.

    Used by the in-memory and JSON backends so they rank like the SQLite one.
    """
    terms = query_terms(query)
    if not terms or limit <= 0:
        return []
    rows = list(records)
    k1, b = 1.2, 0.75
    tf: builtins.list[list[int]] = [
        [_term_count(t, counts, text) for t in terms] for _, text, counts, _ in rows
    ]
    df = [sum(1 for row in tf if row[i]) for i in range(len(terms))]
    n = max(total_docs, 1)
    idf = [math.log(1 + (n - d + 0.5) / (d + 0.5)) for d in df]
    scored = []
    for (record, _, _, length), freqs in zip(rows, tf, strict=True):
        if not any(freqs):
            continue
        s = 0.0
        for i, f in enumerate(freqs):
            if f:
                s += idf[i] * f * (k1 + 1) / (f + k1 * (1 - b + b * length / max(avg_len, 1.0)))
        scored.append(ScoredMemory(record, s))
    scored.sort(key=lambda m: (-m.score, -m.record.created_at))
    return scored[:limit]


def tokens_of(record: MemoryRecord) -> tuple[str, Counter[str], int]:
    text = f"{record.name}\n{record.content}"
    toks = index_tokens(text)
    import unicodedata

    return unicodedata.normalize("NFKC", text).lower(), Counter(toks), len(toks)
