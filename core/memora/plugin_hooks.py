"""How memora knows which plugin registered or answered what.

Every register hook gets a :class:`Collector` as its ``register``: each registration is staged
under the plugin whose implementation is running (a plugin that raises half-way loses all it
registered).  :func:`attribute` wraps each hook implementation once — the register hooks and
``pre_execution_check`` — so the owner is known while pluggy still orders and wraps the calls;
a check that raises denies, naming itself (fail closed).
"""

from __future__ import annotations

import contextvars
import logging
import weakref
from collections.abc import Callable
from typing import Any, Literal

import pluggy

from .errors import ErrorCode, PluginError

__all__ = [
    "CHECK_ANSWERS",
    "HOOK_KINDS",
    "KINDS",
    "Collector",
    "Kind",
    "attribute",
    "check_registration",
]

logger = logging.getLogger("memora.plugins")

Kind = Literal[
    "provider",
    "storage",
    "session_store",
    "project_lock",
    "embedder",
    "web_search",
    "web_fetch",
    "code_executor",
    "project_search",
    "tracer",
    "tool",
    "tool_source",
    "turn_executor",
]

KINDS: dict[Kind, str] = {
    "provider": "register_providers",
    "storage": "register_storage",
    "session_store": "register_session_stores",
    "project_lock": "register_project_locks",
    "embedder": "register_embedders",
    "web_search": "register_web_search",
    "web_fetch": "register_web_fetch",
    "code_executor": "register_code_executors",
    "project_search": "register_project_search",
    "tracer": "register_tracers",
    "tool": "register_tools",
    "tool_source": "register_tool_sources",
    "turn_executor": "register_turn_executors",
}
"""Each kind of registered thing and the hook that registers it."""

HOOK_KINDS: dict[str, Kind] = {hook: kind for kind, hook in KINDS.items()}


class Collector:
    """The ``register`` callable handed to every register hook during one collection.

    The attribution shim (see :func:`attribute`) sets :attr:`current` to the plugin whose
    implementation is running, so each registration is staged under its owner, and a plugin that
    raises half-way loses everything it registered.
    """

    def __init__(self, kind: Kind) -> None:
        self.kind = kind
        self.current: str | None = None
        self.staged: list[tuple[str, str, Any]] = []  # (plugin, name, value), in call order
        self.errors: dict[str, BaseException] = {}
        self._seen: set[tuple[str, str]] = set()

    def __call__(self, name_or_tool: Any, value: Any = None) -> None:
        plugin = self.current or "(unknown plugin)"
        name, value = check_registration(self.kind, plugin, name_or_tool, value)
        if (plugin, name) in self._seen:
            raise PluginError(
                ErrorCode.PLUGIN_CONFLICT,
                f"plugin {plugin!r} registered {self.kind.replace('_', ' ')} {name!r} twice",
                context={"plugin": plugin, "kind": self.kind, "name": name},
            )
        self._seen.add((plugin, name))
        self.staged.append((plugin, name, value))


def check_registration(kind: Kind, plugin: str, name_or_tool: Any, value: Any) -> tuple[str, Any]:
    if kind == "tool":
        name = getattr(name_or_tool, "name", None)
        if not isinstance(name, str) or not name:
            raise PluginError(
                ErrorCode.INVALID_CONFIG,
                f"plugin {plugin!r} registered a tool without a name: {name_or_tool!r}",
                context={"plugin": plugin},
            )
        return name, name_or_tool
    name = name_or_tool
    if not isinstance(name, str) or not name.strip():
        raise PluginError(
            ErrorCode.INVALID_CONFIG,
            f"plugin {plugin!r} registered a {kind} with an empty or non-string name",
            context={"plugin": plugin},
        )
    if not callable(value):
        raise PluginError(
            ErrorCode.INVALID_CONFIG,
            f"plugin {plugin!r} registered {kind} {name!r} with a non-callable factory",
            context={"plugin": plugin},
        )
    return name, value


CHECK_ANSWERS: contextvars.ContextVar[list[tuple[str, object]] | None] = contextvars.ContextVar(
    "memora_check_answers", default=None
)


SHIMS: weakref.WeakSet[Callable[..., Any]] = weakref.WeakSet()
"""The shims :func:`attribute` made (a hook implementation wrapped once, never twice)."""


def attribute(impl: pluggy.HookImpl, hook_name: str) -> None:
    """Wrap one (non-wrapper) hook implementation so memora knows who answered.

    pluggy calls ``impl.function(*args, **kwargs)`` with the arguments in ``impl.argnames``
    order; the shim passes them on unchanged.  Wrappers are left alone: they see exactly what pluggy gives them.
    """
    if impl.wrapper or impl.hookwrapper or impl.function in SHIMS:
        return
    fn = impl.function
    plugin = impl.plugin_name
    if hook_name in HOOK_KINDS:
        try:
            slot: int | None = list(impl.argnames).index("register")
        except ValueError:
            slot = None

        def register_shim(*args: Any, **kwargs: Any) -> Any:
            collector = args[slot] if slot is not None else None
            if not isinstance(collector, Collector):
                # called by someone else through pm.hook: stay out of the way
                return fn(*args, **kwargs)
            collector.current = plugin
            try:
                fn(*args, **kwargs)
            except Exception as exc:
                collector.errors[plugin] = exc
            finally:
                collector.current = None
            return None

        shim: Callable[..., Any] = register_shim
    elif hook_name == "pre_execution_check":

        def check_shim(*args: Any, **kwargs: Any) -> Any:
            try:
                answer = fn(*args, **kwargs)
            except Exception as exc:
                # fail closed: a check that cannot decide denies, naming itself
                logger.warning("pre_execution_check of plugin %r raised: %r", plugin, exc)
                from .checks import Deny

                answer = Deny(f"check of plugin {plugin!r} failed: {exc}")
            sink = CHECK_ANSWERS.get()
            if sink is not None and answer is not None:
                sink.append((plugin, answer))
            return answer

        shim = check_shim
    else:  # register_commands: isolated by Plugins.register_commands itself
        return
    SHIMS.add(shim)
    # HookImpl.function is a slot pluggy reads on every call; replacing it is how the answer of
    # each plugin stays attributed while pluggy still orders and wraps the calls.
    setattr(impl, "function", shim)  # noqa: B010 - the attribute is declared Final in pluggy
