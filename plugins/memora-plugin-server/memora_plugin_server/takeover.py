"""Durable turns whose worker died go on in this one.

With a turn executor (``"turn_executor": "dbos"``), every turn's steps are kept as it runs.
:func:`take_overs` runs beside the hub: every ``TAKEOVER_SECONDS`` it asks each project's
executor for its unfinished turns, and takes over each one whose session no live worker holds
(:meth:`Hub.take_over`: the session's lock, its Agent, the turn rebuilt from its last kept
state, its events going on under the same turn id).  Several workers may look at once: the
session's lock lets one of them in.  Without shared state the process serves its projects
alone, so it looks once, at its start: a turn left unfinished then was left by the process
before it.

A turn this memora cannot go on with — kept by a newer one (its journal's version) — is left
alone, named once in the log: taken over, it would be refused on every pass, each refusal
written into the events of the session's last turn.  A turn whose session has stored a round
started after it (the session took the next message while the turn waited) is given up: it
would go on out of order, behind the user's back.  One turn whose take-over fails does not keep
the others from theirs.

A worker can also die after its turn's workflow ended (the round stored, the journal done with
it) and before it wrote the turn's end where followers read it (:func:`_end_orphans`, every
``ORPHAN_SECONDS``): no workflow is left to take over, so the turn's end is written from what
the session kept — ``done`` with the stored round's answer, ``aborted`` or a failure as the
round says, ``paused`` when the worker had saved the turn's pause (kept: any worker resumes
it) — and, when the session kept neither, ``TURN_LOST``, which is then true.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from memora import UnfinishedTurn, check_state_version
from memora.chunks import AbortedChunk, DoneChunk, ErrorChunk, PausedChunk, Usage
from memora.errors import BusyError, ErrorCode, MemoraError
from memora.security.state import warn_once

from .shared import SharedState, lost_turn

if TYPE_CHECKING:
    from .hub import Hub
    from .slots import Project

__all__ = ["ORPHAN_SECONDS", "TAKEOVER_GRACE", "TAKEOVER_SECONDS", "continued_turn", "take_overs"]

logger = logging.getLogger("memora.server")

TAKEOVER_SECONDS = 1.0
"""How often a worker looks for a durable turn whose worker died (its session free)."""
TAKEOVER_GRACE = 30.0
"""How long the followers of a durable turn whose worker died wait for another to take it
over before they are told ``TURN_LOST``."""
ORPHAN_SECONDS = 3.0
"""How often a worker looks for a turn left without its end by a worker that died after the
turn's workflow ended (well within :data:`TAKEOVER_GRACE`)."""
_ENDED = ("done", "aborted", "error")
"""A stored round's statuses that say how its turn ended."""


async def take_overs(hub: Hub) -> None:
    """See the module docstring (cancelled when the hub closes)."""
    first = True
    refused: set[tuple[str, str]] = set()  # (project, turn) this memora cannot go on with
    orphans_due = 0.0
    while True:
        look_for_orphans = time.monotonic() >= orphans_due
        if look_for_orphans:
            orphans_due = time.monotonic() + ORPHAN_SECONDS
        for project in hub.projects.values():
            if project.runtime.turn_executor is None or (project.shared is None and not first):
                continue
            try:
                await _take_over_dead(hub, project, refused)
                if look_for_orphans and project.shared is not None:
                    await _end_orphans(hub, project)
            except Exception:
                logger.exception(
                    "looking for durable turns to take over in %s failed", project.name
                )
        first = False
        await asyncio.sleep(TAKEOVER_SECONDS)


async def _take_over_dead(hub: Hub, project: Project, refused: set[tuple[str, str]]) -> None:
    executor = project.runtime.turn_executor
    assert executor is not None
    for left in await executor.unfinished():
        if (project.name, left.key) in refused or hub.busy_here(project.name, left.session_id):
            continue
        try:
            await _take_over(hub, project, left, refused)
        except Exception as exc:  # this turn's failure is not the next one's; said once
            warn_once(
                logger, left.key, "taking over turn %s failed: %r (tried again)", left.key, exc
            )


async def _take_over(
    hub: Hub, project: Project, left: UnfinishedTurn, refused: set[tuple[str, str]]
) -> None:
    if project.shared is not None and await project.shared.alive(left.session_id):
        return  # running on a live worker
    exists, owner = await hub.owner(project.name, left.session_id)
    if not exists:
        return  # not a session of this project
    executor = project.runtime.turn_executor
    assert executor is not None
    state = await executor.last_state(left.key)
    if state is None:
        return  # it ended since it was listed
    try:
        check_state_version(state)
    except MemoraError as exc:
        refused.add((project.name, left.key))
        logger.warning("turn %s is not taken over: %s", left.key, exc.message)
        return
    if await _moved_on(project, left.session_id, state):
        await executor.abandon(left.key)
        logger.warning(
            "turn %s of session %s is given up, not taken over: the session stored a round "
            "started after it (a message sent while it waited), and it would go on out of order",
            left.key,
            left.session_id,
        )
        return
    with contextlib.suppress(BusyError):  # another worker was quicker
        await hub.take_over(project.name, left.session_id, left.key, scope=owner)
        logger.info("took over turn %s of session %s", left.key, left.session_id)


