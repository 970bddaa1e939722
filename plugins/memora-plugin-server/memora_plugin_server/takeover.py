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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from memora import UnfinishedTurn, check_state_version
from memora.errors import BusyError, MemoraError
from memora.security.state import warn_once

if TYPE_CHECKING:
    from .hub import Hub
    from .slots import Project

__all__ = ["TAKEOVER_GRACE", "TAKEOVER_SECONDS", "take_overs"]

logger = logging.getLogger("memora.server")

TAKEOVER_SECONDS = 1.0
"""How often a worker looks for a durable turn whose worker died (its session free)."""
TAKEOVER_GRACE = 30.0
"""How long the followers of a durable turn whose worker died wait for another to take it
over before they are told ``TURN_LOST``."""


async def take_overs(hub: Hub) -> None:
    """See the module docstring (cancelled when the hub closes)."""
    first = True
    refused: set[tuple[str, str]] = set()  # (project, turn) this memora cannot go on with
    while True:
        for project in hub.projects.values():
            if project.runtime.turn_executor is None or (project.shared is None and not first):
                continue
            try:
                await _take_over_dead(hub, project, refused)
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


async def _moved_on(project: Project, session_id: str, state: Mapping[str, Any]) -> bool:
    """The session stored a round started after the turn ``state`` began: the session took
    another message while the turn waited (its journal failed, or its worker died and the user
    asked again) — going on now would run it behind that round, on a history it never saw."""
    started = float(state.get("started_at") or 0)
    rounds = await project.runtime.session_store.rounds(session_id)
    return any(r.round_id != state.get("round_id") and r.started_at > started for r in rounds)
