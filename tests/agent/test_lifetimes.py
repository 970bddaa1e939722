"""The Agent's three lifetimes: a project runtime shared by many sessions, the Agent per
session, and the paused turn as a value; errors hosts catch by type."""

from __future__ import annotations

import asyncio
import gc
import json
import pickle
import weakref
from pathlib import Path
from typing import Any

import pytest

from memora import (
    AbortedError,
    Agent,
    Ask,
    BusyError,
    InvalidConfigError,
    InvalidInputError,
    MemoraError,
    PausedTurn,
    ProjectRuntime,
    ProviderError,
    TurnFailedError,
)
from memora.agent import ApprovalPause, QuestionPause
from memora.errors import ErrorCode, NotFoundError, PauseExpiredError
from memora.llm.types import TextDelta
from memora.testing import ScriptedProvider, ScriptedResponse, text, tool_call

from .conftest import collect, types, write_pack


def _runtime(tmp_path: Path, project: Path, provider: Any, **kwargs: Any) -> ProjectRuntime:
    config = tmp_path / "config"
    write_pack(config, "test", {"reflect": {"summary": "off"}})
    return ProjectRuntime(
        project_path=project,
        data_dir=tmp_path / "data",
        provider=provider,
        config_dir=config,
        active_role_pack="test",
        load_entrypoints=False,
        **kwargs,
    )


async def test_two_sessions_of_one_runtime_run_turns_at_the_same_time(
    tmp_path: Path, project: Path
) -> None:
    provider = ScriptedProvider(default=text("ok"))
    async with _runtime(tmp_path, project, provider) as runtime:
        alice = await runtime.agent(session_id="alice")
        bob = await runtime.agent(session_id="bob")
        assert alice.runtime is bob.runtime is runtime
        assert alice.memory is bob.memory  # one storage, one lock
        assert alice.security.lock is bob.security.lock
        a, b = await asyncio.gather(collect(alice.chat("hi alice")), collect(bob.chat("hi bob")))
        assert types(a)[-1] == types(b)[-1] == "done"
        rounds_a = await alice.sessions.rounds()
        rounds_b = await bob.sessions.rounds()
        assert [r.user for r in rounds_a] == ["hi alice"]
        assert [r.user for r in rounds_b] == ["hi bob"]
        # a session is held by one Agent of the runtime at a time
        with pytest.raises(BusyError) as info:
            await runtime.agent(session_id="alice")
        assert info.value.code == ErrorCode.BUSY and "alice" in str(info.value)
        with pytest.raises(BusyError):
            await bob.switch_session("alice")
        assert bob.session_id == "bob"  # the refused switch left bob where it was
        await alice.close()
        again = await runtime.agent(session_id="alice")  # free once alice closed
        assert [m.content for m in again.history if m.role == "user"] == ["hi alice"]
        # closing an Agent leaves the runtime open; closing the runtime closes its Agents
        assert runtime.is_open
    assert not runtime.is_open
    with pytest.raises(MemoraError):
        await collect(bob.chat("still there?"))


async def test_an_agent_of_a_runtime_sets_only_session_options(
    tmp_path: Path, project: Path
) -> None:
    async with _runtime(tmp_path, project, ScriptedProvider(default=text("ok"))) as runtime:
        with pytest.raises(InvalidConfigError) as info:
            await runtime.agent(session_id="x", max_tokens=5)
        assert "max_tokens" in str(info.value) and "session_id" in str(info.value)
        agent = await runtime.agent(session_id="x", approvals="read-only")
        assert agent.approvals == "read-only"
        assert agent.options.session_id == "x" and runtime.options.session_id is None


async def test_an_agent_alone_owns_its_runtime(make_agent: Any) -> None:
    agent = await make_agent(ScriptedProvider(default=text("ok")))
    runtime = agent.runtime
    assert runtime.is_open
    await agent.close()
    assert not runtime.is_open  # the lock is released with the Agent, as before


