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

import functools
import math
import re
from collections.abc import Sequence

from .keywords import CJK_RANGES, QueryTerm, normalise, query_terms
from .types import ScoredMemory

__all__ = [
    "DEFAULT_SESSION_WEIGHT",
    "PASSAGE_CHARS",
    "PASSAGE_WEIGHT",
    "rank_keyword_pool",
    "session_pool",
    "with_best_passage",
    "with_session_context",
]

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


# -- passage-level evidence ----------------------------------------------------------------------

PASSAGE_WEIGHT = 1.0
"""How much a memory's best sentence counts next to the whole memory's score (see
:func:`with_best_passage`): equally.  Leave-one-conversation-out on LoCoMo's dev half, from 0,
0.5, 1, 1.5, 2 and 3: keywords fused with e5, over both units, 1.0 in every fold; keywords
alone, summaries 1.0 in four folds of five, dialog turns 3.0 in every fold, where 1 to 3 are
within 0.4 of each other at every cut-off (bench/bench_recall.py prints the folds)."""

PASSAGE_CHARS = 4000
"""The first characters of a memory that :func:`with_best_passage` reads for its sentences (a
search reads a pool of up to a few hundred memories; a memory may hold a million characters)."""

_K1 = 1.2
"""BM25's term-frequency saturation, as FTS5's ``bm25()`` uses."""

_SENTENCE_END = re.compile(r"[.!?](?=\s)|[。！？；\n]")
"""What ends a sentence: ``.``, ``!`` or ``?`` before a space, ``。！？；``, a line break."""

_ASCII_ENDS = frozenset(".!?\n")
"""What :func:`_ascii_words_re` gives for the end of a sentence (no word is punctuation)."""

_ASCII_TOKEN = r"[a-z0-9]*(?:_+[a-z0-9]+)*"
"""The rest of a lowercased ASCII word, as :func:`memora.memory.keywords.index_tokens` reads
it (letters, digits, ``_`` inside)."""


@functools.lru_cache(maxsize=256)
def _ascii_words_re(starts: tuple[str, ...]) -> re.Pattern[str]:
    """The words of lowercased ASCII text that start with one of ``starts``, whole, as the
    tokenizer splits them (a word inside another — ``sql`` in ``mysql`` or ``a_sql`` — is not
    one), and the ends of its sentences (:data:`_ASCII_ENDS`): the regular expression skips
    the other words, so they cost no Python.  (A word the tokenizer reads after a leading
    ``_``, as ``init`` in ``__init``, is not seen.)"""
    alternatives = "|".join(re.escape(x) for x in sorted(set(starts), key=len, reverse=True))
    return re.compile(rf"(?<![a-z0-9_])(?:{alternatives}){_ASCII_TOKEN}|[.!?](?=\s)|\n")


@functools.cache
def _words_re() -> re.Pattern[str]:
    # compiled on first use, as the tokenizer's own pattern (its character classes are slow
    # to compile): the words of a text, as the tokenizer reads them (CJK runs left out)
    return re.compile(rf"[^\W{CJK_RANGES}]+")


@functools.cache
def _cjk_re() -> re.Pattern[str]:
    return re.compile(rf"[{CJK_RANGES}]+")


