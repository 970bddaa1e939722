"""Runtime resolver: declared strategy values -> the effective strategy of a turn.

Precedence per key: the host's ``strategy_override`` > the role pack's declaration > the default.
An invalid declared value falls back as documented in :mod:`.strategy_keys` (for instance an
out-of-range ``temperature`` is not sent at all); an invalid override is ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .strategy_keys import NOT_SENT, STRATEGY_KEYS, KeySpec
from .validator import Issue

__all__ = ["EffectiveStrategy", "resolve_strategy"]


@dataclass(frozen=True, slots=True)
class EffectiveStrategy:
    """The strategy in force for a turn: the role pack's declared keys over the defaults, with
    host overrides applied."""

    summary_focus: str | None = None
    tool_mode: str = "allow"
    temperature: float | None = 0.7
    """``None``: do not send a temperature."""
    output_limit: int | None = None
    """``None``: no per-request output cap from the role pack."""
    tool_step_limit: int = 20
    provider_routing: str = "auto"
    multi_step_reasoning: str = "auto"
    tool_readonly: bool = False
    summary: bool = True
    self_review: bool = False
    user_followup: str = "silent"
    ask_on: tuple[str, ...] = ("ambiguity", "decision", "missing_info")
    ask_limit: int = 10
    error_handling: str = "retry"
    context_limit: int = 0
    step_budget: int = 50
    web_search_limit: int = 5

    def effective_window(self, provider_window: int) -> int:
        """min(provider window, contextLimit) — contextLimit only ever shrinks the window."""
        if self.context_limit > 0:
            return min(provider_window, self.context_limit)
        return provider_window

    def max_iterations(self, kernel_max: int) -> int:
        """LLM iterations per turn: stepBudget, or the kernel's maximum when 0."""
        return self.step_budget if self.step_budget > 0 else kernel_max

    def max_tokens(self, agent_max_tokens: int | None) -> int | None:
        """Per-request output budget: min of the Agent's ``max_tokens`` and ``outputLimit``."""
        values = [v for v in (agent_max_tokens, self.output_limit) if v is not None and v > 0]
        return min(values) if values else None

    @property
    def asks_user(self) -> bool:
        return self.user_followup == "ask"


_FIELD = {
    "summaryFocus": "summary_focus",
    "toolMode": "tool_mode",
    "temperature": "temperature",
    "outputLimit": "output_limit",
    "toolStepLimit": "tool_step_limit",
    "providerRouting": "provider_routing",
    "multiStepReasoning": "multi_step_reasoning",
    "toolReadonly": "tool_readonly",
    "summary": "summary",
    "selfReview": "self_review",
    "userFollowup": "user_followup",
    "askOn": "ask_on",
    "askLimit": "ask_limit",
    "errorHandling": "error_handling",
    "contextLimit": "context_limit",
    "stepBudget": "step_budget",
    "webSearchLimit": "web_search_limit",
}


def _lookup(source: Mapping[str, Any] | None, spec: KeySpec) -> tuple[bool, Any]:
    if not isinstance(source, Mapping):
        return False, None
    stage = source.get(spec.stage)
    if isinstance(stage, Mapping) and spec.name in stage:
        return True, stage[spec.name]
    return False, None


def _runtime(spec: KeySpec, value: Any) -> Any:
    """Map a key's value (or fallback) onto the EffectiveStrategy field."""
    if value is NOT_SENT:
        return None
    if spec.name == "outputLimit":
        return int(value) if value else None
    if spec.name == "toolReadonly":
        return value == "readonly"
    if spec.name == "summary":
        return value == "on"
    if spec.name == "selfReview":
        return int(value) > 0
    if spec.name == "askOn":
        return tuple(value)
    return value


def resolve_strategy(
    declared: Mapping[str, Any] | None,
    override: Mapping[str, Any] | None = None,
) -> tuple[EffectiveStrategy, list[Issue]]:
    """Resolve every key; returns the strategy and the issues met (invalid values)."""
    values: dict[str, Any] = {}
    issues: list[Issue] = []
    for spec in STRATEGY_KEYS:
        found, value = _lookup(override, spec)
        if found:
            problem = spec.check(value)
            if problem is None:
                values[_FIELD[spec.name]] = _runtime(spec, spec.coerce(value))
                continue
            issues.append(Issue(f"strategy_override.{spec.stage}.{spec.name}", problem))
        found, value = _lookup(declared, spec)
        if not found:
            chosen = spec.default
        else:
            problem = spec.check(value)
            if problem is None:
                chosen = spec.coerce(value)
            else:
                issues.append(Issue(spec.path, problem))
                chosen = spec.fallback
        values[_FIELD[spec.name]] = _runtime(spec, chosen)
    return EffectiveStrategy(**values), issues