async def test_the_paused_turn_is_a_value(make_agent: Any) -> None:
    provider = ScriptedProvider(
        [tool_call(("list_dir", {}, "l1")), text("done listing")], default=text("ok")
    )
    agent = await make_agent(provider, pre_execution_check=lambda call, ctx: Ask("sure?"))
    await collect(agent.chat("list"))
    paused = agent.paused_turn
    assert isinstance(paused, PausedTurn) and paused.kind == "approval"
    assert isinstance(paused.paused, ApprovalPause) and paused.paused.reason == "sure?"
    saved = json.loads(json.dumps(paused.to_json()))
    assert saved == agent.pause_state()
    with pytest.raises(InvalidInputError):
        paused.answer({"x": "y"})  # not a question
    with pytest.raises(InvalidInputError):
        paused.approve(tool_call_id="other")
    paused.approve()
    chunks = [c async for c in paused.resume()]
    assert types(chunks)[-1] == "done" and agent.paused_turn is None
    with pytest.raises(InvalidInputError):  # the value refuses once the turn moved on
        paused.deny("too late")


async def test_a_paused_question_answered_through_the_value(make_agent: Any) -> None:
    ask = {"questions": [{"question": "Which?", "options": ["a", "b"]}]}
    provider = ScriptedProvider(
        [tool_call(("ask_user", ask, "q1")), text("b it is")], default=text("ok")
    )
    agent = await make_agent(
        provider, strategy={"reflect": {"summary": "off", "userFollowup": "ask"}}
    )
    await collect(agent.chat("pick"))
    paused = agent.paused_turn
    assert paused is not None and isinstance(paused.paused, QuestionPause)
    with pytest.raises(InvalidInputError):
        paused.answer("ask", "c")  # not an option
    paused.answer("ask", "b")
    assert types([c async for c in paused.resume()])[-1] == "done"


async def test_a_discarded_value_drops_the_turn_and_a_stale_one_does_nothing(
    make_agent: Any,
) -> None:
    provider = ScriptedProvider([tool_call(("list_dir", {}, "l1"))], default=text("ok"))
    agent = await make_agent(provider, pre_execution_check=lambda call, ctx: Ask("sure?"))
    await collect(agent.chat("list"))
    before = len(agent.history)
    paused = agent.paused_turn
    assert paused is not None
    paused.discard()
    assert agent.paused_turn is None and len(agent.history) < before
    assert types(await collect(agent.chat("again")))[-1] == "done"
    paused.discard()  # stale: the Agent moved on; nothing happens
    assert agent.session_state.status == "idle"


async def test_an_expired_pause_raises_its_own_class(make_agent: Any) -> None:
    provider = ScriptedProvider([tool_call(("list_dir", {}, "l1"))], default=text("ok"))
    agent = await make_agent(
        provider, pre_execution_check=lambda call, ctx: Ask("sure?"), pause_timeout=0.01
    )
    await collect(agent.chat("list"))
    await asyncio.sleep(0.05)
    with pytest.raises(PauseExpiredError) as info:
        agent.approve("l1")
    assert info.value.code == ErrorCode.PAUSE_EXPIRED and agent.paused_turn is None


async def test_busy_is_a_busy_error(make_agent: Any) -> None:
    provider = ScriptedProvider([tool_call(("list_dir", {}, "l1"))], default=text("ok"))
    agent = await make_agent(provider, pre_execution_check=lambda call, ctx: Ask("sure?"))
    await collect(agent.chat("list"))
    with pytest.raises(BusyError) as info:
        await collect(agent.chat("another"))
    assert info.value.code == ErrorCode.BUSY and isinstance(info.value, MemoraError)


