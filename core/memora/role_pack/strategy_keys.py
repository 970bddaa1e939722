"""Every strategy key of a role pack: type, legal range, default and runtime fallback.

This module is the single source of truth.  The validator, the runtime resolver and the docs
table (``docs/role_packs.md``, checked by a test) all read :data:`STRATEGY_KEYS`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final, Literal

__all__ = [
    "ASK_ON_VALUES",
    "NOT_SENT",
    "STAGES",
    "STRATEGY_KEYS",
    "KeySpec",
    "keys_by_stage",
    "markdown_table",
]


class _NotSent:
    """Runtime fallback meaning "do not send this parameter; the provider decides"."""

    _instance: _NotSent | None = None

    def __new__(cls) -> _NotSent:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NOT_SENT"

    def __bool__(self) -> bool:
        return False


NOT_SENT: Final = _NotSent()

STAGES: tuple[str, ...] = ("prepare", "act", "reflect", "global")
ASK_ON_VALUES: tuple[str, ...] = ("ambiguity", "decision", "missing_info", "confirm")

Kind = Literal["enum", "int", "number", "string", "list"]


@dataclass(frozen=True, slots=True)
class KeySpec:
    """One strategy key a role pack may declare: its stage, type, default and legal values."""

    stage: str
    name: str
    kind: Kind
    default: Any
    """Value when the key is not declared."""
    fallback: Any
    """Value the runtime uses when the declared value is invalid."""
    description: str
    choices: tuple[str, ...] = ()
    ranges: tuple[tuple[float, float], ...] = ()
    """Legal closed intervals for numbers (``0 or [a, b]`` is two intervals)."""
    length: tuple[int, int] | None = None
    """Legal length (characters for strings, items for lists)."""

    @property
    def path(self) -> str:
        return f"strategy.{self.stage}.{self.name}"

    def legal_text(self) -> str:
        if self.kind == "enum":
            return " / ".join(self.choices)
        if self.kind in ("int", "number"):
            parts = []
            for lo, hi in self.ranges:
                parts.append(_num(lo) if lo == hi else f"[{_num(lo)}, {_num(hi)}]")
            return " or ".join(parts)
        if self.kind == "string" and self.length:
            return f"{self.length[0]}–{self.length[1]} characters"
        if self.kind == "list" and self.length:
            return f"{self.length[0]}–{self.length[1]} distinct items of " + " / ".join(
                self.choices
            )
        return ""

    def check(self, value: Any) -> str | None:
        """``None`` when ``value`` is legal, else an error message naming the legal range."""
        checker = {
            "enum": self._check_enum,
            "int": self._check_number,
            "number": self._check_number,
            "string": self._check_string,
        }.get(self.kind, self._check_list)  # else a list of enum values
        return checker(value, _show(value))

    def _check_enum(self, value: Any, shown: str) -> str | None:
        if not isinstance(value, str) or value not in self.choices:
            return f"{self.path} = {shown} is not one of {self.legal_text()}"
        return None

    def _check_number(self, value: Any, shown: str) -> str | None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{self.path} = {shown} must be a number in the legal range {self.legal_text()}"
        if isinstance(value, float) and not math.isfinite(value):
            return f"{self.path} = {shown} is outside the legal range {self.legal_text()}"
        if self.kind == "int" and not (isinstance(value, int) or float(value).is_integer()):
            return (
                f"{self.path} = {shown} must be an integer in the legal range {self.legal_text()}"
            )
        if not any(lo <= value <= hi for lo, hi in self.ranges):
            return f"{self.path} = {shown} is outside the legal range {self.legal_text()}"
        return None

    def _check_string(self, value: Any, shown: str) -> str | None:
        if not isinstance(value, str):
            return f"{self.path} = {shown} must be a string of {self.legal_text()}"
        assert self.length is not None
        if not self.length[0] <= len(value.strip()) <= self.length[1]:
            return f"{self.path} has {len(value.strip())} characters; legal: {self.legal_text()}"
        return None

    def _check_list(self, value: Any, shown: str) -> str | None:
        assert self.length is not None
        if not isinstance(value, list):
            return f"{self.path} = {shown} must be a list of {self.legal_text()}"
        bad = [v for v in value if not isinstance(v, str) or v not in self.choices]
        if bad:
            return (
                f"{self.path} contains {', '.join(_show(b) for b in bad)}; "
                f"legal items: {' / '.join(self.choices)}"
            )
        if len(set(value)) != len(value):
            return f"{self.path} repeats an item; legal: {self.legal_text()}"
        if not self.length[0] <= len(value) <= self.length[1]:
            return f"{self.path} has {len(value)} items; legal: {self.legal_text()}"
        return None

    def coerce(self, value: Any) -> Any:
        """The value the runtime uses for a *legal* declared value."""
        if self.kind == "int":
            return int(value)
        if self.kind == "number":
            return float(value)
        if self.kind == "string":
            return str(value).strip()
        if self.kind == "list":
            return tuple(value)
        return value


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _show(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    if value is None:
        text = "null"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    return text if len(text) <= 60 else text[:57] + "..."


STRATEGY_KEYS: tuple[KeySpec, ...] = (
    KeySpec(
        "prepare",
        "summaryFocus",
        "string",
        None,
        None,
        "Lens of the round summary: what is worth remembering from each round.",
        length=(1, 500),
    ),
    KeySpec(
        "act",
        "toolMode",
        "enum",
        "allow",
        "allow",
        "allow: tools are exposed; block: the model sees no tools at all.",
        choices=("allow", "block"),
    ),
    KeySpec(
        "act",
        "temperature",
        "number",
        0.7,
        NOT_SENT,
        "Sampling temperature sent with every chat request.",
        ranges=((0, 2),),
    ),
    KeySpec(
        "act",
        "outputLimit",
        "int",
        0,
        NOT_SENT,
        "Per-request output token cap; 0 = no limit. Effective = min(this, Agent max_tokens).",
        ranges=((0, 0), (1, 65536)),
    ),
    KeySpec(
        "act",
        "toolStepLimit",
        "int",
        20,
        20,
        "Tool steps per turn; 0 = unlimited (stepBudget still ends the turn).",
        ranges=((0, 100),),
    ),
    KeySpec(
        "act",
        "providerRouting",
        "enum",
        "auto",
        "auto",
        "auto: route summaries/background work to the background provider; fixed: use the main one.",
        choices=("auto", "fixed"),
    ),
    KeySpec(
        "act",
        "multiStepReasoning",
        "enum",
        "auto",
        "auto",
        "auto: the model keeps a task table when useful; manual: only when the user asks for a plan.",
        choices=("auto", "manual"),
    ),
    KeySpec(
        "act",
        "toolReadonly",
        "enum",
        "full",
        "full",
        "full: all tools; readonly: every writing tool is refused by the kernel.",
        choices=("full", "readonly"),
    ),
    KeySpec(
        "reflect",
        "summary",
        "enum",
        "on",
        "on",
        "on: write a round summary after each round; off: write none.",
        choices=("on", "off"),
    ),
    KeySpec(
        "reflect",
        "selfReview",
        "int",
        0,
        0,
        "0 = no self-review; any value > 0 = one final review after a turn that used tools.",
        ranges=((0, 10),),
    ),
    KeySpec(
        "reflect",
        "userFollowup",
        "enum",
        "silent",
        "silent",
        "ask: expose the ask_user tool (situations in askOn); silent: never ask.",
        choices=("ask", "silent"),
    ),
    KeySpec(
        "global",
        "askOn",
        "list",
        ("ambiguity", "decision", "missing_info"),
        ("ambiguity", "decision", "missing_info"),
        "Situations in which the model may ask the user (needs userFollowup = ask).",
        choices=ASK_ON_VALUES,
        length=(1, 4),
    ),
    KeySpec(
        "global",
        "askLimit",
        "int",
        10,
        10,
        "Questions per turn through ask_user.",
        ranges=((1, 10),),
    ),
    KeySpec(
        "global",
        "errorHandling",
        "enum",
        "retry",
        "retry",
        "retry: back off and retry transient LLM errors; degrade: end with the answer so far; stop: end with the error.",
        choices=("retry", "degrade", "stop"),
    ),
    KeySpec(
        "global",
        "contextLimit",
        "int",
        0,
        0,
        "Context window cap; 0 = follow the provider. Effective window = min(provider, this).",
        ranges=((0, 0), (120_000, 2_000_000)),
    ),
    KeySpec(
        "global",
        "stepBudget",
        "int",
        50,
        50,
        "LLM iterations per turn; 0 = the kernel's max_iterations.",
        ranges=((0, 0), (10, 500)),
    ),
    KeySpec(
        "global",
        "webSearchLimit",
        "int",
        5,
        5,
        "web_search calls per turn; further calls are blocked.",
        ranges=((1, 50),),
    ),
)


def keys_by_stage() -> dict[str, dict[str, KeySpec]]:
    table: dict[str, dict[str, KeySpec]] = {stage: {} for stage in STAGES}
    for spec in STRATEGY_KEYS:
        table[spec.stage][spec.name] = spec
    return table


def _default_text(spec: KeySpec) -> str:
    d = spec.default
    if d is None:
        return "none"
    if isinstance(d, tuple):
        return "[" + ", ".join(d) + "]"
    return _num(d) if isinstance(d, (int, float)) else str(d)


def _fallback_text(spec: KeySpec) -> str:
    f = spec.fallback
    if f is NOT_SENT:
        return "not sent"
    if f is None:
        return "none"
    if isinstance(f, tuple):
        return "[" + ", ".join(f) + "]"
    return _num(f) if isinstance(f, (int, float)) else str(f)


def markdown_table() -> str:
    """The strategy-key table of the docs, generated from :data:`STRATEGY_KEYS`."""
    lines = [
        "| stage | key | type | legal | default | when invalid | meaning |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in STRATEGY_KEYS:
        lines.append(
            f"| {s.stage} | `{s.name}` | {s.kind} | {s.legal_text()} | {_default_text(s)} "
            f"| {_fallback_text(s)} | {s.description} |"
        )
    return "\n".join(lines)
