"""The in-process session store (``memory``): sessions in a dict, for hosts that persist
conversations themselves and for tests.  Nothing survives the process."""

from __future__ import annotations

import builtins
import time
from collections.abc import Sequence
from typing import Any

from ..errors import ErrorCode, MemoraError
from .redaction import redacted, round_lines, title_without
from .session_types import (
    RoundRecord,
    SessionContents,
    SessionInfo,
    lines_until_round,
    new_session_id,
    no_session,
)

__all__ = ["InMemorySessionStore"]


class InMemorySessionStore:
    """Sessions in a dict (``memory``): for hosts that persist conversations themselves, and for
    tests.  Same API as :class:`JsonlSessionStore`; nothing survives the process."""

    def __init__(self) -> None:
        self._meta: dict[str, SessionInfo] = {}
        self._lines: dict[str, builtins.list[dict[str, Any]]] = {}

    def _get(self, session_id: str) -> SessionInfo:
        info = self._meta.get(session_id)
        if info is None:
            raise no_session(session_id)
        return info

    def _info(self, session_id: str) -> SessionInfo:
        info = self._get(session_id).copy()
        rounds = [x for x in self._lines[session_id] if x["kind"] == "round"]
        info.round_count = len(rounds)
        if rounds:
            info.updated_at = max(info.updated_at, max(float(r["ended_at"]) for r in rounds))
            if not info.title and rounds[0]["user"].strip():
                info.title = rounds[0]["user"].strip().splitlines()[0][:80]
        return info

    async def create(
        self, title: str = "", session_id: str | None = None, *, scope: str | None = None
    ) -> SessionInfo:
        sid = session_id or new_session_id()
        if sid in self._meta:
            raise MemoraError(ErrorCode.INVALID_INPUT, f"session {sid!r} already exists")
        t = time.time()
        self._meta[sid] = SessionInfo(id=sid, title=title, created_at=t, updated_at=t, scope=scope)
        self._lines[sid] = []
        return self._info(sid)

    async def get(self, session_id: str) -> SessionInfo:
        return self._info(session_id)

    async def exists(self, session_id: str) -> bool:
        return session_id in self._meta

    async def list(self, *, include_archived: bool = False) -> builtins.list[SessionInfo]:
        infos = [self._info(s) for s in self._meta]
        infos = [i for i in infos if include_archived or not i.archived]
        infos.sort(key=lambda i: -i.updated_at)
        return infos

    async def append_messages(self, session_id: str, messages: Sequence[dict[str, Any]]) -> None:
        self._get(session_id)
        self._lines[session_id].extend({"kind": "message", **m} for m in messages)

    async def append_round(self, session_id: str, record: RoundRecord) -> None:
        await self.append_turn(session_id, (), record)

    async def append_turn(
        self, session_id: str, messages: Sequence[dict[str, Any]], record: RoundRecord
    ) -> None:
        await self.append_messages(session_id, messages)
        self._lines[session_id].append({"kind": "round", **record.to_dict()})

    async def messages(self, session_id: str) -> builtins.list[dict[str, Any]]:
        self._get(session_id)
        return [
            {k: v for k, v in x.items() if k != "kind"}
            for x in self._lines[session_id]
            if x["kind"] == "message"
        ]

    async def rounds(self, session_id: str) -> builtins.list[RoundRecord]:
        self._get(session_id)
        return [RoundRecord.from_dict(x) for x in self._lines[session_id] if x["kind"] == "round"]

    async def load(self, session_id: str) -> SessionContents | None:
        if session_id not in self._meta:
            return None
        return SessionContents(
            self._info(session_id),
            await self.messages(session_id),
            await self.rounds(session_id),
        )

    async def fork(
        self, session_id: str, at_round_id: str | None = None, title: str = ""
    ) -> tuple[SessionInfo, int]:
        source = self._info(session_id)
        kept = lines_until_round(self._lines[session_id], session_id, at_round_id)
        info = await self.create(title or (source.title + " (fork)").strip(), scope=source.scope)
        meta = self._meta[info.id]
        meta.parent_id, meta.fork_round_id = session_id, at_round_id
        self._lines[info.id] = list(kept)
        new = self._info(info.id)
        return new, new.round_count

    async def redact_round(self, session_id: str, round_id: str, tombstone: dict[str, Any]) -> bool:
        lines = self._lines.get(session_id, [])
        targets = round_lines(lines, round_id)
        if targets:
            title = title_without(self._get(session_id).title, lines[targets[-1]].get("user", ""))
            if title is not None:
                self._meta[session_id].title = title
        for index in targets:
            lines[index] = redacted(lines[index], tombstone)
        return bool(targets)

    async def archive(self, session_id: str, archived: bool = True) -> SessionInfo:
        meta = self._get(session_id)
        meta.archived = archived
        meta.updated_at = time.time()
        return self._info(session_id)

    async def close(self) -> None:
        return None
