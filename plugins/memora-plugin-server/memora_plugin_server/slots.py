"""A session served by this process (:class:`Slot`), and how a turn runs in it.

A turn runs in a task of its own (:func:`run_turn`): its chunks go into a :class:`TurnLog`,
which every request following the turn reads from, and — with several workers — where every
worker finds them; the closing chunk is published only once the turn's pause is shared and the
session's lock let go.  :func:`pause_doc` is what the API shows of a paused turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memora import Agent, ApprovalPause, HostPause, PausedTurn, ProjectRuntime, QuestionPause
from memora.chunks import AgentChunk, ErrorChunk
from memora.errors import ErrorCode, MemoraError

from .shared import Lease, SharedState, TurnWriter
from .turns import END_TYPES, TurnLog

logger = logging.getLogger("memora.server")

__all__ = ["KEPT_LOGS", "Project", "Slot", "pause_doc", "run_turn"]

KEPT_LOGS = 8
"""Finished turn logs kept per session for clients that reconnect late."""


@dataclass
class Slot:
    """A session served by this process: its Agent, the running turn, recent turn logs."""

    project: Project
    session_id: str
    agent: Agent | None = None
    version: str = ""
    """The shared version of the session the Agent was opened at (shared mode)."""
    running: asyncio.Task[None] | None = None
    turn: TurnLog | None = None
    """The log of the turn ``running`` runs (or ran last) — a taken-over turn's too, which
    ``logs`` does not keep: its events before the take-over are where the workers share them."""
    logs: OrderedDict[str, TurnLog] = field(default_factory=OrderedDict)
    last_used: float = field(default_factory=time.monotonic)
    opening: asyncio.Lock = field(default_factory=asyncio.Lock)
    scope: str | None = None
    """The memory scope (user) the session belongs to, known once its Agent was opened."""
    pack: str | None = None
    """The shared role pack the Agent was opened with or switched to (shared mode)."""
    stale: bool = False
    """The store changed under the running turn (``forget --everywhere``, here or on another
    worker): the Agent, whose window may hold what was forgotten, is opened again from the
    store before its next use."""

    @property
    def busy(self) -> bool:
        return self.running is not None and not self.running.done()


@dataclass
class Project:
    """A served project: its name in URLs, its folder, its runtime and, when several workers
    serve it, what they share (:class:`~.shared.FileSharedState`)."""

    name: str
    path: Path
    runtime: ProjectRuntime
    shared: SharedState | None = None


async def run_turn(
    slot: Slot,
    kind: str,
    chunks: AsyncIterator[Any],
    lease: Lease | None,
    *,
    going_on: str | None = None,
    agent: Agent | None = None,
) -> TurnLog:
    """Run a turn's ``chunks`` in a task of their own (``slot.running``), into a new
    :class:`TurnLog` (and, with several workers, where every worker reads it); ``lease``:
    the session's lock across the workers, let go when the turn ends.  ``going_on``: the id of
    a dead worker's durable turn taken over here — its events go on after the last one written
    (followers read them where the workers share them: the log here holds only the rest).
    ``agent``: returns only once its turn executor has kept the turn's start (or the turn
    ended first) — a turn acknowledged to a client is never one a dying worker loses."""
    log = TurnLog(going_on or "t_" + secrets.token_hex(8), kind)
    if going_on is None:
        slot.logs[log.id] = log
        while len(slot.logs) > KEPT_LOGS:
            slot.logs.popitem(last=False)
    shared = slot.project.shared
    writer: TurnWriter | None = None
    if shared is not None:
        if going_on is not None:
            writer = await shared.resume_writer(slot.session_id, going_on)
        else:
            writer = await shared.writer(slot.session_id, log.id)
    slot.turn = log
    running = slot.running = asyncio.get_running_loop().create_task(
        _drive(slot, log, chunks, lease, writer), name=f"memora-turn-{log.id}"
    )
    if agent is not None and agent.runtime.turn_executor is not None:
        kept = asyncio.ensure_future(agent.turn_kept())
        try:
            await asyncio.wait((kept, running), return_when=asyncio.FIRST_COMPLETED)
        finally:
            kept.cancel()
    return log


async def _drive(
    slot: Slot,
    log: TurnLog,
    chunks: AsyncIterator[Any],
    lease: Lease | None,
    writer: TurnWriter | None,
) -> None:
    # The closing chunk (done, paused...) is published only once the Agent's generator has
    # finished and, with several workers, the pause is saved and the session's lock let go:
    # a client that acts on it at once (a new message, an approval, a role-pack switch)
    # must find the session free, on whichever worker its request lands.
    def publish(chunk: AgentChunk) -> None:
        data = log.add(chunk)
        if writer is not None:
            writer.add(data)

    last: AgentChunk | None = None
    watcher = await _watch_aborts(slot) if lease is not None else None
    try:
        async with contextlib.aclosing(chunks):  # type: ignore[type-var]
            async for chunk in chunks:
                if last is not None:
                    publish(last)
                    last = None
                if chunk.type in END_TYPES:
                    last = chunk
                else:
                    publish(chunk)
    except MemoraError as exc:
        last = ErrorChunk(message=exc.message, code=exc.code.value)
    except Exception as exc:
        logger.exception("turn %s in session %s failed", log.id, slot.session_id)
        last = ErrorChunk(message=f"{type(exc).__name__}: {exc}", code=ErrorCode.TURN_FAILED.value)
    finally:
        if watcher is not None:
            watcher.cancel()
        try:
            await _share_outcome(slot, last.type if last is not None else None)
        finally:
            if writer is not None:
                if last is not None:
                    writer.add(last.model_dump_json())
                await writer.end()
            if lease is not None:
                await lease.release()
            if last is not None:
                log.add(last)
            log.end()
            slot.last_used = time.monotonic()


def forgotten_in(slot: Slot) -> bool:
    """``forget --everywhere`` took text out of the session's rounds: the events of its
    finished turns, kept for a client that reconnects, go too (the rounds say what is left);
    true when its Agent is to be closed now — a running turn's is once the turn ends."""
    for turn_id, log in list(slot.logs.items()):
        if log.ended:
            del slot.logs[turn_id]
    slot.stale = slot.busy
    return not slot.busy


