"""A project's resources: what is set up once per project and process, and shared by its sessions.

:class:`ProjectResources` resolves the settings (:func:`memora.agent.resolved.agent_settings`),
builds the plugin manager, the providers, the storage and memory, the session store, the tracers,
the services (web search, fetch, code execution), the tool sources (MCP servers) and takes the
project lock.  It sits below the Agent: an ``Agent(project_path=...)`` builds one of its own; the
host's door, :class:`~memora.agent.runtime.ProjectRuntime`, is this class plus what makes Agents
(``runtime.agent(session_id=...)``) and the role packs a new session would see.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from ..errors import BusyError, ErrorCode, InvalidConfigError, MemoraError, NotAvailableError
from ..events import EventEmitter
from ..llm.router import ProviderRouter
from ..security.state import user_config_dir
from .options import SESSION_OPTIONS, AgentOptions

# the stores, plugins, services and tools are imported by open(), not with the class
if TYPE_CHECKING:
    from ..checks import CheckContext, CheckDecision, ToolCallInfo
    from ..llm.provider import Provider
    from ..memory.sessions import SessionStore
    from ..memory.vectors import SemanticSearch
    from ..plugins import Plugins
    from ..settings import Settings
    from ..tracing import Tracer
    from .durable import TurnExecutor
    from .resolved import AgentSettings

__all__ = ["SESSION_OPTIONS", "ProjectResources", "maybe_await"]

logger = logging.getLogger("memora.agent")


def _host_check(fn: Callable[[ToolCallInfo, CheckContext], CheckDecision | None]) -> object:
    """The ``pre_execution_check`` Agent option as a plugin."""
    from ..hookspecs import hookimpl

    class HostCheck:
        @hookimpl
        def pre_execution_check(
            self, call: ToolCallInfo, context: CheckContext
        ) -> CheckDecision | None:
            return fn(call, context)

    return HostCheck()


def _memora_folders(project: Path, *folders: Path) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    """``folders`` as absolute paths, split: those a tool can be kept out of, and those that
    hold the project (its tools cannot be kept out of the folder they work in: said once)."""
    root = os.path.realpath(project)
    kept: list[Path] = []
    holding: list[Path] = []
    for folder in folders:
        real = os.path.realpath(folder)
        if os.path.commonpath([real, root]) == real:
            logger.warning(
                "%s holds the project %s: its tools are not kept out of it, and the commands "
                "of an Agent whose tools are isolated are refused (keep memora's data and "
                "config folders apart from the project)",
                real,
                root,
            )
            holding.append(Path(real))
            continue
        kept.append(Path(real))
    return tuple(kept), tuple(holding)


async def maybe_await(result: Any) -> Any:
    """Locks and stores may offer plain or async methods."""
    if asyncio.iscoroutine(result):
        return await result
    return result


class ProjectResources:
    """One project's plugins, providers, stores, services and lock (see the module docstring)."""

    def __init__(
        self,
        options: AgentOptions | None = None,
        *,
        events: EventEmitter | None = None,
        **kwargs: Any,
    ) -> None:
        self.host_options = options if options is not None else AgentOptions(**kwargs)
        self.events = events if events is not None else EventEmitter()
        self._resolved: AgentSettings | None = None
        self._open = False
        self._closed = False
        self._owned: list[Any] = []
        self._sources: dict[str, tuple[str, Any]] | None = None
        self.source_failures: dict[str, str] = {}
        """capability -> why its tool source could not provide it (``capability_map``)."""
        self._holders: dict[str, object] = {}
        self._agents: set[object] = set()

    # -- settings ----------------------------------------------------------------------------

    @property
    def options(self) -> AgentOptions:
        """The options in force: the host's, with the config files' ``options`` filled in."""
        return self._resolved.options if self._resolved is not None else self.host_options

    @property
    def settings(self) -> Settings:
        return self._need_resolved().settings

    @property
    def approvals(self) -> Any:
        """The approval mode from the options and the config (an Agent starts with it)."""
        return self._need_resolved().approvals

    @property
    def explicit(self) -> frozenset[str]:
        return self._need_resolved().explicit

    def _need_resolved(self) -> AgentSettings:
        if self._resolved is None:
            raise MemoraError(ErrorCode.NOT_INITIALIZED, "the project runtime is not open yet")
        return self._resolved

    def resolve(self) -> None:
        """Resolve the settings again (the files may have changed): ``reload_config``."""
        from .resolved import agent_settings

        self._resolved = agent_settings(self.host_options, plugins=self.plugins)

    def plugin_options(self, name: str, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return self._need_resolved().plugin_options(name, extra)

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self._open and not self._closed

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self, *, shared_lock: bool | None = None) -> Self:
        """Assemble plugins, take the project lock, open the stores (idempotent).
        ``shared_lock``: take the project lock shared (``project_lock_shared``, which it
        defaults to) — a server that learns only from the settings whether other processes
        serve the project decides here, without building the runtime again."""
        from ..plugins import create_plugin_manager
        from ..security.state import ensure_state_dir, keep_out_of_git, warn_if_shared

        if self._open:
            return self
        if self._closed:
            raise MemoraError(ErrorCode.NOT_INITIALIZED, "this project runtime is closed")
        host = self.host_options
        project = Path(host.project_path)
        if not project.is_dir():  # noqa: ASYNC240 - one stat at start-up
            raise InvalidConfigError(f"project_path {project} is not a folder")
        extra: list[Any] = list(host.plugins)
        if host.pre_execution_check is not None:
            extra.append(("host-check", _host_check(host.pre_execution_check)))
        # the plugins first: they declare which of their options a project's config may set
        self.plugins: Plugins = create_plugin_manager(
            load_entrypoints=host.load_entrypoints, extra=extra
        )
        self.resolve()
        data_dir = Path(self.options.data_dir)
        # under the project, every folder on the way is checked: a planted link or a file named
        # .memora is a clear error, not a write elsewhere or a traceback (abspath, not resolve:
        # resolving would follow the very links this is about)
        absolute = Path(os.path.abspath(data_dir))  # noqa: ASYNC240 - no I/O, start-up only
        root = Path(os.path.abspath(project))  # noqa: ASYNC240
        inside = absolute.is_relative_to(root)
        ensure_state_dir(absolute, root if inside else absolute.parent)
        warn_if_shared(absolute)  # a folder an older memora (or the umask) left readable
        if inside:  # committing the project must not publish its conversations
            keep_out_of_git(absolute)
        lock = self._create_lock(
            project,
            data_dir,
            self.options.project_lock_shared if shared_lock is None else shared_lock,
        )
        await maybe_await(lock.acquire())
        try:
            await self._assemble(project, data_dir, lock)
        except BaseException:
            await self._release_owned()
            await maybe_await(lock.release())
            raise
        self._open = True
        return self

    def _create_lock(self, project: Path, data_dir: Path, shared: bool) -> Any:
        spec = self._need_resolved().state_store(
            "project_lock", self.plugins.names("project_lock"), "file"
        )
        if not isinstance(spec, str):
            return spec
        # "shared" comes from the host only: a config that set it would undo the lock
        options = {k: v for k, v in self.plugin_options(spec).items() if k != "shared"}
        options.update(project=project, path=data_dir)
        if shared:
            options["shared"] = True
        return self.plugins.create("project_lock", spec, options)

    def _turn_executor(self, data_dir: Path) -> TurnExecutor | None:
        resolved = self._need_resolved()
        spec = resolved.turn_executor()
        if not isinstance(spec, str):
            return spec  # type: ignore[no-any-return]  # the host's object, or None
        storage = resolved.storage()
        options = {
            **self.plugin_options(spec),
            "path": data_dir,
            "storage": storage if isinstance(storage, str) else None,
            "storage_options": self.plugin_options(storage) if isinstance(storage, str) else {},
            # the user's own folder (this runtime's config_dir, as every other user file): the
            # journal a turn is taken over from is never a file a project could ship
            "user_dir": user_config_dir(self.options.config_dir),
        }
        executor = self.plugins.create("turn_executor", spec, options)
        self._owned.append(executor)
        return executor  # type: ignore[no-any-return]

    def _provider(self, spec: Any, options: Mapping[str, Any] | None = None) -> Provider:
        if spec is None:
            spec = "llamacpp"
        if isinstance(spec, str):
            provider = self.plugins.create("provider", spec, self.plugin_options(spec, options))
            self._owned.append(provider)
            return provider  # type: ignore[no-any-return]
        return spec  # type: ignore[no-any-return]

    def _router(self) -> ProviderRouter:
        resolved = self._need_resolved()
        spec, options, chosen = resolved.provider_choice("provider")
        logger.info("chat provider: %s", chosen)  # `memora run -v` says which it chose
        try:
            chat = self._provider(spec, options)
        except NotAvailableError as exc:
            yours = sorted(resolved.settings.config.providers)
            if not isinstance(spec, str) or not yours:
                raise
            raise NotAvailableError(
                f"{spec!r} is not a provider of your config (yours: {', '.join(yours)}), and "
                f"{exc.message}",
                context={"provider": spec},
            ) from exc
        background_spec, background_options = resolved.provider_spec("background_provider")
        background = (
            self._provider(background_spec, background_options)
            if background_spec is not None
            else None
        )
        router = self.options.provider_router
        routes = (
            {k: self._provider(v) for k, v in router.items()} if isinstance(router, Mapping) else {}
        )
        return ProviderRouter(
            chat,
            background=background,
            routes=routes,
            resolver=router if callable(router) else None,
            chosen=chosen,
        )

    async def _assemble(self, project: Path, data_dir: Path, lock: Any) -> None:
        from ..memory.manager import MemoryManager
        from ..security.paths import PathGuard
        from ..services import LazyServices
        from ..tools.process import BackgroundTasks
        from ..tools.works import WorksRegistry
        from ..tracing import combine_tracers
        from .results import SecurityManager

        opts = self.options
        resolved = self._need_resolved()
        plugins = self.plugins
        self.router = self._router()
        storage = resolved.storage()
        if isinstance(storage, str):
            chosen = self.plugin_options(storage, opts.storage_options)
            if storage == "sqlite" and opts.many_sessions:
                # the built-in store: many conversations' writes share commits on its worker
                # thread; written on the loop, as one conversation's are, a turn's p50 rose 5%
                # at 100 conversations (bench_serve)
                chosen.setdefault("write_inline", False)
            storage = plugins.create("storage", storage, {"path": data_dir, **chosen})
            self._owned.append(storage)
        sessions = resolved.state_store("session_store", plugins.names("session_store"), "jsonl")
        if isinstance(sessions, str):
            sessions = plugins.create(
                "session_store", sessions, {**self.plugin_options(sessions), "path": data_dir}
            )
            self._owned.append(sessions)
        self.session_store: SessionStore = sessions
        """The project's sessions (message history and rounds)."""
        self.round_store: SessionStore = opts.round_store or sessions
        """Where rounds go: the ``round_store`` option, else :attr:`session_store`."""
        self.turn_executor: TurnExecutor | None = self._turn_executor(data_dir)
        """What runs each turn and keeps its steps (durable turns), or ``None``: a turn runs in
        its Agent's own task (see :mod:`memora.agent.durable`)."""
        tracers = [
            plugins.create("tracer", name, self.plugin_options(name))
            for name in plugins.names("tracer")
        ]
        if opts.tracer is not None:
            tracers.append(opts.tracer)
        self.tracer: Tracer = combine_tracers(tracers)
        self.memory = MemoryManager(
            storage,
            self.events,
            semantic=self._semantic(storage),
            session_weight=self.options.session_weight,
            passage_weight=self.options.passage_weight,
        )
        self.memory.embed_pending()  # memories written before, or while the embedder was down
        self.services = LazyServices(self._service_sources())
        self.hidden, self.unhideable = _memora_folders(
            project, data_dir, user_config_dir(opts.config_dir)
        )
        """``hidden``: memora's data and the user's config folder — no file tool reaches them,
        and the processes of an isolated Agent's tools find them empty (``isolate_tools``);
        ``unhideable``: those of them that hold the project, which cannot be hidden from a
        process working in it: an isolated Agent's tools start no process there."""
        self.guard = PathGuard(project, opts.allowed_paths, hidden=self.hidden)
        self.security = SecurityManager(self.guard, opts.permission, lock)
        self.background = BackgroundTasks()
        self.works = WorksRegistry(data_dir, self.guard, self.memory)
        self._unlisten = plugins.add_listener(self._plugins_changed)

    def _semantic(self, storage: Any) -> SemanticSearch | None:
        """Semantic recall when an embedder is configured (user config or Agent option)."""
        from ..memory.vectors import Embedder, SemanticSearch, VectorStorage

        spec, options = self._need_resolved().embedder_spec()
        if spec is None:
            return None
        if isinstance(spec, str):
            embedder = self.plugins.create("embedder", spec, options)
            self._owned.append(embedder)
        else:
            embedder = spec
        if not isinstance(embedder, Embedder):
            raise InvalidConfigError(
                f"embedder {spec!r} is not an Embedder (it needs name, embed() and aclose())",
                context={"key": "embedder"},
            )
        if not isinstance(storage, VectorStorage):
            raise InvalidConfigError(
                f"the memory storage {type(storage).__name__} keeps no vectors, so the embedder "
                f"{embedder.name!r} cannot be used with it (sqlite, json, memory and postgres do)",
                context={"key": "embedder"},
            )
        return SemanticSearch(
            embedder,
            storage,
            weight=self.options.semantic_weight,
            session_weight=self.options.session_weight,
            passage_weight=self.options.passage_weight,
        )

    def _service_sources(self) -> dict[str, Any]:
        """Each service kind -> a ready object (an Agent option) or a factory called on first
        use.  A service named in the options must exist (checked now); otherwise the first
        installed one by name is used."""
        from ..services import LazyServices

        opts = self.options
        plugins = self.plugins
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
        svc = self.plugins.create(kind, name, self.plugin_options(name))
        self._owned.append(svc)
        return svc

    def _plugins_changed(self) -> None:
        """A plugin was registered or unregistered after ``open()``: services and tool sources
        follow (the Agents listen too, for their tools)."""
        stale = self.services.replace(self._service_sources())
        for svc in stale:
            if svc not in self._owned:
                self._owned.append(svc)  # closed with the runtime
        self._sources = None  # re-created from the plugins now registered

    def tool_sources(self) -> dict[str, tuple[str, Any]]:
        """capability -> (source name, source); sources are created (not started) once."""
        if self._sources is None:
            sources: dict[str, tuple[str, Any]] = {}
            for name in self.plugins.names("tool_source"):
                try:
                    source = self.plugins.create("tool_source", name, self.plugin_options(name))
                except Exception as exc:
                    logger.warning("tool source %r failed to start: %s", name, exc)
                    continue
                self._owned.append(source)
                for cap in source.capabilities():
                    sources.setdefault(cap, (name, source))
            self._sources = sources
        return self._sources

    # -- sessions --------------------------------------------------------------------------------

    def hold(self, holder: object, session_id: str, before: str | None = None) -> None:
        """``holder`` (an Agent) takes ``session_id``, letting go of ``before``: one Agent per
        session in a runtime, so two never append to one session's log at once."""
        owner = self._holders.get(session_id)
        if owner is not None and owner is not holder:
            raise BusyError(
                f"session {session_id} is open in another Agent of this runtime; close that "
                "Agent first",
                context={"session_id": session_id},
            )
        if before is not None and self._holders.get(before) is holder:
            del self._holders[before]
        self._holders[session_id] = holder

    def attach(self, agent: object) -> None:
        if not self.is_open:
            raise MemoraError(ErrorCode.NOT_INITIALIZED, "this project runtime is not open")
        self._agents.add(agent)

    def detach(self, agent: object) -> None:
        """An Agent closed: its sessions are free again."""
        self._agents.discard(agent)
        for sid in [s for s, h in self._holders.items() if h is agent]:
            del self._holders[sid]

    # -- closing ---------------------------------------------------------------------------------

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

    def own(self, obj: Any) -> None:
        """Close ``obj`` with the runtime."""
        if obj not in self._owned:
            self._owned.append(obj)

    async def close(self) -> None:
        """Kill background commands, close providers and stores, release the project lock."""
        if self._closed or not self._open:
            self._closed = True
            return
        self._closed = True
        self._unlisten()
        for agent in list(self._agents):
            await agent.close()  # type: ignore[attr-defined]
        with contextlib.suppress(Exception):
            await self.background.close()
        await self.memory.close()
        if self.session_store not in self._owned:  # a host's object: closed as before
            with contextlib.suppress(Exception):
                await self.session_store.close()
        await self._release_owned()
        await maybe_await(self.security.lock.release())