async def test_chat_text_raises_by_what_ended_the_turn(make_agent: Any) -> None:
    class Broken:
        name = "broken"
        context_window = 8000

        async def stream(self, request: Any) -> Any:
            raise ProviderError("the server said no", category="connection")
            yield  # pragma: no cover

    agent = await make_agent(ScriptedProvider(default=text("ok")))
    assert await agent.chat_text("hi") == "ok"
    agent.set_provider(Broken())  # type: ignore[arg-type]
    with pytest.raises(ProviderError) as provider_failed:
        await agent.chat_text("hi")
    assert provider_failed.value.code == ErrorCode.PROVIDER_ERROR
    assert provider_failed.value.category == "connection"

    slow = ScriptedProvider([ScriptedResponse([TextDelta("a"), TextDelta("b")], delay=2)])
    agent.set_provider(slow)

    async def abort_soon() -> None:
        await asyncio.sleep(0.1)
        agent.abort()

    task = asyncio.ensure_future(abort_soon())
    with pytest.raises(AbortedError) as aborted:
        await agent.chat_text("wait")
    await task
    assert aborted.value.code == ErrorCode.ABORTED
    assert aborted.value.context["stop_reason"] == "user"


async def test_a_failure_inside_the_turn_is_turn_failed(make_agent: Any) -> None:
    class Broken:
        threshold = 3

        def check(self, ctx: Any) -> str:
            raise RuntimeError("a bug in the host's interceptor")

    agent = await make_agent(
        ScriptedProvider([tool_call(("list_dir", {}, "l1"))], default=text("ok")),
        duplicate_interceptor=Broken(),
    )
    with pytest.raises(TurnFailedError) as info:
        await agent.chat_text("go")
    assert info.value.code == ErrorCode.TURN_FAILED
    assert "a bug in the host's interceptor" in str(info.value)


def test_every_code_builds_its_class_and_survives_pickling() -> None:
    for code in ErrorCode:
        error = MemoraError(code, "message", context={"k": 1})
        assert error.code == code and error.context["k"] == 1
        back = pickle.loads(pickle.dumps(error))
        assert type(back) is type(error) and str(back) == str(error)
    assert isinstance(MemoraError(ErrorCode.NOT_FOUND, "x"), NotFoundError)
    assert NotFoundError("no such pack").code == ErrorCode.NOT_FOUND
    assert issubclass(ProviderError, MemoraError)


async def test_options_and_history_before_init(tmp_path: Path, project: Path) -> None:
    agent = Agent(project_path=project, data_dir=tmp_path / "d", load_entrypoints=False)
    assert agent.options.project_path == project
    assert agent.history == ()
    agent.discard_paused_turn()  # nothing to discard: no error
    with pytest.raises(MemoraError) as info:
        _ = agent.memory
    assert info.value.code == ErrorCode.NOT_INITIALIZED and "agent.memory" in str(info.value)


async def test_a_closed_agent_is_freed_without_the_cycle_collector(
    tmp_path: Path, project: Path
) -> None:
    """A server closes an Agent for every session it lets go: a closed Agent, its session's
    messages and tools are freed when the host lets go of it, not at the next full garbage
    collection (which a busy server runs seldom)."""
    provider = ScriptedProvider(
        [text("hello"), tool_call(("read_file", {"path": "a.txt"})), text("it says hello")]
    )
    (project / "a.txt").write_text("hello", encoding="utf-8")
    async with _runtime(tmp_path, project, provider) as runtime:
        warm = await runtime.agent(session_id="warm")
        await warm.chat_text("hi")
        await warm.close()
        del warm
        gc.collect()
        gc.disable()
        try:
            agent = await runtime.agent(session_id="s1")
            await agent.chat_text("read a.txt please")
            sessions, polish = agent.sessions, agent.polish
            assert [s.id for s in await sessions.list()]  # the managers work while it lives
            assert (await agent.tools.execute("read_file", {"path": "a.txt"})).ok
            await agent.close()
            assert [s.id for s in await sessions.list()]  # and after close
            del sessions, polish
            gone = weakref.ref(agent)
            tools, state = weakref.ref(agent.tools), weakref.ref(agent.session_state)
            del agent
            assert gone() is None
            assert tools() is None
            assert state() is None
        finally:
            gc.enable()