async def _share_outcome(slot: Slot, ended_as: str | None) -> None:
    """Shared mode: save the turn's pause (or clear it) and move the session's version on."""
    shared, agent = slot.project.shared, slot.agent
    if shared is None or agent is None:
        return
    if (await shared.view(slot.session_id)).version != slot.version:
        # another worker moved the session on while this turn ran (a forget): the version
        # settled here would pass for this Agent's, whose window still holds what it changed
        slot.stale = True
    paused = agent.paused_turn
    pause = {"state": paused.to_json(), "doc": pause_doc(paused)} if paused is not None else None
    slot.version = await shared.settle(slot.session_id, pause)
    if paused is None and ended_as in ("done", "aborted"):
        await shared.forget_created(slot.session_id)  # its round is in the store for every worker


async def _watch_aborts(slot: Slot) -> asyncio.Task[None]:
    shared = slot.project.shared
    assert shared is not None  # an old abort request went when the turn took the lock

    async def watch() -> None:
        while True:
            await shared.wait_abort(slot.session_id)
            if slot.agent is not None:
                slot.agent.abort()

    return asyncio.get_running_loop().create_task(watch(), name="memora-abort-watch")


def pause_doc(paused: PausedTurn) -> dict[str, Any]:
    """What the API shows of a :class:`~memora.PausedTurn`: its kind and round, and what the
    pause waits for (the call to approve, or the questions to answer)."""
    doc: dict[str, Any] = {"kind": paused.kind, "round_id": paused.record.round_id}
    match paused.paused:
        case ApprovalPause(tool_call_id=call_id, name=name, args=args, reason=reason):
            doc.update(tool_call_id=call_id, name=name, args=args, reason=reason)
        case QuestionPause(tool_call_id=call_id, name=name, questions=questions):
            doc.update(
                tool_call_id=call_id, name=name, questions=[q.model_dump() for q in questions]
            )
        case HostPause(tool_call_id=call_id, reason=reason):
            doc.update(tool_call_id=call_id, reason=reason)
    return doc
