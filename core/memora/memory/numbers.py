"""Numbers as values, however a text writes them: digits, English number words, Chinese numerals.

For the grounding check (:mod:`memora.memory.grounding`) "5 million" is not "5", "five hundred"
is 500 and "五百元" is "500元": :func:`number_spans` finds each number a text writes and gives
its value as one canonical string (``"5000000"``, ``"2.5"``), so a summary's numbers can be held
against its round's whatever the writing.

What counts as a number is chosen to make no claim a text did not make:

- digits, with thousands separators (``1,200``) and decimals (``2.5``), and a ``k`` for
  thousands (``5k``); digits joined by ``:``, ``/`` or ``-`` (a date, a time, a range) are kept
  as written, one token, as before;
- English number words (``zero`` … ``nineteen``, the tens, ``hundred``, ``thousand``,
  ``million``, ``billion``, ``trillion``, ``dozen``), hyphenated or not, with ``and`` inside
  (``a hundred and five``), after digits (``2.5 million``).  ``one``, ``a`` and ``an`` alone are
  no number — "the best one", "a car" — only before a scale word (``a hundred``);
- Chinese numerals (``零〇一二两三四五六七八九十百千万亿``, mixed with digits: ``5万``), only
  where they count something: followed by a measure word or unit (``三十五个``, ``五百元``,
  ``两千元``), or mixed with digits.  Numerals inside words — 一起, 一直, 万一, 千万不要, 三明治
  — are words, not numbers.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

__all__ = ["number_spans", "numbers_in"]

_SMALL = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
    "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18,
    "nineteen": 19, "dozen": 12,
}  # fmt: skip
_TENS = {
    "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70,
    "eighty": 80, "ninety": 90,
}  # fmt: skip
_SCALES = {"thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12}

_DIGITS = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_EN_TOKEN = re.compile(
    rf"(?P<literal>\d+(?:[:/-]\d+)+)|(?P<num>(?:{_DIGITS})(?:k(?![a-z]))?)|(?P<word>[a-z]+)"
    r"|(?P<dash>-)"
)

_ZH_DIGITS = {
    "零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7,
    "八": 8, "九": 9,
}  # fmt: skip
_ZH_UNITS = {"十": 10, "百": 100, "千": 1000}
_ZH_BIG = {"万": 10**4, "亿": 10**8}
_ZH_RUN = re.compile(r"(?:\d+(?:\.\d+)?|[零〇一二两三四五六七八九十百千万亿])+")
_MEASURES = (
    "个只条张件本位名人口家台辆架艘匹头棵朵封篇页章节层楼座间套份双对"
    "元块角毛分钱美镑岁年月日号天周星期小时钟秒次回遍趟倍成折度米里斤克吨升公千万亿%"
)
"""What follows a Chinese numeral that counts something (measure words and units)."""


def _canon(value: Decimal) -> str:
    text = format(value.normalize(), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _digits(token: str) -> Decimal | None:
    scale = 1000 if token.endswith("k") else 1
    try:
        return Decimal(token.rstrip("k").replace(",", "")) * scale
    except InvalidOperation:
        return None


def _english(text: str) -> list[tuple[int, int, str]]:
    """Number spans of (normalised, lower-case) ``text`` in English writing."""
    spans: list[tuple[int, int, str]] = []
    run: list[tuple[int, int, str, Decimal | None]] = []  # (start, end, kind, value)

    def close() -> None:
        value = _evaluate(run)
        if value is not None:
            spans.append((run[0][0], run[-1][1], _canon(value)))
        run.clear()

    for m in _EN_TOKEN.finditer(text):
        if m.group("literal"):
            close()
            spans.append((m.start(), m.end(), m.group("literal")))
            continue
        token = m.group("num") or m.group("word") or "-"
        kind, value = _kind(token)
        if kind is None or not _continues(run, kind, value):
            close()
            if kind is None or kind in ("and", "-"):
                continue
        run.append((m.start(), m.end(), kind, value))
    close()
    return spans


def _kind(token: str) -> tuple[str | None, Decimal | None]:
    if token[0].isdigit():
        return "digits", _digits(token)
    if token in _SMALL:
        return ("one" if token == "one" else "small"), Decimal(_SMALL[token])
    if token in _TENS:
        return "tens", Decimal(_TENS[token])
    if token == "hundred":
        return "hundred", Decimal(100)
    if token in _SCALES:
        return "scale", Decimal(_SCALES[token])
    if token in ("a", "an"):
        return "article", Decimal(1)
    if token in ("and", "-"):
        return token, None
    return None, None


def _continues(
    run: list[tuple[int, int, str, Decimal | None]], kind: str, value: Decimal | None
) -> bool:
    """Whether a token of ``kind`` goes on the number ``run`` holds (else a new one starts)."""
    if not run:
        return kind not in ("and", "-")
    last = run[-1][2]
    if last in ("and", "-"):
        return kind in ("small", "one", "tens") and len(run) > 1
    if kind in ("and", "-"):
        return last in ("hundred", "scale", "tens") or (kind == "-" and last == "tens")
    if kind in ("hundred", "scale"):
        return last in ("digits", "small", "one", "tens", "article") or (
            kind == "scale" and last == "hundred"
        )
    if kind in ("small", "one"):  # "twenty-five", "a hundred and five"; never "twenty twelve"
        return last in ("hundred", "scale") or (last == "tens" and value is not None and value < 10)
    if kind == "tens":
        return last in ("hundred", "scale")
    return False  # digits after anything: a number of their own


def _evaluate(run: list[tuple[int, int, str, Decimal | None]]) -> Decimal | None:
    while run and run[-1][2] in ("and", "-"):
        run.pop()
    if not run:
        return None
    kinds = [k for _, _, k, _ in run]
    if kinds in (["one"], ["article"]) or kinds[-1] == "article":
        return None  # "one", "a", "an" alone: an article or a pronoun, no number
    total, current = Decimal(0), Decimal(0)
    for _, _, kind, value in run:
        if value is None:
            continue
        if kind == "hundred":
            current = (current or Decimal(1)) * 100
        elif kind == "scale":
            total += (current or Decimal(1)) * value
            current = Decimal(0)
        else:
            current += value
    return total + current


def _chinese(text: str) -> list[tuple[int, int, str]]:
    spans: list[tuple[int, int, str]] = []
    for m in _ZH_RUN.finditer(text):
        run = m.group()
        if run.replace(".", "").isdigit() or not any(
            c in _ZH_DIGITS or c in _ZH_UNITS or c in _ZH_BIG for c in run
        ):
            continue  # plain digits: the English pass has them
        after = text[m.end() : m.end() + 1]
        mixed = any(c.isdigit() for c in run)
        if not mixed and (not after or after not in _MEASURES):
            continue  # a numeral inside a word (一起, 万一), not a count
        value = _zh_value(run)
        if value is not None:
            spans.append((m.start(), m.end(), _canon(value)))
    return spans


def _zh_value(run: str) -> Decimal | None:
    """The value of a Chinese numeral (``三千五百``, ``两万五``, ``5万``, ``3.5亿``)."""
    total, section, digit = Decimal(0), Decimal(0), None
    last_unit = 1
    i = 0
    while i < len(run):
        ch = run[i]
        if ch.isdigit():
            j = i
            while j < len(run) and (run[j].isdigit() or run[j] == "."):
                j += 1
            try:
                digit = Decimal(run[i:j])
            except InvalidOperation:
                return None
            i = j
            continue
        if ch in _ZH_DIGITS:
            digit = Decimal(_ZH_DIGITS[ch])
        elif ch in _ZH_UNITS:
            section += (digit if digit is not None else Decimal(1)) * _ZH_UNITS[ch]
            last_unit, digit = _ZH_UNITS[ch], None
        elif ch in _ZH_BIG:
            section += digit if digit is not None else Decimal(0)
            total = (total + (section or Decimal(1))) * _ZH_BIG[ch]
            section, digit, last_unit = Decimal(0), None, _ZH_BIG[ch]
        i += 1
    if digit is not None:
        # 三千五 is 3500 and 两万五 25000: a last digit after a unit counts a tenth of it
        section += digit * (last_unit // 10 if last_unit >= 100 else 1)
    return total + section


def number_spans(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, value)`` of every number ``text`` writes (``text`` normalised and
    lower-cased as the keyword index reads it), in order; ``value`` is canonical: ``"500"``
    for ``500``, ``five hundred`` and ``五百元``'s ``五百``."""
    found = _english(text) + _chinese(text)
    found.sort()
    kept: list[tuple[int, int, str]] = []
    for span in found:  # a span inside another (a digit in 5万) goes with the larger one
        if kept and span[0] < kept[-1][1]:
            if span[1] - span[0] > kept[-1][1] - kept[-1][0]:
                kept[-1] = span
            continue
        kept.append(span)
    return kept


def numbers_in(text: str) -> set[str]:
    """The values of the numbers ``text`` writes (see :func:`number_spans`)."""
    return {value for _, _, value in number_spans(text)}
