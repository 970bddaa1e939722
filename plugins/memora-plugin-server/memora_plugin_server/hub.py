"""Projects, their sessions and the turns running in them, independent of HTTP.

A :class:`Hub` opens one :class:`~memora.ProjectRuntime` per served project and an Agent per
session it is asked about (``runtime.agent(session_id=...)``), closing an Agent after it has been
idle for ``idle_seconds`` (never while a turn runs or waits for an answer).  A turn runs in a task
of its own: its chunks go into a :class:`TurnLog`, which every request following the turn reads
from — so a client that disconnects and reconnects with the last event id it saw misses nothing,
and a client that goes away does not stop the turn (``abort`` does).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memora import Agent, ProjectRuntime
from memora.errors import BusyError, ErrorCode, InvalidInputError, MemoraError, NotFoundError
from memora.role_pack.manager import RolePackManager

logger = logging.getLogger("memora.server")

__all__ = ["Hub", "Project", "TurnLog"]

KEPT_LOGS = 8
"""Finished turn logs kept per session for clients that reconnect late."""

END_TYPES = frozenset({"done", "aborted", "paused", "error"})


class TurnLog:
    """One turn's chunks as JSON, numbered from 1, and whether the turn has ended."""

    def __init__(self, turn_id: str, kind: str = "turn") -> None:
        self.id = turn_id
        self.kind = kind
        """``turn`` (a message), ``continue`` (after an approval or answers)."""
        self.events: list[str] = []
        self.ended = False
        self.started_at = time.time()
        self._changed = asyncio.Event()

    def add(self, data: str) -> None:
        self.events.append(data)
        self._wake()

    def end(self) -> None:
        self.ended = True
        self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def follow(self, after: int = 0) -> AsyncGenerator[tuple[int, str], None]:
        """Every event after number ``after``, as it arrives, until the turn ends."""
        seq = max(0, after)
        while True:
            changed = self._changed
            while seq < len(self.events):
                seq += 1
                yield seq, self.events[seq - 1]
            if self.ended:
                return
            await changed.wait()


@dataclass
class _Slot:
    """A session served by this process: its Agent, the running turn, recent turn logs."""

    project: Project
    session_id: str
    agent: Agent | None = None
    running: asyncio.Task[None] | None = None
    logs: OrderedDict[str, TurnLog] = field(default_factory=OrderedDict)
    last_used: float = field(default_factory=time.monotonic)
    opening: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def busy(self) -> bool:
        return self.running is not None and not self.running.done()


@dataclass
class Project:
    """A served project: its name in URLs, its folder, its runtime."""

    name: str
    path: Path
    runtime: ProjectRuntime
    packs: RolePackManager | None = None


