"""Projects, their sessions and the turns running in them, independent of HTTP.

A :class:`Hub` opens one :class:`~memora.ProjectRuntime` per served project and an Agent per
session it is asked about (``runtime.agent(session_id=...)``), closing an Agent after it has been
idle for ``idle_seconds`` (never while a turn runs or waits for an answer).  A turn runs in a task
of its own: its chunks go into a :class:`TurnLog`, which every request following the turn reads
from — so a client that disconnects and reconnects with the last event id it saw misses nothing,
and a client that goes away does not stop the turn (``abort`` does).

With several processes serving the same projects (``shared``: ``memora serve --workers N``, or
PostgreSQL storage, where other machines may serve them), a turn also holds its session's lock
and publishes its chunks, its pause and the session's changes where every worker finds them
(:mod:`.shared` on files, :mod:`.pg_shared` in PostgreSQL).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memora import (
    Agent,
    Forgotten,
    OutputSpec,
    ProjectRuntime,
)
from memora.errors import BusyError, ErrorCode, InvalidInputError, MemoraError, NotFoundError
from memora.llm.schema_guard import preload as preload_schema_checks

from .config import MAX_OPEN_SESSIONS
from .shared import (
    TURN_EVENTS_KEPT_SECONDS,
    FileSharedState,
    Lease,
    SessionView,
    SharedState,
)
from .slots import Project, Slot, forgotten_in, pause_doc, run_turn
from .takeover import TAKEOVER_GRACE, continued_turn, take_overs
from .turns import RemoteTurnLog, TurnLog

if TYPE_CHECKING:
    from memora import RolePackManager

logger = logging.getLogger("memora.server")

__all__ = ["Hub", "Project", "RemoteTurnLog", "TurnLog"]

EVICT_GRACE_SECONDS = 1.0
"""A session used this recently keeps its Agent even over the cap: a request that has just
looked its session up must find the Agent it is about to use."""


class Hub:
    """See the module docstring.  ``runtime_options`` go to every ``ProjectRuntime`` (a host's
    provider, storage...); ``approvals`` is the mode of sessions whose config sets none.

    ``max_open_sessions``: at most this many sessions keep their Agent open between requests
    (each holds its history, prompt and role packs: tens of kilobytes, more for a long session).
    Opening one more closes the least recently used idle ones first, so a server's memory
    follows this number rather than how many sessions were used within ``idle_seconds``; a
    session mid-turn, waiting for an answer, or used within the last second is never closed
    for it (the cap may be passed while they last).  A closed session opens again on its next
    request, from its store.

    ``shared=True``: this process is one of several serving the projects (``memora serve
    --workers N``): the project lock is taken shared, and a turn holds its session's lock, its
    events, pause and the session's role pack live in ``<data dir>/server/`` where every worker
    finds them (see :mod:`.shared`)."""

    def __init__(
        self,
        projects: Mapping[str, Path],
        *,
        runtime_options: Mapping[str, Any] | None = None,
        approvals: str = "ask",
        idle_seconds: float = 300.0,
        shared: bool | None = None,
        max_open_sessions: int = MAX_OPEN_SESSIONS,
    ) -> None:
        if not projects:
            raise InvalidInputError("serve at least one project")
        if max_open_sessions < 1:
            raise InvalidInputError(f"max_open_sessions: at least 1, not {max_open_sessions}")
        options = dict(runtime_options or {})
        # many people's sessions in one process: every session's tools find memora's data and
        # the user's config folder empty (a host turns it off with isolate_tools=False), and the
        # stores favour many writers over one conversation's latency
        options.setdefault("isolate_tools", True)
        options.setdefault("many_sessions", True)
        if "data_dir" in options and len(projects) > 1:
            raise InvalidInputError(
                "data_dir: one folder cannot hold several projects' data; leave it out (each "
                "project keeps its data in <project>/.memora/data)"
            )
        self.projects: dict[str, Project] = {}
        for name, path in projects.items():
            folder = Path(path)
            per_project = {"data_dir": folder / ".memora" / "data", **options}
            self.projects[name] = Project(
                name, folder, ProjectRuntime(project_path=folder, **per_project)
            )
        if shared is None:  # PostgreSQL storage: other machines may serve the same projects
            # the runtime answers with the one precedence of the settings (opening nothing)
            shared = any(p.runtime.storage_name() == "postgres" for p in self.projects.values())
        self.shared = shared
        """Several processes serve the projects: each takes its project lock shared."""
        self.approvals = approvals
        self.idle_seconds = idle_seconds
        self.max_open_sessions = max_open_sessions
        self._slots: dict[tuple[str, str], Slot] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._takeovers: asyncio.Task[None] | None = None
        self.ready = False

    # -- lifetime ----------------------------------------------------------------------------

    async def start(self) -> None:
        try:
            for project in self.projects.values():
                await project.runtime.open(shared_lock=self.shared)
                if self.shared:
                    project.shared = _shared_state(project)
                    await project.shared.start()
        except BaseException:
            await self.close()  # the projects opened so far let go of their locks and stores
            raise
        # jsonschema (~65 ms to import) loaded now, off the loop: the first typed request
        # must not pay for it on the event loop every other request shares
        await asyncio.to_thread(preload_schema_checks)
        loop = asyncio.get_running_loop()
        self._sweeper = loop.create_task(self._sweep(), name="memora-sweep")
        if any(p.runtime.turn_executor is not None for p in self.projects.values()):
            self._takeovers = loop.create_task(take_overs(self), name="memora-takeovers")
        self.ready = True

    async def close(self) -> None:
        self.ready = False
        for task in (self._sweeper, self._takeovers):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        for slot in list(self._slots.values()):
            if slot.agent is not None and slot.busy:
                slot.agent.abort()
            if slot.running is not None:
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(slot.running, 10)
            await self._drop(slot)
        for project in self.projects.values():
            if project.shared is not None:
                await project.shared.close()
            await project.runtime.close()

    async def _sweep(self) -> None:
        pruned = time.monotonic()
        while True:
            await asyncio.sleep(min(30.0, max(1.0, self.idle_seconds / 4)))
            now = time.monotonic()
            if now - pruned > 3600:  # old turns' events, hourly
                pruned = now
                for project in self.projects.values():
                    if project.shared is not None:
                        try:
                            await project.shared.prune(TURN_EVENTS_KEPT_SECONDS)
                        except Exception:
                            logger.exception("pruning old turn events of %s failed", project.name)
            for slot in list(self._slots.values()):
                if now - slot.last_used > self.idle_seconds and self._closable(slot):
                    await self._drop(slot)
            await self._trim(self.max_open_sessions)

    def busy_here(self, project: str, session_id: str) -> bool:
        """A turn of the session runs in this process."""
        return (slot := self._slots.get((project, session_id))) is not None and slot.busy

    async def take_over(
        self, project: str, session_id: str, key: str, *, scope: str | None
    ) -> TurnLog:
        """Go on here with the durable turn ``key`` a worker left when it died: its session's
        lock taken, its Agent opened, the turn rebuilt from its last kept state; its events go
        on after the last one written, under the same turn id (:func:`continued_turn`)."""
        slot = self._slot(project, session_id)
        self._refuse_busy(slot)
        lease = await self._lease(slot)
        try:
            turn_id = await continued_turn(slot.project.shared, session_id)
            agent = await self.agent(project, session_id, scope=scope, lease=lease)
            chunks = agent.take_over(key)
        except BaseException:
            if lease is not None:
                await lease.release()
            raise
        return await run_turn(slot, "turn", chunks, lease, going_on=turn_id)

    @staticmethod
    def _closable(slot: Slot) -> bool:
        """No turn runs in the session, and no pause lives only in its Agent (the workers
        share theirs in a file or table)."""
        return not slot.busy and (
            slot.agent is None or slot.agent.paused_turn is None or slot.project.shared is not None
        )

    async def _trim(self, room: int, keep: Slot | None = None) -> None:
        """Close the least recently used idle Agents until at most ``room`` stay open."""
        open_slots = [s for s in self._slots.values() if s.agent is not None]
        excess = len(open_slots) - room
        if excess <= 0:
            return
        settled = time.monotonic() - EVICT_GRACE_SECONDS

        def evictable(s: Slot) -> bool:
            return (
                s.agent is not None
                and s.last_used < settled
                and not s.opening.locked()
                and self._closable(s)
            )

        candidates = (s for s in open_slots if s is not keep and evictable(s))
        for slot in heapq.nsmallest(excess, candidates, key=lambda s: s.last_used):
            if evictable(slot):  # still: a request may have found it during the awaits
                await self._drop(slot)

    async def _drop(self, slot: Slot) -> None:
        key = (slot.project.name, slot.session_id)
        if self._slots.get(key) is slot:
            del self._slots[key]
        await self._close_agent(slot)

    async def _close_agent(self, slot: Slot) -> None:
        if slot.agent is not None:
            agent, slot.agent = slot.agent, None
            try:
                await agent.close()
            except Exception:
                logger.exception("closing the agent of session %s failed", slot.session_id)

    # -- lookups -----------------------------------------------------------------------------

    def project(self, name: str) -> Project:
        try:
            return self.projects[name]
        except KeyError:
            raise NotFoundError(
                f"no project {name!r} is served here; served: {', '.join(sorted(self.projects))}",
                context={"project": name},
            ) from None

    def _slot(self, project: str, session_id: str) -> Slot:
        key = (project, session_id)
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = Slot(self.project(project), session_id)
        slot.last_used = time.monotonic()
        return slot

    def _own_slot(self, slot: Slot, scope: str | None) -> None:
        """``NOT_FOUND`` when the session open here is another scope's (before anything else
        is said about it: not even that a turn runs there)."""
        if slot.agent is not None and slot.scope != scope:
            raise _no_session(slot.session_id)

    async def owner(self, project: str, session_id: str) -> tuple[bool, str | None]:
        """Whether the session exists (here or, not yet written, on another worker) and the
        scope it belongs to."""
        served = self.project(project)
        store = served.runtime.session_store
        if await store.exists(session_id):
            return True, (await store.get(session_id)).scope
        if served.shared is not None:
            created = await served.shared.created_session(session_id)
            if created is not None:
                return True, created.get("scope") or None
        return False, None

    async def check_session(self, project: str, session_id: str, scope: str | None) -> None:
        """``NOT_FOUND`` unless the session exists and belongs to ``scope``."""
        slot = self._slots.get((project, session_id))
        if slot is not None and slot.agent is not None:
            self._own_slot(slot, scope)
            return
        exists, owner = await self.owner(project, session_id)
        if not exists or owner != scope:
            raise _no_session(session_id)

    async def agent(
        self,
        project: str,
        session_id: str,
        *,
        create: bool = False,
        scope: str | None = None,
        lease: Lease | None = None,
    ) -> Agent:
        """The session's Agent, opened on first use — and opened again when another worker
        changed the session since (shared mode).  ``NOT_FOUND`` for a session that does not
        exist unless ``create``, and for another ``scope``'s session.  ``lease``: the session's
        lock, held by the caller (what taking it read of the session is not read again)."""
        slot = self._slot(project, session_id)
        self._own_slot(slot, scope)
        async with slot.opening:
            shared = slot.project.shared
            # what the workers share of it, read once
            view = await self._drop_stale(slot, lease.view if lease is not None else None)
            self._own_slot(slot, scope)
            if slot.agent is None:
                runtime = slot.project.runtime
                exists, owner = await self.owner(project, session_id)
                if (not exists and not create) or (exists and owner != scope):
                    if not slot.busy:
                        self._slots.pop((project, session_id), None)
                    raise NotFoundError(
                        f"no session {session_id!r} in project {project!r}",
                        context={"session_id": session_id},
                    )
                options: dict[str, Any] = {"session_id": session_id, "memory_scope": scope}
                pause = None
                if shared is not None:
                    if view is None:
                        view = await shared.view(session_id)
                    slot.version = view.version
                    if view.role_pack:
                        options["active_role_pack"] = view.role_pack
                    slot.pack = view.role_pack
                    pause = view.pause
                await self._trim(self.max_open_sessions - 1, keep=slot)
                agent = await runtime.agent(**options)
                if agent.approvals is None:
                    agent.approvals = self.approvals  # type: ignore[assignment]
                if pause is not None:
                    # a turn paused on some worker (a typed one keeps its schema)
                    state = pause["state"]
                    schema = (state.get("turn") or {}).get("output_schema")
                    typed = OutputSpec.from_json_schema(schema) if schema else None
                    await agent.resume(state, output_type=typed)
                slot.agent = agent
                slot.scope = scope
            return slot.agent

    async def _drop_stale(self, slot: Slot, view: SessionView | None) -> SessionView | None:
        """Close the idle Agent of a session that moved on without it (a forget under its last
        turn, another worker's turn or switch not read on into it); the shared view read."""
        if slot.agent is None or slot.busy:
            return view
        if slot.stale:
            slot.stale = False
            await self._close_agent(slot)
        elif (shared := slot.project.shared) is not None:
            view = view if view is not None else await shared.view(slot.session_id)
            if view.version != slot.version and not await self._reread(slot, view):
                await self._close_agent(slot)
        return view

    @staticmethod
    async def _reread(slot: Slot, view: SessionView) -> bool:
        """Another worker moved the session on: read its history and rounds again into the
        open Agent when nothing else changed — the role pack is the one it has, and no turn
        is paused on either side.  A fraction of closing the Agent and opening a new one (its
        tools, role packs and prompts stay built).  False: open it anew."""
        agent = slot.agent
        if agent is None or agent.paused_turn is not None:
            return False
        if view.pause is not None or view.role_pack != slot.pack:
            return False
        try:
            await agent.switch_session(slot.session_id)
        except MemoraError:
            return False
        slot.version = view.version
        return True

    def live(self, project: str, session_id: str) -> Agent | None:
        """The session's Agent when this process has it open (no opening)."""
        return slot.agent if (slot := self._slots.get((project, session_id))) else None

    # -- sessions ------------------------------------------------------------------------------

    async def create_session(
        self, project: str, title: str = "", *, scope: str | None = None
    ) -> dict[str, Any]:
        served = self.project(project)
        store = served.runtime.session_store
        made = (
            await store.create(title=title, scope=scope)
            if scope is not None
            else await store.create(title=title)
        )
        info = made.to_dict()
        if served.shared is not None:
            # the file store writes a session at its first turn: tell the other workers now
            await served.shared.note_created(info["id"], info)
        return dict(info)

    async def session_exists(self, project: str, session_id: str) -> bool:
        served = self.project(project)
        if await served.runtime.session_store.exists(session_id):
            return True
        return (
            served.shared is not None
            and await served.shared.created_session(session_id) is not None
        )

    async def session_info(
        self, project: str, session_id: str, *, scope: str | None = None
    ) -> tuple[dict[str, Any], list[Any]]:
        """A session's metadata and rounds (``NOT_FOUND`` when there is none, or when it is
        another ``scope``'s)."""
        served = self.project(project)
        store = served.runtime.session_store
        if await store.exists(session_id):
            info = await store.get(session_id)
            if info.scope != scope:
                raise _no_session(session_id)
            return info.to_dict(), await store.rounds(session_id)
        created = (
            await served.shared.created_session(session_id) if served.shared is not None else None
        )
        if created is not None and (created.get("scope") or None) == scope:
            return created, []
        raise _no_session(session_id)

    async def list_sessions(
        self, project: str, *, archived: bool, scope: str | None = None
    ) -> list[dict[str, Any]]:
        """``scope``'s sessions, most recent first."""
        served = self.project(project)
        infos = [
            i.to_dict() for i in await served.runtime.session_store.list(include_archived=archived)
        ]
        if served.shared is not None:
            known = {i["id"] for i in infos}
            infos += [i for sid, i in (await served.shared.created()).items() if sid not in known]
            infos.sort(key=lambda i: -float(i.get("updated_at") or 0))
        return [i for i in infos if (i.get("scope") or None) == scope]

    async def pause_of(self, project: str, session_id: str) -> dict[str, Any] | None:
        """What the API shows of the session's paused turn, if any."""
        served = self.project(project)
        if served.shared is not None:
            value = await served.shared.pause(session_id)
            return value.get("doc") if value is not None else None
        agent = self.live(project, session_id)
        paused = agent.paused_turn if agent is not None else None
        return pause_doc(paused) if paused is not None else None

    # -- turns -------------------------------------------------------------------------------

    async def start_turn(
        self,
        project: str,
        session_id: str,
        text: str,
        *,
        output: OutputSpec | None = None,
        create: bool = False,
        scope: str | None = None,
    ) -> TurnLog:
        """Start a turn (``output``: a typed turn's result, ``done.output``).  The session
        must exist (``NOT_FOUND``) unless ``create``: an A2A context or an AG-UI thread is a
        session made on first use, a REST session is made by its own route."""
        slot = self._slot(project, session_id)
        self._own_slot(slot, scope)
        self._refuse_busy(slot)
        lease = await self._lease(slot)
        try:
            agent = await self.agent(project, session_id, create=create, scope=scope, lease=lease)
            self._refuse_busy(slot)
            if agent.paused_turn is not None:
                raise BusyError(
                    f"session {session_id} waits for an {agent.paused_turn.kind}: answer it "
                    "(approvals, answers) or discard the paused turn first",
                    context={"session_id": session_id, "pause": agent.paused_turn.kind},
                )
            if agent.session_state.status == "error":
                # the client saw the failure as an `error` event; a new message is its answer
                agent.mark_recovered()
            chunks = agent.chat(text, output_type=output)
        except BaseException:
            if lease is not None:
                await lease.release()
            raise
        log = await run_turn(slot, "turn", chunks, lease, agent=agent)
        log.output = output
        log.text = text
        return log

    async def continue_turn(
        self,
        project: str,
        session_id: str,
        *,
        approve: tuple[str, Mapping[str, Any] | None] | None = None,
        deny: tuple[str, str] | None = None,
        answers: Mapping[str, str] | None = None,
        scope: str | None = None,
    ) -> TurnLog:
        """Answer the paused turn (approve / deny a call, or answer its questions) and run the
        rest of it."""
        slot = self._slot(project, session_id)
        self._own_slot(slot, scope)
        self._refuse_busy(slot)
        lease = await self._lease(slot)
        try:
            agent = await self.agent(project, session_id, scope=scope, lease=lease)
            paused = agent.paused_turn
            if paused is None:
                raise MemoraError(
                    ErrorCode.INVALID_INPUT,
                    f"session {session_id} has no paused turn",
                    context={"session_id": session_id},
                )
            if approve is not None:
                edited = dict(approve[1]) if approve[1] is not None else None
                paused.approve(edited, tool_call_id=approve[0])
            elif deny is not None:
                paused.deny(deny[1], tool_call_id=deny[0])
            elif answers is not None:
                paused.answer(dict(answers))
            if slot.project.shared is not None:
                # answered: a worker that dies from here on loses the turn, it cannot run the
                # approved call a second time from a stale pause
                await slot.project.shared.set_pause(session_id, None)
            chunks = paused.resume()
        except BaseException:
            if lease is not None:
                await lease.release()
            raise
        log = await run_turn(slot, "continue", chunks, lease, agent=agent)
        log.output = paused.record.output_spec
        return log

    async def switch_role_pack(
        self, project: str, session_id: str, name: str, *, scope: str | None = None
    ) -> str:
        slot = self._slot(project, session_id)
        self._own_slot(slot, scope)
        self._refuse_busy(slot)
        lease = await self._lease(slot)
        try:
            agent = await self.agent(project, session_id, scope=scope, lease=lease)
            if agent.paused_turn is not None:
                raise BusyError(
                    f"session {session_id} waits for an {agent.paused_turn.kind}",
                    context={"session_id": session_id},
                )
            agent.switch_role_pack(name)
            active = str(agent.role_pack.active.name)
            shared = slot.project.shared
            if shared is not None:
                await shared.set_role_pack(session_id, active)
                slot.pack = active
                slot.version = await shared.bump(session_id)
            return active
        finally:
            if lease is not None:
                await lease.release()

    def role_packs(self, project: str) -> RolePackManager:
        """The project's role packs as a new session would see them (the runtime's)."""
        return self.project(project).runtime.role_packs()

    async def forget_everywhere(
        self, project: str, memory_id: str, *, scope: str | None, by: str
    ) -> Forgotten:
        """``forget --everywhere`` in ``scope``'s view of the project's memory; every session
        whose log lost a round's text is read again from the store on its next use (here, and
        on every worker: its shared version moves on)."""
        served = self.project(project)
        forgotten = await served.runtime.forget_everywhere(memory_id, by=by, scope=scope)
        for session_id in forgotten.sessions:
            slot = self._slots.get((project, session_id))
            if slot is not None and forgotten_in(slot):
                await self._close_agent(slot)  # reopened from the store, without the text
            if served.shared is not None:
                await served.shared.forget_turns(session_id)
                await served.shared.bump(session_id)
        return forgotten

    def _refuse_busy(self, slot: Slot) -> None:
        if slot.busy:
            raise BusyError(
                f"a turn is running in session {slot.session_id}; wait for it or abort it",
                context={"session_id": slot.session_id},
            )

    async def _lease(self, slot: Slot) -> Lease | None:
        """The session's lock across the workers (shared mode; None otherwise)."""
        shared = slot.project.shared
        if shared is None:
            return None
        lease = await shared.try_lock(slot.session_id)
        if lease is None:
            raise BusyError(
                f"a turn is running in session {slot.session_id} (on another worker); wait for "
                "it or abort it",
                context={"session_id": slot.session_id},
            )
        return lease

    async def turn_log(
        self, project: str, session_id: str, turn_id: str, *, scope: str | None = None
    ) -> TurnLog | RemoteTurnLog:
        await self.check_session(project, session_id, scope)
        slot = self._slots.get((project, session_id))
        log = slot.logs.get(turn_id) if slot is not None else None
        if log is not None:
            return log
        served = self.project(project)
        shared = served.shared
        if shared is not None and await shared.has_turn(session_id, turn_id):
            durable = served.runtime.turn_executor is not None
            return RemoteTurnLog(shared, session_id, turn_id, TAKEOVER_GRACE if durable else 0.0)
        raise NotFoundError(
            f"no turn {turn_id!r} in session {session_id!r} on this server (finished turns "
            "are kept for a while; the session's history has every round)",
            context={"turn_id": turn_id},
        )

    def running_text(self, project: str, session_id: str) -> str | None:
        """The message that started the turn running in the session, when this process runs
        it (a page reloaded mid-turn shows it above the answer being written)."""
        slot = self._slots.get((project, session_id))
        busy = slot is not None and slot.busy and slot.turn is not None
        return slot.turn.text if slot is not None and slot.turn is not None and busy else None

    async def running_turn(self, project: str, session_id: str, stored: Any = ()) -> str | None:
        """The id of the turn running in the session (any worker); none whose round is in
        ``stored`` (round ids) — its end is being written, its round shown as stored."""
        slot = self._slots.get((project, session_id))
        if slot is not None and slot.busy and (log := slot.turn) is not None:
            return None if log.round_id() in stored else log.id
        shared = self.project(project).shared
        return await shared.current_turn(session_id) if shared is not None else None

    async def abort(self, project: str, session_id: str, *, scope: str | None = None) -> bool:
        await self.check_session(project, session_id, scope)
        slot = self._slots.get((project, session_id))
        if slot is not None and slot.agent is not None and slot.busy:
            slot.agent.abort()
            return True
        shared = self.project(project).shared
        if shared is not None and await shared.alive(session_id):
            await shared.request_abort(session_id)  # the worker running it waits for this
            return True
        return await self._cancel_waiting(project, session_id, scope)

    async def _cancel_waiting(self, project: str, session_id: str, scope: str | None) -> bool:
        """No turn runs: a paused one is dropped (nothing of it stored), a dead worker's
        durable turn given up; the session takes the next message."""
        slot = self._slot(project, session_id)
        self._refuse_busy(slot)
        lease = await self._lease(slot)
        try:
            cancelled = False
            executor = slot.project.runtime.turn_executor
            if executor is not None:
                for left in await executor.unfinished(session_id):
                    await executor.abandon(left.key)
                    cancelled = True
            agent = await self.agent(project, session_id, scope=scope, lease=lease)
            paused = agent.paused_turn
            if paused is not None:
                paused.discard()
                cancelled = True
            if cancelled and slot.project.shared is not None:
                slot.version = await slot.project.shared.settle(session_id, None)
            return cancelled
        finally:
            if lease is not None:
                await lease.release()


def _no_session(session_id: str) -> NotFoundError:
    # the same answer for a session that does not exist and for another user's
    return NotFoundError(f"no session {session_id!r}", context={"session_id": session_id})


def _shared_state(project: Project) -> SharedState:
    """PostgreSQL when the project's sessions are there (workers on any machine), else files
    in its data folder (workers on this machine)."""
    try:
        from .pg_shared import for_store
    except ImportError:  # psycopg is not installed: the sessions cannot be in PostgreSQL
        pass
    else:
        found = for_store(project.runtime.session_store)
        if found is not None:
            return found
    options = project.runtime.options
    return FileSharedState(Path(options.data_dir) / "server", options.config_dir)
