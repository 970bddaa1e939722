"""Tokenisation and keyword extraction for Chinese and English.

One tokenizer serves indexing and querying in every backend, so a query finds the same memories
whichever backend stores them:

* Latin/other scripts: lowercase word tokens (letters, digits, ``_``), NFKC-normalised;
* CJK (Han, kana, hangul): overlapping character bigrams of each run, plus the run's last
  character, so any substring of two or more characters is a *phrase* of consecutive bigrams
  (记忆 → ``记忆``; 长期记忆 → ``长期 期记 记忆``) and a single character is a prefix.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from typing import Any

from .periods import MONTH_NAMES as _MONTH_NAMES, query_periods

__all__ = [
    "CJK_RANGES",
    "MAX_QUERY_CHARS",
    "MAX_QUERY_TERMS",
    "MAX_STEMMED",
    "STOP_EN",
    "STOP_ZH",
    "QueryTerm",
    "extract_keywords",
    "index_tokens",
    "normalise",
    "query_terms",
    "scan_words",
    "stem",
]

MAX_QUERY_CHARS = 1000
MAX_QUERY_TERMS = 32

CJK_RANGES = (
    "\u3040-\u30ff"  # hiragana, katakana
    "\u3400-\u4dbf"  # CJK ext A
    "\u4e00-\u9fff"  # CJK unified
    "\uf900-\ufaff"  # compatibility
    "\uac00-\ud7af"  # hangul
    "\U00020000-\U0002ffff"
)
"""The scripts tokenised as CJK (bigrams), as the inside of a regular-expression class."""


@functools.cache
def _token_re() -> re.Pattern[str]:
    # compiled on first use: the character classes cost ~4 ms to compile at import
    return re.compile(rf"([{CJK_RANGES}]+)|([^\W{CJK_RANGES}]+)")


STOP_EN = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "if",
        "then",
        "else",
        "of",
        "to",
        "in",
        "on",
        "at",
        "by",
        "for",
        "with",
        "from",
        "as",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "i",
        "you",
        "he",
        "she",
        "we",
        "they",
        "me",
        "him",
        "her",
        "us",
        "them",
        "my",
        "your",
        "our",
        "their",
        "do",
        "does",
        "did",
        "done",
        "have",
        "has",
        "had",
        "not",
        "no",
        "yes",
        "so",
        "too",
        "very",
        "can",
        "could",
        "would",
        "should",
        "will",
        "shall",
        "may",
        "might",
        "must",
        "about",
        "into",
        "over",
        "under",
        "again",
        "further",
        "more",
        "most",
        "some",
        "such",
        "only",
        "own",
        "same",
        "than",
        "just",
        "also",
        "what",
        "which",
        "who",
        "whom",
        "when",
        "where",
        "why",
        "how",
        "all",
        "any",
        "both",
        "each",
        "few",
        "other",
    ]
)
"""English stop words: no keyword, query term or grounding evidence is one of them."""
STOP_ZH = frozenset(
    [
        "的了是在和有就不也都而及与着或一个我们你们他们这个那个什么怎么因为所以但是如果然后可以这样那样",
        "的",
        "了",
        "是",
        "在",
        "和",
        "有",
        "就",
        "不",
        "也",
        "都",
    ]
)
"""Chinese stop characters and words: a bigram holding one is not a keyword."""


def normalise(text: str) -> str:
    """``text`` as the tokenizer reads it: NFKC, lowercase."""
    return unicodedata.normalize("NFKC", text).lower()


def scan_words(text: str) -> list[tuple[str, str]]:
    """``(cjk_run, word)`` pairs; words are trimmed of ``_`` and dropped when nothing is left."""
    out = []
    for cjk, word in _token_re().findall(normalise(text)):
        if word:
            word = word.strip("_")
            if not word:
                continue
        out.append((cjk, word))
    return out


def _bigrams(run: str) -> list[str]:
    """The index tokens of a run of CJK characters: its bigrams and its last character."""
    if len(run) == 1:
        return [run]
    grams = [run[i : i + 2] for i in range(len(run) - 1)]
    grams.append(run[-1])
    return grams


_ASCII_WORD = re.compile(r"[a-z0-9]+(?:_+[a-z0-9]+)*")
"""A word of lowercased ASCII text as :func:`scan_words` reads it: letters, digits and ``_``, without
the ``_`` at either end."""


def index_tokens(text: str) -> list[str]:
    """Tokens to index for ``text`` (see the module docstring)."""
    if text.isascii():  # NFKC leaves ASCII as it is, and it has no CJK: words only
        return _ASCII_WORD.findall(text.lower())
    out: list[str] = []
    for cjk, word in scan_words(text):
        if cjk:
            out.extend(_bigrams(cjk))
        elif word:
            out.append(word)
    return out


@dataclass(frozen=True, slots=True)
class QueryTerm:
    """One query term: a word, a CJK phrase (consecutive bigrams), or a single-CJK prefix."""

    tokens: tuple[str, ...]
    text: str
    prefix: bool = False


def query_terms(query: str) -> list[QueryTerm]:
    """Split a user query into terms; capped in length and count, never raises.

    English function words (``what``, ``did``, ``the``...) are left out of a query that has other
    words: asked as a question ("When did Melanie run a charity race?"), they matched every
    memory that says "did" and pushed the one about the race down (LoCoMo dialog turns, R@5:
    see bench/bench_recall.py).  A query of function words only is searched as written.  The
    month a query names (:mod:`memora.memory.periods`) stays a term even when its name is a
    function word: "visit in May" searches for ``may``."""
    terms = _query_terms(query)
    months = {_MONTH_NAMES[p.month - 1] for p in query_periods(query) if p.month}
    content = [t for t in terms if t.text not in STOP_EN or t.text in months] or terms
    out: list[QueryTerm] = []
    seen: set[str] = set()
    for term in content:
        term = _stemmed(term)
        if term.text not in seen:
            seen.add(term.text)
            out.append(term)
    return out


MIN_STEM = 4
"""A Latin query word whose English stem has at least this many letters matches, as a prefix,
every word that starts with the stem ("races" -> ``race*``: race, races, raced); a shorter
word matches itself only ("sql" is no hit for "sqlite")."""
MAX_STEMMED = 32
"""Longer than this, a word of ASCII letters is no English word (the longest in common
dictionaries have about 30 letters) and is not stemmed: it is compared as written."""


@functools.cache
def _stemmer() -> Any:
    import snowballstemmer  # type: ignore[import-untyped]  # on the first search, not at import

    return snowballstemmer.stemmer("english")


def _stemmed(term: QueryTerm) -> QueryTerm:
    """``term`` as the prefix of its English stem, where that is what stemming means for it:
    a word of ASCII letters whose stem is a prefix of it (``happy`` -> ``happi`` is not)."""
    word = term.text
    if term.prefix or len(term.tokens) != 1 or not (word.isascii() and word.isalpha()):
        return term
    root = stem(word)
    if len(root) < MIN_STEM or not word.startswith(root):
        return term
    return QueryTerm((root,), root, prefix=True)


def stem(word: str) -> str:
    """The English stem of ``word`` (ASCII letters); a word longer than :data:`MAX_STEMMED`
    is no English word (a blob a tool returned, say) and is its own stem."""
    # the Snowball stemmer is pure Python (~15 µs a word, 0.3 ms a thousand letters): a host's
    # queries and a round's words repeat, so short words are cached; long ones are not kept
    return word if len(word) > MAX_STEMMED else _stem_short(word)


@functools.lru_cache(maxsize=8192)
def _stem_short(word: str) -> str:
    return str(_stemmer().stemWord(word))


def _query_terms(query: str) -> list[QueryTerm]:
    terms: list[QueryTerm] = []
    seen: set[str] = set()
    for cjk, word in scan_words(query[:MAX_QUERY_CHARS]):
        text = cjk or word
        if not text or text in seen:
            continue
        seen.add(text)
        if cjk:
            if len(cjk) == 1:
                terms.append(QueryTerm((cjk,), cjk, prefix=True))
            else:
                terms.append(QueryTerm(tuple(cjk[i : i + 2] for i in range(len(cjk) - 1)), cjk))
        else:
            terms.append(QueryTerm((word,), word))
        if len(terms) >= MAX_QUERY_TERMS:
            break
    return terms


def extract_keywords(text: str, limit: int = 10) -> list[str]:
    """The most characteristic keywords of ``text``, Chinese and English.

    English: non-stopword words of two or more characters. Chinese: two-character words (bigrams
    whose characters are not function words), ranked by frequency then first appearance; a
    longer phrase that repeats is kept whole (记忆系统 ×2 → 记忆系统).
    """
    counts: Counter[str] = Counter()
    first: dict[str, int] = {}
    pos = 0
    norm = normalise(text)
    for cjk, word in scan_words(text):
        if word:
            if len(word) >= 2 and word not in STOP_EN and not word.isdigit():
                counts[word] += 1
                first.setdefault(word, pos)
                pos += 1
            continue
        for i in range(len(cjk) - 1):
            gram = cjk[i : i + 2]
            if gram[0] in STOP_ZH or gram[1] in STOP_ZH or gram in STOP_ZH:
                continue
            counts[gram] += 1
            first.setdefault(gram, pos)
            pos += 1
    # merge adjacent repeated bigrams into longer repeated phrases
    for cjk, _ in _token_re().findall(norm):
        for size in (4, 3):
            for i in range(len(cjk) - size + 1):
                phrase = cjk[i : i + size]
                if any(ch in STOP_ZH for ch in phrase):
                    continue
                n = norm.count(phrase)
                if n >= 2 and phrase not in counts:
                    counts[phrase] = n
                    first.setdefault(phrase, first.get(phrase[:2], pos))
    ranked = sorted(counts, key=lambda k: (-counts[k], -len(k), first.get(k, 0)))
    out: list[str] = []
    for k in ranked:
        if any(k in longer for longer in out):
            continue
        out.append(k)
        if len(out) >= limit:
            break
    return out