async def continued_turn(shared: SharedState | None, session_id: str) -> str | None:
    """The turn whose events a turn taken over in ``session_id`` goes on after (its lock
    held): the session's last — unless its events ended where followers read them (its
    journal failed, and the turn said so), then ``None``: it goes on under a new turn id,
    not after an end nobody reads past."""
    if shared is None:
        return None
    turn_id = await shared.last_turn(session_id)
    if turn_id is None or await shared.turn_ended(session_id, turn_id):
        return None
    return turn_id


async def _moved_on(project: Project, session_id: str, state: Mapping[str, Any]) -> bool:
    """The session stored a round started after the turn ``state`` began: the session took
    another message while the turn waited (its journal failed, or its worker died and the user
    asked again) — going on now would run it behind that round, on a history it never saw."""
    started = float(state.get("started_at") or 0)
    rounds = await project.runtime.session_store.rounds(session_id)
    return any(r.round_id != state.get("round_id") and r.started_at > started for r in rounds)


async def _end_orphans(hub: Hub, project: Project) -> None:
    """Write the end of each turn a dead worker left without one, once its workflow ended
    (see the module docstring)."""
    shared, executor = project.shared, project.runtime.turn_executor
    assert shared is not None and executor is not None
    for session_id, turn_id in await shared.orphans():
        if hub.busy_here(project.name, session_id):
            continue
        lease = await shared.try_lock(session_id)
        if lease is None:
            continue  # a worker took the session meanwhile
        try:
            # still left, and no workflow to take over (that turn goes on instead)
            if (
                await shared.last_turn(session_id) != turn_id
                or await shared.turn_ended(session_id, turn_id)
                or await executor.unfinished(session_id)
            ):
                continue
            rounds = await _rounds_of(shared, session_id, turn_id)
            stored = [r for r in await _kept_rounds(project, session_id) if r.round_id in rounds]
            last = stored[-1] if stored else None
            # a pause saved for every worker is this turn's (a resumed turn clears the saved
            # pause before it starts, and no message is taken while one waits): the dead
            # worker paused the turn and died before writing `paused` — settling now would
            # drop the approval the user is to give
            pause = (
                None
                if last is not None and last.status in _ENDED
                else await shared.pause(session_id)
            )
            if pause is not None:
                end = _paused_end(pause)
            else:
                end = _end_from(last)
                # as the dead worker would have: the session settled, then the end written
                await shared.settle(session_id, None)
                if last is not None and last.status in ("done", "aborted"):
                    await shared.forget_created(session_id)
            writer = await shared.resume_writer(session_id, turn_id)
            writer.add(end)
            await writer.end()
            logger.info(
                "turn %s of session %s, left by a worker that died as it ended, ended from "
                "its stored round",
                turn_id,
                session_id,
            )
        except Exception as exc:
            warn_once(logger, turn_id, "ending turn %s failed: %r (tried again)", turn_id, exc)
        finally:
            await lease.release()


async def _rounds_of(shared: SharedState, session_id: str, turn_id: str) -> set[str]:
    """The round ids the turn's events name (a turn's chunks carry its round's)."""
    found: set[str] = set()
    # the session's lock is held here: the events there are all there will be; an empty
    # batch says the reader caught up
    reading = shared.batches(session_id, turn_id, 0, idle=0.0)
    try:
        async for batch in reading:
            if not batch:
                break
            for _, data in batch:
                with contextlib.suppress(ValueError, AttributeError):
                    round_id = json.loads(data).get("round_id")
                    if isinstance(round_id, str):
                        found.add(round_id)
    finally:
        await reading.aclose()
    return found


async def _kept_rounds(project: Project, session_id: str) -> Sequence[_Round]:
    """The session's stored rounds; none when the store has no such session (deleted since,
    or its folder was never this project's): its turn is ended ``TURN_LOST`` once — it was
    tried again every pass, for good, each costing a lock, a journal query and a read."""
    try:
        return await project.runtime.session_store.rounds(session_id)
    except MemoraError as exc:
        if exc.code != ErrorCode.NOT_FOUND:
            raise
        return []


def _paused_end(pause: Mapping[str, Any]) -> str:
    """The ``paused`` a dead worker had not written after saving its turn's pause."""
    doc = pause.get("doc")
    round_id = doc.get("round_id") if isinstance(doc, Mapping) else None
    return PausedChunk(round_id=round_id if isinstance(round_id, str) else None).model_dump_json()


class _Round(Protocol):
    """What :func:`_end_from` reads of a stored round (the session store's ``RoundRecord``)."""

    round_id: str
    status: str
    assistant: str
    usage: dict[str, int]
    output: Any


def _end_from(stored: _Round | None) -> str:
    """The turn's last event as the session kept its round (``TURN_LOST`` when it kept none,
    or only a pause the dead worker could not share)."""
    if stored is None or stored.status not in _ENDED:
        return lost_turn(0)[0][1]
    rid = stored.round_id
    if stored.status == "done":
        known = {k: v for k, v in stored.usage.items() if k in Usage.model_fields}
        usage = Usage.model_validate(known) if known else None
        return DoneChunk(
            round_id=rid, answer=stored.assistant, output=stored.output, usage=usage
        ).model_dump_json()
    if stored.status == "aborted":
        return AbortedChunk(
            round_id=rid,
            reason="the turn was stopped; its round is kept as it stood",
            stop_reason="interrupted",
        ).model_dump_json()
    return ErrorChunk(
        round_id=rid,
        message="the turn failed; its round is kept as it stood",
        code=ErrorCode.TURN_FAILED.value,
    ).model_dump_json()
