"""The session store conformance suite: what every session store does, checked the same way.

Use it from a plugin's tests by subclassing and providing ``open_store``::

    from memora.testing.session_conformance import SessionStoreConformance

    class TestMySessions(SessionStoreConformance):
        async def open_store(self, path):   # path: a fresh directory per test
            return MySessionStore(path)

It holds a store to the protocol of :class:`memora.memory.sessions.SessionStore` — sessions,
their messages and rounds in order, forks, archiving — and to forgetting a round's text
(``redact_round``, what ``memora memory forget --everywhere`` asks of it): the round and its
turn's messages keep their place and structure and lose every word, the round says who asked
and when, and nothing else changes.  Needs pytest and pytest-asyncio.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from ..memory.redaction import FORGOTTEN
from ..memory.sessions import RoundRecord, SessionStore

__all__ = ["SECRET", "SessionStoreConformance"]

SECRET = "kestrel-5521 我的密码"


def _turn(round_id: str, said: str, answer: str) -> tuple[list[dict[str, Any]], RoundRecord]:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": said},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": f"c-{round_id}", "name": "read_file", "arguments": '{"path": "a"}'}],
        },
        {"role": "tool", "content": f"a says {said}", "tool_call_id": f"c-{round_id}", "name": "read_file"},
        {"role": "assistant", "content": answer},
    ]  # fmt: skip
    events: list[dict[str, Any]] = [
        {"type": "tool_start", "tool_call_id": f"c-{round_id}", "name": "read_file", "args": {"path": said}},
        {"type": "tool_result", "tool_call_id": f"c-{round_id}", "name": "read_file", "ok": True, "summary": said},
    ]  # fmt: skip
    record = RoundRecord(
        round_id, said, answer, events, "done", 1.0, 2.0, {"input_tokens": 7}, None, "m"
    )
    return messages, record


class SessionStoreConformance:
    """Subclass and implement :meth:`open_store`."""

    pytestmark = pytest.mark.asyncio(loop_scope="function")

    async def open_store(self, path: Path) -> SessionStore:  # pragma: no cover - abstract
        raise NotImplementedError

    @pytest_asyncio.fixture(loop_scope="function")
    async def store(self, tmp_path: Path) -> AsyncIterator[SessionStore]:
        opened = await self.open_store(tmp_path)
        try:
            yield opened
        finally:
            await opened.close()

    async def _append_turn(
        self, store: SessionStore, session_id: str, round_id: str, said: str, answer: str
    ) -> None:
        messages, record = _turn(round_id, said, answer)
        turn = getattr(store, "append_turn", None)
        if turn is not None:
            await turn(session_id, messages, record)
        else:
            await store.append_messages(session_id, messages)
            await store.append_round(session_id, record)

    async def test_messages_and_rounds_come_back_in_order(self, store: SessionStore) -> None:
        info = await store.create("t")
        await self._append_turn(store, info.id, "r1", "first", "one")
        await self._append_turn(store, info.id, "r2", "second", "two")
        rounds = await store.rounds(info.id)
        assert [r.round_id for r in rounds] == ["r1", "r2"], "rounds come back in order"
        assert [m["content"] for m in await store.messages(info.id) if m["role"] == "user"] == [
            "first",
            "second",
        ]
        assert (await store.get(info.id)).round_count == 2
        assert await store.exists(info.id) and not await store.exists("no-such-session")

    async def _forget_the_middle_round(self, store: SessionStore) -> tuple[str, Any]:
        """A session of three turns whose middle one is forgotten: its id and the store's
        ``redact_round`` (the test is skipped for a store without one)."""
        redact = getattr(store, "redact_round", None)
        if redact is None:
            pytest.skip("this store cannot forget a round's text (no redact_round)")
        info = await store.create()
        await self._append_turn(store, info.id, "r1", "before", "kept answer")
        await self._append_turn(store, info.id, "r2", f"my code is {SECRET}", f"noted {SECRET}")
        await self._append_turn(store, info.id, "r3", "after", "kept too")
        stamp = {"by": "token:alice", "at": 1_800_000_000.0, "memory": "m1"}
        assert await redact(info.id, "r2", stamp) is True
        assert await redact(info.id, "no-such-round", stamp) is False
        return info.id, redact

    async def test_a_forgotten_round_keeps_its_place_and_loses_its_words(
        self, store: SessionStore
    ) -> None:
        session_id, _ = await self._forget_the_middle_round(store)
        messages = await store.messages(session_id)
        rounds = await store.rounds(session_id)
        everything = json.dumps([messages, [r.to_dict() for r in rounds]], ensure_ascii=False)
        assert SECRET not in everything and "5521" not in everything, (
            "no word of the forgotten round is left in its messages or its round"
        )
        assert [r.round_id for r in rounds] == ["r1", "r2", "r3"], "the round keeps its place"
        forgotten = rounds[1]
        assert forgotten.forgotten is not None and forgotten.forgotten.get("by") in (
            "token:alice",
            None,
        ), "the round says who asked (when its line has room)"
        assert (forgotten.user, forgotten.assistant, forgotten.events) == ("", "", [])
        assert forgotten.status == "done" and forgotten.usage == {"input_tokens": 7}
        assert rounds[0].user == "before" and rounds[2].assistant == "kept too", (
            "the other rounds are untouched"
        )
        load = getattr(store, "load", None)
        if load is not None:
            loaded = await load(session_id)
            assert loaded is not None
            assert SECRET not in json.dumps(
                [loaded.messages, [r.to_dict() for r in loaded.rounds]], ensure_ascii=False
            )

    async def test_a_forgotten_turns_messages_keep_their_structure(
        self, store: SessionStore
    ) -> None:
        session_id, _ = await self._forget_the_middle_round(store)
        messages = await store.messages(session_id)
        assert len(messages) == 12, "every message keeps its place"
        middle = messages[4:8]
        assert [m["role"] for m in middle] == ["user", "assistant", "tool", "assistant"]
        assert middle[0]["content"] == FORGOTTEN and middle[2]["content"] == FORGOTTEN
        # a provider refuses a history whose tool results match no call: the ids stay
        assert middle[1]["tool_calls"][0]["id"] == "c-r2"
        assert middle[2]["tool_call_id"] == "c-r2"
        assert messages[0]["content"] == "before" and messages[-1]["content"] == "kept too"
        # and the session goes on: a turn after it is appended as ever
        await self._append_turn(store, session_id, "r4", "later", "fine")
        assert [r.round_id for r in await store.rounds(session_id)] == ["r1", "r2", "r3", "r4"]
        assert SECRET not in (await store.get(session_id)).title

    async def test_forgetting_the_first_round_takes_it_out_of_the_default_title(
        self, store: SessionStore
    ) -> None:
        redact = getattr(store, "redact_round", None)
        if redact is None:
            pytest.skip("this store cannot forget a round's text (no redact_round)")
        info = await store.create()
        await self._append_turn(store, info.id, "r1", f"remember {SECRET}", "ok")
        assert SECRET in (await store.get(info.id)).title, "the default title is the request"
        assert await redact(info.id, "r1", {"by": "cli:ana", "at": 1.0})
        listed = [i for i in await store.list() if i.id == info.id]
        assert SECRET not in (await store.get(info.id)).title
        assert listed and SECRET not in listed[0].title
