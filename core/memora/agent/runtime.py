"""The project runtime: the host's one door to a project.

A host that serves many sessions of one project (a web service, an IDE) opens one
:class:`ProjectRuntime` and makes an Agent per session with :meth:`ProjectRuntime.agent` — the
project lock, the connections and the started MCP servers are shared, and each session is held by
one Agent at a time.  The runtime owns, typed, what hosts would otherwise rebuild: the resolved
settings, the storage and memory (``memory``), the session store (``session_store``), the tools'
services, the plugins, and the role packs a new session sees (:meth:`role_packs`).  Construction
runs one way: the runtime makes Agents; ``Agent(project_path=...)`` is the one-session shorthand,
which builds the resources (:class:`~memora.agent.project.ProjectResources`) for itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..memory.forgetting import Forgotten, forget_everywhere
from .agent import Agent
from .options import SESSION_OPTIONS, check_session_options
from .project import ProjectResources, maybe_await
from .resolved import agent_settings

if TYPE_CHECKING:
    from ..role_pack.manager import RolePackManager

__all__ = ["SESSION_OPTIONS", "ProjectRuntime", "maybe_await"]


class ProjectRuntime(ProjectResources):
    """One project's plugins, providers, stores, services and lock, and the Agents of its sessions.

    ``async with ProjectRuntime(project_path=..., data_dir=...) as runtime:`` then
    ``agent = await runtime.agent(session_id=...)`` per session.
    """

    _packs: RolePackManager | None = None

    async def agent(self, **session_options: Any) -> Agent:
        """An initialised Agent on this runtime for one session (``session_id``; default: the
        most recent session, or a new one), optionally with its own ``active_role_pack`` and
        ``approvals``.  Close it with ``await agent.close()``; the runtime stays open."""
        check_session_options(session_options)
        await self.open()
        agent = Agent(runtime=self, **session_options)
        return await agent.init()

    def role_packs(self) -> RolePackManager:
        """The project's role packs as a new session sees them (read from disk once; call
        ``refresh()`` on the result to read them again).  Needs no open runtime."""
        if self._packs is None:
            from .machinery import role_packs_for  # the session machinery: loaded when asked

            self._packs = role_packs_for(self.options)
        return self._packs

    def configured_options(self, name: str) -> dict[str, Any]:
        """The options the plugin factory ``name`` will get (config ``plugins[name]`` < the
        host's ``plugin_options[name]``), without opening anything: a server asks it to leave
        an option the user set as the user set it."""
        resolved = self._resolved or agent_settings(self.host_options, warn=False)
        return resolved.plugin_options(name)

    async def forget_everywhere(
        self, memory_id: str, *, by: str, scope: str | None = None
    ) -> Forgotten:
        """``memory_id`` out of recall, its text out of its history and out of the session's
        log (:func:`~memora.memory.forgetting.forget_everywhere`), in ``scope``'s view of the
        project's memory (``None``: the project's owner).  An Agent holding one of the changed
        sessions open keeps what it read until it opens the session again."""
        await self.open()
        return await forget_everywhere(
            self.memory.for_scope(scope), self.session_store, memory_id, by=by
        )

    def storage_name(self) -> str:
        """The storage backend the project resolves to — the host's option, else its settings
        (the one precedence of :func:`~memora.agent.resolved.agent_settings`) — without opening
        anything: a server asks it to know whether other machines may share the project."""
        resolved = self._resolved or agent_settings(self.host_options, warn=False)
        storage = resolved.storage()
        return storage if isinstance(storage, str) else type(storage).__name__
