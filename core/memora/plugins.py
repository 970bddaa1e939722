"""The plugin manager factory: stevedore discovers, pluggy registers and calls.

Each Agent (and each test) gets its own :class:`Plugins` from :func:`create_plugin_manager`;
there is no module-level manager.

* Built-in implementations (``memora.default_plugins.*``) are registered with the same call as
  third-party ones and are listed with ``builtin=True``.
* Third-party plugins come from the entry-point group ``memora``.  A plugin that fails to import is
  recorded in :attr:`Plugins.failures` (name, distribution, error) and the rest still loads;
  ``MEMORA_STRICT_PLUGINS=1`` re-raises instead.  ``MEMORA_LOAD_PLUGINS=a,b`` loads only the named
  entry points (an empty value loads none).
* After loading, ``check_pending()`` makes a misspelt hook name fail at start-up, and every
  register-style hook is collected once so two plugins claiming one name fail at start-up too.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Literal, cast

import pluggy

from . import hookspecs
from .checks import (
    CheckContext,
    CheckDecision,
    CheckOutcome,
    Deny,
    ToolCallInfo,
    combine_decisions,
)
from .errors import ErrorCode, NotAvailableError, PluginConflictError, PluginError

__all__ = [
    "DEFAULT_PLUGINS",
    "ENTRY_POINT_GROUP",
    "KINDS",
    "Kind",
    "PluginFailure",
    "PluginInfo",
    "Plugins",
    "Registered",
    "create_plugin_manager",
]

logger = logging.getLogger("memora.plugins")

ENTRY_POINT_GROUP = "memora"

DEFAULT_PLUGINS: tuple[str, ...] = (
    "memora.default_plugins.checks",
    "memora.default_plugins.storage",
    "memora.default_plugins.sessions",
    "memora.default_plugins.tools",
)
"""Modules registered as built-in plugins, in this order."""

Kind = Literal[
    "provider",
    "storage",
    "session_store",
    "web_search",
    "web_fetch",
    "code_executor",
    "project_search",
    "tracer",
    "tool",
]

KINDS: dict[Kind, str] = {
    "provider": "register_providers",
    "storage": "register_storage",
    "session_store": "register_session_stores",
    "web_search": "register_web_search",
    "web_fetch": "register_web_fetch",
    "code_executor": "register_code_executors",
    "project_search": "register_project_search",
    "tracer": "register_tracers",
    "tool": "register_tools",
}
"""Each kind of registered thing and the hook that registers it."""

_INSTALL_HINTS: dict[str, str] = {
    "provider": "pip install memora-plugin-openai (or memora-plugin-llamacpp)",
    "web_search": "pip install memora-plugin-ddgs",
    "web_fetch": "pip install memora-plugin-fetch",
}


@dataclass(frozen=True, slots=True)
class Registered:
    """One registered thing: its name, the object or factory, and who registered it."""

    kind: Kind
    name: str
    value: Any
    plugin: str


@dataclass(frozen=True, slots=True)
class PluginInfo:
    name: str
    distribution: str | None
    version: str | None
    hooks: tuple[str, ...]
    builtin: bool


@dataclass(frozen=True, slots=True)
class PluginFailure:
    name: str
    distribution: str | None
    error: str


@dataclass(slots=True)
class _Meta:
    distribution: str | None
    version: str | None
    builtin: bool


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def _load_only() -> list[str] | None:
    raw = os.environ.get("MEMORA_LOAD_PLUGINS")
    if raw is None:
        return None
    return [part.strip() for part in raw.split(",") if part.strip()]


@dataclass
class Plugins:
    """A pluggy manager plus what memora knows about its plugins."""

    pm: pluggy.PluginManager
    failures: list[PluginFailure] = field(default_factory=list)
    _meta: dict[str, _Meta] = field(default_factory=dict)
    _registry: dict[Kind, dict[str, Registered]] = field(default_factory=dict)

    # -- registration -------------------------------------------------------------------------

    def register(
        self,
        plugin: object,
        name: str | None = None,
        *,
        distribution: str | None = None,
        version: str | None = None,
        builtin: bool = False,
    ) -> str:
        """Register a plugin object (a module or an instance with ``@hookimpl`` methods).

        Used for built-ins, entry points and host hooks alike.  Re-collects every registry, so a
        name clash with an already registered plugin raises :class:`PluginConflictError` and
        leaves the manager as it was.
        """
        plugin_name = self.pm.register(plugin, name=name)
        if plugin_name is None:  # pragma: no cover - pluggy returns None only for blocked names
            raise PluginError(ErrorCode.PLUGIN_LOAD_FAILED, f"plugin {name!r} is blocked")
        self._meta[plugin_name] = _Meta(distribution, version, builtin)
        try:
            self.pm.check_pending()
            self._collect()
        except Exception:
            self.pm.unregister(plugin)
            self._meta.pop(plugin_name, None)
            self._collect()
            raise
        return plugin_name

    def _collect(self) -> None:
        registry: dict[Kind, dict[str, Registered]] = {}
        for kind, hook_name in KINDS.items():
            table: dict[str, Registered] = {}
            # registration order, so the message names the earlier owner first
            for plugin_name, impl in self._impls(hook_name, call_order=False):
                adder = _make_adder(kind, plugin_name, table)
                self._call_impl(hook_name, plugin_name, impl, {"register": adder})
            registry[kind] = table
        self._registry = registry

    # -- calling hooks --------------------------------------------------------------------------

    def _impls(
        self, hook_name: str, *, call_order: bool = True
    ) -> Iterator[tuple[str, pluggy.HookImpl]]:
        """Hook implementations in pluggy's call order (last registered first, tryfirst/trylast
        honoured), or in registration order."""
        impls = getattr(self.pm.hook, hook_name).get_hookimpls()
        for impl in reversed(impls) if call_order else impls:
            yield impl.plugin_name, impl

    @staticmethod
    def _call_impl(
        hook_name: str, plugin_name: str, impl: pluggy.HookImpl, kwargs: Mapping[str, Any]
    ) -> Any:
        try:
            return impl.function(*[kwargs[a] for a in impl.argnames])
        except (PluginConflictError, NotAvailableError):
            raise
        except Exception as exc:
            raise PluginError(
                ErrorCode.PLUGIN_HOOK_FAILED,
                f"plugin {plugin_name!r} raised in hook {hook_name}: {type(exc).__name__}: {exc}",
                context={"plugin": plugin_name, "hook": hook_name},
            ) from exc

    def call_each(self, hook_name: str, **kwargs: Any) -> list[tuple[str, Any]]:
        """Call every implementation of ``hook_name``; returns ``(plugin, result)`` pairs.

        An exception inside a hook is re-raised as :class:`PluginError` naming the plugin.
        """
        return [
            (plugin_name, self._call_impl(hook_name, plugin_name, impl, kwargs))
            for plugin_name, impl in self._impls(hook_name)
        ]

    def pre_execution_check(self, call: ToolCallInfo, context: CheckContext) -> CheckOutcome:
        """Run every ``pre_execution_check`` and combine the answers (see :mod:`memora.checks`).

        A check that raises denies the call (fail closed) with a reason naming the plugin.
        """
        results: list[tuple[str, CheckDecision | None]] = []
        kwargs: dict[str, object] = {"call": call, "context": context}
        for plugin_name, impl in self._impls("pre_execution_check"):
            try:
                answer = cast(
                    "CheckDecision | None", impl.function(*[kwargs[a] for a in impl.argnames])
                )
                results.append((plugin_name, answer))
            except Exception as exc:
                logger.warning("pre_execution_check of plugin %r raised: %r", plugin_name, exc)
                results.append(
                    (plugin_name, Deny(f"check of plugin {plugin_name!r} failed: {exc}"))
                )
        return combine_decisions(results)

    # -- looking things up -------------------------------------------------------------------------

    def registered(self, kind: Kind) -> dict[str, Registered]:
        """Everything registered for ``kind``, by name."""
        return dict(self._registry.get(kind, {}))

    def names(self, kind: Kind) -> list[str]:
        return sorted(self._registry.get(kind, {}))

    def get(self, kind: Kind, name: str) -> Any:
        """The factory (or tool) registered as ``name``; a clear error listing what exists."""
        table = self._registry.get(kind, {})
        try:
            return table[name].value
        except KeyError:
            available = sorted(table)
            hint = _INSTALL_HINTS.get(kind)
            msg = f"no {kind.replace('_', ' ')} named {name!r} is installed; available: " + (
                ", ".join(available) if available else "none"
            )
            if hint:
                msg += f" (to add one: {hint})"
            raise NotAvailableError(
                msg, context={"kind": kind, "name": name, "available": available}
            ) from None

    def create(self, kind: Kind, name: str, options: Mapping[str, Any] | None = None) -> Any:
        """Look up the factory ``name`` of ``kind`` and call it with ``options``."""
        factory = self.get(kind, name)
        owner = self._registry[kind][name].plugin
        try:
            return factory(dict(options or {}))
        except (NotAvailableError, PluginError):
            raise
        except Exception as exc:
            raise PluginError(
                ErrorCode.PLUGIN_HOOK_FAILED,
                f"plugin {owner!r} failed to create {kind} {name!r}: {type(exc).__name__}: {exc}",
                context={"plugin": owner, "kind": kind, "name": name},
            ) from exc

    def plugin_infos(self, *, include_builtin: bool = True) -> list[PluginInfo]:
        infos = []
        for name, plugin in self.pm.list_name_plugin():
            meta = self._meta.get(name, _Meta(None, None, False))
            if meta.builtin and not include_builtin:
                continue
            callers = self.pm.get_hookcallers(plugin) or []
            infos.append(
                PluginInfo(
                    name=name,
                    distribution=meta.distribution,
                    version=meta.version,
                    hooks=tuple(sorted(c.name for c in callers)),
                    builtin=meta.builtin,
                )
            )
        infos.sort(key=lambda i: (not i.builtin, i.name))
        return infos


def _make_adder(kind: Kind, plugin_name: str, table: dict[str, Registered]) -> Callable[..., None]:
    def add(name_or_tool: Any, value: Any = None) -> None:
        if kind == "tool":
            tool = name_or_tool
            name = getattr(tool, "name", None)
            if not isinstance(name, str) or not name:
                raise PluginError(
                    ErrorCode.INVALID_CONFIG,
                    f"plugin {plugin_name!r} registered a tool without a name: {tool!r}",
                    context={"plugin": plugin_name},
                )
            value = tool
        else:
            name = name_or_tool
            if not isinstance(name, str) or not name.strip():
                raise PluginError(
                    ErrorCode.INVALID_CONFIG,
                    f"plugin {plugin_name!r} registered a {kind} with an empty or non-string name",
                    context={"plugin": plugin_name},
                )
            if not callable(value):
                raise PluginError(
                    ErrorCode.INVALID_CONFIG,
                    f"plugin {plugin_name!r} registered {kind} {name!r} with a non-callable factory",
                    context={"plugin": plugin_name},
                )
        if name in table:
            other = table[name].plugin
            raise PluginConflictError(
                f"{kind.replace('_', ' ')} name {name!r} is registered by both plugin "
                f"{other!r} and plugin {plugin_name!r}; uninstall one or restrict loading with "
                "MEMORA_LOAD_PLUGINS",
                context={"kind": kind, "name": name, "owners": [other, plugin_name]},
            )
        table[name] = Registered(kind, name, value, plugin_name)

    return add


def _dist_of(entry_point: Any) -> tuple[str | None, str | None]:
    dist = getattr(entry_point, "dist", None)
    if dist is None:
        return None, None
    try:
        return dist.metadata["Name"], dist.version
    except Exception:  # pragma: no cover - broken metadata
        return getattr(dist, "name", None), None


def _discover_entry_points(
    only: list[str] | None, strict: bool, failures: list[PluginFailure]
) -> list[tuple[str, object, str | None, str | None]]:
    """Load entry points of the ``memora`` group through stevedore; failures are recorded."""
    if only is not None and not only:
        return []
    from stevedore import ExtensionManager, NamedExtensionManager

    # stevedore memoises scans per namespace for the life of the process; a host that installs
    # a plugin and creates a new manager must see it, so drop that memo (its on-disk cache,
    # keyed by sys.path and file mtimes, still makes the scan cheap).
    ExtensionManager.ENTRY_POINT_CACHE.pop(ENTRY_POINT_GROUP, None)

    def on_failure(_manager: Any, entry_point: Any, exc: BaseException) -> None:
        dist, _ = _dist_of(entry_point)
        if dist is None:
            from importlib.metadata import entry_points

            for ep in entry_points(group=ENTRY_POINT_GROUP, name=getattr(entry_point, "name", "")):
                dist, _ = _dist_of(ep)
        name = getattr(entry_point, "name", str(entry_point))
        failure = PluginFailure(name=name, distribution=dist, error=f"{type(exc).__name__}: {exc}")
        logger.warning("plugin %r (%s) failed to load: %s", name, dist, failure.error)
        if strict:
            raise PluginError(
                ErrorCode.PLUGIN_LOAD_FAILED,
                f"plugin {name!r} from {dist or 'an unknown distribution'} failed to load: "
                f"{failure.error}",
                context={"plugin": name, "distribution": dist},
            ) from exc
        failures.append(failure)

    if only is None:
        mgr: Any = ExtensionManager(
            ENTRY_POINT_GROUP, invoke_on_load=False, on_load_failure_callback=on_failure
        )
    else:
        mgr = NamedExtensionManager(
            ENTRY_POINT_GROUP,
            names=only,
            invoke_on_load=False,
            on_load_failure_callback=on_failure,
            name_order=True,
        )
    # stevedore may hand back entry points rebuilt from its cache, without ``dist``: look the
    # distributions up from importlib.metadata once.
    from importlib.metadata import entry_points

    owners = {ep.name: _dist_of(ep) for ep in entry_points(group=ENTRY_POINT_GROUP)}
    loaded = []
    for ext in mgr.extensions:
        dist, version = _dist_of(ext.entry_point)
        if dist is None:
            dist, version = owners.get(ext.name, (None, None))
        loaded.append((ext.name, ext.plugin, dist, version))
    return loaded


def create_plugin_manager(
    *,
    load_entrypoints: bool = True,
    extra: Iterable[object | tuple[str, object]] = (),
    strict: bool | None = None,
) -> Plugins:
    """Create a fresh plugin manager: built-ins, then entry points, then ``extra`` (host hooks).

    ``extra`` items are plugin objects or ``(name, plugin)`` pairs.  ``strict`` defaults to the
    ``MEMORA_STRICT_PLUGINS`` environment variable.
    """
    if strict is None:
        strict = _env_flag("MEMORA_STRICT_PLUGINS")
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    plugins = Plugins(pm)

    import memora

    version = getattr(memora, "__version__", None)
    for module_name in DEFAULT_PLUGINS:
        module: ModuleType = importlib.import_module(module_name)
        _register_raw(plugins, module, module_name, "memora", version, builtin=True)

    if load_entrypoints:
        for name, obj, dist, ver in _discover_entry_points(_load_only(), strict, plugins.failures):
            try:
                _register_raw(plugins, obj, name, dist, ver, builtin=False)
            except ValueError as exc:  # pluggy: name already registered
                failure = PluginFailure(name, dist, f"{type(exc).__name__}: {exc}")
                if strict:
                    raise PluginError(
                        ErrorCode.PLUGIN_LOAD_FAILED,
                        f"plugin {name!r}: {exc}",
                        context={"plugin": name, "distribution": dist},
                    ) from exc
                logger.warning("plugin %r not registered: %s", name, exc)
                plugins.failures.append(failure)

    for item in extra:
        host_name: str | None
        if isinstance(item, tuple):
            host_name, obj = item
        else:
            host_name, obj = None, item
        _register_raw(plugins, obj, host_name, None, None, builtin=False)

    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(
            ErrorCode.PLUGIN_LOAD_FAILED,
            f"plugin {exc.plugin!r} implements a hook memora does not define: {exc}",
            context={"plugin": getattr(exc, "plugin", None)},
        ) from exc
    plugins._collect()
    return plugins


def _register_raw(
    plugins: Plugins,
    obj: object,
    name: str | None,
    dist: str | None,
    version: str | None,
    *,
    builtin: bool,
) -> None:
    """Register without re-collecting (the factory collects once at the end)."""
    try:
        registered = plugins.pm.register(obj, name=name)
    except pluggy.PluginValidationError as exc:
        raise PluginError(
            ErrorCode.PLUGIN_LOAD_FAILED,
            f"plugin {name!r} has an invalid hook implementation: {exc}",
            context={"plugin": name, "distribution": dist},
        ) from exc
    if registered is not None:
        plugins._meta[registered] = _Meta(dist, version, builtin)
