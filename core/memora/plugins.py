"""The plugin manager factory: stevedore discovers, pluggy registers and calls.

Each Agent (and each test) gets its own :class:`Plugins` from :func:`create_plugin_manager`;
there is no module-level manager.

Plugins come from three places, in rising precedence:

``builtin``
    ``memora.default_plugins.*``, registered with the same call as everyone else.
``installed``
    entry points of the group ``memora`` (``pip install memora-plugin-…``).
``host``
    plugin objects the host passes in code (``Agent(plugins=[...])``, ``extra=``,
    :meth:`Plugins.register`).

**An installed plugin that fails costs only itself.**  Failing to import, an invalid or unknown
(misspelt) hook implementation, or raising inside a register hook: the plugin is unregistered
and recorded in :attr:`Plugins.failures` with its distribution and the error; everything else
keeps working.  ``MEMORA_STRICT_PLUGINS=1`` turns each of these into a :class:`PluginError`.
Host plugins are code the host wrote and passed explicitly, so their mistakes raise at once.

**Name clashes follow one rule.**  Two plugins registering the same name for the same kind: the
one from the higher level above keeps it (a host plugin may override an installed or built-in
name, an installed plugin a built-in one); on the same level the first registered keeps it
(installed plugins register in the order of their entry-point names).  Every clash is recorded
in :attr:`Plugins.clashes`; a same-level clash between installed plugins is a failure under
``MEMORA_STRICT_PLUGINS=1``, and between host plugins always raises
:class:`PluginConflictError`.

Hooks are called through pluggy, so ``wrapper=True``/``hookwrapper`` implementations, ``tryfirst``
and ``trylast`` behave as pluggy documents.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import pluggy

from . import hookspecs
from ._lazy import lazy_module
from ._version import __version__
from .errors import ErrorCode, MemoraError, NotAvailableError, PluginConflictError, PluginError
from .plugin_discovery import ENTRY_POINT_GROUP, PluginFailure, discover_entry_points
from .plugin_hooks import CHECK_ANSWERS, KINDS, Collector, Kind, attribute
from .security.trust import factory_rules
from .tools import DeferredTool

if TYPE_CHECKING:  # memora.checks is imported by the first check, not by `memora plugins`
    from .checks import CheckContext, CheckDecision, CheckOutcome, Deny, ToolCallInfo

__all__ = [
    "DEFAULT_PLUGINS",
    "ENTRY_POINT_GROUP",
    "INSTALL_HINTS",
    "KINDS",
    "Kind",
    "NameClash",
    "Origin",
    "PluginFailure",
    "PluginInfo",
    "Plugins",
    "Registered",
    "checked_factory",
    "create_plugin_manager",
    "probed",
]

logger = logging.getLogger("memora.plugins")

KERNEL_DISTRIBUTION = "memora-kernel"

DEFAULT_PLUGINS: tuple[str, ...] = (
    "memora.default_plugins.checks",
    "memora.default_plugins.storage",
    "memora.default_plugins.sessions",
    "memora.default_plugins.locks",
    "memora.default_plugins.tools",
)
"""Modules registered as built-in plugins, in this order."""

INSTALL_HINTS: dict[str, str] = {
    "provider": "pip install memora-plugin-openai (or memora-plugin-llamacpp)",
    "embedder": "pip install memora-plugin-openai (or memora-plugin-llamacpp)",
    "web_fetch": "pip install memora-plugin-fetch",
    "web_search": "pip install memora-plugin-ddgs",
    "code_executor": "pip install memora-plugin-sandbox",
    "tracer": "pip install memora-plugin-otel",
    "tool_source": "pip install memora-plugin-mcp",
    "turn_executor": "pip install memora-plugin-dbos",
}
"""Install hints shown when nothing of a kind is installed.  Only distributions that exist in
this repository's ``plugins/`` folder are named (a test checks it)."""

Origin = Literal["builtin", "installed", "host"]
_RANK: dict[Origin, int] = {"builtin": 0, "installed": 1, "host": 2}


@dataclass(frozen=True, slots=True)
class Registered:
    """One registered thing: its name, the object or factory, and who registered it."""

    kind: Kind
    name: str
    value: Any
    plugin: str


