"""Which tools the model sees, and what their schemas cost: one object per Agent, a view per turn.

:class:`ToolExposure` decides a tool's visibility from its flags, the active role pack's
strategy and capability map and the ``resident_tools`` option, keeps the tools of tool sources
(MCP servers) up to date, and caches the schemas sent per tool set and role pack.  A turn runs
against :meth:`ToolExposure.for_turn` — the exposure with the turn's chat provider fixed — as
pydantic-ai's ``ToolManager.for_run_step`` does.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..capabilities import PRIVILEGED, CapabilityMap, compute_capability_map
from ..errors import InvalidConfigError
from ..llm.types import ToolSpec
from ..services import LazyServices
from ..tools.base import Tool, ToolRegistry
from .context_window import estimate_spec_tokens

if TYPE_CHECKING:
    from ..llm.provider import Provider
    from ..role_pack.manager import RolePackManager
    from ..tools.task_table import TaskTable
    from .project import ProjectResources

__all__ = ["ToolExposure", "TurnTools"]

logger = logging.getLogger("memora.agent")

BUILTIN_TOOLS = "memora.default_plugins.tools"


def hidden_resident(chosen: list[str] | None) -> frozenset[str]:
    """The resident tools the ``resident_tools`` option leaves out (checked against the real
    names, so a typo is an error rather than a silently missing tool)."""
    if chosen is None:
        return frozenset()
    from ..tools import resident_tools

    names = {t.name for t in resident_tools()}
    unknown = sorted(set(chosen) - names)
    if unknown:
        raise InvalidConfigError(
            f"resident_tools: {', '.join(map(repr, unknown))} is not a resident tool; "
            f"resident tools: {', '.join(sorted(names))}",
            context={"unknown": unknown},
        )
    return frozenset(names - set(chosen))


def _available_services(services: Mapping[str, Any]) -> list[str]:
    """The service kinds present, without creating any lazy service."""
    if isinstance(services, LazyServices):
        return sorted(services.available())
    return [k for k, v in services.items() if v is not None]


@dataclass(frozen=True, slots=True)
class _Exposed:
    key: tuple[Any, ...]
    specs: list[ToolSpec]
    cost: int
    withheld: str | None
    names: frozenset[str]


class ToolExposure:
    """The tools one Agent exposes to its model (see the module docstring)."""

    def __init__(
        self,
        runtime: ProjectResources,
        tools: ToolRegistry,
        role_packs: RolePackManager,
        task_table: TaskTable,
        *,
        window: Callable[[Provider], int],
    ) -> None:
        self._runtime = runtime
        self.tools = tools
        self._role_packs = role_packs
        self._table = task_table
        self._window = window
        self.hidden = hidden_resident(runtime.options.resident_tools)
        self.plan_asked = False
        """``multiStepReasoning: manual``: the running request asked for a plan."""
        self._cap_map: CapabilityMap | None = None
        self._cache: _Exposed | None = None
        self._source_tools: dict[str, dict[str, Tool]] = {}

    def invalidate(self) -> None:
        """The role pack, the provider or the plugins changed: compute again on next use."""
        self._cap_map = None
        self._cache = None

    # -- visibility ------------------------------------------------------------------------------

    def visible(self, tool: Tool) -> bool:
        """Whether the model may see ``tool`` under the active role pack (from the tool's
        flags, the capability map and the ``resident_tools`` option)."""
        strategy = self._role_packs.strategy
        if strategy.tool_mode == "block":
            return False
        if tool.capability is not None:
            if tool.capability in self.capability_map().enabled:
                return True
            return (
                tool.capability not in PRIVILEGED
                and tool.capability in self._role_packs.active.capabilities
            )
        if tool.name in self.hidden and self.tools.owner(tool.name) == BUILTIN_TOOLS:
            return False
        if tool.pauses:
            return strategy.asks_user
        if tool.plans and strategy.multi_step_reasoning == "manual":
            return self.plan_asked or bool(self._table.items())
        return True

    def capability_map(self) -> CapabilityMap:
        pack = self._role_packs.active
        if self._cap_map is None or self._cap_map.role_pack != pack.name:
            runtime = self._runtime
            services = {k: [k] for k in _available_services(runtime.services)}
            sourced = {cap: runtime.source_failures.get(cap) for cap in runtime.tool_sources()}
            self._cap_map = compute_capability_map(
                pack.name, list(pack.capabilities), services, sourced=sourced
            )
        return self._cap_map

    def exposed(self, provider: Provider) -> builtins.list[Tool]:
        """The tools the model sees, in registration order (none when they are withheld)."""
        if self._exposed(provider, False).withheld is not None:
            return []
        return [
            t
            for name in self.tools.names()
            if (t := self.tools.get(name)) is not None and self.visible(t)
        ]

    def spec_tokens(self, provider: Provider, asks_exhausted: bool = False) -> int:
        """What the schemas sent to ``provider`` cost in the context window."""
        return self._exposed(provider, asks_exhausted).cost

    # -- schemas ---------------------------------------------------------------------------------

    def _exposed(self, provider: Provider, asks_exhausted: bool) -> _Exposed:
        """The tool schemas sent to the model (computed once per tool set and role pack)."""
        strategy = self._role_packs.strategy
        key = (
            self._role_packs.active.name,
            strategy,
            self.tools.version,
            asks_exhausted,
            self.plan_asked,
            id(provider),
        )
        cached = self._cache
        if cached is not None and cached.key == key:
            return cached
        specs = [
            t.spec()
            for name in self.tools.names()
            if (t := self.tools.get(name)) is not None
            and self.visible(t)
            and not (t.pauses and asks_exhausted)
        ]
        cost = estimate_spec_tokens(specs)
        window = self._window(provider)
        withheld = None
        if specs and getattr(provider, "supports_tools", True) is False:
            withheld = f"the model of {provider.name} does not use tools: none are sent to it"
            logger.info("%s", withheld)
            specs, cost = [], 0
        elif specs and cost > window // 2:
            # a small model's window: the schemas alone would crowd out the conversation
            # (and a hard window makes the request fail); the turn runs without tools
            withheld = (
                f"the {len(specs)} tool schemas take about {cost} tokens, more than half of "
                f"the {window}-token context window: no tools are sent to this model; "
                "choose the ones it needs with the resident_tools option"
            )
            logger.warning("%s", withheld)
            specs, cost = [], 0
        self._cache = _Exposed(key, specs, cost, withheld, frozenset(s.name for s in specs))
        return self._cache

    def withheld(self, provider: Provider) -> str | None:
        return self._exposed(provider, False).withheld

    def for_turn(self, provider: Provider) -> TurnTools:
        """The exposure as a turn sees it: the turn's chat provider fixed."""
        return TurnTools(self, provider)

    # -- tool sources ----------------------------------------------------------------------------

    async def load_capability_tools(self) -> None:
        """Bring the tools of the capabilities the active role pack declares and a tool source
        serves (``mcp:<server>``...) up to date: started on first use, listed again before
        every turn.  A source that fails costs only its capability: its tools disappear, the
        reason is in ``capability_map().unavailable``."""
        runtime = self._runtime
        sources = runtime.tool_sources()
        failures = runtime.source_failures
        changed = False
        for cap in [c for c in self._role_packs.active.capabilities if c in sources]:
            name, source = sources[cap]
            try:
                tools = {t.name: t for t in await source.tools(cap)}
                failure = None
            except Exception as exc:
                tools, failure = {}, f"{name} could not provide it: {exc}"
            if failure != failures.get(cap):
                changed = True
                if failure is None:
                    failures.pop(cap, None)
                else:
                    logger.warning("%s", failure)
                    failures[cap] = failure
            self._swap_source_tools(cap, name, tools)
        if changed:
            self._cap_map = None

    def _swap_source_tools(self, cap: str, source: str, tools: dict[str, Tool]) -> None:
        registry = self.tools
        old = self._source_tools.get(cap, {})
        for tool_name, tool in old.items():
            if tools.get(tool_name) is not tool and registry.get(tool_name) is tool:
                registry.unregister(tool_name)
        for tool_name, tool in tools.items():
            if registry.get(tool_name) is tool:
                continue
            if tool_name in registry and old.get(tool_name) is None:
                logger.warning("tool %r of %s is shadowed by an existing tool", tool_name, source)
                continue
            registry.register(tool, owner=source, replace=True)
        self._source_tools[cap] = tools


@dataclass(frozen=True, slots=True)
class TurnTools:
    """The tool exposure of one turn (its chat provider fixed): what ``TurnDeps`` carries."""

    exposure: ToolExposure
    provider: Provider

    def visible(self, tool: Tool) -> bool:
        return self.exposure.visible(tool)

    def specs(self, asks_exhausted: bool = False) -> list[ToolSpec]:
        """The tool schemas to send (``asks_exhausted``: the question limit is reached)."""
        return self.exposure._exposed(self.provider, asks_exhausted).specs

    def spec_tokens(self, asks_exhausted: bool = False) -> int:
        """What those schemas cost in the context window."""
        return self.exposure.spec_tokens(self.provider, asks_exhausted)

    def names(self) -> frozenset[str]:
        """The names of the tools sent (the system prompt names only these)."""
        return self.exposure._exposed(self.provider, False).names

    @property
    def withheld(self) -> str | None:
        return self.exposure._exposed(self.provider, False).withheld
