"""Durable turns through the kernel's seam (#71), with the in-memory executor of memora.testing:
the turn checkpoints after each step and before a call that may not be repeated; a worker that
dies there leaves a turn another Agent takes over from what was kept — no LLM call made twice,
no tool run twice, the round stored once; a call left in flight runs again only if its tool
says it may."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from memora import ProjectRuntime, tool
from memora.agent.durable import INTERRUPTED_CALL, JournalError
from memora.errors import ErrorCode, MemoraError
from memora.testing import ScriptedProvider, text, tool_call
from memora.testing.turns import InMemoryTurnExecutor, WorkerDied

from .conftest import collect, types, write_pack

RAN: dict[str, int] = {}


@tool(idempotency="non-idempotent", writes=True)
async def send_payment(ctx: Any, amount: int) -> str:
    """Pay an amount (not to be repeated)."""
    RAN["send_payment"] = RAN.get("send_payment", 0) + 1
    return f"paid {amount}"


@tool(idempotency="idempotent")
async def set_flag(ctx: Any, name: str) -> str:
    """Set a flag (setting it twice is the same)."""
    RAN["set_flag"] = RAN.get("set_flag", 0) + 1
    return f"flag {name} set"


@tool(idempotency="read-only")
async def look(ctx: Any, what: str) -> str:
    """Look at something."""
    RAN["look"] = RAN.get("look", 0) + 1
    return f"{what} looks fine"


@pytest.fixture(autouse=True)
def _count() -> None:
    RAN.clear()


def _runtime(tmp_path: Path, project: Path, provider: Any, executor: Any) -> ProjectRuntime:
    config = tmp_path / "config"
    write_pack(config, "test", {"reflect": {"summary": "off"}})
    return ProjectRuntime(
        project_path=project,
        data_dir=tmp_path / "data",
        provider=provider,
        config_dir=config,
        active_role_pack="test",
        load_entrypoints=False,
        turn_executor=executor,
        confirm_writes=False,
        approvals="full-auto",
    )


async def _agent(runtime: ProjectRuntime, session_id: str) -> Any:
    agent = await runtime.agent(session_id=session_id)
    for t in (send_payment, set_flag, look):
        agent.tools.register(t)
    return agent


def _script() -> ScriptedProvider:
    return ScriptedProvider(
        [
            tool_call(("look", {"what": "the invoice"})),
            tool_call(("send_payment", {"amount": 40})),
            tool_call(("set_flag", {"name": "paid"})),
            text("Paid and flagged."),
        ]
    )


async def test_a_durable_turn_runs_as_a_turn_does_and_keeps_each_step(
    tmp_path: Path, project: Path
) -> None:
    executor = InMemoryTurnExecutor()
    provider = _script()
    async with _runtime(tmp_path, project, provider, executor) as runtime:
        agent = await _agent(runtime, "s1")
        chunks = await collect(agent.chat("pay the invoice"))
        assert types(chunks)[-1] == "done" and chunks[-1].answer == "Paid and flagged."
        assert RAN == {"look": 1, "send_payment": 1, "set_flag": 1}
        (key,) = executor.journal
        assert key.startswith("memora:s1:") and key.endswith(":1") and key in executor.ended
        states = executor.journal[key]
        # the start, then one state after each step (the step it leads to), and one before the
        # call that may not be repeated (send_payment, non-idempotent: named in flight)
        steps = [s["step"] for s in states]
        assert steps == [
            "model",
            "tools",
            "model",
            "tools",
            "tools",
            "model",
            "tools",
            "model",
            "finish",
        ]
        assert [s["in_flight"] for s in states].count([]) == len(states) - 1
        assert await executor.unfinished() == []
        rounds = await runtime.session_store.rounds("s1")
        assert [r.status for r in rounds] == ["done"]


async def test_a_worker_dying_between_two_tool_steps_leaves_a_turn_another_agent_ends(
    tmp_path: Path, project: Path
) -> None:
    """The worker dies once send_payment's result is kept: the Agent taking over makes the
    remaining calls only — no LLM call twice, each tool once — and stores one round."""

    def after_payment(key: str, state: dict[str, Any]) -> bool:
        return any(
            e.get("name") == "send_payment" for e in state["events"] if e["type"] == "tool_result"
        )

    executor = InMemoryTurnExecutor(die_at=after_payment)
    provider = _script()
    async with _runtime(tmp_path, project, provider, executor) as runtime:
        agent = await _agent(runtime, "s1")
        before = agent.history
        seen: list[Any] = []
        with pytest.raises(JournalError) as died:
            async for chunk in agent.chat("pay the invoice"):
                seen.append(chunk)
        assert "done" not in types(seen) and isinstance(died.value.__cause__, WorkerDied)
        assert agent.history == before  # the unfinished turn goes on elsewhere, not here
        await agent.close()
        assert await runtime.session_store.rounds("s1") == []  # nothing stored by the dead one
        (left,) = await executor.unfinished("s1")
        executor.die_at = None
        other = await _agent(runtime, "s1")
        rest = await collect(other.take_over(left.key))
        assert types(rest)[-1] == "done" and rest[-1].answer == "Paid and flagged."
        assert RAN == {"look": 1, "send_payment": 1, "set_flag": 1}
        assert len(provider.requests) == 4  # one per model step, none repeated
        (stored,) = await runtime.session_store.rounds("s1")
        assert stored.status == "done" and stored.round_id == left.round_id
        results = [e["name"] for e in stored.events if e["type"] == "tool_result"]
        assert results == ["look", "send_payment", "set_flag"]
        assert await executor.unfinished() == []


@pytest.mark.parametrize(("tool_name", "runs_again"), [("send_payment", False), ("set_flag", True)])
async def test_a_call_left_in_flight_runs_again_only_if_its_tool_may_repeat(
    tmp_path: Path, project: Path, tool_name: str, runs_again: bool
) -> None:
    """The worker dies with the call pending: a call that may not be repeated was named in
    flight before it could run (it may have run, or not) and is not run again — the model and
    the round are told it was interrupted; an idempotent tool's call (never named in flight) just
    runs on the Agent that takes over."""

    def at_intent(key: str, state: dict[str, Any]) -> bool:
        pending = [c["name"] for c in state["pending_calls"]]
        return tool_name in pending and (runs_again or bool(state["in_flight"]))

    script = [
        tool_call((tool_name, {"amount": 40} if tool_name == "send_payment" else {"name": "x"})),
        text("ok"),
    ]
    executor = InMemoryTurnExecutor(die_at=at_intent)
    provider = ScriptedProvider(script)
    async with _runtime(tmp_path, project, provider, executor) as runtime:
        agent = await _agent(runtime, "s1")
        with pytest.raises(JournalError):
            await collect(agent.chat("do it"))
        await agent.close()
        assert RAN == {}  # it died before the call ran here
        (left,) = await executor.unfinished("s1")
        executor.die_at = None
        other = await _agent(runtime, "s1")
        rest = await collect(other.take_over(left.key))
        assert types(rest)[-1] == "done"
        assert RAN.get(tool_name, 0) == (1 if runs_again else 0)
        (stored,) = await runtime.session_store.rounds("s1")
        kinds = [e["type"] for e in stored.events]
        assert ("tool_interrupted" in kinds) is not runs_again
        second = provider.requests[1].messages
        said = [m.content for m in second if m.role == "tool"]
        assert (INTERRUPTED_CALL in said) is not runs_again


async def test_taking_over_refuses_what_it_cannot(tmp_path: Path, project: Path) -> None:
    executor = InMemoryTurnExecutor()
    async with _runtime(tmp_path, project, ScriptedProvider([text("x")]), executor) as runtime:
        agent = await _agent(runtime, "s1")
        with pytest.raises(MemoraError) as info:
            await collect(agent.take_over("memora:s1:r-nope:1"))
        assert info.value.code == ErrorCode.NOT_FOUND
        executor.journal["memora:s1:r-new:1"] = [
            {"journal": 99, "session_id": "s1", "round_id": "r-new", "step": "model"}
        ]
        executor.updated["memora:s1:r-new:1"] = 0.0
        with pytest.raises(MemoraError) as info:
            await collect(agent.take_over("memora:s1:r-new:1"))
        assert info.value.code == ErrorCode.INVALID_INPUT and "version 99" in info.value.message
    async with _runtime(tmp_path, project, ScriptedProvider([text("x")]), None) as runtime:
        agent = await runtime.agent(session_id="s2")
        with pytest.raises(MemoraError) as info:
            agent.take_over("memora:s1:r-1:1")
        assert info.value.code == ErrorCode.NOT_AVAILABLE


async def test_an_aborted_durable_turn_ends_aborted_and_its_journal_ends(
    tmp_path: Path, project: Path
) -> None:
    executor = InMemoryTurnExecutor()
    provider = ScriptedProvider([tool_call(("look", {"what": "a"})), text("never")])
    async with _runtime(tmp_path, project, provider, executor) as runtime:
        agent = await _agent(runtime, "s1")
        seen = []
        async for chunk in agent.chat("look"):
            seen.append(chunk)
            if chunk.type == "tool_result":
                agent.abort()
        assert types(seen)[-1] == "aborted"
        assert await executor.unfinished() == []
        (stored,) = await runtime.session_store.rounds("s1")
        assert stored.status == "aborted"


async def test_a_durable_turn_that_pauses_ends_its_run_and_continues_as_the_next(
    tmp_path: Path, project: Path
) -> None:
    """A pause (here an approval) ends the turn's run; answered, the turn continues as run 2
    of the same round, and the call that waited is not named in flight while it waits."""
    executor = InMemoryTurnExecutor()
    provider = ScriptedProvider([tool_call(("send_payment", {"amount": 5})), text("paid")])
    config = tmp_path / "config"
    write_pack(config, "test", {"reflect": {"summary": "off"}})
    async with ProjectRuntime(
        project_path=project,
        data_dir=tmp_path / "data",
        provider=provider,
        config_dir=config,
        active_role_pack="test",
        load_entrypoints=False,
        turn_executor=executor,
        approvals="ask",
    ) as runtime:
        agent = await _agent(runtime, "s1")
        first = await collect(agent.chat("pay"))
        assert types(first)[-1] == "paused"
        (key1,) = executor.journal
        assert key1 in executor.ended and executor.journal[key1][-1]["in_flight"] == []
        paused = agent.paused_turn
        assert paused is not None
        paused.approve()
        rest = await collect(paused.resume())
        assert types(rest)[-1] == "done" and RAN == {"send_payment": 1}
        key2 = next(k for k in executor.journal if k != key1)
        assert key2 == key1[: -len(":1")] + ":2" and key2 in executor.ended


class _SlowJournal:
    """The in-memory executor behind a journal that keeps a turn's start only once ``gate``
    is set (a database slow to answer)."""

    def __init__(self) -> None:
        self.inner = InMemoryTurnExecutor()
        self.gate = asyncio.Event()

    def execute(self, turn: Any) -> Any:
        async def chunks() -> Any:
            await self.gate.wait()
            async for chunk in self.inner.execute(turn):
                yield chunk

        return chunks()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_turn_kept_returns_once_the_executor_keeps_the_turns_start(
    tmp_path: Path,
) -> None:
    """A host that acknowledges a turn (``202``) waits for ``agent.turn_kept()``: a turn it
    acknowledged is one a dying process leaves to another (soak finding: the server answered
    before the turn's workflow existed, and a host killed in between lost it)."""
    project = tmp_path / "p"
    project.mkdir()
    executor = _SlowJournal()
    slow = text("kept", chunks=3)
    slow.delay = 0.3  # the model answers slowly: the turn is kept long before it ends
    provider = ScriptedProvider([], default=slow)
    async with _runtime(tmp_path, project, provider, executor) as rt:
        agent = await _agent(rt, "s1")
        running = asyncio.create_task(collect(agent.chat("hello")))
        kept = asyncio.create_task(agent.turn_kept())
        await asyncio.sleep(0.2)
        assert not kept.done() and executor.inner.journal == {}
        executor.gate.set()
        await asyncio.wait_for(kept, 10)
        assert list(executor.inner.journal)  # its start is in the journal
        assert not running.done()  # kept at its start, not only at its end
        assert types(await asyncio.wait_for(running, 10))[-1] == "done"
        # a turn refused at its start is never kept, and leaves the running one's alone
        executor.gate.clear()
        one = asyncio.create_task(collect(agent.chat("one")))
        await asyncio.sleep(0.1)
        second = agent.chat("two at once")
        second_kept = asyncio.create_task(agent.turn_kept())
        with pytest.raises(MemoraError):
            await collect(second)
        await asyncio.wait_for(second_kept, 10)  # refused: nobody waits for it for ever
        kept = asyncio.create_task(agent.turn_kept())
        await asyncio.sleep(0.1)
        assert not kept.done()  # turn "one" is not kept yet
        executor.gate.set()
        await asyncio.wait_for(kept, 10)
        assert types(await asyncio.wait_for(one, 10))[-1] == "done"


async def test_turn_kept_is_at_once_without_a_turn_executor(tmp_path: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    provider = ScriptedProvider([text("plain")])
    async with _runtime(tmp_path, project, provider, None) as rt:
        agent = await _agent(rt, "s1")
        running = asyncio.create_task(collect(agent.chat("hello")))
        await asyncio.wait_for(agent.turn_kept(), 10)
        assert types(await running)[-1] == "done"
