"""Semantic recall: embedders, vectors kept next to memories, and keyword + vector fusion.

Off by default.  A host that has an embedding model turns it on with ``"embedder"`` in the
user's config (or the Agent option ``embedder``); then

* every memory gets a vector from the embedder, written in the background after the write that
  made it (a turn's ``done`` never waits for it; ``await agent.idle()`` does), and memories
  without one — written before the embedder was on, or while it was down — are filled in when
  the store opens and on the next write after an embedding failed;
* :meth:`SemanticSearch.search` ranks by a *weighed* fusion of the keyword (BM25) ranking and the
  vector (cosine) ranking: each list's scores are scaled to 0..1 and added with the weights
  ``1 - semantic_weight`` and ``semantic_weight``.  The weight is measured on LoCoMo (see
  docs/memory.md), not assumed: an unweighed rank fusion lowered BM25's recall there;
* when the embedder fails at search time the keyword ranking is returned, with a warning — a
  search never fails because of it.

A backend that keeps vectors implements :class:`VectorStorage` (the ``sqlite``, ``memory``,
``json`` and ``postgres`` backends do); vectors are kept per *space* (the embedder's name and
model), so changing the model re-embeds instead of comparing vectors of two models.
"""

from __future__ import annotations

import array
import asyncio
import builtins
import logging
import math
import operator
from collections.abc import Collection, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

from .periods import periods_first, query_periods
from .ranking import (
    DEFAULT_SESSION_WEIGHT,
    PASSAGE_WEIGHT,
    rank_keyword_pool,
    session_pool,
)
from .storage import ReadOnlyMemoryStorage
from .types import MemoryRecord, ScoredMemory

__all__ = [
    "DEFAULT_SEMANTIC_WEIGHT",
    "EMBED_TEXT_CHARS",
    "EmbedKind",
    "Embedder",
    "SemanticSearch",
    "VectorRows",
    "VectorStorage",
    "embed_text",
    "fuse",
    "normalize",
    "pack",
    "unpack",
]

logger = logging.getLogger("memora.memory")

EmbedKind = Literal["query", "document"]

DEFAULT_SEMANTIC_WEIGHT = 0.3
"""The vector ranking's share in the fused score (measured on LoCoMo's dev half, see
docs/memory.md: higher weights lost recall with a small model)."""

EMBED_TEXT_CHARS = 2000
"""Text sent to the embedder per memory: small models read ~512 tokens; the rest is cut."""

BATCH = 32
"""Memories embedded per request when filling in vectors."""


@runtime_checkable
class Embedder(Protocol):
    """Turns text into vectors (registered with the ``register_embedders`` hook)."""

    @property
    def name(self) -> str:
        """The vector space: plugin and model (``openai:text-embedding-3-small``).  Vectors of
        different names are never compared."""
        ...

    async def embed(self, texts: Sequence[str], *, kind: EmbedKind) -> list[list[float]]:
        """One vector per text, in order.  ``kind`` tells a model that embeds questions and
        passages differently (e5's ``query:``/``passage:``) which one this is."""
        ...

    async def aclose(self) -> None: ...


@runtime_checkable
class VectorStorage(ReadOnlyMemoryStorage, Protocol):
    """What a memory backend implements to keep vectors (all methods ``async``), besides the
    read methods of every backend."""

    async def put_vectors(self, space: str, vectors: Sequence[tuple[str, Sequence[float]]]) -> None:
        """Store (or replace) the vector of each memory id; ids that no longer exist are
        skipped.  Vectors arrive normalised to length 1."""
        ...

    async def missing_vectors(self, space: str, *, limit: int = BATCH) -> list[MemoryRecord]:
        """Up to ``limit`` memories with no vector in ``space`` (oldest first); a memory whose
        name or content changed counts as missing again."""
        ...

    async def search_by_vector(
        self,
        space: str,
        vector: Sequence[float],
        *,
        source: str | None = None,
        limit: int = 10,
        include_superseded: bool = False,
        round_ids: Collection[str] | None = None,
        scopes: Collection[str] | None = None,
    ) -> list[ScoredMemory]:
        """The memories whose vectors are closest to ``vector`` (cosine; the score), with the
        filters of ``search_by_keyword`` (``scopes`` in the backend's own query)."""
        ...


# -- vectors ---------------------------------------------------------------------------------