@dataclass(frozen=True, slots=True)
class PluginInfo:
    """A registered plugin: where it comes from and which hooks and names it provides."""

    name: str
    distribution: str | None
    version: str | None
    hooks: tuple[str, ...]
    builtin: bool
    origin: Origin = "host"
    registers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Kind -> the names this plugin provides (those it won; see :attr:`Plugins.clashes`)."""


@dataclass(frozen=True, slots=True)
class NameClash:
    """Two plugins registered one name for one kind; ``kept`` keeps it."""

    kind: Kind
    name: str
    kept: str
    dropped: str
    reason: str


@dataclass(slots=True)
class _Meta:
    """Where a registered plugin object came from."""

    distribution: str | None
    version: str | None
    origin: Origin

    @property
    def builtin(self) -> bool:
        return self.origin == "builtin"


def checked_factory(
    label: str,
    legal: Iterable[str],
    load: Callable[[], Callable[..., Any]],
    *,
    project: Mapping[str, Any] | None = None,
) -> Callable[[Mapping[str, Any]], Any]:
    """A plugin factory that refuses unknown options (naming the legal ones) and imports its
    implementation only when called (``load`` returns the class), so discovering the plugin
    stays cheap: ``register("ddgs", checked_factory("ddgs", {"region"}, lambda: DdgsSearch))``.

    ``project`` maps the options a project's config may set to their rule
    (:data:`memora.settings.ANY`, :class:`~memora.settings.AtMost`,
    :class:`~memora.settings.OneOf`); the others come from the user's side only."""
    allowed = frozenset(legal)

    def factory(options: Mapping[str, Any]) -> Any:
        unknown = set(options) - allowed
        if unknown:
            raise ValueError(
                f"unknown {label} option(s) {', '.join(sorted(unknown))}; legal: "
                f"{', '.join(sorted(allowed)) or 'none'}"
            )
        return load()(**options)

    factory.probe = load  # type: ignore[attr-defined]  # memora plugins imports it to check
    if project:
        unknown = set(project) - allowed
        if unknown:
            raise ValueError(f"{label}: project options {sorted(unknown)} are not legal options")
        factory.project_options = dict(project)  # type: ignore[attr-defined]
    return factory


_F = TypeVar("_F")


def probed(factory: _F, load: Callable[[], Any]) -> _F:
    """Attach ``load`` (what the factory imports on first use) as its ``probe``, for
    :meth:`Plugins.probe`; returns ``factory``."""
    factory.probe = load  # type: ignore[attr-defined]
    return factory


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def _load_only() -> list[str] | None:
    raw = os.environ.get("MEMORA_LOAD_PLUGINS")
    if raw is None:
        return None
    return [part.strip() for part in raw.split(",") if part.strip()]


_checks = lazy_module("memora.checks")
"""memora.checks, imported by the first tool call's check (not by `memora plugins`)."""


def _readable_name(obj: object) -> str:
    if isinstance(obj, ModuleType):
        return obj.__name__
    if isinstance(obj, type):
        return obj.__name__
    return type(obj).__name__


