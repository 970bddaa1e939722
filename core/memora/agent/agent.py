"""The Agent facade: one project, one storage, one session store, one project lock.

Managers are reached as attributes after ``await agent.init()``: ``role_pack``, ``tools``,
``skills``, ``memory``, ``works``, ``polish``, ``sessions``, ``security``.
"""

from __future__ import annotations

import asyncio
import builtins
import collections
import contextlib
import dataclasses
import functools
import json
import logging
import os
import stat
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..capabilities import PRIVILEGED, CapabilityMap, compute_capability_map
from ..checks import ApprovalMode, CheckContext, CheckDecision, ToolCallInfo
from ..chunks import (
    AbortedChunk,
    AgentChunk,
    DoneChunk,
    ErrorChunk,
    ToolProgressChunk,
    ToolResultChunk,
)
from ..errors import ErrorCode, MemoraError
from ..events import ArchiveFailed, EventEmitter, GoalDriftDetected, SessionForked
from ..hookspecs import hookimpl
from ..llm.provider import Provider, complete_text
from ..llm.retry import RetryPolicy
from ..llm.router import ProviderRouter
from ..llm.types import LLMRequest, Message, ToolSpec, clean_text
from ..memory.manager import MemoryManager
from ..memory.sessions import RoundRecord, SessionInfo
from ..plugins import Plugins, create_plugin_manager
from ..role_pack.manager import RolePackManager
from ..security.paths import PathGuard
from ..security.state import ensure_state_dir, warn_if_shared
from ..services import LazyServices
from ..tools.base import Tool, ToolRegistry
from ..tools.context import ToolContext
from ..tools.process import BackgroundTasks, child_environment
from ..tools.task_table import PlanItem, TaskTable
from ..tools.works import WorksRegistry
from ..tracing import combine_tracers
from .context_window import ContextWindow, estimate_spec_tokens
from .loop import TurnDeps, TurnEngine, new_round_id
from .options import AgentOptions, TeamConfig
from .record import (
    PLAN_LOG_SHOWN,
    PLAN_LOG_SIZE,
    ApprovalDecision,
    ApprovalPause,
    HostPause,
    PauseMeta,
    PendingCall,
    PlanItemOutcome,
    QuestionPause,
    TurnRecord,
)
from .serialize import message_from_dict, message_to_dict
from .state import DuplicateCallInterceptor, Outbox, SessionState, StatusTransition

__all__ = [
    "Agent",
    "Checkpoint",
    "PolishManager",
    "SecurityManager",
    "SessionManager",
    "ToolCallResult",
]

logger = logging.getLogger("memora.agent")

PAUSE_STATE_VERSION = 2


class _HostCheck:
    """Wraps the ``pre_execution_check`` Agent option as a plugin."""

    def __init__(self, fn: Callable[[ToolCallInfo, CheckContext], CheckDecision | None]) -> None:
        self._fn = fn

    @hookimpl
    def pre_execution_check(
        self, call: ToolCallInfo, context: CheckContext
    ) -> CheckDecision | None:
        return self._fn(call, context)


async def _maybe_await(result: Any) -> Any:
    """Locks and stores may offer plain or async methods."""
    if asyncio.iscoroutine(result):
        return await result
    return result


_BUILTIN_TOOLS = "memora.default_plugins.tools"
_NO_TOOLS: frozenset[str] = frozenset()


@functools.lru_cache(maxsize=8)
def _words(csv: str) -> tuple[str, ...]:
    """The words of a comma-separated message (parsed once per text, not per turn)."""
    return tuple(w.strip() for w in csv.split(",") if w.strip())


"""The tool set of a request that carries none (a meeting's)."""


def _hidden_resident(chosen: builtins.list[str] | None) -> frozenset[str]:
    """The resident tools the ``resident_tools`` option leaves out (checked against the real
    names, so a typo is an error rather than a silently missing tool)."""
    if chosen is None:
        return frozenset()
    from ..tools import resident_tools

    names = {t.name for t in resident_tools()}
    unknown = sorted(set(chosen) - names)
    if unknown:
        raise MemoraError(
            ErrorCode.INVALID_CONFIG,
            f"resident_tools: {', '.join(map(repr, unknown))} is not a resident tool; "
            f"resident tools: {', '.join(sorted(names))}",
            context={"unknown": unknown},
        )
    return frozenset(names - set(chosen))


def _available_services(services: Mapping[str, Any]) -> builtins.list[str]:
    """The service kinds present, without creating any lazy service."""
    if isinstance(services, LazyServices):
        return sorted(services.available())
    return [k for k, v in services.items() if v is not None]


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
        return self._agent._session_store

    @property
    def current(self) -> str:
        return self._agent.session_id

    async def list(self, *, include_archived: bool = False) -> builtins.list[SessionInfo]:
        return list(await self.store.list(include_archived=include_archived))

    async def rounds(self, session_id: str | None = None) -> builtins.list[RoundRecord]:
        return list(await self.store.rounds(session_id or self.current))

    async def archive(self, session_id: str, archived: bool = True) -> SessionInfo:
        info: SessionInfo = await self.store.archive(session_id, archived)
        return info