def normalize(vector: Sequence[float]) -> list[float]:
    """``vector`` scaled to length 1 (a zero vector stays zero); non-finite values are
    refused with ``ValueError``."""
    values = [float(x) for x in vector]
    if not values:
        raise ValueError("an embedding must have at least one dimension")
    norm = math.sqrt(math.fsum(x * x for x in values))
    if not math.isfinite(norm):
        raise ValueError("an embedding holds a value that is not a finite number")
    if norm == 0.0:
        return values
    return [x / norm for x in values]


def pack(vector: Sequence[float]) -> bytes:
    """float32, little-endian (the BLOB the SQLite backend keeps)."""
    a = array.array("f", vector)
    if a.itemsize != 4:  # pragma: no cover - every supported platform has a 4-byte C float
        raise RuntimeError("this platform's C float is not 32 bits")
    if _BIG_ENDIAN:  # pragma: no cover
        a.byteswap()
    return a.tobytes()


def unpack(blob: bytes) -> array.array[float]:
    a = array.array("f")
    a.frombytes(blob)
    if _BIG_ENDIAN:  # pragma: no cover
        a.byteswap()
    return a


_BIG_ENDIAN = array.array("H", [1]).tobytes() == b"\x00\x01"


def embed_text(record: MemoryRecord) -> str:
    """What a memory's vector is made from: its name and content, cut at
    :data:`EMBED_TEXT_CHARS`."""
    text = f"{record.name}\n{record.content}".strip() if record.name else record.content.strip()
    return text[:EMBED_TEXT_CHARS] or "-"


def _numpy() -> Any:
    try:
        import numpy
    except ImportError:
        return None
    return numpy


