"""Forget everywhere: a memory out of recall, its text out of its history, its round's text out
of the session's log — with a record of who asked and when.

``forget`` (:meth:`MemoryManager.forget`) takes a memory out of recall and keeps its chain, old
text included, for ``memora memory history``.  People who ask a service to forget something
mean everywhere: :func:`forget_everywhere` does that forget, then

- empties every version of the memory (its supersede chain: the texts an edit replaced too),
  each keeping its place in the chain with ``meta.redacted`` — who asked, when, for which memory;
- forgets the text of the round the memory came from in the session's log, and in every session
  forked from it (a fork copied the round): the round keeps its place, its id, times and usage,
  and says ``forgotten`` (who and when); its turn's messages keep their roles and tool-call ids
  and say ``[forgotten]`` (:mod:`memora.memory.redaction`);
- asks the memory store to scrub its files where it can (SQLite: the index merged, the
  write-ahead log cut), so the old bytes are not left in free space.

A session store without ``redact_round`` is refused with ``NOT_AVAILABLE`` before anything is
changed.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import NotAvailableError
from .manager import MemoryManager
from .sessions import SessionStore
from .types import MemoryRecord

__all__ = ["Forgotten", "forget_everywhere"]


@dataclass(frozen=True)
class Forgotten:
    """What :func:`forget_everywhere` did: the forget's tombstone, the memories emptied (the
    chain) and the rounds forgotten ``(session_id, round_id)``."""

    tombstone: MemoryRecord
    memories: tuple[str, ...]
    rounds: tuple[tuple[str, str], ...]

    @property
    def sessions(self) -> tuple[str, ...]:
        """The sessions whose log changed (a host reopens any it holds open)."""
        return tuple(dict.fromkeys(sid for sid, _ in self.rounds))

    def to_dict(self) -> dict[str, Any]:
        """As JSON data (a route's answer, ``--json``)."""
        return {
            "tombstone": self.tombstone.id,
            "memories": list(self.memories),
            "rounds": [{"session_id": s, "round_id": r} for s, r in self.rounds],
        }


async def forget_everywhere(
    memory: MemoryManager, sessions: SessionStore | None, memory_id: str, *, by: str
) -> Forgotten:
    """Forget ``memory_id`` everywhere (see the module docstring) in ``memory``'s view — its
    scope's rules hold: another scope's memory is ``NOT_FOUND``, the project's is ``CONFLICT``
    for a scoped view, a superseded one ``CONFLICT`` naming the current one."""
    chain = await memory.history(memory_id)
    rounds = {(r.session_id, r.round_id) for r in chain if r.session_id and r.round_id}
    redact = getattr(sessions, "redact_round", None)
    if rounds and redact is None:
        raise NotAvailableError(
            f"the session store {type(sessions).__name__} cannot forget a round's text (it has "
            "no redact_round); nothing was changed — forget without --everywhere takes the "
            "memory out of recall",
            context={"memory_id": memory_id},
        )
    tombstone = await memory.forget(memory_id, by=by)
    stamp = {"by": by, "at": tombstone.meta["forgotten"]["at"], "memory": memory_id}
    for record in chain:
        await memory.storage.update(
            record.id, content="", name="", meta={**record.meta, "redacted": stamp}
        )
    done: list[tuple[str, str]] = []
    if rounds and sessions is not None and redact is not None:
        forks = await _forks(sessions)
        for session_id, round_id in sorted(rounds):
            assert session_id is not None and round_id is not None
            for sid in (session_id, *_descendants(forks, session_id)):
                if await redact(sid, round_id, stamp):
                    done.append((sid, round_id))
    scrub = getattr(memory.storage, "scrub", None)
    if scrub is not None:
        await scrub()
    return Forgotten(tombstone, tuple(r.id for r in chain), tuple(done))


async def _forks(sessions: SessionStore) -> dict[str, builtins.list[str]]:
    """Each session's forks (the sessions whose ``parent_id`` it is), archived ones too."""
    children: dict[str, builtins.list[str]] = {}
    for info in await sessions.list(include_archived=True):
        if info.parent_id:
            children.setdefault(info.parent_id, []).append(info.id)
    return children


def _descendants(children: dict[str, builtins.list[str]], root: str) -> Iterable[str]:
    seen: set[str] = {root}
    todo = list(children.get(root, ()))
    while todo:
        sid = todo.pop()
        if sid in seen:
            continue
        seen.add(sid)
        yield sid
        todo.extend(children.get(sid, ()))
