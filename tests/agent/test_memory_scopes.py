"""Memory scopes through the Agent: a scoped Agent writes its rounds into its scope, recalls its
scope plus the project's unscoped memories, and opens and lists only its scope's sessions; an
unscoped Agent sees only the unscoped.  Every path a model or a host reads memory by is checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memora import ProjectRuntime
from memora.errors import MemoraError
from memora.memory.types import NewMemory
from memora.testing import ScriptedProvider, text, tool_call

from .conftest import collect, write_pack


def _runtime(tmp_path: Path, project: Path, provider: ScriptedProvider, storage: str) -> Any:
    config = tmp_path / "config"
    write_pack(config, "test")  # the default strategy: every round is remembered
    return ProjectRuntime(
        project_path=project,
        data_dir=tmp_path / "data",
        provider=provider,
        config_dir=config,
        active_role_pack="test",
        storage=storage,
        load_entrypoints=False,
    )


def _recall(query: str, call_id: str) -> Any:
    return tool_call(("memory_search", {"query": query}, call_id))


@pytest.mark.parametrize("storage", ["sqlite", "json", "memory"])
async def test_scoped_agents_keep_to_their_scope(
    tmp_path: Path, project: Path, storage: str
) -> None:
    provider = ScriptedProvider(default=text("noted"))
    async with _runtime(tmp_path, project, provider, storage) as runtime:
        await runtime.memory.write(NewMemory("the office wifi password is heron42"))
        alice = await runtime.agent(session_id="a1", memory_scope="alice")
        await collect(alice.chat("my locker code is 4711"))
        await alice.idle()
        bob = await runtime.agent(session_id="b1", memory_scope="bob")
        await collect(bob.chat("my locker code is 9999"))
        await bob.idle()

        hits = await alice.memory.search("locker code")
        assert [h.record.scope for h in hits] == ["alice"]
        assert "4711" in hits[0].record.content and "9999" not in str(hits)
        assert [h.record.scope for h in await bob.memory.search("locker")] == ["bob"]
        # the project's unscoped memory is every scope's
        assert [h.record.scope for h in await alice.memory.search("wifi")] == [None]
        # an unscoped Agent reads only the unscoped
        assert [h.record.scope for h in await runtime.memory.search("locker")] == []

        # the model's own recall goes through the same view
        provider.extend([_recall("locker code", "r1"), text("done")])
        await collect(bob.chat("what was my locker code?"))
        recalled = str([m.content for m in bob.history if m.role == "tool"][-1])
        assert "9999" in recalled and "4711" not in recalled

        # direct reads of another scope's memory are not there
        alice_memory = hits[0].record
        with pytest.raises(MemoraError) as caught:
            await bob.memory.get(alice_memory.id)
        assert caught.value.code.value == "NOT_FOUND"
        with pytest.raises(MemoraError):
            await bob.memory.forget(alice_memory.id, by="bob")
        with pytest.raises(MemoraError):
            await bob.memory.history(alice_memory.id)
        assert (await alice.memory.get(alice_memory.id)).scope == "alice"
        # counts are the view's
        assert (await alice.memory.snapshot()).total == 2
        assert (await runtime.memory.all_scopes().snapshot()).total >= 3

        # an edit stays in its scope
        edited = await alice.memory.edit(alice_memory.id, "locker 4712", by="alice")
        assert edited.scope == "alice"
        # a scoped view cannot write into another scope
        with pytest.raises(MemoraError, match="scope 'alice'"):
            await alice.memory.write(NewMemory("sneaky", scope="bob"))
        await alice.close()
        await bob.close()


async def test_sessions_belong_to_their_scope(tmp_path: Path, project: Path) -> None:
    provider = ScriptedProvider(default=text("ok"))
    async with _runtime(tmp_path, project, provider, "sqlite") as runtime:
        alice = await runtime.agent(session_id="alice-1", memory_scope="alice")
        await collect(alice.chat("hello"))
        await alice.close()
        # bob cannot open alice's session, nor can the project's unscoped Agent
        with pytest.raises(MemoraError, match="no session 'alice-1'"):
            await runtime.agent(session_id="alice-1", memory_scope="bob")
        with pytest.raises(MemoraError, match="no session 'alice-1'"):
            await runtime.agent(session_id="alice-1")
        bob = await runtime.agent(memory_scope="bob")  # the most recent of bob's: a new one
        assert bob.session_id != "alice-1"
        assert [s.id for s in await bob.sessions.list()] == [bob.session_id]
        with pytest.raises(MemoraError):
            await bob.sessions.rounds("alice-1")
        with pytest.raises(MemoraError):
            await bob.switch_session("alice-1")
        await bob.close()
        again = await runtime.agent(memory_scope="alice")  # alice's most recent: hers
        assert again.session_id == "alice-1"
        assert [s.scope for s in await again.sessions.list()] == ["alice"]
        fork = await again.fork_session()
        assert (await again.sessions.get(fork)).scope == "alice", "a fork stays its owner's"
        await again.close()


async def test_a_bad_scope_is_refused_by_name(tmp_path: Path, project: Path) -> None:
    provider = ScriptedProvider(default=text("ok"))
    async with _runtime(tmp_path, project, provider, "memory") as runtime:
        for bad in ("", " alice", "a\nb", "x" * 201):
            with pytest.raises(MemoraError, match="memory_scope"):
                await runtime.agent(memory_scope=bad)
        chinese = await runtime.agent(memory_scope="王芳")
        assert chinese.memory.scope == "王芳"
        await chinese.close()


async def test_a_backend_without_scopes_serves_no_scoped_agent() -> None:
    from memora.memory.manager import MemoryManager
    from memora.memory.storage import accepts_scopes

    class Old:
        async def search_by_keyword(self, query: str, *, limit: int = 10) -> list[Any]:
            return []

    assert not accepts_scopes(Old())
    manager = MemoryManager(Old())  # type: ignore[arg-type]
    with pytest.raises(MemoraError, match="has no memory scopes"):
        manager.for_scope("alice")


async def test_pinned_memories_are_in_every_turn_of_their_scope(
    tmp_path: Path, project: Path
) -> None:
    """#39 item 3, pin: a pinned memory is in the system prompt of its scope's turns (alice's
    for alice, the project's for everyone), bounded, audited, and out again when unpinned,
    forgotten or edited away; an edit keeps the pin on the new text."""
    from memora.memory.manager import MAX_PINNED

    provider = ScriptedProvider(default=text("ok"))
    async with _runtime(tmp_path, project, provider, "sqlite") as runtime:
        shared = await runtime.memory.write(NewMemory("The shop closes at six", name="hours"))
        mine = await runtime.memory.for_scope("alice").write(NewMemory("Alice is vegetarian"))
        alice = await runtime.agent(memory_scope="alice")
        bob = await runtime.agent(memory_scope="bob")

        def prompt() -> str:
            return str(provider.requests[-1].messages[0].content)

        await collect(alice.chat("hi"))
        assert "Pinned memories" not in prompt(), "nothing pinned: no block"
        pinned = await alice.memory.pin(mine.id, by="alice")
        assert pinned.meta["pinned"]["by"] == "alice"
        await runtime.memory.pin(shared.id, by="owner")
        await collect(alice.chat("dinner?"))
        assert "Alice is vegetarian" in prompt() and "closes at six" in prompt()
        await collect(bob.chat("dinner?"))
        assert "closes at six" in prompt() and "vegetarian" not in prompt()
        with pytest.raises(MemoraError):
            await bob.memory.pin(mine.id)  # another scope's memory is not there for bob

        # an edit keeps the pin, on the new text
        edited = await alice.memory.edit(mine.id, "Alice is vegan", by="alice")
        await collect(alice.chat("lunch?"))
        assert "Alice is vegan" in prompt() and "vegetarian" not in prompt()
        assert [r.id for r in await alice.memory.pinned()] == [edited.id, shared.id]
        # unpin: out of the prompt, audited
        undone = await alice.memory.unpin(edited.id, by="alice")
        assert "pinned" not in undone.meta and undone.meta["unpinned"]["by"] == "alice"
        await collect(alice.chat("snack?"))
        assert "vegan" not in prompt()
        # forget: a forgotten pinned memory leaves the prompt
        await runtime.memory.forget(shared.id, by="owner")
        await collect(bob.chat("open?"))
        assert "Pinned memories" not in prompt()

        # bounded: MAX_PINNED a scope, then a CONFLICT naming the way out
        view = runtime.memory.for_scope("carol")
        notes = [await view.write(NewMemory(f"note {n} " + "x" * 500)) for n in range(11)]
        for note in notes[:MAX_PINNED]:
            await view.pin(note.id)
        with pytest.raises(MemoraError, match="unpin one first"):
            await view.pin(notes[-1].id)
        carol = await runtime.agent(memory_scope="carol")
        await collect(carol.chat("hello"))
        block = prompt().split("Pinned memories", 1)[1]
        assert len(block) <= 2200, "the block is bounded however long the memories"
        for agent in (alice, bob, carol):
            await agent.close()