class VectorRows:
    """Vectors of one space in process memory, scored by brute force: a numpy matrix when numpy
    is installed (``pip install 'memora-kernel[vectors]'``), else plain Python (fine for a few
    thousand memories).  Rows are keyed by memory id; replacing or dropping one is O(1)."""

    def __init__(self, dims: int | None = None, *, use_numpy: bool | None = None) -> None:
        """``use_numpy``: None uses numpy when it is installed; False never does."""
        self._np = _numpy() if use_numpy is not False else None
        if use_numpy and self._np is None:
            raise ImportError("numpy is not installed: pip install 'memora-kernel[vectors]'")
        self._reset(dims)

    def _reset(self, dims: int | None) -> None:
        self.dims = dims
        self.ids: list[str | None] = []
        self.index: dict[str, int] = {}
        self._rows: list[Any] = []  # plain Python: array('f') per row
        self._matrix: Any = None  # numpy: capacity x dims, float32
        self._free: list[int] = []

    def __len__(self) -> int:
        return len(self.index)

    def put(self, memory_id: str, vector: Sequence[float]) -> None:
        if self.dims is None:
            self.dims = len(vector)
        if len(vector) != self.dims:
            # another model behind the same name: the old rows are useless now
            self._reset(len(vector))
        at = self.index.get(memory_id)
        if at is None:
            at = self._free.pop() if self._free else len(self.ids)
            if at == len(self.ids):
                self.ids.append(memory_id)
            else:
                self.ids[at] = memory_id
            self.index[memory_id] = at
        if self._np is not None:
            np = self._np
            if self._matrix is None or at >= self._matrix.shape[0]:
                grown = np.zeros((max(64, (at + 1) * 2), self.dims), dtype=np.float32)
                if self._matrix is not None:
                    grown[: self._matrix.shape[0]] = self._matrix
                self._matrix = grown
            self._matrix[at] = np.asarray(vector, dtype=np.float32)
        else:
            row = array.array("f", vector)
            if at == len(self._rows):
                self._rows.append(row)
            else:
                self._rows[at] = row

    def load(self, rows: Sequence[tuple[str, bytes]]) -> None:
        """Add many ``(id, packed float32 vector)`` rows at once (a store's first search)."""
        if not rows:
            return
        np = self._np
        width = len(rows[0][1])
        if np is None or self.index or any(len(blob) != width for _, blob in rows):
            for memory_id, blob in rows:
                self.put(memory_id, unpack(blob))
            return
        matrix = np.frombuffer(b"".join(blob for _, blob in rows), dtype="<f4")
        self._reset(width // 4)
        self._matrix = matrix.reshape(len(rows), width // 4).astype(np.float32)
        ids = [memory_id for memory_id, _ in rows]
        self.ids = list(ids)
        self.index = {memory_id: i for i, memory_id in enumerate(ids)}

    def drop(self, memory_id: str) -> None:
        at = self.index.pop(memory_id, None)
        if at is None:
            return
        self.ids[at] = None
        self._free.append(at)
        if self._np is not None and self._matrix is not None:
            self._matrix[at] = 0.0

    def ranked(self, query: Sequence[float], k: int) -> list[tuple[str, float]]:
        """The ``k`` ids closest to ``query`` (dot product of unit vectors), best first; fewer
        than ``k`` only when fewer rows are kept."""
        n = len(self.ids)
        if n == 0 or k <= 0 or self.dims is None or len(query) != self.dims:
            return []
        if self._np is not None:
            np = self._np
            scores = self._matrix[:n] @ np.asarray(query, dtype=np.float32)
            if self._free:  # dropped rows never rank (a zero row would beat a negative score)
                scores[self._free] = -np.inf
            k = min(k, len(self.index))
            if k == 0:
                return []
            top = np.argpartition(-scores, k - 1)[:k] if k < n else np.arange(n)
            order = top[np.argsort(-scores[top], kind="stable")]
            out = [(self.ids[i], float(scores[i])) for i in order.tolist()]
        else:
            q = array.array("f", query)
            mul = operator.mul
            pairs = [
                (sum(map(mul, row, q)), i)
                for i, row in enumerate(self._rows)
                if self.ids[i] is not None
            ]
            pairs.sort(key=lambda p: -p[0])
            out = [(self.ids[i], float(s)) for s, i in pairs[:k]]
        return [(i, s) for i, s in out if i is not None]


# -- fusion ------------------------------------------------------------------------------------


def _scaled(hits: Sequence[ScoredMemory]) -> dict[str, float]:
    if not hits:
        return {}
    scores = [h.score for h in hits]
    hi, lo = max(scores), min(scores)
    span = hi - lo
    if span <= 0:
        return {h.record.id: 1.0 for h in hits}
    return {h.record.id: (h.score - lo) / span for h in hits}


def fuse(
    keyword: Sequence[ScoredMemory],
    semantic: Sequence[ScoredMemory],
    weight: float,
    limit: int,
) -> list[ScoredMemory]:
    """Weighed fusion of two rankings: each list's scores scaled to 0..1 (min–max over the
    list), a memory's score = ``(1 - weight) * keyword + weight * semantic`` (0 where a list
    lacks it).  Ties keep the keyword order."""
    if weight <= 0 or not semantic:
        return list(keyword[:limit])
    if weight >= 1 or not keyword:
        return list(semantic[:limit])
    kw, vs = _scaled(keyword), _scaled(semantic)
    records: dict[str, MemoryRecord] = {}
    order: dict[str, int] = {}
    for hit in (*keyword, *semantic):
        if hit.record.id not in records:
            records[hit.record.id] = hit.record
            order[hit.record.id] = len(order)
    scored = [
        ScoredMemory(rec, (1 - weight) * kw.get(mid, 0.0) + weight * vs.get(mid, 0.0))
        for mid, rec in records.items()
    ]
    scored.sort(key=lambda h: (-h.score, order[h.record.id]))
    return scored[:limit]


# -- the search --------------------------------------------------------------------------------


class SemanticSearch:
    """An embedder over a :class:`VectorStorage`: fills in vectors and searches with fusion."""

    def __init__(
        self,
        embedder: Embedder,
        storage: Any,
        *,
        weight: float = DEFAULT_SEMANTIC_WEIGHT,
        pool: int = 50,
        query_timeout: float = 10.0,
        session_weight: float = DEFAULT_SESSION_WEIGHT,
        passage_weight: float = PASSAGE_WEIGHT,
    ) -> None:
        if not isinstance(storage, VectorStorage):
            raise TypeError(
                f"the memory storage {type(storage).__name__} keeps no vectors (it has no "
                "put_vectors/missing_vectors/search_by_vector); semantic recall needs one that does"
            )
        self.embedder = embedder
        self.storage = storage
        self.weight = float(weight)
        self.pool = pool
        self.query_timeout = query_timeout
        self.session_weight = float(session_weight)
        """How much a memory's session counts in the keyword ranking before fusion (see
        :mod:`memora.memory.ranking`)."""
        self.passage_weight = float(passage_weight)
        """How much a memory's best sentence counts in the keyword ranking before fusion (see
        :func:`memora.memory.ranking.with_best_passage`)."""
        self._warned = False
        self._filling: asyncio.Lock | None = None

    @property
    def space(self) -> str:
        return str(self.embedder.name)

    async def _embed(self, todo: Sequence[MemoryRecord]) -> bool:
        """Embed ``todo`` and store the vectors; False (warned once) when the embedder failed."""
        try:
            vectors = await self.embedder.embed([embed_text(r) for r in todo], kind="document")
            if len(vectors) != len(todo):
                raise ValueError(
                    f"the embedder returned {len(vectors)} vectors for {len(todo)} texts"
                )
            rows = [(r.id, normalize(v)) for r, v in zip(todo, vectors, strict=True)]
        except Exception as exc:
            self._warn(f"embedding memories with {self.space} failed: {exc}")
            return False
        await self.storage.put_vectors(self.space, rows)
        self._warned = False
        return True

    async def embed_records(self, records: Sequence[MemoryRecord]) -> bool:
        """Write the vectors of ``records`` (just written: no search for what is missing);
        False when the embedder failed (they stay missing for :meth:`fill`)."""
        if self._filling is None:
            self._filling = asyncio.Lock()
        async with self._filling:
            for start in range(0, len(records), BATCH):
                if not await self._embed(records[start : start + BATCH]):
                    return False
        return True

    async def fill(self, *, max_batches: int | None = None) -> int:
        """Embed memories that have no vector yet; returns how many were written.  Stops at the
        first failure (logged once; the next call tries again)."""
        if self._filling is None:
            self._filling = asyncio.Lock()
        written = 0
        async with self._filling:
            batches = 0
            while max_batches is None or batches < max_batches:
                batches += 1
                todo = await self.storage.missing_vectors(self.space, limit=BATCH)
                if not todo or not await self._embed(todo):
                    break
                written += len(todo)
                if len(todo) < BATCH:
                    break
                if batches == 1:  # more than a batch: a backfill (a new embedder, or a model)
                    logger.info(
                        "writing the vectors of memories that have none with %s, in the background",
                        self.space,
                    )
        return written

    async def warm(self) -> None:
        """Read the space's vectors into process memory now (a store keeps them there after
        its first vector search): at 100k memories that read takes seconds, better spent in
        the background after opening than in the first search."""
        await self.storage.search_by_vector(self.space, [0.0], limit=1)

    def _warn(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            logger.warning("%s; searches use keywords alone until it works", message)

    async def _query_vector(self, query: str) -> list[float] | None:
        try:
            vectors = await asyncio.wait_for(
                self.embedder.embed([query[:EMBED_TEXT_CHARS]], kind="query"), self.query_timeout
            )
            return normalize(vectors[0])
        except Exception as exc:  # TimeoutError, a provider error, a malformed answer
            self._warn(f"embedding a query with {self.space} failed: {exc!r}")
            return None

    async def search(
        self,
        query: str,
        *,
        source: str | None = None,
        limit: int = 10,
        include_superseded: bool = False,
        round_ids: Collection[str] | None = None,
        scopes: Collection[str] | None = None,
    ) -> builtins.list[ScoredMemory]:
        if not isinstance(query, str) or not query.strip() or limit <= 0:
            return []
        pool = max(self.pool, limit * 2)
        keyword_pool = session_pool(limit) if self.session_weight > 0 else pool
        scoped: dict[str, Any] = {} if scopes is None else {"scopes": scopes}
        keyword_task = asyncio.ensure_future(
            self.storage.search_by_keyword(
                query,
                source=source,
                limit=keyword_pool,
                include_superseded=include_superseded,
                round_ids=round_ids,
                **scoped,
            )
        )
        try:
            vector = await self._query_vector(query)
            keyword = rank_keyword_pool(
                await keyword_task,
                query,
                self.session_weight,
                pool,
                passage_weight=self.passage_weight,
            )
        finally:
            if not keyword_task.done():  # cancelled while embedding the query
                keyword_task.cancel()
        periods = query_periods(query)
        if vector is None:
            return periods_first(keyword, periods, limit)
        semantic = await self.storage.search_by_vector(
            self.space,
            vector,
            source=source,
            limit=pool,
            include_superseded=include_superseded,
            round_ids=round_ids,
            **scoped,
        )
        return periods_first(fuse(keyword, semantic, self.weight, pool), periods, limit)
