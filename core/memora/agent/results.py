"""What the Agent hands to hosts: its checkpoint, a direct tool call's result, and the small
managers reached as attributes (``agent.polish``, ``agent.security``, ``agent.sessions``)."""

from __future__ import annotations

import builtins
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import NotFoundError
from ..llm.provider import complete_text
from ..llm.types import LLMRequest, Message
from ..memory.sessions import RoundRecord, SessionInfo
from ..security.paths import PathGuard
from ..tools.task_table import PlanItem
from .record import PauseMeta, PlanItemOutcome

if TYPE_CHECKING:
    from .agent import Agent

__all__ = ["Checkpoint", "PolishManager", "SecurityManager", "SessionManager", "ToolCallResult"]


@dataclasses.dataclass(frozen=True, slots=True)
class Checkpoint:
    """``agent.checkpoint()``: the session's state for a host to show or keep."""

    session_id: str
    status: str
    error: str | None
    error_at: float | None
    recovered: bool
    main_goal: str | None
    current_goal: str | None
    goal_change_seq: int
    plan: builtins.list[PlanItem]
    plan_item_log: builtins.list[PlanItemOutcome]
    """The last 12 steps: round, iteration, active plan item, tools called, all ok."""
    pause_meta: PauseMeta | None
    completed_tool_calls: builtins.list[dict[str, Any]]
    last_heartbeat: float
    paused_at: float | None

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["plan_item_log"] = [o.to_dict() for o in self.plan_item_log]
        data["pause_meta"] = self.pause_meta.to_dict() if self.pause_meta else None
        return data


@dataclasses.dataclass(frozen=True, slots=True)
class ToolCallResult:
    """What :meth:`Agent.call_tool` returns."""

    name: str
    call_id: str
    ok: bool
    blocked: bool
    error_code: str | None
    summary: str
    content: str
    """What the model would have received."""
    started: bool = False
    """The tool ran (or started): false for a call refused by a gate."""
    progress: builtins.list[str] = dataclasses.field(default_factory=list)
    needs_approval: str | None = None
    """A check asked for approval (its reason); the call did not run."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class PolishManager:
    """``agent.polish``: rewrite a text with the background provider under given instructions."""

    def __init__(self, agent: Agent) -> None:
        self._agent = agent

    async def rewrite(self, text: str, instructions: str, *, max_tokens: int | None = None) -> str:
        provider = self._agent.router.for_task("background")
        request = LLMRequest(
            [
                Message.system(
                    "Rewrite the user's text following these instructions. Reply with the rewritten "
                    f"text only.\nInstructions: {instructions}"
                ),
                Message.user(text),
            ],
            temperature=0.3,
            max_tokens=max_tokens,
        )
        return (await complete_text(provider, request)).strip()


class SecurityManager:
    """``agent.security``: the path guard, permission level and project lock of the Agent."""

    def __init__(self, guard: PathGuard, permission: str, lock: Any) -> None:
        self.guard = guard
        self.permission = permission
        self.lock = lock

    def check_path(self, path: str) -> Path:
        """Resolve ``path`` as tools do; raises ``ToolError(PATH_NOT_ALLOWED)`` outside."""
        return self.guard.resolve(path)


class SessionManager:
    """``agent.sessions``: list, create, switch, fork and archive sessions."""

    def __init__(self, agent: Agent) -> None:
        self._agent = agent

    @property
    def store(self) -> Any:
        return self._agent.runtime.session_store

    @property
    def current(self) -> str:
        return self._agent.session_id

    @property
    def scope(self) -> str | None:
        """Whose sessions these are: the Agent's ``memory_scope``."""
        return self._agent.memory.scope

    async def list(self, *, include_archived: bool = False) -> builtins.list[SessionInfo]:
        """This Agent's scope's sessions, most recent first."""
        scope = self.scope
        return [
            i for i in await self.store.list(include_archived=include_archived) if i.scope == scope
        ]

    async def get(self, session_id: str) -> SessionInfo:
        """The session ``session_id`` (``NOT_FOUND`` when it is another scope's)."""
        info: SessionInfo = await self.store.get(session_id)
        if info.scope != self.scope:
            raise NotFoundError(f"no session {session_id!r}", context={"session_id": session_id})
        return info

    async def rounds(self, session_id: str | None = None) -> builtins.list[RoundRecord]:
        if session_id is not None and session_id != self.current:
            await self.get(session_id)
        return list(await self.store.rounds(session_id or self.current))

    async def archive(self, session_id: str, archived: bool = True) -> SessionInfo:
        await self.get(session_id)
        info: SessionInfo = await self.store.archive(session_id, archived)
        return info
