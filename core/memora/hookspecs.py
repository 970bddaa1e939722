"""Every extension point of memora, one hook each.

Hooks are cheap and synchronous: they hand over objects or factories; all I/O (async included)
lives in those objects' methods.  Register-style hooks receive a ``register`` callable and call it
once per thing they provide.  A *factory* is called when an Agent needs the thing (providers,
storage and session stores at ``init()``; web search, fetch, code execution and project search
the first time a tool uses them), with the options the host gave for that name
(``config["plugins"][name]``, then the Agent's options) as a plain ``dict``.

Names are short ids users see (``sqlite``, ``openai``, ``fetch``).  When two plugins register the
same name for the same kind, one documented rule decides (see :mod:`memora.plugins`): a host
plugin overrides an installed one, an installed one a built-in; on one level the first keeps it.

Implement a hook in a plugin module with :data:`memora.hookimpl`::

    from memora import hookimpl

    @hookimpl
    def register_web_fetch(register):
        register("httpx", lambda options: MyFetcher(**options))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from .checks import CheckContext, CheckDecision, ToolCallInfo

__all__ = ["PROJECT_NAME", "hookimpl", "hookspec"]

PROJECT_NAME = "memora"
hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

Factory = Callable[[Mapping[str, Any]], Any]
Register = Callable[[str, Factory], None]


@hookspec
def register_providers(register: Register) -> None:
    """Register LLM provider factories.

    Called when a plugin manager is created, and again after every later
    ``Plugins.register()``/``unregister()``: register the same things each time, with no side
    effects.  Call ``register(name, factory)`` for each
    provider; ``factory(options)`` returns an object implementing :class:`memora.llm.Provider`
    (``name``, ``context_window``, async ``stream(request)``, ``aclose()``).  ``options`` holds
    ``model``, ``base_url`` and the like as the host configured them.  Returns nothing.
    """


@hookspec
def register_storage(register: Register) -> None:
    """Register memory storage backends by name (``memory``, ``json``, ``sqlite``, ...).

    Called when a plugin manager is created, and again after every later
    ``Plugins.register()``/``unregister()``: register the same things each time, with no side
    effects.  ``factory(options)`` returns a
    ``MemoryStorage`` (see :mod:`memora.memory`); ``options["path"]`` is the data directory the
    Agent was given, plus any backend options (``options["dsn"]`` for a networked backend).
    Returns nothing.
    """


@hookspec
def register_session_stores(register: Register) -> None:
    """Register session/round store backends by name (``jsonl`` and ``memory`` are built in).

    Called when a plugin manager is created, and again after every later
    ``Plugins.register()``/``unregister()``: register the same things each time, with no side
    effects.  ``factory(options)`` returns an object with the
    session-store API of :mod:`memora.memory` (append messages, rounds, list, fork, archive);
    ``options["path"]`` is the data directory.  Returns nothing.
    """


@hookspec
def register_project_locks(register: Register) -> None:
    """Register project locks by name (``file`` is built in): one Agent per project at a time.

    Called when a plugin manager is created, and again after every later
    ``Plugins.register()``/``unregister()``: register the same things each time, with no side
    effects.  ``factory(options)`` returns an object with ``acquire()`` and ``release()`` (plain
    or ``async`` methods); ``acquire`` raises ``MemoraError(PROJECT_LOCKED)`` naming the holder.
    ``options["project"]`` is the project folder and ``options["path"]`` the data directory.  A
    lock registered under the same name as a storage backend is used whenever that backend is
    (``"storage": "postgres"`` moves the lock too).  Returns nothing.
    """


@hookspec
def register_embedders(register: Register) -> None:
    """Register embedders by name (semantic recall; none is built in, and none is used unless
    the user's config names one with ``"embedder"``).

    Called when a plugin manager is created, and again after every later
    ``Plugins.register()``/``unregister()``: register the same things each time, with no side
    effects.  ``factory(options)`` returns a :class:`memora.memory.vectors.Embedder` (``name``,
    async ``embed(texts, kind=)``, ``aclose()``); ``options`` are the config entry's (``model``,
    ``base_url``...).  Returns nothing.
    """


@hookspec
def register_web_search(register: Register) -> None:
    """Register web search services (capability ``web:search``, tool ``web_search``).

    Called when a plugin manager is created, and again after every later
    ``Plugins.register()``/``unregister()``: register the same things each time, with no side
    effects.  ``factory(options)`` returns a
    :class:`memora.services.WebSearch`.  The tool is only exposed when the active role pack
    declares ``web:search``.  Returns nothing.
    """


@hookspec
def register_web_fetch(register: Register) -> None:
    """Register web fetch services (capability ``web:fetch``, tool ``web_fetch``).

    Called when a plugin manager is created, and again after every later
    ``Plugins.register()``/``unregister()``: register the same things each time, with no side
    effects.  ``factory(options)`` returns a
    :class:`memora.services.WebFetch`.  The tool is only exposed when the active role pack
    declares ``web:fetch``.  Returns nothing.
    """


@hookspec
def register_code_executors(register: Register) -> None:
    """Register code execution services (capability ``code:execute``, tool ``run_code``).

    Called when a plugin manager is created, and again after every later
    ``Plugins.register()``/``unregister()``: register the same things each time, with no side
    effects.  ``factory(options)`` returns a
    :class:`memora.services.CodeExecutor`.  The tool is only exposed when the active role pack
    declares ``code:execute``.  Returns nothing.
    """


@hookspec
def register_project_search(register: Register) -> None:
    """Register project search implementations behind the resident ``search_project`` tool.

    Called when a plugin manager is created, and again after every later
    ``Plugins.register()``/``unregister()``: register the same things each time, with no side
    effects.  ``factory(options)`` returns a
    :class:`memora.services.ProjectSearch`.  The built-in one is named ``builtin``; a host picks
    another with the Agent option ``project_search``.  Returns nothing.
    """


@hookspec
def register_tools(register: Callable[[Any], None]) -> None:
    """Register extra tools for every Agent.

    Called when a plugin manager is created, and again after every later
    ``Plugins.register()``/``unregister()``: register the same things each time, with no side
    effects.  Call ``register(tool)`` with a
    :class:`memora.tools.Tool` (build one from a typed async function with ``memora.tool``).  Tool
    names share one namespace with the built-in tools; a clash follows the rule in
    :mod:`memora.plugins`.  Returns nothing.
    """


@hookspec
def register_tracers(register: Register) -> None:
    """Register tracers that receive the spans ``recall``, ``llm_call``, ``tool_exec`` and
    ``response``.

    Called when a plugin manager is created, and again after every later
    ``Plugins.register()``/``unregister()``: register the same things each time, with no side
    effects.  ``factory(options)`` returns a
    :class:`memora.tracing.Tracer`.  With no tracer registered, tracing is a no-op.  Returns nothing.
    """


@hookspec
def register_turn_executors(register: Register) -> None:
    """Register turn executors: what runs each turn and keeps its steps, so a turn outlives
    its worker (durable turns; see :mod:`memora.agent.durable` and docs/durability.md).

    Called when a plugin manager is created, and again after every later
    ``Plugins.register()``/``unregister()``: register the same things each time, with no side
    effects.  ``factory(options)`` returns a :class:`memora.agent.durable.TurnExecutor`;
    ``options`` holds the plugin's options (``config["plugins"][name]``) and ``path`` (the
    project's data folder), ``storage`` (the storage backend's name) and ``storage_options``
    (its options: a PostgreSQL DSN the executor may keep its journal in).  Chosen by the
    user's config ``"turn_executor": name`` (never a project's).  Returns nothing.
    """


@hookspec
def register_tool_sources(register: Register) -> None:
    """Register sources of tools that appear at run time (``register(name, factory)``), such as
    the tools of MCP servers.  ``factory(options)`` (``options``: ``config["plugins"][name]``)
    returns a :class:`memora.services.ToolSource`: it names the capabilities it serves
    (``mcp:github``...) and, for a capability the active role pack declares, lists its tools
    before each turn (so a changed tool list is picked up).  A source that fails to start costs
    only its own capabilities.

    Called when a plugin manager is created, and again after every later
    ``Plugins.register()``/``unregister()``: register the same things each time, with no side
    effects.  Returns nothing.
    """


@hookspec
def register_commands(cli: Any) -> None:
    """Add commands to the ``memora`` command line: ``cli`` is a :class:`click.Group`
    (``@cli.command()``, ``cli.add_command(group)``), as in simonw/llm.

    Called only by the command line, when a name is not a kernel command or the list is shown
    (so a plugin's imports do not slow ``memora chat``).  Each plugin registers on its own
    staging group: one that raises loses only its commands (a warning names it), and a command
    named like a kernel command or an earlier plugin's is left out with a warning.  Returns
    nothing.
    """


@hookspec
def pre_execution_check(call: ToolCallInfo, context: CheckContext) -> CheckDecision | None:
    """Decide whether a tool call may run.

    Called for every tool call, after the kernel's own gates (tool mode, read-only strategy,
    capability map, permission) and before the tool runs.  *Every* implementation runs; the answers
    combine as documented in :mod:`memora.checks`: any ``Deny`` wins, then ``Ask`` (pause for host
    approval), ``Skip`` (reuse a result), ``Rewrite`` (new arguments).  Return ``None`` for no
    opinion.  The built-in allow-all check is ``trylast``.  Must be fast and must not block.
    """
