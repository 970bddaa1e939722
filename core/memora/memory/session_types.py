"""What every session store speaks: a session's metadata, a round, what opening one reads,
and the :class:`SessionStore` protocol (the built-in ``jsonl`` store is
:mod:`memora.memory.sessions`, the in-process ``memory`` one :mod:`memora.memory.session_memory`;
``postgres`` is a plugin).  A session is a list of lines: ``{"kind": "message", ...}`` (one
LLM-history message) and ``{"kind": "round", ...}`` (a finished round).
"""

from __future__ import annotations

import builtins
import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime
from typing import Any, NamedTuple, Protocol, runtime_checkable

from ..errors import ErrorCode, MemoraError

__all__ = [
    "RoundRecord",
    "SessionContents",
    "SessionInfo",
    "SessionStore",
    "lines_until_round",
    "messages_of",
    "new_session_id",
    "no_session",
    "rounds_of",
]

logger = logging.getLogger("memora.sessions")


def new_session_id() -> str:
    """A fresh session id: the UTC time it was made and eight random hex digits."""
    return f"{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"


@dataclass
class SessionInfo:
    """A session's metadata: title, times, where it was forked from, rounds so far."""

    id: str
    title: str = ""
    created_at: float = 0.0
    updated_at: float = 0.0
    parent_id: str | None = None
    fork_round_id: str | None = None
    archived: bool = False
    round_count: int = 0
    scope: str | None = None
    """The user, tenant or agent the session belongs to (``None``: the project's); an Agent of
    one scope opens and lists only that scope's sessions."""

    def to_dict(self) -> dict[str, Any]:
        # every field is a plain value: a shallow dict (asdict() deep-copies each one, the
        # largest cost of a new session's first append)
        return {name: getattr(self, name) for name in _INFO_FIELDS}

    def copy(self) -> SessionInfo:
        """A copy (every field is a plain value: no deep copy needed)."""
        return replace(self)


_INFO_FIELDS = tuple(f.name for f in fields(SessionInfo))


@dataclass
class RoundRecord:
    """One question and its answer, with what happened in between."""

    round_id: str
    user: str
    assistant: str = ""
    events: builtins.list[dict[str, Any]] = field(default_factory=list)
    status: str = "done"
    """``done``, ``aborted``, ``error`` or ``paused``."""
    started_at: float = 0.0
    ended_at: float = 0.0
    usage: dict[str, int] = field(default_factory=dict)
    output: Any = None
    """A typed turn's validated result, as JSON data (``None``: a text turn)."""
    model: str = ""
    """Which provider and model answered (``openai:gpt-4o-mini``); empty in rounds stored
    before memora recorded it."""
    forgotten: dict[str, Any] | None = None
    """Set when the round's text was forgotten (``forget --everywhere``): who asked (``by``),
    when (``at``) and for which memory; the round's text, answer and events are gone."""

    def to_dict(self) -> dict[str, Any]:
        # shallow on purpose: events are plain JSON values, about to be serialised (asdict()
        # deep-copies every event dict, a measurable cost per turn)
        data = {
            "round_id": self.round_id,
            "user": self.user,
            "assistant": self.assistant,
            "events": list(self.events),
            "status": self.status,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "usage": dict(self.usage),
        }
        if self.output is not None:
            data["output"] = self.output
        if self.model:
            data["model"] = self.model
        if self.forgotten is not None:
            data["forgotten"] = dict(self.forgotten)
        return data

    @staticmethod
    def from_dict(data: dict[str, Any]) -> RoundRecord:
        return RoundRecord(
            round_id=str(data["round_id"]),
            user=str(data.get("user", "")),
            assistant=str(data.get("assistant", "")),
            events=list(data.get("events") or []),
            status=str(data.get("status", "done")),
            started_at=float(data.get("started_at") or 0.0),
            ended_at=float(data.get("ended_at") or 0.0),
            usage=dict(data.get("usage") or {}),
            output=data.get("output"),
            model=str(data.get("model") or ""),
            forgotten=dict(data["forgotten"]) if isinstance(data.get("forgotten"), dict) else None,
        )


def no_session(session_id: str) -> MemoraError:
    """``NOT_FOUND``: the store has no session ``session_id``."""
    return MemoraError(
        ErrorCode.NOT_FOUND, f"no session {session_id!r}", context={"session_id": session_id}
    )