class _Matcher:
    """The query's terms as a search reads a memory: words by token (memoised for the search; a
    stem matches as a prefix), CJK terms by their text in a run of CJK characters (a phrase is
    its bigrams in a row and a single character a prefix, so each occurrence of the text in
    the run is one match, as the backends count them)."""

    __slots__ = ("ascii_words", "cjk", "exact", "memo", "prefix_of", "prefixes")

    def __init__(self, terms: Sequence[QueryTerm]) -> None:
        self.exact: dict[str, tuple[int, ...]] = {}
        self.prefix_of: list[tuple[str, int]] = []
        self.cjk: list[tuple[str, int]] = []
        for j, term in enumerate(terms):
            if _cjk_re().fullmatch(term.text):
                self.cjk.append((term.text, j))
            elif term.prefix:
                self.prefix_of.append((term.tokens[0], j))
            else:
                self.exact[term.tokens[0]] = (*self.exact.get(term.tokens[0], ()), j)
        self.prefixes = tuple(p for p, _ in self.prefix_of)
        self.memo: dict[str, tuple[int, ...]] = {}
        starts = tuple(w for w in (*self.exact, *self.prefixes) if w.isascii())
        self.ascii_words = _ascii_words_re(starts) if starts else None

    def word(self, token: str) -> tuple[int, ...]:
        matched = self.memo.get(token)
        if matched is None:
            matched = self.exact.get(token, ())
            if self.prefixes and token.startswith(self.prefixes):
                matched += tuple(j for p, j in self.prefix_of if token.startswith(p))
            self.memo[token] = matched
        return matched

    def sentences(self, text: str) -> list[dict[int, int]]:
        """The query terms' counts (by index) in each sentence of ``text`` that holds any."""
        if text.isascii():  # no CJK term can match: the words that may, and the sentences' ends
            return self._ascii_sentences(text)
        sentences: list[dict[int, int]] = []
        words = _words_re() if self.exact or self.prefixes else None
        cjk, count_ascii, count_words = self.cjk, self._count_ascii, self._count_words
        for sentence in _SENTENCE_END.split(normalise(text)):
            counts: dict[int, int] = {}
            for phrase, j in cjk:
                found = sentence.count(phrase)
                if found:
                    counts[j] = found
            if sentence.isascii():  # (a sentence's own end was split off)
                count_ascii(sentence, counts)
            elif words is not None:
                count_words(words.findall(sentence), counts)
            if counts:
                sentences.append(counts)
        return sentences

    def _ascii_sentences(self, text: str) -> list[dict[int, int]]:
        """:meth:`sentences` of ASCII text: one pass over its words, a sentence ending at an
        end word."""
        sentences: list[dict[int, int]] = []
        if self.ascii_words is None:
            return sentences
        counts: dict[int, int] = {}
        for word in self.ascii_words.findall(text.lower()):
            if word in _ASCII_ENDS:
                if counts:
                    sentences.append(counts)
                    counts = {}
                continue
            for j in self.word(word):
                counts[j] = counts.get(j, 0) + 1
        if counts:
            sentences.append(counts)
        return sentences

    def _count_ascii(self, sentence: str, counts: dict[int, int]) -> None:
        """Add the query terms of an ASCII sentence (already normalised) to ``counts``."""
        if self.ascii_words is None:
            return
        for word in self.ascii_words.findall(sentence):
            if word not in _ASCII_ENDS:
                for j in self.word(word):
                    counts[j] = counts.get(j, 0) + 1

    def _count_words(self, words: list[str], counts: dict[int, int]) -> None:
        """Add the query terms among a mixed sentence's ``words`` to ``counts`` (each word's
        matches remembered: a memory's words repeat)."""
        memo = self.memo
        for word in words:
            matched = memo.get(word)
            if matched is None:
                token = word.strip("_")
                matched = self.word(token) if token else ()
                memo[word] = matched
            for j in matched:
                counts[j] = counts.get(j, 0) + 1


def with_best_passage(
    hits: Sequence[ScoredMemory], query: str, weight: float = PASSAGE_WEIGHT
) -> list[ScoredMemory]:
    """``hits`` (a keyword pool, best first) re-scored with their best sentence:

        score(m) = s(m) / max s  +  weight * p(m) / max p

    where ``p(m)`` is the BM25 score, without length normalisation, of the sentence of ``m``
    that matches the query best (each term's idf over the pool).  A whole memory's score
    rewards the query's words anywhere in it, so without this a long memory — a round's
    summary, a session's — that answers in one sentence ranks below one that mentions the same
    words in passing, here and there.  This is passage-level evidence (Callan, SIGIR 1994): a
    document scored by itself and its best passage.  It reads the memories' text the backend
    already returned, so every backend, a third-party one included, ranks the same way.  Ties
    keep the given order; a pool in which no sentence holds a query term comes back as it
    was."""
    if weight <= 0 or len(hits) < 2:
        return list(hits)
    terms = query_terms(query)
    if not terms:
        return list(hits)
    match = _Matcher(terms)
    per_memory = [match.sentences(hit.record.content[:PASSAGE_CHARS]) for hit in hits]
    df = [0] * len(terms)
    for sentences in per_memory:
        for j in {j for counts in sentences for j in counts}:
            df[j] += 1
    n = len(hits)
    idf = [math.log(1 + (n - d + 0.5) / (d + 0.5)) for d in df]
    best = [
        max(
            (sum(idf[j] * tf * (_K1 + 1) / (tf + _K1) for j, tf in c.items()) for c in counts),
            default=0.0,
        )
        for counts in per_memory
    ]
    top = max(best)
    if top <= 0:
        return list(hits)
    own = _scaled(hits)
    scores = [o + weight * b / top for o, b in zip(own, best, strict=True)]
    ranked = sorted(range(n), key=lambda i: (-scores[i], i))
    return [ScoredMemory(hits[i].record, scores[i]) for i in ranked]


def rank_keyword_pool(
    hits: Sequence[ScoredMemory],
    query: str,
    session_weight: float,
    limit: int,
    *,
    passage_weight: float = PASSAGE_WEIGHT,
) -> list[ScoredMemory]:
    """A keyword pool ranked as every search path ranks it: each memory with its best sentence
    (:func:`with_best_passage`), then with its session (:func:`with_session_context`); the first
    ``limit``."""
    return with_session_context(
        with_best_passage(hits, query, passage_weight), session_weight, limit
    )
