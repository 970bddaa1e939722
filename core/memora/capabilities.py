"""The capability map: role-pack capabilities x installed plugins -> the exposed tool set.

Resident tools (files, project search, memory recall, the task table, skills, commands, works)
are always exposed and need no declaration; ``file:*``, ``memory:recall`` and ``task:plan`` are
accepted as declarations for documentation's sake.  *Privileged* tools are exposed only when the
active role pack declares the capability **and** an installed plugin provides the service:

==================  ======================  =================
capability          service kind            tool
==================  ======================  =================
``web:search``      ``web_search``          ``web_search``
``web:fetch``       ``web_fetch``           ``web_fetch``
``code:execute``    ``code_executor``       ``run_code``
==================  ======================  =================

Unknown capabilities are skipped with a warning naming the pack.  The map is a pure function of
(declared capabilities, installed services), recomputed whenever the role pack is switched.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "CAPABILITY_PATTERN",
    "PRIVILEGED",
    "RESIDENT_CAPABILITIES",
    "CapabilityMap",
    "Privileged",
    "compute_capability_map",
]

logger = logging.getLogger("memora.capabilities")

CAPABILITY_PATTERN = re.compile(r"^[a-z][a-z0-9_-]*:(\*|[a-z][a-z0-9_-]*)$")
"""``domain:action``, lowercase; ``domain:*`` declares every action of a domain."""


@dataclass(frozen=True, slots=True)
class Privileged:
    """A privileged tool: shown to the model only when the role pack declares ``capability`` and
    a service of ``service_kind`` is configured."""

    capability: str
    service_kind: str
    tool: str
    turn_limit: str | None = None
    """The strategy attribute capping this tool's calls per turn (``web_search_limit``); a call
    over the cap is refused as ``tool_result(blocked=True)`` before it starts."""


PRIVILEGED: dict[str, Privileged] = {
    p.capability: p
    for p in (
        Privileged("web:search", "web_search", "web_search", turn_limit="web_search_limit"),
        Privileged("web:fetch", "web_fetch", "web_fetch"),
        Privileged("code:execute", "code_executor", "run_code"),
    )
}
"""The one table of privileged capabilities: which service each needs, which tool it enables
(the tool carries the capability as its ``capability`` flag) and any per-turn cap."""

RESIDENT_CAPABILITIES: frozenset[str] = frozenset(
    {
        "file:*",
        "file:read",
        "file:write",
        "memory:recall",
        "task:plan",
        "skill:read",
        "command:run",
    }
)


@dataclass(frozen=True, slots=True)
class CapabilityMap:
    """The result for one role pack."""

    role_pack: str | None
    enabled: Mapping[str, Privileged] = field(default_factory=dict)
    """Privileged capability -> what it enables, for the capabilities that are on."""
    unavailable: Mapping[str, str] = field(default_factory=dict)
    """Declared privileged capability -> why it is off (no plugin provides it)."""
    warnings: tuple[str, ...] = ()

    @property
    def privileged_tools(self) -> frozenset[str]:
        return frozenset(p.tool for p in self.enabled.values())


def compute_capability_map(
    role_pack: str | None,
    declared: Sequence[str],
    available_services: Mapping[str, Sequence[str]],
    *,
    log: bool = True,
    sourced: Mapping[str, str | None] | None = None,
) -> CapabilityMap:
    """Compute which privileged tools the pack may see.

    ``available_services`` maps a service kind (``web_search``...) to the names of installed
    implementations.  Warnings are returned, and logged under ``memora.capabilities`` unless
    ``log`` is false.
    """
    pack = role_pack or "(none)"
    enabled: dict[str, Privileged] = {}
    unavailable: dict[str, str] = {}
    warnings: list[str] = []
    for cap in declared:
        if cap in RESIDENT_CAPABILITIES:
            continue
        if sourced is not None and cap in sourced:  # served by a tool source (mcp:github...)
            reason = sourced[cap]
            if reason is not None:
                unavailable[cap] = f"role pack {pack!r} declares {cap!r}: {reason}"
                warnings.append(unavailable[cap])
            continue
        spec = PRIVILEGED.get(cap)
        if spec is None:
            known = sorted(PRIVILEGED) + sorted(RESIDENT_CAPABILITIES)
            warnings.append(
                f"role pack {pack!r} declares unknown capability {cap!r}; skipped "
                f"(known: {', '.join(known)})"
            )
            continue
        if available_services.get(spec.service_kind):
            enabled[cap] = spec
        else:
            reason = (
                f"role pack {pack!r} declares {cap!r} but no installed plugin provides "
                f"{spec.service_kind!r}; tool {spec.tool!r} stays hidden"
            )
            unavailable[cap] = reason
            warnings.append(reason)
    if log:
        for w in warnings:
            logger.warning(w)
    return CapabilityMap(pack if role_pack else None, enabled, unavailable, tuple(warnings))