def lines_until_round(
    lines: Iterable[dict[str, Any]], session_id: str, at_round_id: str | None
) -> builtins.list[dict[str, Any]]:
    """The lines of a session up to and including round ``at_round_id`` (all when ``None``),
    for a fork; ``NOT_FOUND`` when the session has no such round.  Lines are dicts with
    ``kind`` (and ``round_id`` for rounds), as every session store keeps them."""
    kept: builtins.list[dict[str, Any]] = []
    for line in lines:
        kept.append(line)
        if (
            at_round_id is not None
            and line.get("kind") == "round"
            and line.get("round_id") == at_round_id
        ):
            return kept
    if at_round_id is not None:
        raise MemoraError(
            ErrorCode.NOT_FOUND,
            f"session {session_id!r} has no round {at_round_id!r}",
            context={"session_id": session_id, "round_id": at_round_id},
        )
    return kept


class SessionContents(NamedTuple):
    """What an Agent reads when it opens a session: ``get``, ``messages`` and ``rounds`` in
    one (``load``)."""

    info: SessionInfo
    messages: builtins.list[dict[str, Any]]
    rounds: builtins.list[RoundRecord]
    mark: Any = None
    """Where this read ended, in the store's own terms: ``load(session_id, after=mark)`` may
    then read only what was written since (``None``: the store cannot)."""
    since: Any = None
    """The ``after`` mark this read went on from — ``messages`` and ``rounds`` are then only
    what was written after it — or ``None``: the whole session."""


def messages_of(lines: Iterable[dict[str, Any]]) -> builtins.list[dict[str, Any]]:
    """The history messages among a session's lines (without their ``kind``)."""
    return [
        {k: v for k, v in x.items() if k != "kind"} for x in lines if x.get("kind") == "message"
    ]


def rounds_of(session_id: str, lines: Iterable[dict[str, Any]]) -> builtins.list[RoundRecord]:
    """The rounds among a session's lines; a malformed one is logged and skipped."""
    out = []
    for line in lines:
        if line.get("kind") == "round" and "round_id" in line:
            try:
                out.append(RoundRecord.from_dict(line))
            except (TypeError, ValueError) as exc:
                logger.warning("session %s: malformed round skipped: %s", session_id, exc)
    return out


@runtime_checkable
class SessionStore(Protocol):
    """What a session store does (``register_session_stores``; the built-in ``jsonl`` and
    ``memory`` stores, ``postgres``): sessions with their message history and their rounds.
    A store may also offer ``append_turn(session_id, messages, record)``, one write for a
    finished turn's messages and round, and ``load(session_id)``, a :class:`SessionContents`
    (or ``None`` when there is no such session) read at once — what an Agent reads when it
    opens a session, otherwise asked for with ``exists``, ``get``, ``messages`` and ``rounds``.
    A store that can forget a round's text offers ``redact_round(session_id, round_id,
    tombstone) -> bool`` (``memora memory forget --everywhere``; see
    :mod:`memora.memory.redaction`): the round's line and its turn's messages keep their place
    and structure and lose their text, the round gaining ``forgotten`` (the ``tombstone``:
    who asked and when); ``False`` when the session has no such round."""

    async def create(
        self, title: str = "", session_id: str | None = None, *, scope: str | None = None
    ) -> SessionInfo:
        """A new session (of ``scope``: a store without the parameter serves unscoped agents
        only)."""
        ...

    async def get(self, session_id: str) -> SessionInfo: ...
    async def exists(self, session_id: str) -> bool: ...
    async def list(self, *, include_archived: bool = False) -> builtins.list[SessionInfo]: ...
    async def append_messages(
        self, session_id: str, messages: Sequence[dict[str, Any]]
    ) -> None: ...
    async def messages(self, session_id: str) -> builtins.list[dict[str, Any]]: ...
    async def append_round(self, session_id: str, record: RoundRecord) -> None: ...
    async def rounds(self, session_id: str) -> builtins.list[RoundRecord]: ...
    async def fork(
        self, session_id: str, at_round_id: str | None = None, title: str = ""
    ) -> tuple[SessionInfo, int]: ...
    async def archive(self, session_id: str, archived: bool = True) -> SessionInfo: ...
    async def close(self) -> None: ...
