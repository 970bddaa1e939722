from __future__ import annotations

from typing import Any

import pytest

from memora.agent.state import (
    DuplicateCallInterceptor,
    Outbox,
    SessionState,
    args_key,
    goal_similarity,
)
from memora.errors import ErrorCode, MemoraError
from memora.testing import ScriptedProvider, text


def test_session_state_machine() -> None:
    s = SessionState()
    s.start()
    assert s.status == "running"
    s.pause()
    assert s.pause_expired(10, now=s.paused_at + 11)  # type: ignore[operator]
    s.beat()  # a heartbeat does not reset the pause clock
    assert s.pause_expired(10, now=s.paused_at + 11)  # type: ignore[operator]
    assert not s.pause_expired(10, now=s.paused_at + 5)  # type: ignore[operator]
    s.fail("provider exploded")
    assert s.status == "error" and s.error == "provider exploded"
    with pytest.raises(MemoraError) as info:
        s.start()
    assert info.value.code == ErrorCode.BUSY and "mark_recovered" in str(info.value)
    s.mark_recovered()
    s.start()
    assert s.status == "running" and s.error == "provider exploded"  # the cause is kept


def test_goal_similarity() -> None:
    assert goal_similarity("设计订单数据库", "设计发票数据库") > 0.3
    assert goal_similarity("design the schema", "写一首诗") == 0.0


def test_interceptor_and_outbox_round_trip() -> None:
    d = DuplicateCallInterceptor(threshold=2)
    assert [d.check("t", {"a": 1}) for _ in range(3)] == ["ok", "warn", "block"]
    assert d.check("t", {"a": 2}) == "ok"
    saved = d.to_dict()
    d2 = DuplicateCallInterceptor(threshold=2)
    d2.load(saved)
    assert d2.check("t", {"a": 2}) == "warn"
    o = Outbox()
    o.record("r1/c1", "write_file", {"p": 1}, True, "done", "ok", None)
    assert o.by_id("r1/c1", "write_file", {"p": 1}) is not None
    assert o.by_id("r1/c1", "write_file", {"p": 2}) is None  # same id, other arguments
    # a caller with the key already (the loop's gates) gets the same answers
    assert o.by_id("r1/c1", "write_file", key=args_key("write_file", {"p": 1})) is not None
    assert o.by_id("r1/c1", "write_file", key=args_key("write_file", {"p": 2})) is None
    o2 = Outbox()
    o2.load(o.to_list())
    assert o2.previous("write_file", {"p": 1}).content == "done"  # type: ignore[union-attr]


async def test_unexpected_failure_needs_recovery(
    make_agent: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Buggy(ScriptedProvider):
        """A provider with a bug (not a ProviderError): the turn ends in `error`."""

        broken = True

        async def stream(self, request: Any) -> Any:
            if self.broken:
                raise RuntimeError("bug in request building")
            async for delta in super().stream(request):
                yield delta

    provider = Buggy(default=text("fine"))
    agent = await make_agent(provider)
    chunks = [c async for c in agent.chat("q")]
    assert chunks[-1].type == "error" and "bug in request building" in chunks[-1].message
    provider.broken = False
    with pytest.raises(MemoraError) as info:
        [c async for c in agent.chat("again")]
    assert info.value.code == ErrorCode.BUSY
    agent.mark_recovered()
    chunks = [c async for c in agent.chat("again")]
    assert chunks[-1].type == "done"
