"""What a tool receives: the project, the guards, and the Agent's managers."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic

from typing_extensions import TypeVar

from ..security.paths import PathGuard
from ..security.permissions import Permission
from .task_table import TaskTable

if TYPE_CHECKING:
    from ..memory.manager import MemoryManager
    from ..role_pack.manager import RolePackManager
    from .process import BackgroundTasks
    from .works import WorksRegistry

__all__ = ["DepsT", "ToolContext"]

DepsT = TypeVar("DepsT", default=Any)
"""The type of the host's dependencies (``agent.run(..., deps=...)``) a tool reads as
``ctx.deps``: annotate ``ctx: ToolContext[MyDeps]``."""


def _background_tasks() -> BackgroundTasks:
    # tools/process.py (asyncio, subprocess) loads with the first context, not with the tools
    from .process import BackgroundTasks

    return BackgroundTasks()


@dataclass
class ToolContext(Generic[DepsT]):
    """What a tool's handler may use: the project, its path guard and permission, memory, role
    packs, services, a way to report progress, and the host's ``deps`` for this turn."""

    project: Path
    guard: PathGuard
    permission: Permission = "owner"
    readonly: bool = False
    memory: MemoryManager | None = None
    role_packs: RolePackManager | None = None
    works: WorksRegistry | None = None
    background: BackgroundTasks = field(default_factory=_background_tasks)
    task_table: TaskTable = field(default_factory=TaskTable)
    services: Mapping[str, Any] = field(default_factory=dict)
    """Service objects by kind: ``web_search``, ``web_fetch``, ``code_executor``, ``project_search``."""
    progress: Callable[[str], None] | None = None
    session_id: str | None = None
    round_id: str | None = None
    branch_round_ids: Callable[[], list[str]] | None = None
    """The round ids of the current session branch (for ``memory_search(scope="branch")``)."""
    node_path: str = "node"
    env: dict[str, str] | None = None
    hide: tuple[Path, ...] = ()
    """Folders every process a tool starts finds empty (memora's data, the user's config
    folder): set for one of several people's Agents (``isolate_tools``)."""
    hide_refused: str | None = None
    """Why no process may start for this Agent's tools, when one of memora's folders that must
    be hidden cannot be (it holds the project): :meth:`hiding` raises it."""
    counters: dict[str, int] = field(default_factory=dict)
    """Per-turn counters (``web_search`` calls...); the loop resets them each turn."""
    web_search_limit: int = 5
    command_timeout_max: float = 600.0
    consistency_check: bool = False
    """Refuse to overwrite or edit a file that changed on disk since the model last read it
    (or that it never read)."""
    file_stamps: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Resolved path -> (mtime_ns, size) when the model last read or wrote it."""
    deps: DepsT = None  # type: ignore[assignment]
    """What the host passed as ``deps`` for this turn (``agent.run(..., deps=...)``, typed by
    ``ToolContext[MyDeps]``), or ``None``: never put into a prompt or a session log."""

    def derive(self, **changes: Any) -> ToolContext[DepsT]:
        """A copy with ``changes`` (shallow: the managers and the per-turn dicts are shared).
        The loop gives every tool call its own context this way; cheaper than
        ``dataclasses.replace``, which re-runs ``__init__``."""
        ctx: ToolContext[DepsT] = object.__new__(ToolContext)
        ctx.__dict__.update(self.__dict__)
        for key, value in changes.items():
            if key not in _FIELDS:
                raise TypeError(f"ToolContext has no field {key!r}")
            setattr(ctx, key, value)
        return ctx

    def hiding(self) -> tuple[Path, ...]:
        """The folders a process this tool starts must find empty (:attr:`hide`);
        ``NOT_AVAILABLE`` when they cannot be hidden (:attr:`hide_refused`): never run
        unhidden."""
        if self.hide_refused is not None:
            from ..errors import ToolError, ToolErrorCode

            raise ToolError(ToolErrorCode.NOT_AVAILABLE, self.hide_refused)
        return self.hide

    def service(self, kind: str, capability: str) -> Any:
        """The service of ``kind``, created on first use; a ``NOT_AVAILABLE`` tool error when no
        plugin provides it or it failed to start (the message names the plugin and the cause)."""
        from ..errors import MemoraError, ToolError, ToolErrorCode

        try:
            svc = self.services.get(kind)
        except MemoraError as exc:
            raise ToolError(
                ToolErrorCode.NOT_AVAILABLE, f"{capability} is not available: {exc.message}"
            ) from exc
        except Exception as exc:
            raise ToolError(
                ToolErrorCode.NOT_AVAILABLE,
                f"{capability} is not available: the {kind} service failed to start: "
                f"{type(exc).__name__}: {exc}",
            ) from exc
        if svc is None:
            raise ToolError(
                ToolErrorCode.NOT_AVAILABLE,
                f"{capability} is not available: no plugin provides {kind}",
            )
        return svc

    @staticmethod
    def for_project(project: str | Path, **kwargs: Any) -> ToolContext:
        project = Path(project)
        return ToolContext(
            project=project, guard=PathGuard(project, kwargs.pop("allowed_paths", None)), **kwargs
        )


_FIELDS = frozenset(f.name for f in fields(ToolContext))
