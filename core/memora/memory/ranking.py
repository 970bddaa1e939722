"""Session context in keyword ranking: a memory is ranked with the session it came from.

A question is rarely answered by one round alone: the words of "When did Melanie run a charity
race?" are spread over the rounds of the afternoon she talked about it.  A keyword search that
scores each memory alone ranks a round with one rare word above the round that answers in a
session full of the question's words.  So the keyword ranking draws a pool of candidates
(:func:`session_pool`), scores every session by its two best candidates, and ranks each memory
by its own score plus ``weight`` times its session's (both scaled to 0..1 over the pool):

    score(m) = s(m) / max s  +  weight * S(session of m) / max S,   S = sum of the 2 best s

A memory without a session (added by hand, imported) is a session of its own.  This is
cluster-based smoothing from the retrieval literature — document context from its neighbours —
and the two-stage "session, then message" retrieval recent LoCoMo systems report, done in one
pass over a pool the backend already returns.

The weight (1.0), the pool (at least 100, and 8 candidates per result) and "the best two" were
chosen by leave-one-conversation-out cross-validation on LoCoMo's dev half: each of the five
folds, choosing on the other four conversations, picked the same weight and pool (four of five
"best two", one "best three"); the held-out recall is what ``bench/bench_recall.py`` prints next
to the in-sample one.  The ``session_weight`` option sets the weight; 0 turns it off.
"""

from __future__ import annotations

from collections.abc import Sequence

from .types import ScoredMemory

__all__ = ["DEFAULT_SESSION_WEIGHT", "session_pool", "with_session_context"]

DEFAULT_SESSION_WEIGHT = 1.0
MIN_POOL = 100
POOL_PER_RESULT = 8
BEST_OF_SESSION = 2


def session_pool(limit: int) -> int:
    """How many keyword candidates to draw for ``limit`` results."""
    return max(MIN_POOL, limit * POOL_PER_RESULT)


def _scaled(hits: Sequence[ScoredMemory]) -> list[float]:
    """Scores over the pool's best: ``s / max`` when every score is positive (BM25 and
    ``ts_rank`` are), min–max otherwise; all 1.0 when they are equal."""
    scores = [h.score for h in hits]
    hi, lo = max(scores), min(scores)
    if lo > 0:
        return [s / hi for s in scores]
    span = hi - lo
    return [(s - lo) / span if span > 0 else 1.0 for s in scores]


def with_session_context(
    hits: Sequence[ScoredMemory], weight: float, limit: int
) -> list[ScoredMemory]:
    """``hits`` (a keyword ranking, best first) re-ranked with their sessions' scores, the
    first ``limit``; the scores returned are the combined ones.  Ties keep the given order."""
    if weight <= 0 or len(hits) < 2:
        return list(hits[:limit])
    own = _scaled(hits)
    best: dict[str, list[float]] = {}
    keys: list[str] = []
    for hit, score in zip(hits, own, strict=True):
        session = hit.record.session_id
        key = f"s:{session}" if session else f"m:{hit.record.id}"
        keys.append(key)
        top = best.setdefault(key, [])
        top.append(score)
        if len(top) > BEST_OF_SESSION:
            top.sort(reverse=True)
            del top[BEST_OF_SESSION:]
    group = {key: sum(top) for key, top in best.items()}
    most = max(group.values()) or 1.0
    ranked = sorted(range(len(hits)), key=lambda i: (-(own[i] + weight * group[keys[i]] / most), i))
    return [
        ScoredMemory(hits[i].record, own[i] + weight * group[keys[i]] / most)
        for i in ranked[:limit]
    ]