@dataclass
class Plugins:
    """A pluggy manager plus what memora knows about its plugins."""

    pm: pluggy.PluginManager
    strict: bool = False
    failures: list[PluginFailure] = field(default_factory=list)
    clashes: list[NameClash] = field(default_factory=list)
    _meta: dict[str, _Meta] = field(default_factory=dict)
    _registry: dict[Kind, dict[str, Registered]] = field(default_factory=dict)
    _listeners: list[Callable[[], None]] = field(default_factory=list)

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
        """Register a host plugin (a module, class or instance with ``@hookimpl`` methods).

        Works before and after an Agent's ``init()``: every register hook runs again, and Agents
        built on this manager recompute their tools, services and capability map.  A mistake in
        the plugin (an unknown hook, a hook that raises, a name another host plugin already
        holds) raises :class:`PluginError` and leaves the manager as it was.
        """
        origin: Origin = "builtin" if builtin else "host"
        plugin_name = self._add(plugin, name, distribution, version, origin)
        try:
            self._collect()
        except BaseException:
            self.pm.unregister(name=plugin_name)
            self._meta.pop(plugin_name, None)
            self._collect()
            raise
        self._changed()
        return plugin_name

    def unregister(self, name: str) -> None:
        """Remove a plugin by name; Agents built on this manager recompute what it provided."""
        if self.pm.get_plugin(name) is None:
            raise NotAvailableError(
                f"no plugin named {name!r} is registered", context={"name": name}
            )
        self.pm.unregister(name=name)
        self._meta.pop(name, None)
        self._collect()
        self._changed()

    def add_listener(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback()`` after every later :meth:`register`/:meth:`unregister`.

        Returns a function that removes the listener.
        """
        self._listeners.append(callback)
        return lambda: self._listeners.remove(callback) if callback in self._listeners else None

    def _changed(self) -> None:
        for callback in list(self._listeners):
            callback()

    def _add(
        self,
        obj: object,
        name: str | None,
        distribution: str | None,
        version: str | None,
        origin: Origin,
    ) -> str:
        """pm.register plus memora's checks; raises PluginError and leaves nothing behind."""
        if name is None:
            base = _readable_name(obj)
            name, n = base, 2
            while self.pm.get_plugin(name) is not None or self.pm.is_blocked(name):
                name, n = f"{base}#{n}", n + 1
        try:
            plugin_name = self.pm.register(obj, name=name)
        except pluggy.PluginValidationError as exc:
            raise PluginError(
                ErrorCode.PLUGIN_LOAD_FAILED,
                f"plugin {name!r} has an invalid hook implementation: {exc}",
                context={"plugin": name, "distribution": distribution},
            ) from exc
        except ValueError as exc:  # the name or the object is already registered
            raise PluginError(
                ErrorCode.PLUGIN_LOAD_FAILED,
                f"plugin {name!r} could not be registered: {exc}",
                context={"plugin": name, "distribution": distribution},
            ) from exc
        if plugin_name is None:  # pragma: no cover - pluggy returns None only for blocked names
            raise PluginError(ErrorCode.PLUGIN_LOAD_FAILED, f"plugin {name!r} is blocked")
        unknown = [
            caller.name
            for caller in self.pm.get_hookcallers(obj) or []
            if not caller.has_spec()
            and any(i.plugin is obj and not i.optionalhook for i in caller.get_hookimpls())
        ]
        if unknown:
            self.pm.unregister(obj)
            hints = []
            for hook in unknown:
                import difflib

                close = difflib.get_close_matches(hook, [*KINDS.values(), "pre_execution_check"])
                hints.append(f"{hook!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            raise PluginError(
                ErrorCode.PLUGIN_LOAD_FAILED,
                f"plugin {plugin_name!r} implements a hook memora does not define: "
                + ", ".join(hints),
                context={"plugin": plugin_name, "distribution": distribution, "hooks": unknown},
            )
        for caller in self.pm.get_hookcallers(obj) or []:
            for impl in caller.get_hookimpls():
                if impl.plugin is obj:
                    attribute(impl, caller.name)
        self._meta[plugin_name] = _Meta(distribution, version, origin)
        return plugin_name

    def _collect(self) -> None:
        """Run every register hook through pluggy and build the registry.

        An installed plugin whose hook raises is unregistered and recorded (under strict mode:
        raised); a built-in or host plugin that raises is an error of the host's own making and
        raises :class:`PluginError`.  Name clashes are settled by :func:`_settle`.
        """
        while True:
            staged: dict[Kind, list[tuple[str, str, Any]]] = {}
            errors: dict[str, tuple[str, BaseException]] = {}
            for kind, hook_name in KINDS.items():
                collector = Collector(kind)
                getattr(self.pm.hook, hook_name)(register=collector)
                staged[kind] = collector.staged
                for plugin, exc in collector.errors.items():
                    errors.setdefault(plugin, (hook_name, exc))
            if not errors:
                break
            for plugin, (hook_name, exc) in errors.items():
                meta = self._meta.get(plugin)
                if isinstance(exc, PluginError):
                    error: PluginError = exc
                else:
                    error = PluginError(
                        ErrorCode.PLUGIN_HOOK_FAILED,
                        f"plugin {plugin!r} raised in hook {hook_name}: "
                        f"{type(exc).__name__}: {exc}",
                        context={"plugin": plugin, "hook": hook_name},
                    )
                if meta is None or meta.origin != "installed" or self.strict:
                    if error is exc:
                        raise error
                    raise error from exc
                # an installed plugin that breaks loses only itself; collect again without it
                self._drop(plugin, meta, error.message, "hook")
        self._registry = self._settle(staged)

    def _drop(self, plugin: str, meta: _Meta, error: str, stage: str) -> None:
        logger.warning("plugin %r (%s) left out: %s", plugin, meta.distribution, error)
        self.failures.append(PluginFailure(plugin, meta.distribution, error, stage))
        self.pm.unregister(name=plugin)
        self._meta.pop(plugin, None)

    def _settle(
        self, staged: Mapping[Kind, list[tuple[str, str, Any]]]
    ) -> dict[Kind, dict[str, Registered]]:
        order = {name: i for i, name in enumerate(self._meta)}  # registration order
        registry: dict[Kind, dict[str, Registered]] = {}
        clashes: list[NameClash] = []
        for kind, entries in staged.items():
            table: dict[str, Registered] = {}
            for plugin, name, value in sorted(entries, key=lambda e: order.get(e[0], 0)):
                new = Registered(kind, name, value, plugin)
                old = table.get(name)
                if old is None:
                    table[name] = new
                    continue
                old_origin = self._origin(old.plugin)
                new_origin = self._origin(plugin)
                label = kind.replace("_", " ")
                if _RANK[new_origin] > _RANK[old_origin]:
                    table[name] = new
                    clashes.append(
                        NameClash(
                            kind, name, plugin, old.plugin,
                            f"{new_origin} plugin {plugin!r} overrides {label} {name!r} of "
                            f"{old_origin} plugin {old.plugin!r}",
                        )
                    )  # fmt: skip
                    continue
                message = (
                    f"{label} name {name!r} is registered by both plugin {old.plugin!r} and plugin "
                    f"{plugin!r}; {old.plugin!r} keeps it"
                )
                context = {"kind": kind, "name": name, "owners": [old.plugin, plugin]}
                if new_origin == "host" or new_origin == "builtin":
                    raise PluginConflictError(
                        message.replace(f"; {old.plugin!r} keeps it", "; give one another name"),
                        context=context,
                    )
                if self.strict:
                    raise PluginConflictError(
                        message.replace(
                            f"; {old.plugin!r} keeps it",
                            "; uninstall one of them or leave one out with MEMORA_LOAD_PLUGINS",
                        ),
                        context=context,
                    )
                logger.warning("%s", message)
                clashes.append(NameClash(kind, name, old.plugin, plugin, message))
            registry[kind] = table
        self.clashes = clashes
        return registry

    def _origin(self, plugin: str) -> Origin:
        meta = self._meta.get(plugin)
        return meta.origin if meta is not None else "host"

    # -- calling hooks --------------------------------------------------------------------------

    def pre_execution_check(self, call: ToolCallInfo, context: CheckContext) -> CheckOutcome:
        """Run every ``pre_execution_check`` through pluggy and combine the answers (see
        :mod:`memora.checks`).

        A check that raises denies the call (fail closed) with a reason naming the plugin; so
        does a hook wrapper that raises.  Answers a wrapper adds are attributed to the wrapper.
        """
        checks = _checks()
        deny: type[Deny] = checks.Deny
        combine: Callable[[Iterable[tuple[str, CheckDecision | None]]], CheckOutcome] = (
            checks.combine_decisions
        )
        answers: list[tuple[str, object]] = []
        token = CHECK_ANSWERS.set(answers)
        try:
            results = self.pm.hook.pre_execution_check(call=call, context=context)
        except Exception as exc:
            wrappers = self._wrapper_names("pre_execution_check") or ["a hook wrapper"]
            logger.warning("pre_execution_check wrapper raised: %r", exc)
            return combine([(wrappers[0], deny(f"check wrapper {wrappers[0]!r} failed: {exc}"))])
        finally:
            CHECK_ANSWERS.reset(token)
        by_id = {id(answer): plugin for plugin, answer in answers}
        combined: list[tuple[str, CheckDecision | None]] = []
        for answer in results or ():
            plugin = by_id.get(id(answer))
            if plugin is None:  # an answer a wrapper added
                plugin = ", ".join(self._wrapper_names("pre_execution_check")) or "a hook wrapper"
            combined.append((plugin, answer))
        return combine(combined)

    def _wrapper_names(self, hook_name: str) -> list[str]:
        impls = getattr(self.pm.hook, hook_name).get_hookimpls()
        return [i.plugin_name for i in impls if i.wrapper or i.hookwrapper]

    def register_commands(self, cli: Any) -> list[PluginFailure]:
        """Run every plugin's ``register_commands`` hook, each on a staging group of its own,
        and add what it registered to ``cli`` (a click group).  A plugin that raises loses
        only its commands; a name ``cli`` already has is not replaced.  Returns the failures
        (each also logged as a warning and kept in :attr:`failures`)."""
        import click

        failures: list[PluginFailure] = []
        for impl in reversed(self.pm.hook.register_commands.get_hookimpls()):  # load order
            staging = click.Group(name=cli.name)
            plugin = impl.plugin_name
            dist = self._meta[plugin].distribution if plugin in self._meta else None
            try:
                impl.function(cli=staging)
            except Exception as exc:
                error = f"raised in hook register_commands: {type(exc).__name__}: {exc}"
                logger.warning("plugin %r (%s): its commands are left out: %s", plugin, dist, error)
                failures.append(PluginFailure(plugin, dist, error, "hook"))
                continue
            for name, command in staging.commands.items():
                if name in cli.commands:
                    logger.warning(
                        "plugin %r (%s): command %r is taken; left out", plugin, dist, name
                    )
                    continue
                cli.add_command(command, name)
        self.failures.extend(failures)
        return failures

    # -- looking things up -------------------------------------------------------------------------

    def registered(self, kind: Kind) -> dict[str, Registered]:
        """Everything registered for ``kind``, by name."""
        table = self._registry.get(kind, {})
        for name, reg in table.items():
            if isinstance(reg.value, DeferredTool):
                table[name] = self._loaded(reg)  # same keys: the dict is not resized
        return dict(table)

    @staticmethod
    def _loaded(reg: Registered) -> Registered:
        """``reg`` with its built-in tool imported (:class:`~memora.tools.DeferredTool`): the
        built-ins are registered by name so that listing plugins imports no tool module."""
        return Registered(reg.kind, reg.name, reg.value.load(), reg.plugin)

    def names(self, kind: Kind) -> list[str]:
        return sorted(self._registry.get(kind, {}))

    def project_rules(self, name: str, kind: str | None = None) -> dict[str, Any]:
        """The options a project's config may set for the factory registered as ``name`` (of
        ``kind``, or of any kind: ``plugins[name]`` reaches every factory of that name), with
        their rules; an option two factories declare differently keeps neither's (stricter)."""
        out: dict[str, Any] = {}
        clash: set[str] = set()
        for k, table in self._registry.items():
            if kind is not None and k != kind:
                continue
            reg = table.get(name)
            if reg is None or k == "tool":
                continue
            for key, rule in factory_rules(reg.value).items():
                if key in out and out[key] != rule:
                    clash.add(key)
                out[key] = rule
        return {k: v for k, v in out.items() if k not in clash}

    def owner(self, kind: Kind, name: str) -> str | None:
        """The plugin that provides ``name`` of ``kind``, or None."""
        entry = self._registry.get(kind, {}).get(name)
        return entry.plugin if entry is not None else None

    def get(self, kind: Kind, name: str) -> Any:
        """The factory (or tool) registered as ``name``; a clear error listing what exists."""
        table = self._registry.get(kind, {})
        try:
            reg = table[name]
        except KeyError:
            available = sorted(table)
            label = kind.replace("_", " ")
            msg = f"no {label} named {name!r} is installed; available: " + (
                ", ".join(available) if available else "none"
            )
            broken = [f for f in self.failures if f.name == name]
            if broken:
                msg += f" (plugin {name!r} failed to load: {broken[0].error})"
            elif kind == "provider" and "openai" in available:
                # the plugin the hint would name is there: say how to point it somewhere
                msg += (
                    "; to use an OpenAI-compatible endpoint: memora init --base-url URL --model "
                    "NAME (or memora providers add NAME --base-url URL --model MODEL, or pass "
                    f"--base-url/--model); for {name!r}: pip install memora-plugin-{name}"
                )
            elif hint := INSTALL_HINTS.get(kind):
                msg += f" (to add one: {hint})"
            raise NotAvailableError(
                msg, context={"kind": kind, "name": name, "available": available}
            ) from None
        if isinstance(reg.value, DeferredTool):
            reg = table[name] = self._loaded(reg)
        return reg.value

    def create(self, kind: Kind, name: str, options: Mapping[str, Any] | None = None) -> Any:
        """Look up the factory ``name`` of ``kind`` and call it with ``options``."""
        factory = self.get(kind, name)
        owner = self._registry[kind][name].plugin
        try:
            return factory(dict(options or {}))
        except MemoraError:
            raise
        except Exception as exc:
            raise PluginError(
                ErrorCode.PLUGIN_HOOK_FAILED,
                f"plugin {owner!r} failed to create {kind} {name!r}: {type(exc).__name__}: {exc}",
                context={"plugin": owner, "kind": kind, "name": name},
            ) from exc

    def probe(self) -> list[PluginFailure]:
        """Import what each plugin's factories load lazily (their ``probe`` callable, set by
        :func:`checked_factory` or :func:`probed`), so a plugin whose own imports fail — a
        dependency missing, or of the wrong major version — shows as failed in ``memora
        plugins`` instead of "ok" until its first use.  The failures are also added to
        :attr:`failures` (stage ``probe``)."""
        found: list[PluginFailure] = []
        seen: set[int] = set()
        for table in self._registry.values():
            for reg in table.values():
                check = getattr(reg.value, "probe", None)
                if not callable(check) or id(check) in seen:
                    continue
                seen.add(id(check))
                if any(f.name == reg.plugin for f in found):
                    continue
                try:
                    check()
                except Exception as exc:  # ImportError, AttributeError, a broken module ...
                    meta = self._meta.get(reg.plugin, _Meta(None, None, "host"))
                    found.append(
                        PluginFailure(
                            reg.plugin,
                            meta.distribution,
                            f"{type(exc).__name__}: {exc}",
                            "probe",
                        )
                    )
        self.failures.extend(f for f in found if f not in self.failures)
        return found

    def plugin_infos(self, *, include_builtin: bool = True) -> list[PluginInfo]:
        provides: dict[str, dict[str, list[str]]] = {}
        for kind, table in self._registry.items():
            for reg in table.values():
                provides.setdefault(reg.plugin, {}).setdefault(kind, []).append(reg.name)
        infos = []
        for name, plugin in self.pm.list_name_plugin():
            meta = self._meta.get(name, _Meta(None, None, "host"))
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
                    origin=meta.origin,
                    registers={k: tuple(sorted(v)) for k, v in provides.get(name, {}).items()},
                )
            )
        infos.sort(key=lambda i: (_RANK[i.origin], i.name))
        return infos


