"""The system prompts a turn sends: the active role pack's (or a team member's), the compact one
for a small local model, and the plan section.  One :class:`Prompts` per Agent; a turn reads
:meth:`Prompts.for_turn` (its provider and tool set fixed)."""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InvalidInputError
from .options import TeamConfig
from .record import PLAN_LOG_SHOWN, PlanItemOutcome

if TYPE_CHECKING:
    from ..llm.provider import Provider
    from ..messages import Messages
    from ..role_pack.manager import RolePackManager
    from ..tools.task_table import TaskTable
    from .exposure import TurnTools

__all__ = ["Prompts", "TurnPrompts"]

logger = logging.getLogger("memora.agent")

_NO_TOOLS: frozenset[str] = frozenset()
"""The tool set of a request that carries none (a meeting's)."""


@functools.lru_cache(maxsize=8)
def _words(csv: str) -> tuple[str, ...]:
    """The words of a comma-separated message (parsed once per text, not per turn)."""
    return tuple(w.strip() for w in csv.split(",") if w.strip())


class Prompts:
    """What an Agent's prompts are made of (see the module docstring)."""

    def __init__(
        self,
        role_packs: RolePackManager,
        messages: Messages,
        task_table: TaskTable,
        plan_log: collections.deque[PlanItemOutcome],
        *,
        project: Path,
        teams: list[TeamConfig] | None,
    ) -> None:
        self._role_packs = role_packs
        self.messages = messages
        self._table = task_table
        self._plan_log = plan_log
        self._project = project
        self.teams = list(teams or [])
        self._warned_members: set[tuple[str, str]] = set()
        self._readme: str | None = None
        self.pinned: str | None = None
        """The user's pinned memories, as a block after the prompt (set at each turn's start:
        :meth:`memora.memory.manager.MemoryManager.pinned_block`)."""

    def team(self, name: str | None = None) -> TeamConfig | None:
        """The team named ``name`` (its name or leader), else the one the active pack leads."""
        if name is not None:
            return next((t for t in self.teams if name in (t.label, t.leader)), None)
        active = self._role_packs.active.name
        return next((t for t in self.teams if t.leader == active), None)

    def meeting_team(
        self, name: str | None, members: list[str] | None
    ) -> tuple[TeamConfig, list[str]]:
        """The team of a meeting and its speakers, checked (``INVALID_INPUT`` naming the legal
        teams or members; ``NOT_FOUND`` for a member pack that does not exist)."""
        chosen = self.team(name)
        if chosen is None:
            known = ", ".join(t.label for t in self.teams) or "none"
            raise InvalidInputError(
                f"no team {name!r}; teams: {known}"
                if name
                else f"the active role pack leads no team; teams: {known} (pass team=...)"
            )
        speakers = list(members) if members is not None else list(chosen.members)
        outside = [m for m in speakers if m not in chosen.members]
        if outside or not speakers:
            raise InvalidInputError(
                f"meeting members must be members of team {chosen.label!r} "
                f"({', '.join(chosen.members)}); not: {', '.join(outside) or '(none given)'}"
            )
        for pack in [*speakers, chosen.leader]:
            self._role_packs.get(pack)  # NOT_FOUND now, not mid-meeting
        return chosen, speakers

    def asks_for_plan(self, text: str) -> bool:
        """``multiStepReasoning: manual``: does this request ask for a plan?"""
        lowered = text.lower()
        return any(w in lowered for w in _words(self.messages.plan_request_words))

    def readme_head(self, limit: int = 600) -> str:
        """The start of the project's README (read once), for a small model's prompt; empty
        when there is none."""
        if self._readme is None:
            found = ""
            for name in ("README.md", "README.rst", "README.txt", "README"):
                with contextlib.suppress(OSError, ValueError):
                    fd = os.open(self._project / name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
                    try:
                        if stat.S_ISREG(os.fstat(fd).st_mode):
                            raw = os.read(fd, limit * 4)
                            found = raw.decode("utf-8", "ignore").strip()[:limit]
                    finally:
                        os.close(fd)
                if found:
                    break
            self._readme = found
        return self._readme

    def system(self, provider: Provider, tools: TurnTools) -> str:
        """The system prompt of a request to ``provider`` carrying ``tools`` (and the pinned
        memories after it, when there are)."""
        prompt = self._system(provider, tools)
        return prompt if self.pinned is None else f"{prompt}\n\n{self.pinned}"

    def _system(self, provider: Provider, tools: TurnTools) -> str:
        packs = self._role_packs
        if getattr(provider, "compact_prompt", False):
            # a small local model (the embedded one) parrots a rule list back and invents
            # what it cannot read: one short, honest paragraph instead
            pack = packs.active
            prompt = self.messages.render(
                "compact_system_prompt", assistant=pack.display_name or pack.name
            )
            readme = self.readme_head()
            if readme:  # it cannot read files: what it may say about the project, given
                prompt += "\n\n" + self.messages.render("compact_readme", readme=readme)
            return prompt
        # the prompt names only the tools the request carries (none for a small model whose
        # window they do not fit, only the chosen ones with resident_tools)
        names = tools.names()
        item = self._table.active()
        if item is not None and item.member:
            team = self.team()
            if team is not None and item.member in (team.leader, *team.members):
                if item.member != team.leader:
                    return packs.system_prompt_for(item.member, tools=names)
            elif (item.id, item.member) not in self._warned_members:
                self._warned_members.add((item.id, item.member))
                logger.warning(
                    "plan item %r names member %r, who is not in the active role pack's team; "
                    "the active pack assembles it",
                    item.id,
                    item.member,
                )
        return packs.system_prompt(tools=names)

    def for_member(self, name: str) -> str:
        """A meeting speaker's prompt: a meeting request carries no tools, so the prompt names
        none (no skills list, no plan or question advice)."""
        packs = self._role_packs
        if name == packs.active.name:
            return packs.system_prompt(tools=_NO_TOOLS)
        return packs.system_prompt_for(name, tools=_NO_TOOLS)

    def plan_section(self) -> str | None:
        """The plan as the model sees it (a system message after the prompt), when there is one."""
        table = self._table
        if not table.items():
            return None
        section = (
            "Current plan (task table; keep it up to date with task_table_update):\n"
            + table.render()
        )
        steps = [o for o in list(self._plan_log)[-PLAN_LOG_SHOWN:] if o.summary]
        if steps:
            # the seed's plan-item log: what was done, marked as history, never as an order
            section += "\n\n" + self.messages.render(
                "plan_log_intro",
                steps="\n".join(
                    f"- {o.plan_item_id or '-'} {'ok' if o.ok else 'failed'}: {o.summary}"
                    for o in steps
                ),
            )
        return section

    def for_turn(self, provider: Provider, tools: TurnTools) -> TurnPrompts:
        return TurnPrompts(self, provider, tools)


@dataclass(frozen=True, slots=True)
class TurnPrompts:
    """The prompts of one turn (its provider and tools fixed): what ``TurnDeps`` carries."""

    prompts: Prompts
    provider: Provider
    tools: TurnTools

    def system(self) -> str:
        return self.prompts.system(self.provider, self.tools)

    def for_member(self, name: str) -> str:
        return self.prompts.for_member(name)

    def plan_section(self) -> str | None:
        return self.prompts.plan_section()