class Agent:
    """An LLM agent for one project.

    ``async with Agent(project_path=..., data_dir=...) as agent:`` then
    ``async for chunk in agent.chat("...")``.
    """

    def __init__(self, options: AgentOptions | None = None, **kwargs: Any) -> None:
        self.options = options if options is not None else AgentOptions(**kwargs)
        self.events = EventEmitter()
        self.messages = self.options.messages
        self.approvals: ApprovalMode | None = self.options.approvals
        """The approval mode in force (set from the options and the config at ``init()``)."""
        self._initialised = False
        self._closed = False
        self._busy = False
        self._turn: TurnRecord | None = None
        self._consumer: asyncio.Task[Any] | None = None
        self._aborting = False
        self._window = ContextWindow(self.messages, summarise=self.options.enable_context_summary)
        self._override_router: ProviderRouter | None = None
        self._pause_request: str | None = None
        self._warned_members: set[tuple[str, str]] = set()
        self._plan_asked = False
        self._plan_log: collections.deque[PlanItemOutcome] = collections.deque(maxlen=PLAN_LOG_SIZE)
        self._cap_map: CapabilityMap | None = None
        self._visible_cache: (
            tuple[tuple[Any, ...], list[ToolSpec], int, str | None, frozenset[str]] | None
        ) = None
        self._sources: dict[str, tuple[str, Any]] | None = None
        """capability -> (tool source name, source), from the ``tool_source`` plugins."""
        self._source_failures: dict[str, str] = {}
        self._source_tools: dict[str, dict[str, Tool]] = {}
        self._owned: builtins.list[Any] = []
        self._round_ids: builtins.list[str] = []
        self.session_state = SessionState(on_drift=self._drift)
        self.outbox = Outbox()
        self.duplicate_interceptor = DuplicateCallInterceptor(self.options.duplicate_call_threshold)
        self.retry_policy = RetryPolicy(
            max_attempts=self.options.retry_attempts, base_delay=self.options.retry_base_delay
        )
        self._role_pack: RolePackManager
        self._router_fixed: ProviderRouter | None = None
        self._sync_runner: asyncio.Runner | None = None
        self._explicit: set[str] = set(self.options.model_fields_set)
        self._summaries: set[asyncio.Task[None]] = set()
        self._hidden_resident: frozenset[str] = frozenset()
        self._unlisten: Callable[[], None] = lambda: None

    # ------------------------------------------------------------------------------------------
    # managers (available after init)

    def _need(self, name: str) -> Any:
        if not self._initialised:
            raise MemoraError(
                ErrorCode.NOT_INITIALIZED,
                f"agent.{name} is available after `await agent.init()` (or `async with Agent(...)`)",
            )
        return getattr(self, f"_{name}")

    role_pack: RolePackManager = property(lambda self: self._need("role_pack"))  # type: ignore[assignment]
    tools: ToolRegistry = property(lambda self: self._need("tools"))  # type: ignore[assignment]
    memory: MemoryManager = property(lambda self: self._need("memory"))  # type: ignore[assignment]
    works: WorksRegistry = property(lambda self: self._need("works"))  # type: ignore[assignment]
    polish: PolishManager = property(lambda self: self._need("polish"))  # type: ignore[assignment]
    sessions: SessionManager = property(lambda self: self._need("sessions"))  # type: ignore[assignment]
    security: SecurityManager = property(lambda self: self._need("security"))  # type: ignore[assignment]
    plugins: Plugins = property(lambda self: self._need("plugins"))  # type: ignore[assignment]
    tool_context: ToolContext = property(lambda self: self._need("tool_context"))  # type: ignore[assignment]

    @property
    def router(self) -> ProviderRouter:
        """Task type -> provider; ``act.providerRouting = fixed`` sends everything to the chat
        provider."""
        base: ProviderRouter = self._need("base_router")
        if self._override_router is not None:
            return self._override_router
        if self._role_pack.strategy.provider_routing == "fixed":
            if self._router_fixed is None:
                self._router_fixed = base.with_fixed(True)
            return self._router_fixed
        return base

    @property
    def skills(self) -> Mapping[str, Any]:
        """The active skills (global pool < role pack < project), by name."""
        return self.role_pack.skills()

    @property
    def session_id(self) -> str:
        return str(self._need("session_id"))

    @property
    def history(self) -> tuple[Message, ...]:
        """The live conversation of the current session as the model sees it (oldest first,
        without the system prompt); a read-only copy.  Trimmed messages are not in it."""
        return self._window.messages

    @property
    def plan(self) -> builtins.list[PlanItem]:
        """The session's plan (task table items, in order); the model keeps it with
        ``task_table_update``, it survives turns, restarts and is shown to the model."""
        return [dataclasses.replace(i) for i in self._need("tool_context").task_table.items()]

    def set_provider(self, provider: Provider, *, background: Provider | None = None) -> None:
        """Send every task (chat, summaries, background work) to ``provider`` from the next
        LLM call on — a model switch in a host, or a scripted provider in tests
        (:mod:`memora.testing`).  ``background`` keeps a separate background provider.
        The Agent does not close providers passed here."""
        self._need("base_router")
        self._override_router = ProviderRouter(provider, background=background)
        self._visible_cache = None

    @contextlib.contextmanager
    def override(self, *, provider: Provider) -> Iterator[Agent]:
        """``with agent.override(provider=scripted): ...`` — :meth:`set_provider` for a block,
        restored afterwards."""
        before = self._override_router
        self.set_provider(provider)
        try:
            yield self
        finally:
            self._override_router = before

    # ------------------------------------------------------------------------------------------
    # lifecycle

    async def __aenter__(self) -> Agent:
        await self.init()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def init(self) -> Agent:
        """Assemble plugins, take the project lock, load role packs, open the stores."""
        if self._initialised:
            return self
        project = Path(self.options.project_path)
        if not project.is_dir():  # noqa: ASYNC240 - one stat at start-up
            raise MemoraError(ErrorCode.INVALID_CONFIG, f"project_path {project} is not a folder")
        extra: builtins.list[Any] = list(self.options.plugins)
        if self.options.pre_execution_check is not None:
            extra.append(("host-check", _HostCheck(self.options.pre_execution_check)))
        # the plugins first: they declare which of their options a project's config may set
        plugins = create_plugin_manager(load_entrypoints=self.options.load_entrypoints, extra=extra)
        self._plugins = plugins
        self._apply_settings(project)
        opts = self.options
        data_dir = Path(opts.data_dir)
        # under the project, every folder on the way is checked: a planted link or a file named
        # .memora is a clear error, not a write elsewhere or a traceback (abspath, not resolve:
        # resolving would follow the very links this is about)
        absolute = Path(os.path.abspath(data_dir))  # noqa: ASYNC240 - no I/O, start-up only
        root = Path(os.path.abspath(project))  # noqa: ASYNC240
        ensure_state_dir(absolute, root if absolute.is_relative_to(root) else absolute.parent)
        warn_if_shared(absolute)  # a folder an older memora (or the umask) left readable
        lock = self._create_lock(project, data_dir)
        await _maybe_await(lock.acquire())
        try:
            await self._assemble(plugins, project, data_dir, lock)
        except BaseException:
            await self._release_owned()
            await _maybe_await(lock.release())
            raise
        self._initialised = True
        return self

    def _apply_settings(self, project: Path) -> None:
        """Resolve the settings (see :mod:`memora.settings`) and apply the config's ``options``
        to the Agent options the host did not set."""
        from ..settings import resolve_settings

        opts = self.options
        explicit = set(opts.model_fields_set)
        self._explicit = explicit
        self.settings = resolve_settings(
            project,
            config_dir=opts.config_dir,
            explicit={"storage": opts.storage}
            if "storage" in explicit and isinstance(opts.storage, str)
            else None,
            explicit_label="Agent option",
            plugins=self._plugins,
            trust=opts.project_trust,
        )
        # an explicit mode is the host's word; else the config's (a project only tightens it)
        self.approvals = (
            opts.approvals if "approvals" in explicit else self.settings.config.approvals
        )
        updates = {k: v for k, v in self.settings.config.options.items() if k not in explicit}
        if not updates:
            return
        current = {name: getattr(opts, name) for name in explicit}
        try:
            self.options = AgentOptions.model_validate(
                {"project_path": opts.project_path, "data_dir": opts.data_dir, **current, **updates}
            )
        except ValidationError as exc:
            first = exc.errors()[0]
            key = str(first["loc"][0]) if first["loc"] else "?"
            raise MemoraError(
                ErrorCode.INVALID_CONFIG,
                f"options.{key} (from {self.settings.origin('options.' + key)}): {first['msg']}",
                context={"key": f"options.{key}"},
            ) from exc
        self.duplicate_interceptor = DuplicateCallInterceptor(self.options.duplicate_call_threshold)
        self.retry_policy = RetryPolicy(
            max_attempts=self.options.retry_attempts, base_delay=self.options.retry_base_delay
        )

    def _storage_name(self) -> Any:
        return self.options.storage if "storage" in self._explicit else self.settings.storage

    def _state_service(self, kind: Any, option: str, fallback: str) -> Any:
        """The session store or project lock: an Agent option, else the config's key, else the
        one a plugin registered under the storage backend's name, else the built-in one."""
        if option in self._explicit and getattr(self.options, option) is not None:
            return getattr(self.options, option)
        return self.settings.state_store(
            option, self._storage_name(), self._plugins.names(kind), fallback
        )

    def _create_lock(self, project: Path, data_dir: Path) -> Any:
        spec = self._state_service("project_lock", "project_lock", "file")
        if not isinstance(spec, str):
            return spec
        return self._plugins.create(
            "project_lock",
            spec,
            {**self._plugin_options(spec), "project": project, "path": data_dir},
        )

    def _plugin_options(self, name: str, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Options for the factory registered as ``name``: config ``plugins[name]`` < Agent
        ``plugin_options[name]`` < ``extra``."""
        return {
            **self.settings.plugin_options(name),
            **self.options.plugin_options.get(name, {}),
            **(extra or {}),
        }

    def _provider_spec(self, key: str) -> tuple[Any, dict[str, Any]]:
        """The chat (``provider``) or ``background_provider``: an Agent option wins, then the
        configured provider entry (``active_provider`` / ``background_provider``)."""
        opts = self.options
        if key in self._explicit and getattr(opts, key) is not None:
            extra = opts.provider_options if key == "provider" else {}
            return getattr(opts, key), dict(extra)
        config = self.settings.config
        name = config.active_provider if key == "provider" else config.background_provider
        entry = self.settings.provider(name) if name else None
        if entry is not None:
            kind, options = entry
            if key == "provider":
                options = {**options, **opts.provider_options}
            return kind, options
        if key == "provider":
            return "llamacpp", dict(opts.provider_options)
        return None, {}

    def _provider(
        self, plugins: Plugins, spec: Any, options: Mapping[str, Any] | None = None
    ) -> Provider:
        if spec is None:
            spec = "llamacpp"
        if isinstance(spec, str):
            provider = plugins.create("provider", spec, self._plugin_options(spec, options))
            self._owned.append(provider)
            return provider  # type: ignore[no-any-return]
        return spec  # type: ignore[no-any-return]

    async def _assemble(self, plugins: Plugins, project: Path, data_dir: Path, lock: Any) -> None:
        opts = self.options
        self._plugins = plugins
        chat = self._provider(plugins, *self._provider_spec("provider"))
        background_spec, background_options = self._provider_spec("background_provider")
        background = (
            self._provider(plugins, background_spec, background_options)
            if background_spec is not None
            else None
        )
        router = opts.provider_router
        routes = (
            {k: self._provider(plugins, v) for k, v in router.items()}
            if isinstance(router, Mapping)
            else {}
        )
        self._base_router = ProviderRouter(
            chat,
            background=background,
            routes=routes,
            resolver=router if callable(router) else None,
        )
        self._router_fixed = None

        storage = self._storage_name()
        if isinstance(storage, str):
            storage = plugins.create(
                "storage",
                storage,
                {"path": data_dir, **self._plugin_options(storage, opts.storage_options)},
            )
            self._owned.append(storage)
        sessions = self._state_service("session_store", "session_store", "jsonl")
        if isinstance(sessions, str):
            sessions = plugins.create(
                "session_store", sessions, {**self._plugin_options(sessions), "path": data_dir}
            )
            self._owned.append(sessions)
        self._session_store = sessions
        self._round_store = opts.round_store or sessions

        tracers = [
            plugins.create("tracer", name, self._plugin_options(name))
            for name in plugins.names("tracer")
        ]
        if opts.tracer is not None:
            tracers.append(opts.tracer)
        self.tracer = combine_tracers(tracers)

        self._memory = MemoryManager(storage, self.events)
        self._role_pack = RolePackManager(
            opts.config_dir,
            pack_roots=opts.role_pack_dirs,
            active=opts.active_role_pack,
            fallback_role=opts.builtin_fallback_role,
            disabled_skills=opts.disabled_skills,
            project_path=project,
            strategy_override=opts.strategy_override,
            events=self.events,
            messages=self.messages,
        )
        self._role_pack.resolve_initial()
        self._role_pack.edit_check = opts.role_pack_edit_check
        self._tools = ToolRegistry()
        self._tools.executor = self.call_tool
        self._plugin_tools: dict[str, Tool] = {}
        self._sync_plugin_tools()
        self._hidden_resident = _hidden_resident(opts.resident_tools)
        services = LazyServices(self._service_sources())
        self._services = services
        guard = PathGuard(project, opts.allowed_paths)
        self._security = SecurityManager(guard, opts.permission, lock)
        self._background = BackgroundTasks()
        self._works = WorksRegistry(data_dir, guard, self._memory)
        self._tool_context = ToolContext(
            project=project,
            guard=guard,
            permission=opts.permission,
            memory=self._memory,
            role_packs=self._role_pack,
            works=self._works,
            background=self._background,
            task_table=TaskTable(),
            services=services,
            node_path=opts.node_path,
            env=child_environment(opts.command_env_allow, opts.command_env)
            if opts.command_env_allow or opts.command_env
            else None,
            branch_round_ids=lambda: list(self._round_ids),
            consistency_check=opts.file_consistency_check,
        )
        self._window = ContextWindow(self.messages, summarise=opts.enable_context_summary)
        self._window.spawn = self._spawn_background
        if self._base_router.for_task("background") is not self._base_router.chat:
            # a background provider is configured: trimmed history gets an LLM summary there
            self._window.summariser = self._summarise_trimmed
        self._polish = PolishManager(self)
        self._sessions = SessionManager(self)
        await self._open_session(opts.session_id)
        self._unlisten = plugins.add_listener(self._plugins_changed)

    # ------------------------------------------------------------------------------------------
    # what plugins provide, recomputed when a plugin is registered after init()

    def _service_sources(self) -> dict[str, Any]:
        """Each service kind -> a ready object (an Agent option) or a factory called on first
        use.  A service named in the options must exist (checked now); otherwise the first
        installed one by name is used."""
        opts = self.options
        plugins = self._plugins
        sources: dict[str, Any] = {}
        for kind, explicit in (
            ("web_search", opts.web_search),
            ("web_fetch", opts.web_fetch),
            ("code_executor", opts.code_executor),
            ("project_search", opts.project_search),
        ):
            if explicit is not None and not isinstance(explicit, str):
                sources[kind] = explicit
                continue
            names = plugins.names(kind)  # type: ignore[arg-type]
            name = explicit if isinstance(explicit, str) else (names[0] if names else None)
            if name is None:
                continue
            factory = plugins.get(kind, name)  # type: ignore[arg-type]
            sources[kind] = LazyServices.deferred(
                (kind, name, plugins.owner(kind, name), id(factory)),  # type: ignore[arg-type]
                functools.partial(self._create_service, kind, name),
            )
        return sources

    def _create_service(self, kind: Any, name: str) -> Any:
        svc = self._plugins.create(kind, name, self._plugin_options(name))
        self._owned.append(svc)
        return svc

    def _sync_plugin_tools(self) -> None:
        wanted = self._plugins.registered("tool")
        for name, old in list(self._plugin_tools.items()):
            reg = wanted.get(name)
            if reg is None or reg.value is not old:
                if self._tools.get(name) is old:
                    self._tools.unregister(name)
                del self._plugin_tools[name]
        for name, reg in wanted.items():
            if name in self._plugin_tools:
                continue
            if name in self._tools:  # registered directly on agent.tools by the host: it wins
                logger.info("tool %r of plugin %r is shadowed by agent.tools", name, reg.plugin)
                continue
            self._tools.register(reg.value, owner=reg.plugin)
            self._plugin_tools[name] = reg.value

    def _plugins_changed(self) -> None:
        """A plugin was registered or unregistered on ``agent.plugins`` after init()."""
        self._sync_plugin_tools()
        stale = self._services.replace(self._service_sources())
        for svc in stale:
            if svc not in self._owned:
                self._owned.append(svc)  # closed with the Agent
        self._cap_map = None
        self._visible_cache = None
        self._sources = None  # re-created from the plugins now registered

    async def _open_session(self, session_id: str | None) -> None:
        store = self._session_store
        if session_id is None:
            existing = await store.list()
            info = existing[0] if existing else await store.create()
        elif await store.exists(session_id):
            info = await store.get(session_id)
        else:
            info = await store.create(session_id=session_id)
        history = [message_from_dict(m) for m in await store.messages(info.id)]
        round_store = self._round_store
        if round_store is not store and not await round_store.exists(info.id):
            await round_store.create(session_id=info.id)  # a separate round store follows
        rounds = await round_store.rounds(info.id)
        plan: builtins.list[dict[str, Any]] = []
        for r in reversed(rounds):  # the plan as the last round that changed it left it
            found = next((e for e in reversed(r.events) if e.get("type") == "plan"), None)
            if found is not None:
                plan = list(found.get("items") or [])
                break
        self._set_session(info.id, history, [r.round_id for r in rounds], plan)

    def _set_session(
        self,
        session_id: str,
        history: builtins.list[Message],
        round_ids: builtins.list[str],
        plan: builtins.list[dict[str, Any]] | None = None,
    ) -> None:
        self._session_id = session_id
        self._window.reset(history)
        self._round_ids = round_ids
        self.duplicate_interceptor.reset()
        first = next((m.content for m in history if m.role == "user"), None)
        self.session_state.reset(session_id, first)
        table = self._tool_context.task_table
        table.clear()
        if plan:
            table.update([PlanItem(**i) for i in plan])
        self._plan_seen = self._plan_key()

    def _plan_key(self) -> tuple[tuple[Any, ...], ...]:
        return tuple(
            (i.id, i.description, i.status, i.order, i.member)
            for i in self._tool_context.task_table.items()
        )

    async def _release_owned(self) -> None:
        for obj in reversed(self._owned):
            closer = getattr(obj, "aclose", None) or getattr(obj, "close", None)
            if closer is None:
                continue
            try:
                result = closer()
                if asyncio.iscoroutine(result):
                    await result
            except Exception:
                logger.exception("closing %r failed", obj)
        self._owned.clear()

    async def close(self) -> None:
        """Kill background commands, close providers and stores, release the project lock."""
        if self._closed or not self._initialised:
            self._closed = True
            return
        self._closed = True
        self._unlisten()
        await self.idle()  # round summaries still being written
        with contextlib.suppress(Exception):
            await self._background.close()
        if self._session_store not in self._owned:  # a host's object: closed as before
            with contextlib.suppress(Exception):
                await self._session_store.close()
        await self._release_owned()
        await _maybe_await(self._security.lock.release())

    # ------------------------------------------------------------------------------------------
    # conversation state

    def _drift(self, main: str, current: str, similarity: float) -> None:
        seq = self.session_state.goal_change_seq
        self.events.emit(GoalDriftDetected(main, current, similarity, seq))

    def _team(self, name: str | None = None) -> TeamConfig | None:
        """The team named ``name`` (its name or leader), else the one the active pack leads."""
        teams = self.options.role_pack_teams or []
        if name is not None:
            return next((t for t in teams if name in (t.label, t.leader)), None)
        active = self._role_pack.active.name
        return next((t for t in teams if t.leader == active), None)

    def _system_prompt(self) -> str:
        if getattr(self.router.chat, "compact_prompt", False):
            # a small local model (the embedded one) parrots a rule list back and invents
            # what it cannot read: one short, honest paragraph instead
            pack = self._role_pack.active
            prompt = self.messages.render(
                "compact_system_prompt", assistant=pack.display_name or pack.name
            )
            readme = self._readme_head()
            if readme:  # it cannot read files: what it may say about the project, given
                prompt += "\n\n" + self.messages.render("compact_readme", readme=readme)
            return prompt
        # the prompt names only the tools the request carries (none for a small model whose
        # window they do not fit, only the chosen ones with resident_tools)
        self._visible_specs()
        assert self._visible_cache is not None
        tools = self._visible_cache[4]
        item = self._tool_context.task_table.active()
        if item is not None and item.member:
            team = self._team()
            if team is not None and item.member in (team.leader, *team.members):
                if item.member != team.leader:
                    return self._role_pack.system_prompt_for(item.member, tools=tools)
            elif (item.id, item.member) not in self._warned_members:
                self._warned_members.add((item.id, item.member))
                logger.warning(
                    "plan item %r names member %r, who is not in the active role pack's team; "
                    "the active pack assembles it",
                    item.id,
                    item.member,
                )
        return self._role_pack.system_prompt(tools=tools)

    def _readme_head(self, limit: int = 600) -> str:
        """The start of the project's README (cached for the Agent's life), for a small
        model's prompt; empty when there is none."""
        cached: str | None = self.__dict__.get("_readme_cache")
        if cached is None:
            cached = ""
            root = Path(self.options.project_path)
            for name in ("README.md", "README.rst", "README.txt", "README"):
                with contextlib.suppress(OSError, ValueError):
                    fd = os.open(root / name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
                    try:
                        if stat.S_ISREG(os.fstat(fd).st_mode):
                            raw = os.read(fd, limit * 4)
                            cached = raw.decode("utf-8", "ignore").strip()[:limit]
                    finally:
                        os.close(fd)
                if cached:
                    break
            self.__dict__["_readme_cache"] = cached
        return cached

    def _asks_for_plan(self, text: str) -> bool:
        """``multiStepReasoning: manual``: does this request ask for a plan?"""
        lowered = text.lower()
        return any(w in lowered for w in _words(self.messages.plan_request_words))

    def _prompt_for(self, name: str) -> str:
        """A meeting speaker's prompt: a meeting request carries no tools, so the prompt names
        none (no skills list, no plan or question advice)."""
        if name == self._role_pack.active.name:
            return self._role_pack.system_prompt(tools=_NO_TOOLS)
        return self._role_pack.system_prompt_for(name, tools=_NO_TOOLS)

    async def meeting(
        self,
        question: str,
        *,
        team: str | None = None,
        members: Sequence[str] | None = None,
    ) -> AsyncIterator[AgentChunk]:
        """A team meeting as one turn: each member (a role pack) answers ``question`` in turn,
        seeing what was said before, streamed as ``meeting_turn(member)`` then
        ``text(stage="meeting", speaker=member)``; then the leader, as chair, sums up
        (``meeting_turn(role="chair")``, ``text(stage="answer", speaker=leader)``); ``done``
        carries the summary.  The session keeps the question and the summary; each
        contribution is a ``meeting_turn`` round event.

        ``team``: a team's name or leader (default: the team the active pack leads);
        ``members``: a subset of its members, in speaking order."""
        chosen = self._team(team)
        if chosen is None:
            known = ", ".join(t.label for t in self.options.role_pack_teams or []) or "none"
            raise MemoraError(
                ErrorCode.INVALID_INPUT,
                f"no team {team!r}; teams: {known}"
                if team
                else f"the active role pack leads no team; teams: {known} (pass team=...)",
            )
        speakers = list(members) if members is not None else list(chosen.members)
        outside = [m for m in speakers if m not in chosen.members]
        if outside or not speakers:
            raise MemoraError(
                ErrorCode.INVALID_INPUT,
                f"meeting members must be members of team {chosen.label!r} "
                f"({', '.join(chosen.members)}); not: {', '.join(outside) or '(none given)'}",
            )
        for name in [*speakers, chosen.leader]:
            self.role_pack.get(name)  # NOT_FOUND now, not mid-meeting
        self._start()
        text = clean_text(question)
        self.session_state.start()
        self.session_state.set_goal(text)
        self._busy = True
        record = self._new_record(text)
        record.step = "meeting"
        record.meeting = {"members": speakers, "chair": chosen.leader, "spoken": []}
        self._turn = record
        async for chunk in self._drive(record):
            yield chunk

    def _plan_section(self) -> str | None:
        """The plan as the model sees it (a system message after the prompt), when there is one."""
        table = self._tool_context.task_table
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

    def _effective_window(self) -> int:
        provider_window = min(
            self.router.for_task("chat").context_window, self.options.max_context_tokens
        )
        return self._role_pack.strategy.effective_window(provider_window)

    def _output_reserve(self) -> int:
        return self._role_pack.strategy.max_tokens(self.options.max_tokens) or 1024

    def _tool_visible(self, tool: Tool) -> bool:
        """Whether the model may see ``tool`` under the active role pack (from the tool's
        flags, the capability map and the ``resident_tools`` option)."""
        strategy = self._role_pack.strategy
        if strategy.tool_mode == "block":
            return False
        if tool.capability is not None:
            cap_map = self._capability_map()
            if tool.capability in cap_map.enabled:
                return True
            return (
                tool.capability not in PRIVILEGED
                and tool.capability in self._role_pack.active.capabilities
            )
        if tool.name in self._hidden_resident and self._tools.owner(tool.name) == _BUILTIN_TOOLS:
            return False
        if tool.pauses:
            return strategy.asks_user
        if tool.plans and strategy.multi_step_reasoning == "manual":
            return self._plan_asked or bool(self._tool_context.task_table.items())
        return True

    def capability_map(self) -> CapabilityMap:
        """The active role pack's capability map: which privileged capabilities are on, and
        ``unavailable``: the declared ones no plugin provides, with the reason."""
        return self._capability_map()

    def _capability_map(self) -> CapabilityMap:
        pack = self._role_pack.active
        if self._cap_map is None or self._cap_map.role_pack != pack.name:
            services = {k: [k] for k in _available_services(self._tool_context.services)}
            sourced = {cap: self._source_failures.get(cap) for cap in self._tool_sources()}
            self._cap_map = compute_capability_map(
                pack.name, list(pack.capabilities), services, sourced=sourced
            )
        return self._cap_map

    # -- tools that appear at run time (tool sources: MCP servers...) ------------------------

    def _tool_sources(self) -> dict[str, tuple[str, Any]]:
        """capability -> (source name, source); sources are created (not started) once."""
        if self._sources is None:
            sources: dict[str, tuple[str, Any]] = {}
            for name in self._plugins.names("tool_source"):
                try:
                    source = self._plugins.create("tool_source", name, self._plugin_options(name))
                except Exception as exc:
                    logger.warning("tool source %r failed to start: %s", name, exc)
                    continue
                self._owned.append(source)
                for cap in source.capabilities():
                    sources.setdefault(cap, (name, source))
            self._sources = sources
        return self._sources

    async def load_capability_tools(self) -> None:
        """Bring the tools of the capabilities the active role pack declares and a tool source
        serves (``mcp:<server>``...) up to date: started on first use, listed again before
        every turn.  A source that fails costs only its capability: its tools disappear, the
        reason is in ``capability_map().unavailable``."""
        sources = self._tool_sources()
        declared = [c for c in self._role_pack.active.capabilities if c in sources]
        changed = False
        for cap in declared:
            name, source = sources[cap]
            try:
                tools = {t.name: t for t in await source.tools(cap)}
                failure = None
            except Exception as exc:
                tools, failure = {}, f"{name} could not provide it: {exc}"
            if failure != self._source_failures.get(cap):
                changed = True
                if failure is None:
                    self._source_failures.pop(cap, None)
                else:
                    logger.warning("%s", failure)
                    self._source_failures[cap] = failure
            old = self._source_tools.get(cap, {})
            for tool_name, tool in old.items():
                if tools.get(tool_name) is not tool and self._tools.get(tool_name) is tool:
                    self._tools.unregister(tool_name)
            for tool_name, tool in tools.items():
                if self._tools.get(tool_name) is tool:
                    continue
                if tool_name in self._tools and old.get(tool_name) is None:
                    logger.warning("tool %r of %s is shadowed by an existing tool", tool_name, name)
                    continue
                self._tools.register(tool, owner=name, replace=True)
            self._source_tools[cap] = tools
        if changed:
            self._cap_map = None

    def _visible_specs(self, asks_exhausted: bool = False) -> builtins.list[ToolSpec]:
        """The tool schemas sent to the model (computed once per tool set and role pack)."""
        strategy = self._role_pack.strategy
        provider = self.router.for_task("chat")
        key = (
            self._role_pack.active.name,
            strategy,
            self._tools.version,
            asks_exhausted,
            self._plan_asked,
            id(provider),
        )
        if self._visible_cache is None or self._visible_cache[0] != key:
            specs = [
                t.spec()
                for name in self._tools.names()
                if (t := self._tools.get(name)) is not None
                and self._tool_visible(t)
                and not (t.pauses and asks_exhausted)
            ]
            cost = estimate_spec_tokens(specs)
            window = self._effective_window()
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
            self._visible_cache = (key, specs, cost, withheld, frozenset(s.name for s in specs))
        return self._visible_cache[1]

    @property
    def tools_withheld(self) -> str | None:
        """Why no tool is sent to the model: its provider says it does not use tools
        (``supports_tools = False``), or the tool schemas would take more than half of its
        context window (a small local model); ``None`` when tools are sent."""
        self._visible_specs()
        assert self._visible_cache is not None
        return self._visible_cache[3]

    def _spec_tokens(self, asks_exhausted: bool = False) -> int:
        """The context-window cost of the tool schemas sent (computed with them, once)."""
        self._visible_specs(asks_exhausted)
        assert self._visible_cache is not None
        return self._visible_cache[2]

    def _turn_deps(self, record: TurnRecord, *, model_turn: bool = True) -> TurnDeps:
        """What the turn engine sees of the Agent (built once per turn or resumption).  A model
        turn whose tools do not fit the window runs as ``toolMode: block``; a host's own
        ``call_tool`` (``model_turn=False``) is not affected."""
        opts = self.options
        strategy = self._role_pack.strategy
        if model_turn and strategy.tool_mode != "block" and self.tools_withheld is not None:
            strategy = dataclasses.replace(strategy, tool_mode="block")
        base = self._tool_context.derive(
            session_id=record.session_id,
            round_id=record.round_id,
            readonly=strategy.tool_readonly,
            web_search_limit=strategy.web_search_limit,
            counters=record.counters,
            file_stamps=record.file_stamps,
            task_table=record.plan,
            progress=None,
        )
        return TurnDeps(
            window=self._window,
            tools=self._tools,
            strategy=strategy,
            messages=self.messages,
            tracer=self.tracer,
            session=self.session_state,
            provider=self.router.for_task("chat"),
            review_provider=self.router.for_task("reasoning"),
            retry_policy=self.retry_policy,
            check=self._plugins.pre_execution_check,
            tool_context=base,
            visible=self._tool_visible,
            specs=self._visible_specs,
            spec_tokens=self._spec_tokens,
            system_prompt=self._system_prompt,
            prompt_for=self._prompt_for,
            plan_section=self._plan_section,
            window_tokens=self._effective_window(),
            output_reserve=self._output_reserve(),
            max_tokens=strategy.max_tokens(opts.max_tokens),
            history_key=self._session_id,
            project_path=opts.project_path,
            permission=opts.permission,
            role_pack=self._role_pack.active.name,
            confirm_writes=opts.confirm_writes,
            confirm_scripts=opts.confirm_scripts,
            approvals=self.approvals,
            duplicate_threshold=opts.duplicate_call_threshold,
            duplicate_interceptor=opts.duplicate_interceptor,
            max_iterations=strategy.max_iterations(opts.max_iterations),
            stall_timeout=opts.llm_stall_timeout,
            persist=self._finish_turn,
            aborting=lambda: self._aborting,
            pause_requested=lambda: self._pause_request,
        )

    def _new_record(self, text: str) -> TurnRecord:
        return TurnRecord(
            round_id=new_round_id(),
            user_text=text,
            session_id=self._session_id,
            outbox=self.outbox,
            duplicates=self.duplicate_interceptor,
            file_stamps=self._tool_context.file_stamps,
            plan=self._tool_context.task_table,
            plan_log=self._plan_log,
        )

    async def _finish_turn(self, state: TurnRecord, summarise: bool) -> None:
        """Persist the round and its messages (one append, before ``done``: a killed process
        loses at most the running turn); start the round summary in the background when due."""
        self._busy = False
        self._turn = None
        self._consumer = None
        plan_key = self._plan_key()
        if plan_key != self._plan_seen:  # the plan changed: the round carries the new one
            self._plan_seen = plan_key
            state.note("plan", items=[i.to_dict() for i in state.plan.items()])
        record = RoundRecord(
            round_id=state.round_id,
            user=state.user_text,
            assistant=state.answer,
            events=state.events,
            status=state.status,
            started_at=state.started_at,
            ended_at=time.time(),
            usage=dict(state.usage),
        )
        try:
            store, rounds = self._session_store, self._round_store
            if rounds is store and hasattr(store, "append_turn"):
                await store.append_turn(state.session_id, state.messages, record)
            else:  # a host's store without the one-append method
                await store.append_messages(state.session_id, state.messages)
                await rounds.append_round(state.session_id, record)
            self._round_ids.append(state.round_id)
        except Exception as exc:
            logger.exception("persisting round %s failed", state.round_id)
            self.events.emit(ArchiveFailed(state.session_id, f"{type(exc).__name__}: {exc}"))
        if (
            not summarise
            or self.options.archive_mode != "full"
            or not self._role_pack.strategy.summary
        ):
            return
        tool_notes = [
            f"{e['name']}: {e.get('summary', '')}"
            for e in state.events
            if e.get("type") == "tool_result"
        ][:20]
        # The summary is an extra LLM call: `done` does not wait for it.  The Agent owns the
        # task; `await agent.idle()` waits for it and `close()` finishes it.
        task = asyncio.get_running_loop().create_task(
            self._write_summary(state, tool_notes, self.router.for_task("summary")),
            name=f"memora-round-summary-{state.round_id}",
        )
        self._summaries.add(task)
        task.add_done_callback(self._summaries.discard)

    async def _write_summary(
        self, state: TurnRecord, tool_notes: builtins.list[str], provider: Provider
    ) -> None:
        try:
            await self._memory.write_round_summary(
                provider,
                user=state.user_text,
                assistant=state.answer,
                session_id=state.session_id,
                round_id=state.round_id,
                tool_notes=tool_notes,
                focus=self._role_pack.strategy.summary_focus,
                messages=self.messages,
                verbatim_tokens=self.options.summary_verbatim_tokens,
            )
        except Exception as exc:
            logger.warning("round summary for %s failed: %s", state.round_id, exc)
            self.events.emit(ArchiveFailed(state.session_id, f"round summary failed: {exc}"))

    def _spawn_background(self, coro: Coroutine[Any, Any, None]) -> None:
        """Work after the answer (summaries): the Agent owns the task; ``idle()`` waits for it,
        ``close()`` finishes it."""
        task = asyncio.get_running_loop().create_task(coro)
        self._summaries.add(task)
        task.add_done_callback(self._summaries.discard)

    async def _summarise_trimmed(self, dropped: builtins.list[Message]) -> str:
        """An LLM summary of messages trimmed from the context, on the background provider."""
        labels = {"user": self.messages.user_label, "assistant": self.messages.assistant_label}
        transcript = "\n".join(
            f"{labels[m.role]}: {m.content[:2000]}"
            for m in dropped
            if m.role in labels and m.content.strip()
        )
        if not transcript:
            return ""
        request = LLMRequest(
            [Message.system(self.messages.context_summary_prompt), Message.user(transcript)],
            temperature=0.2,
            max_tokens=400,
        )
        text = await complete_text(self.router.for_task("background"), request)
        return f"{self.messages.recent_conversation_label} (summary): {text.strip()}"

    async def idle(self) -> None:
        """Wait until the work the Agent does after ``done`` (round summaries) has finished.

        Failures are not raised: they are logged and emitted as ``ArchiveFailed`` events.
        """
        while self._summaries:
            await asyncio.gather(*list(self._summaries), return_exceptions=True)

    # ------------------------------------------------------------------------------------------
    # chat

    def _start(self) -> None:
        if not self._initialised:
            raise MemoraError(
                ErrorCode.NOT_INITIALIZED, "call `await agent.init()` before chatting"
            )
        if self._closed:
            raise MemoraError(ErrorCode.NOT_INITIALIZED, "this agent is closed")
        if self._busy:
            raise MemoraError(
                ErrorCode.BUSY,
                "a turn is already running on this agent (one session runs at a time); wait for it, "
                "or use one Agent per project to work in parallel",
            )
        if self._turn is not None and self._turn.paused is not None:
            raise MemoraError(
                ErrorCode.BUSY,
                "the current turn is paused; answer it (answer_question / approve / reject) and call "
                "continue_after_pause(), or call discard_paused_turn()",
            )

    async def chat(self, text: str) -> AsyncIterator[AgentChunk]:
        """Run one turn; yields every chunk.  Never raises once started (errors are chunks);
        a cancellation from outside the Agent (a host's timeout) ends the turn with an
        ``aborted`` chunk and then propagates."""
        self._start()
        text = clean_text(text)  # a lone surrogate would make every later request unencodable
        self.session_state.start()  # raises while an unrecovered error stands
        self.session_state.set_goal(text)
        self._busy = True
        self.duplicate_interceptor.reset()
        self._plan_asked = self._asks_for_plan(text)
        await self.load_capability_tools()
        record = self._new_record(text)
        self._turn = record
        async for chunk in self._drive(record):
            yield chunk

    async def _drive(self, record: TurnRecord) -> AsyncIterator[AgentChunk]:
        self._consumer = asyncio.current_task()
        self._aborting = False
        engine = TurnEngine(self._turn_deps(record), record)
        try:
            async for chunk in engine.run():
                self._consumer = asyncio.current_task()
                yield chunk
        finally:
            self._consumer = None
            self._aborting = False
            self._busy = False
            if record.paused is None:
                self._pause_request = None  # the turn ended before it could pause
                if self._turn is record:
                    self._turn = None

    async def chat_text(self, text: str) -> str:
        """Run one turn and return the final answer text (raises on error or abort)."""
        async for chunk in self.chat(text):
            if isinstance(chunk, DoneChunk):
                return chunk.answer or ""
            if isinstance(chunk, ErrorChunk):
                raise MemoraError(ErrorCode.PROVIDER_ERROR, chunk.message)
            if isinstance(chunk, AbortedChunk):
                raise MemoraError(ErrorCode.PROVIDER_ERROR, f"aborted: {chunk.reason}")
            if chunk.type == "paused":
                raise MemoraError(
                    ErrorCode.BUSY, "the turn paused for the host; use chat() to handle pauses"
                )
        return ""

    def chat_sync(self, text: str) -> str:
        """Synchronous hosts: initialise if needed, run one turn, return the final answer.

        Runs on an event loop owned by this Agent; do not mix with ``await agent.chat()``.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise MemoraError(
                ErrorCode.BUSY,
                "chat_sync() cannot run inside an event loop; use `async for ... in agent.chat()`",
            )
        runner = self._sync_runner
        if runner is None:
            runner = asyncio.Runner()
            self._sync_runner = runner
        if not self._initialised:
            runner.run(self.init())
        return runner.run(self.chat_text(text))

    def close_sync(self) -> None:
        runner = self._sync_runner
        if runner is not None:
            runner.run(self.close())
            runner.close()
            self._sync_runner = None

    def abort(self) -> None:
        """Host abort signal: the running turn ends with ``aborted(stop_reason="user")``; the
        iterator then ends normally (no exception reaches the host)."""
        if self._consumer is not None and not self._consumer.done():
            self._aborting = True
            self._consumer.cancel()

    # ------------------------------------------------------------------------------------------
    # host control

    def switch_role_pack(self, name: str) -> None:
        """Activate another role pack (``agent.role_pack.activate``): prompt, strategy,
        capability map and tool set follow from the next LLM call on."""
        self._start()
        self.role_pack.activate(name)
        self._cap_map = None
        self._visible_cache = None

    def reload_config(self) -> builtins.list[str]:
        """Read the configuration again: role packs changed on disk (the active one is rebuilt
        and ``RolePackSwitched(reloaded=True)`` emitted), added or removed packs, project rules
        and skills, and the Agent ``options`` of the config files.  Providers, storage, the
        session store and the lock stay as they are (they hold connections and files; build a
        new Agent to change them).  Returns the names of the packs read again."""
        self._start()
        self._apply_settings(Path(self.options.project_path))
        changed = self.role_pack.refresh()
        self._cap_map = None
        self._visible_cache = None
        self._window.summarise = self.options.enable_context_summary
        return changed

    def effective_max_tokens(self) -> int | None:
        """The output limit requests carry: min(``max_tokens``, the role pack's
        ``act.outputLimit``), ``None`` when neither is set.  Hosts must not recompute it."""
        return self.role_pack.strategy.max_tokens(self.options.max_tokens)

    async def append_message(self, role: str, content: str) -> None:
        """Add a message to the live conversation between turns (a system note, a message the
        host received elsewhere): the next request carries it and the session store keeps it.
        ``role`` is ``user``, ``assistant`` or ``system``."""
        self._start()
        if role not in ("user", "assistant", "system"):
            raise MemoraError(
                ErrorCode.INVALID_INPUT,
                f"append_message role must be user, assistant or system, not {role!r}",
            )
        message = self._window.append(Message(role, clean_text(content)))  # type: ignore[arg-type]
        await self._session_store.append_messages(self._session_id, [message_to_dict(message)])

    # ------------------------------------------------------------------------------------------
    # tools outside the conversation

    def exposed_tools(self) -> builtins.list[Tool]:
        """The tools the model sees under the active role pack (flags, capability map,
        ``resident_tools``), in registration order."""
        self._need("tools")
        if self.tools_withheld is not None:
            return []
        return [
            t
            for name in self._tools.names()
            if (t := self._tools.get(name)) is not None and self._tool_visible(t)
        ]

    async def call_tool(
        self,
        name: str,
        args: Mapping[str, Any] | str | None = None,
        *,
        approve: bool = False,
    ) -> ToolCallResult:
        """Run one tool call through the same gates as the loop (role pack, permission,
        capability map, limits, every ``pre_execution_check``) without the model and without
        touching the conversation: for hosts, plugin authors and ``memora tools call``.

        A check answering ``Ask`` runs the call only with ``approve=True``; otherwise the result
        says approval is needed (``needs_approval``)."""
        self._start()
        await self.load_capability_tools()
        raw = args if isinstance(args, str) else json.dumps(dict(args or {}), ensure_ascii=False)
        record = self._new_record(f"[direct tool call] {name}")
        record.duplicates = DuplicateCallInterceptor(self.options.duplicate_call_threshold)
        scratch = ContextWindow(self.messages, summarise=False)
        deps = dataclasses.replace(self._turn_deps(record, model_turn=False), window=scratch)
        engine = TurnEngine(deps, record)
        call = PendingCall(f"direct-{new_round_id()[2:]}", name, raw)
        self._busy = True
        try:
            chunks = [c async for c in engine.run_call(call)]
            pause = record.paused
            if isinstance(pause, ApprovalPause):
                if not approve:
                    return ToolCallResult(
                        name,
                        call.id,
                        False,
                        True,
                        "NEEDS_APPROVAL",
                        f"needs approval: {pause.reason}",
                        "",
                        needs_approval=pause.reason,
                    )
                record.approval = ApprovalDecision(call.id, True)
                chunks += [c async for c in engine.run_call(call)]
        finally:
            self._busy = False
            self.session_state.finish("direct tool call")
        result = next((c for c in chunks if isinstance(c, ToolResultChunk)), None)
        if result is None:  # ask_user: a question needs a conversation
            return ToolCallResult(
                name,
                call.id,
                False,
                True,
                "NOT_AVAILABLE",
                "this tool asks the user; it only runs inside a conversation",
                "",
            )
        last = scratch.last
        return ToolCallResult(
            name,
            call.id,
            result.ok,
            result.blocked,
            result.error_code,
            result.summary,
            last.content if last is not None else "",
            started=any(c.type == "tool_start" for c in chunks),
            progress=[c.content for c in chunks if isinstance(c, ToolProgressChunk)],
        )

    # ------------------------------------------------------------------------------------------
    # pauses

    @property
    def paused_turn(self) -> TurnRecord | None:
        """The paused turn's record (``paused_turn.paused`` is a ``QuestionPause`` or an
        ``ApprovalPause``), or ``None``."""
        return self._turn if self._turn is not None and self._turn.paused is not None else None

    def answer_question(self, answers: Mapping[str, str] | str, answer: str | None = None) -> None:
        """Answer a ``question_pending``: ``answer_question({"slot": "text"})`` or
        ``answer_question("slot", "text")``."""
        self._live_pause(required=False)
        turn = self.paused_turn
        paused = turn.paused if turn is not None else None
        if turn is None or not isinstance(paused, QuestionPause):
            raise MemoraError(ErrorCode.INVALID_INPUT, "no question is pending")
        given = {answers: answer or ""} if isinstance(answers, str) else dict(answers)
        slots = [q.slot for q in paused.questions]
        unknown = set(given) - set(slots)
        if unknown:
            raise MemoraError(
                ErrorCode.INVALID_INPUT, f"unknown slot(s) {sorted(unknown)}; pending: {slots}"
            )
        for q in paused.questions:
            value = given.get(q.slot)
            if value is not None and q.options and not q.allow_custom and value not in q.options:
                raise MemoraError(
                    ErrorCode.INVALID_INPUT,
                    f"answer for {q.slot!r} must be one of {q.options}",
                )
        turn.answers.update({k: str(v) for k, v in given.items()})

    def approve(self, tool_call_id: str, args: Mapping[str, Any] | None = None) -> None:
        """Approve the pending call, optionally with **edited** arguments (re-validated)."""
        turn, paused = self._pending_approval(tool_call_id)
        approved_args = None
        if args is not None:
            tool = self.tools.get(paused.name)
            if tool is None:
                raise MemoraError(ErrorCode.INVALID_INPUT, f"tool {paused.name!r} is gone")
            approved_args = tool.parse_args(dict(args))
        turn.approval = ApprovalDecision(tool_call_id, True, approved_args)

    def reject(self, tool_call_id: str, reason: str = "") -> None:
        turn, _ = self._pending_approval(tool_call_id)
        turn.approval = ApprovalDecision(tool_call_id, False, None, reason)

    def _live_pause(self, *, required: bool = True) -> TurnRecord:
        """The paused turn, dropped with ``PAUSE_EXPIRED`` when it waited past
        ``pause_timeout`` (counted from when it paused)."""
        turn = self.paused_turn
        timeout = self.options.pause_timeout
        if turn is not None and timeout is not None and self.session_state.pause_expired(timeout):
            waited = time.time() - (self.session_state.paused_at or time.time())
            self.discard_paused_turn()
            raise MemoraError(
                ErrorCode.PAUSE_EXPIRED,
                f"the paused turn waited {waited:.0f} s, longer than pause_timeout "
                f"({timeout:g} s); it was dropped — send the request again",
            )
        if turn is None:
            if required:
                raise MemoraError(ErrorCode.INVALID_INPUT, "no turn is paused")
            return None  # type: ignore[return-value]
        return turn

    def request_pause(self, reason: str = "") -> None:
        """Ask the running turn to pause before its next model call (a host's "pause" button):
        it yields ``paused``; ``continue_after_pause()`` resumes it where it stopped.  The
        checkpoint's ``pause_meta`` says ``source="user"``."""
        if not self._busy or self._turn is None:
            raise MemoraError(ErrorCode.INVALID_INPUT, "no turn is running")
        self._pause_request = reason

    def checkpoint(self) -> Checkpoint:
        """The session's checkpoint: status and error, goals, the plan and its step log, the
        pause (with its source), executed tool calls, heartbeat."""
        state = self.session_state
        turn = self._turn
        return Checkpoint(
            session_id=self._need("session_id"),
            status=state.status,
            error=state.error,
            error_at=state.error_at,
            recovered=state.recovered,
            main_goal=state.main_goal,
            current_goal=state.current_goal,
            goal_change_seq=state.goal_change_seq,
            plan=self.plan,
            plan_item_log=list(self._plan_log),
            pause_meta=turn.pause_meta if turn is not None and turn.paused is not None else None,
            completed_tool_calls=self.outbox.to_list(),
            last_heartbeat=state.heartbeat_at,
            paused_at=state.paused_at,
        )

    def _pending_approval(self, tool_call_id: str) -> tuple[TurnRecord, ApprovalPause]:
        self._live_pause()
        turn = self.paused_turn
        paused = turn.paused if turn is not None else None
        if turn is None or not isinstance(paused, ApprovalPause):
            raise MemoraError(ErrorCode.INVALID_INPUT, "no approval is pending")
        if paused.tool_call_id != tool_call_id:
            raise MemoraError(
                ErrorCode.INVALID_INPUT,
                f"the pending call is {paused.tool_call_id!r}, not {tool_call_id!r}",
            )
        return turn, paused

    async def continue_after_pause(self) -> AsyncIterator[AgentChunk]:
        """Resume the paused turn (same round) after answering or approving — or, for a pause
        the host requested, as it is."""
        turn = self._live_pause()
        if isinstance(turn.paused, HostPause):
            turn.paused = None
            turn.pause_meta = None
            self._pause_request = None
        if isinstance(turn.paused, QuestionPause) and not turn.answers:
            raise MemoraError(
                ErrorCode.INVALID_INPUT, "answer the pending question first (answer_question)"
            )
        if isinstance(turn.paused, ApprovalPause) and turn.approval is None:
            raise MemoraError(ErrorCode.INVALID_INPUT, "approve or reject the pending call first")
        if self._busy:
            raise MemoraError(ErrorCode.BUSY, "a turn is already running")
        self.session_state.start()
        self._busy = True
        async for chunk in self._drive(turn):
            yield chunk

    def pause_state(self) -> dict[str, Any]:
        """The paused turn as JSON-able data; ``Agent.resume(state)`` in a new process picks it
        up.  It holds the whole turn record: the pause, the turn's messages and events, the
        outbox, the duplicate-call state, the file stamps, the per-turn counters and the plan."""
        turn = self.paused_turn
        if turn is None:
            raise MemoraError(ErrorCode.INVALID_INPUT, "no turn is paused")
        return {
            "version": PAUSE_STATE_VERSION,
            "session_id": self._session_id,
            "role_pack": self._role_pack.active.name,
            "turn": turn.to_dict(),
            "session_state": self.session_state.to_dict(),
        }

    async def resume(self, state: Mapping[str, Any]) -> None:
        """Restore a paused turn saved with :meth:`pause_state` (after a restart)."""
        version = state.get("version")
        if version not in (1, PAUSE_STATE_VERSION):
            raise MemoraError(
                ErrorCode.INVALID_INPUT,
                f"unsupported pause state version {version!r} (this memora reads 1 and "
                f"{PAUSE_STATE_VERSION})",
            )
        if self._busy or self.paused_turn is not None:
            raise MemoraError(ErrorCode.BUSY, "another turn is active")
        await self.switch_session(str(state["session_id"]))
        if state.get("role_pack") and state["role_pack"] != self._role_pack.active.name:
            self._role_pack.activate(str(state["role_pack"]))
        data = dict(state["turn"])
        if version == 1:  # version 1 kept these next to the turn
            data.setdefault("outbox", state.get("outbox") or [])
            data.setdefault("duplicates", state.get("duplicates") or {})
            data.setdefault("plan", state.get("task_table") or [])
            paused = data.get("paused") or {}
            data.setdefault("step", "tools" if data.get("pending_calls") else "model")
            if paused.get("kind") == "question":
                paused.setdefault("name", "ask_user")
        turn = TurnRecord.from_dict(
            data,
            outbox=self.outbox,
            duplicates=self.duplicate_interceptor,
            file_stamps=self._tool_context.file_stamps,
            plan=self._tool_context.task_table,
            plan_log=self._plan_log,
        )
        for m in turn.messages:
            self._window.append(message_from_dict(m))
        self.session_state.start()
        self.session_state.pause("resumed from a saved pause")
        self._turn = turn

    def discard_paused_turn(self) -> None:
        """Drop a paused turn without finishing it: its messages leave the live history (they
        were never stored), so no tool call is left without a result; nothing of it is stored.
        Calls it already executed stay in the outbox."""
        turn = self.paused_turn
        if turn is not None:
            self._window.rollback(len(turn.messages))
        self._turn = None
        self.session_state.finish("paused turn discarded")

    # ------------------------------------------------------------------------------------------
    # sessions and background tasks

    async def switch_session(self, session_id: str) -> None:
        self._start()
        await self._open_session(session_id)

    async def new_session(self, title: str = "") -> str:
        self._start()
        info = await self._session_store.create(title=title)
        if self._round_store is not self._session_store:
            await self._round_store.create(session_id=info.id, title=title)
        self._set_session(info.id, [], [])  # just created: nothing to read back
        return str(info.id)

    async def fork_session(self, at_round_id: str | None = None, *, switch: bool = True) -> str:
        """Copy this session's rounds up to ``at_round_id`` into a new session (emits
        ``SessionForked`` with the round count)."""
        self._start()
        info, count = await self._session_store.fork(self._session_id, at_round_id)
        self.events.emit(SessionForked(self._session_id, info.id, count))
        if switch:
            await self._open_session(info.id)
        return str(info.id)

    def list_background_tasks(self) -> builtins.list[dict[str, object]]:
        return self._need("background").list()  # type: ignore[no-any-return]

    async def kill_background_task(self, task_id: str) -> bool:
        return await self._need("background").kill(task_id)  # type: ignore[no-any-return]

    def mark_recovered(self) -> StatusTransition:
        """The host dealt with the error that stopped the session: chatting is allowed again."""
        return self.session_state.mark_recovered()