class Hub:
    """See the module docstring.  ``runtime_options`` go to every ``ProjectRuntime`` (a host's
    provider, storage...); ``approvals`` is the mode of sessions whose config sets none."""

    def __init__(
        self,
        projects: Mapping[str, Path],
        *,
        runtime_options: Mapping[str, Any] | None = None,
        approvals: str = "ask",
        idle_seconds: float = 300.0,
    ) -> None:
        if not projects:
            raise InvalidInputError("serve at least one project")
        options = dict(runtime_options or {})
        if "data_dir" in options and len(projects) > 1:
            raise InvalidInputError(
                "data_dir: one folder cannot hold several projects' data; leave it out (each "
                "project keeps its data in <project>/.memora/data)"
            )
        self.projects: dict[str, Project] = {}
        for name, path in projects.items():
            folder = Path(path)
            per_project = {"data_dir": folder / ".memora" / "data", **options}
            runtime = ProjectRuntime(project_path=folder, **per_project)
            self.projects[name] = Project(name, folder, runtime)
        self.approvals = approvals
        self.idle_seconds = idle_seconds
        self._slots: dict[tuple[str, str], _Slot] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self.ready = False

    # -- lifetime ----------------------------------------------------------------------------

    async def start(self) -> None:
        for project in self.projects.values():
            await project.runtime.open()
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep(), name="memora-sweep")
        self.ready = True

    async def close(self) -> None:
        self.ready = False
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        for slot in list(self._slots.values()):
            if slot.agent is not None:
                slot.agent.abort()
            if slot.running is not None:
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(slot.running, 10)
            await self._drop(slot)
        for project in self.projects.values():
            await project.runtime.close()

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(min(30.0, max(1.0, self.idle_seconds / 4)))
            now = time.monotonic()
            for slot in list(self._slots.values()):
                if (
                    not slot.busy
                    and now - slot.last_used > self.idle_seconds
                    and (slot.agent is None or slot.agent.paused_turn is None)
                ):
                    await self._drop(slot)

    async def _drop(self, slot: _Slot) -> None:
        self._slots.pop((slot.project.name, slot.session_id), None)
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

    def _slot(self, project: str, session_id: str) -> _Slot:
        key = (project, session_id)
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = _Slot(self.project(project), session_id)
        slot.last_used = time.monotonic()
        return slot

    async def agent(self, project: str, session_id: str, *, create: bool = False) -> Agent:
        """The session's Agent, opened on first use (``NOT_FOUND`` for a session that does not
        exist unless ``create``)."""
        slot = self._slot(project, session_id)
        async with slot.opening:
            if slot.agent is None:
                runtime = slot.project.runtime
                if not create and not await runtime.session_store.exists(session_id):
                    self._slots.pop((project, session_id), None)
                    raise NotFoundError(
                        f"no session {session_id!r} in project {project!r}",
                        context={"session_id": session_id},
                    )
                agent = await runtime.agent(session_id=session_id)
                if agent.approvals is None:
                    agent.approvals = self.approvals  # type: ignore[assignment]
                slot.agent = agent
            return slot.agent

    def live(self, project: str, session_id: str) -> Agent | None:
        """The session's Agent when this process has it open (no opening)."""
        slot = self._slots.get((project, session_id))
        return slot.agent if slot is not None else None

    # -- turns -------------------------------------------------------------------------------

    async def start_turn(self, project: str, session_id: str, text: str) -> TurnLog:
        slot = self._slot(project, session_id)
        self._refuse_busy(slot)
        agent = await self.agent(project, session_id, create=True)
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
        return self._run(slot, "turn", agent.chat(text))

    async def continue_turn(
        self,
        project: str,
        session_id: str,
        *,
        approve: tuple[str, Mapping[str, Any] | None] | None = None,
        deny: tuple[str, str] | None = None,
        answers: Mapping[str, str] | None = None,
    ) -> TurnLog:
        """Answer the paused turn (approve / deny a call, or answer its questions) and run the
        rest of it."""
        slot = self._slot(project, session_id)
        self._refuse_busy(slot)
        agent = await self.agent(project, session_id)
        paused = agent.paused_turn
        if paused is None:
            raise MemoraError(
                ErrorCode.INVALID_INPUT,
                f"session {session_id} has no paused turn",
                context={"session_id": session_id},
            )
        if approve is not None:
            agent.approve(approve[0], dict(approve[1]) if approve[1] is not None else None)
        elif deny is not None:
            agent.reject(deny[0], deny[1])
        elif answers is not None:
            agent.answer_question(dict(answers))
        return self._run(slot, "continue", agent.continue_after_pause())

    def refuse_busy(self, project: str, session_id: str) -> None:
        """``BUSY`` while a turn runs or waits in the session."""
        slot = self._slot(project, session_id)
        self._refuse_busy(slot)
        if slot.agent is not None and slot.agent.paused_turn is not None:
            raise BusyError(
                f"session {session_id} waits for an {slot.agent.paused_turn.kind}",
                context={"session_id": session_id},
            )

    def role_packs(self, project: str) -> RolePackManager:
        """The project's role packs as a new session would see them."""
        served = self.project(project)
        if served.packs is None:
            opts = served.runtime.options
            served.packs = RolePackManager(
                opts.config_dir,
                pack_roots=opts.role_pack_dirs,
                active=opts.active_role_pack,
                fallback_role=opts.builtin_fallback_role,
                project_path=served.path,
            )
        return served.packs

    def _refuse_busy(self, slot: _Slot) -> None:
        if slot.busy:
            raise BusyError(
                f"a turn is running in session {slot.session_id}; wait for it or abort it",
                context={"session_id": slot.session_id},
            )

    def _run(self, slot: _Slot, kind: str, chunks: AsyncIterator[Any]) -> TurnLog:
        log = TurnLog("t_" + secrets.token_hex(8), kind)
        slot.logs[log.id] = log
        while len(slot.logs) > KEPT_LOGS:
            slot.logs.popitem(last=False)
        slot.running = asyncio.get_running_loop().create_task(
            self._drive(slot, log, chunks), name=f"memora-turn-{log.id}"
        )
        return log

    async def _drive(self, slot: _Slot, log: TurnLog, chunks: AsyncIterator[Any]) -> None:
        # The closing chunk (done, paused...) is logged only once the Agent's generator has
        # finished: a client that acts on it at once (a new message, a role-pack switch) must
        # find the session free, not BUSY for the moment the turn takes to wind down.
        last: str | None = None
        try:
            async with contextlib.aclosing(chunks):  # type: ignore[type-var]
                async for chunk in chunks:
                    if last is not None:
                        log.add(last)
                        last = None
                    if chunk.type in END_TYPES:
                        last = chunk.model_dump_json()
                    else:
                        log.add(chunk.model_dump_json())
            if last is not None:
                log.add(last)
                last = None
        except MemoraError as exc:
            log.add(_error_json(exc.message, exc.code.value))
        except Exception as exc:
            logger.exception("turn %s in session %s failed", log.id, slot.session_id)
            log.add(_error_json(f"{type(exc).__name__}: {exc}", ErrorCode.TURN_FAILED.value))
        finally:
            if last is not None:
                log.add(last)
            log.end()
            slot.last_used = time.monotonic()

    def turn_log(self, project: str, session_id: str, turn_id: str) -> TurnLog:
        slot = self._slots.get((project, session_id))
        log = slot.logs.get(turn_id) if slot is not None else None
        if log is None:
            raise NotFoundError(
                f"no turn {turn_id!r} in session {session_id!r} on this server (finished turns "
                "are kept for a while; the session's history has every round)",
                context={"turn_id": turn_id},
            )
        return log

    def running_turn(self, project: str, session_id: str) -> TurnLog | None:
        slot = self._slots.get((project, session_id))
        if slot is None or not slot.busy or not slot.logs:
            return None
        return next(reversed(slot.logs.values()))

    def abort(self, project: str, session_id: str) -> bool:
        slot = self._slots.get((project, session_id))
        if slot is None or slot.agent is None or not slot.busy:
            return False
        slot.agent.abort()
        return True


def _error_json(message: str, code: str) -> str:
    from memora.chunks import ErrorChunk

    return ErrorChunk(message=message, code=code).model_dump_json()
