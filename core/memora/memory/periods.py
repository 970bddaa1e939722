"""Dates a query names: memories from that time rank first.

"Which outdoor spot did Joanna visit in May?" names a month; the memory that answers was written
in May, or in the days after (a conversation tells what happened lately).  A keyword search
cannot see that: the word "May" is a function word, and a month's name is rarely in the round
that tells of it.  So a search whose query names a date — a day, a month, a year, in English or
Chinese — ranks the memories whose time (``created_at``) falls in that period, or up to
:data:`LOOKBACK_DAYS` after it, ahead of the others, each group in its own order
(:func:`periods_first`).  Nothing is dropped: a query whose period holds no hit ranks as before.

Recognised (a number is ASCII digits; a month is its English name or its three-letter
abbreviation, any case):

* ``May 23, 2023`` · ``23 May 2023`` · ``1st of February, 2023`` · ``2023-05-23`` ·
  ``2023年5月23日``: that day;
* ``May 23`` · ``23rd May`` · ``5月23日``: that day in any year;
* ``May 2023`` · ``2023-05`` · ``2023年5月``: that month;
* ``in June`` · ``June`` written with a capital inside the query · ``5月``: that month in any
  year.  "May" and "March" are also verbs: alone, they name the month only after a word such
  as "in", "since" or "early" ("Which spot did Joanna visit in May?"; not "May I ask…");
* ``in 2022`` · ``2022年``: that year.

Relative dates ("last week", "yesterday") are not resolved: the time a question refers to is
not always the time it is asked.  A memory's time is read in the process's local time zone.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from .types import ScoredMemory

__all__ = ["LOOKBACK_DAYS", "MONTH_NAMES", "Period", "in_periods", "periods_first", "query_periods"]

LOOKBACK_DAYS = 7
"""A memory written up to this many days after a period still belongs to it.  Chosen on the
session summaries of LoCoMo's dev half among 7, 14 and 30 days (7 was best or tied at every
cut-off; bench/bench_recall.py prints the recall with and without the dates)."""

MONTH_NAMES = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_AMBIGUOUS = ("may", "march")  # also verbs: as a month, only after a word such as "in"


def _names(months: Sequence[str]) -> str:
    return "|".join(f"{m[:3]}(?:{m[3:]})?" if len(m) > 3 else m for m in months)


_ANY_CASE = rf"(?i:{_names(MONTH_NAMES)})\.?(?![^\W\d_])"
_LEAD_MONTH = (
    rf"(?:(?i:{_names([m for m in MONTH_NAMES if m not in _AMBIGUOUS])})|May|Mar(?:ch)?)"
    r"\.?(?![^\W\d_])"
)
_DAY = r"(?P<d>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<y>(?:19|20)\d\d)(?!\d)"
_LEAD = r"(?i:in|on|of|since|during|until|till|by|before|after|from|early|late|mid|last|next)"


@functools.cache
def _patterns() -> tuple[re.Pattern[str], ...]:
    # compiled on the first query that may hold a date, not at import (start-up time)
    return tuple(
        re.compile(p)
        for p in (
            # 2023-05-23, 2023-05
            rf"(?<!\d){_YEAR}-(?P<m>[01]?\d)(?:-(?P<d>[0-3]?\d))?(?!\d)",
            # 2023年5月23日, 2023年5月, 5月23日, 5月; 2023年
            r"(?:(?P<y>(?:19|20)\d\d)\s*年\s*)?(?<!\d)(?P<m>[01]?\d)\s*月(?:\s*(?P<d>[0-3]?\d)\s*[日号])?",
            r"(?P<y>(?:19|20)\d\d)\s*年",
            # May 23, 2023 · May 23 · May 2023
            rf"\b(?P<mn>{_ANY_CASE})\s*{_DAY}(?![\d:])(?:,?\s*{_YEAR})?",
            rf"\b(?P<mn>{_ANY_CASE}),?\s*{_YEAR}",
            # 23 May 2023 · 1st of February, 2023 · 23rd May
            rf"(?<![\d:]){_DAY}\s+(?:of\s+)?(?P<mn>{_ANY_CASE})(?:,?\s*{_YEAR})?",
            # in May · early March · since june
            rf"\b{_LEAD}\s+(?P<mn>{_LEAD_MONTH})",
            # in 2022 · since 1999
            rf"\b{_LEAD}\s+{_YEAR}",
            # a month's name written with a capital inside the query: "went camping in June"
            r"(?<=\S)\s+(?P<mn>"
            + "|".join(m.capitalize() for m in MONTH_NAMES if m not in _AMBIGUOUS)
            + r")\b",
        )
    )


@dataclass(frozen=True, slots=True)
class Period:
    """A day, a month or a year; a field left ``None`` matches any value."""

    year: int | None = None
    month: int | None = None
    day: int | None = None

    def holds(self, day: dt.date) -> bool:
        return (
            (self.year is None or day.year == self.year)
            and (self.month is None or day.month == self.month)
            and (self.day is None or day.day == self.day)
        )


def _month(name: str | None) -> int | None:
    if not name:
        return None
    key = name.rstrip(".").lower()[:3]
    return next((i + 1 for i, m in enumerate(MONTH_NAMES) if m.startswith(key)), None)


_DIGIT = re.compile(r"\d")
_ABBREVIATIONS = tuple(m[:3] for m in MONTH_NAMES)


def query_periods(query: str) -> tuple[Period, ...]:
    """The periods ``query`` names (see the module docstring), each once, in no set order."""
    if not isinstance(query, str):
        return ()
    text = query[:1000]
    lowered = text.lower()
    if not _DIGIT.search(text) and not any(m in lowered for m in _ABBREVIATIONS):
        return ()  # no digit and no month: most queries, in a microsecond or two
    return _read_periods(text)


@functools.lru_cache(maxsize=1024)
def _read_periods(text: str) -> tuple[Period, ...]:
    # cached: a search reads its query's periods twice (its terms, its ranking)
    matches = [m for pattern in _patterns() for m in pattern.finditer(text)]
    # the longest reading of a date wins: "1 February, 2023" is a day, not "February, 2023"
    matches.sort(key=lambda m: (m.start() - m.end(), m.start()))
    found: list[Period] = []
    taken: list[tuple[int, int]] = []
    for match in matches:
        start, end = match.span()
        if any(start < b and a < end for a, b in taken):
            continue
        groups = match.groupdict()
        month = _month(groups["mn"]) if "mn" in groups else _int(groups.get("m"))
        period = Period(_int(groups.get("y")), month, _int(groups.get("d")))
        if not _valid(period):
            continue
        taken.append((start, end))
        if period not in found:
            found.append(period)
    return tuple(found)


def _int(value: str | None) -> int | None:
    return int(value) if value else None


def _valid(period: Period) -> bool:
    if period.month is not None and not 1 <= period.month <= 12:
        return False
    if period.day is not None and (period.month is None or not 1 <= period.day <= 31):
        return False
    return period != Period()


def in_periods(created_at: float, periods: Sequence[Period]) -> bool:
    """Whether a memory written at ``created_at`` (epoch seconds) belongs to one of
    ``periods``: written in it or up to :data:`LOOKBACK_DAYS` days after."""
    written = _day_of(created_at)
    return written is not None and _day_in(written, periods)


def _day_of(created_at: float) -> dt.date | None:
    try:
        return dt.datetime.fromtimestamp(created_at).date()
    except (OverflowError, OSError, ValueError):
        return None


def _day_in(written: dt.date, periods: Sequence[Period]) -> bool:
    days = [written - dt.timedelta(days=k) for k in range(LOOKBACK_DAYS + 1)]
    return any(p.holds(d) for p in periods for d in days)


def periods_first(
    hits: Sequence[ScoredMemory], periods: Sequence[Period], limit: int
) -> list[ScoredMemory]:
    """``hits`` with those that belong to ``periods`` first, each group in the given order; the
    first ``limit``.  Scores are left as they are."""
    if not periods:
        return list(hits[:limit])
    by_day: dict[dt.date | None, bool] = {None: False}  # a session's memories share their day
    inside: list[ScoredMemory] = []
    outside: list[ScoredMemory] = []
    for hit in hits:
        day = _day_of(hit.record.created_at)
        if day not in by_day:
            by_day[day] = day is not None and _day_in(day, periods)
        (inside if by_day[day] else outside).append(hit)
    return [*inside, *outside][:limit]