def create_plugin_manager(
    *,
    load_entrypoints: bool = True,
    extra: Iterable[object | tuple[str, object]] = (),
    strict: bool | None = None,
) -> Plugins:
    """Create a fresh plugin manager: built-ins, then entry points, then ``extra`` (host hooks).

    ``extra`` items are plugin objects or ``(name, plugin)`` pairs; an object without a name is
    known by its class (or module) name.  ``strict`` defaults to the ``MEMORA_STRICT_PLUGINS``
    environment variable.
    """
    if strict is None:
        strict = _env_flag("MEMORA_STRICT_PLUGINS")
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    plugins = Plugins(pm, strict=strict)

    version = __version__
    for module_name in DEFAULT_PLUGINS:
        module: ModuleType = importlib.import_module(module_name)
        plugins._add(module, module_name, KERNEL_DISTRIBUTION, version, "builtin")

    if load_entrypoints:
        for name, obj, dist, ver in discover_entry_points(_load_only(), strict, plugins.failures):
            try:
                plugins._add(obj, name, dist, ver, "installed")
            except PluginError as exc:
                if strict:
                    raise
                logger.warning("plugin %r (%s) left out: %s", name, dist, exc.message)
                plugins.failures.append(PluginFailure(name, dist, exc.message, "register"))

    for item in extra:
        host_name: str | None
        if isinstance(item, tuple):
            host_name, obj = item
        else:
            host_name, obj = None, item
        plugins._add(obj, host_name, None, None, "host")

    plugins._collect()
    return plugins
