"""A memory never says what the round did not: round summaries checked against their round.

A model's summary of a round is data to check, like any model output.  :func:`grounding`
measures how much of it the round said: the share of the summary's content terms — the words
the keyword index keeps (stop words out, English words by their stem, Chinese as bigrams),
numbers included — found in the round (the user's text, the answer, the tool notes).
:func:`grounded` is the rule a summary must pass to be stored: that share at least
:data:`MIN_GROUNDING`, and every number in it from the round.  The threshold was chosen on data
(``bench/bench_grounding.py``: the bundled model's summaries of long LoCoMo rounds against
their own round and against another round).

A summary that fails is replaced by :func:`extractive_summary`: the user's request and the
answer's most informative sentences, ranked by the same terms — so the stored memory holds the
words a later search for the round will use.  A summary that passes keeps the user's request
with it (:func:`with_request`).  :func:`short_name` cuts a memory's name at a word boundary,
CJK-aware; :func:`name_after_edit` renames a memory whose name a person's correction made
untrue.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence

from .keywords import MAX_STEMMED, STOP_EN, STOP_ZH, normalise, scan_words, stem
from .numbers import number_spans, numbers_in

__all__ = [
    "MIN_GROUNDING",
    "content_terms",
    "extractive_summary",
    "grounded",
    "grounding",
    "name_after_edit",
    "short_name",
    "spoken_as",
    "with_request",
]

MIN_GROUNDING = 0.7
"""The share of a summary's content terms its round must contain.  Chosen on the bundled
model's summaries of long LoCoMo dev rounds (bench/bench_grounding.py prints the
distributions): against another round no summary reached 0.3; against their own round the
median was 0.4, and every summary read below 0.7 made a claim its round did not (a sum of
money, a business the speaker does not run, a feeling nobody voiced).  Strict on purpose: a
summary wrongly refused costs an extractive summary, which keeps the round's own words; one
wrongly kept is a false memory."""

_FRAMING_VERBS = (
    "say says said saying ask asks asked asking tell tells told telling mention mentions "
    "mentioned discuss discusses discussed discussing talk talks talked talking explain "
    "explains explained explaining describe describes described reply replies replied answer "
    "answers answered respond responds responded note notes noted share shares shared"
)
_LABELS = frozenset(
    {"user", "assistant", "speaker", "tools", "used", "summary", "type", "round"}
    | {"conversation", "re", "ve", "ll", "s", "t", "d", "m"}
    | set(_FRAMING_VERBS.split())
)
"""Words that make no claim about the round: memora's own framing (labels, the summary
format), the verbs a summary reports speech with ("the user asked", "she mentioned"), and the
tails of English contractions (you're, I've)."""
_SENTENCE = re.compile(r"(?<=[.!?。！？])\s+|(?<=[。！？])|\n+")


def _word_term(word: str) -> str | None:
    # a round's words repeat, and every round summary checks two texts: one lookup a word
    # (not for a long one, which could be anything a tool returned: the cache stays small)
    return _short_term(word) if len(word) <= MAX_STEMMED else _term(word)


def _term(word: str) -> str | None:
    if word in STOP_EN or word in _LABELS or (len(word) < 2 and not word.isdigit()):
        return None
    if word.isascii() and word.isalpha():
        return stem(word)
    return word


_short_term = functools.lru_cache(maxsize=16384)(_term)


def content_terms(text: str) -> list[str]:
    """The content terms of ``text``, in order (repeats kept): English words by their stem,
    other words as written, Chinese as bigrams of non-function characters, numbers by their
    value however written ("five hundred", "500" and "五百元"'s 五百 are one term, ``500``;
    see :mod:`memora.memory.numbers`)."""
    text = normalise(text)
    spans = number_spans(text)
    if not spans:
        return _word_terms(text)
    out: list[str] = []
    at = 0
    for start, end, value in spans:
        out.extend(_word_terms(text[at:start]))
        out.append(value)
        at = end
    out.extend(_word_terms(text[at:]))
    return out


def _word_terms(text: str) -> list[str]:
    out: list[str] = []
    for cjk, word in scan_words(text):
        if word:
            term = _word_term(word)
            if term is not None:
                out.append(term)
            continue
        if len(cjk) == 1:
            if cjk not in STOP_ZH:
                out.append(cjk)
            continue
        for i in range(len(cjk) - 1):
            gram = cjk[i : i + 2]
            if gram[0] in STOP_ZH or gram[1] in STOP_ZH:
                continue
            out.append(gram)
    return out


def _numbers(text: str) -> set[str]:
    return numbers_in(normalise(text))


def grounding(summary: str, round_text: str) -> float:
    """The share of ``summary``'s distinct content terms that ``round_text`` contains (1.0 for
    a summary with none)."""
    said = set(content_terms(summary))
    if not said:
        return 1.0
    source = set(content_terms(round_text))
    return len(said & source) / len(said)


def grounded(
    summary: str,
    round_text: str,
    *,
    user: str | None = None,
    user_label: str = "User",
    threshold: float = MIN_GROUNDING,
    score: float | None = None,
) -> bool:
    """Whether ``summary`` may be stored for a round that said ``round_text``: most of its
    content terms are the round's, it names no number the round did not, and a line it puts
    in the user's mouth (``User: ...``) is mostly what the ``user`` said — a question the
    answer talked about is not one the user asked.  ``score``: ``grounding(summary,
    round_text)`` when the caller has it already."""
    if not summary.strip():
        return False
    if not _numbers(summary) <= _numbers(round_text):
        return False
    if user is not None:
        for line in summary.splitlines():
            quoted = spoken_as(line, user_label)
            if quoted is not None and grounding(quoted, user) < threshold:
                return False
    return (grounding(summary, round_text) if score is None else score) >= threshold


_DRESS = re.compile(r"^[\s>*_`#~\-•·]+|[*_`~]+")
"""Markdown and list dressing around a label: ``**User:**``, ``> User:``, ``- user :``."""


def spoken_as(line: str, label: str) -> str | None:
    """What ``line`` puts in ``label``'s mouth — the text after ``label:`` as a person reads
    it (any case, markdown emphasis, quotes and bullets around it, ``:`` or ``：``) — or
    None when the line does not speak as ``label``."""
    bare = _DRESS.sub("", line).lstrip()
    head, colon, rest = bare.partition(":")
    if not colon:
        head, colon, rest = bare.partition("：")
    if colon and head.strip().lower() == label.lower():
        return rest.strip()
    return None


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s and s.strip()]


def extractive_summary(
    user: str,
    answer: str,
    tool_notes: Sequence[str] = (),
    *,
    max_chars: int = 600,
    labels: tuple[str, str] = ("User", "Assistant"),
    focus: str | None = None,
) -> str:
    """A summary built from the round itself: the user's request (cut at a word boundary),
    the tools used, and the answer's sentences that carry the most of the round's content
    terms — each term weighed by how often the round uses it, double when the user's request
    or the ``focus`` (a role pack's ``summaryFocus``: what its summaries should keep) has it —
    in their original order, within ``max_chars``."""
    request = short_name(" ".join(user.split()), 240)
    request_terms = set(content_terms(user)) | set(content_terms(focus or ""))
    counts = Counter(content_terms(answer)) + Counter(content_terms(user))
    sentences = _sentences(answer)
    scored: list[tuple[float, int, str]] = []
    for index, sentence in enumerate(sentences):
        terms = set(content_terms(sentence))
        if not terms:
            continue
        weight = sum(math.log1p(counts[t]) * (2.0 if t in request_terms else 1.0) for t in terms)
        scored.append((weight / math.sqrt(len(terms)), index, sentence))
    budget = max(0, max_chars - len(request) - 40)
    chosen: list[tuple[int, str]] = []
    for _, index, sentence in sorted(scored, key=lambda s: (-s[0], s[1])):
        if len(sentence) > budget:
            continue
        chosen.append((index, sentence))
        budget -= len(sentence) + 1
    lines = [f"{labels[0]}: {request}"]
    if tool_notes:
        lines.append("Tools used: " + "; ".join(short_name(n, 120) for n in tool_notes[:5]))
    if chosen:
        lines.append(f"{labels[1]}: " + " ".join(s for _, s in sorted(chosen)))
    return "\n".join(lines)


def with_request(summary: str, user: str, *, label: str = "User") -> str:
    """A model summary that passed, with the user's request ahead of it when the summary does
    not already hold its words: a later search for what was asked finds the memory."""
    request = short_name(" ".join(user.split()), 240)
    wanted = set(content_terms(request))
    if wanted and wanted <= set(content_terms(summary)):
        return summary
    return f"{label}: {request}\n{summary}"


def name_after_edit(name: str, old: str, new: str, *, label: str = "User", limit: int = 60) -> str:
    """The name a memory keeps when a person rewrites its text from ``old`` to ``new``:
    ``name``, unless the rewrite took out a content term or a number of it that ``old`` said
    (the person corrected that word away) — then one taken from ``new``: its first line,
    without a leading ``label:`` (memora's transcript label), cut by :func:`short_name`.  A
    name is shown with the memory and searched with it: a corrected word must not keep naming
    it, nor finding it.  A name that was never in the text (a topic: ``database``) stays."""
    if not name.strip():
        return name
    kept = set(content_terms(new))
    dropped = (set(content_terms(name)) & set(content_terms(old))) - kept
    numbers = (_numbers(name) & _numbers(old)) - _numbers(new)
    if not dropped and not numbers:
        return name
    first = next((line.strip() for line in new.splitlines() if line.strip()), "")
    head, colon, rest = first.partition(":")
    if colon and head.strip().lower() == label.lower() and rest.strip():
        first = rest.strip()
    return short_name(first, limit)


def short_name(text: str, limit: int = 60) -> str:
    """``text`` cut to at most ``limit`` characters at a word boundary: never inside a Latin
    word or number (between two CJK characters is a boundary); ``…`` marks a cut."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    nxt = text[limit - 1]
    if _inside_word(cut[-1], nxt):
        space = max(cut.rfind(" "), _last_cjk(cut))
        if space > 0:
            cut = cut[: space + 1] if not cut[space].isspace() else cut[:space]
    return cut.rstrip(" ,;:-") + "…"


def _is_cjk(ch: str) -> bool:
    return bool(scan_words(ch)) and bool(scan_words(ch)[0][0])


def _inside_word(left: str, right: str) -> bool:
    return left.isalnum() and right.isalnum() and not (_is_cjk(left) or _is_cjk(right))


def _last_cjk(text: str) -> int:
    for i in range(len(text) - 1, -1, -1):
        if _is_cjk(text[i]):
            return i
    return -1


def terms_found(query_terms: Iterable[str], text: str) -> float:
    """The share of ``query_terms`` (content terms) that ``text`` has: a memory found again by
    its own round's key words (bench_grounding's second figure)."""
    wanted = set(query_terms)
    if not wanted:
        return 1.0
    return len(wanted & set(content_terms(text))) / len(wanted)
