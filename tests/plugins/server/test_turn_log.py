"""The hub's turn log: the protocol adapters read typed chunks — the very objects while the
turn runs, parsed from the JSON once it has ended — and the event stream reads the JSON."""

from __future__ import annotations

import asyncio

from memora.chunks import DoneChunk, TextChunk, ToolStartChunk
from memora_plugin_server.turns import TurnLog


async def test_followers_get_typed_chunks_before_and_after_the_end() -> None:
    log = TurnLog("t_1")
    first = TextChunk(content="慢 words")
    log.add(first)

    async def follow() -> list[object]:
        return [c async for c in log.chunks(0)]

    live = asyncio.create_task(follow())
    await asyncio.sleep(0)
    call = ToolStartChunk(tool_call_id="c1", name="read_file", args={"path": "a.txt"})
    log.add(call)
    log.add(DoneChunk(answer="done"))
    await asyncio.sleep(0)
    log.end()
    seen = await live
    assert seen[0] is first and seen[1] is call  # no JSON round trip in this process
    late = [c async for c in log.chunks(1)]  # a reader after the end: parsed from the JSON
    assert late == [call, DoneChunk(answer="done")]
    assert isinstance(late[0], ToolStartChunk) and late[0].args == {"path": "a.txt"}
    assert [seq for seq, _ in [item async for item in log.follow(0)]] == [1, 2, 3]


async def test_every_follower_is_woken_and_an_idle_one_gets_keep_alives() -> None:
    log = TurnLog("t_2")

    async def read(idle: float | None) -> list[list[tuple[int, str]]]:
        return [batch async for batch in log.batches(0, idle)]

    patient = asyncio.create_task(read(None))
    idle = asyncio.create_task(read(0.01))
    await asyncio.sleep(0.05)  # the idle follower has timed out a few times by now
    log.add(TextChunk(content="one"))
    await asyncio.sleep(0)
    log.add(TextChunk(content="two"))
    log.end()
    calm, restless = await patient, await idle
    assert [seq for batch in calm for seq, _ in batch] == [1, 2]
    assert [seq for batch in restless for seq, _ in batch] == [1, 2]
    assert [] not in calm  # no idle limit: no keep-alive batches
    assert restless[0] == [] and restless.count([]) >= 2  # one per idle period, then the events


def test_a_turn_log_names_the_round_it_writes() -> None:
    """A page reloaded while a turn's end is being written is told no turn runs when its round
    is already stored (``Hub.running_turn(stored=...)``): it showed the round twice — stored,
    and replayed from the turn's events (seen once in a clean-clone run)."""
    log = TurnLog("t_1")
    assert log.round_id() is None
    log.add(TextChunk(content="hi"))
    log.add(TextChunk(content="there", round_id="r-1"))
    assert log.round_id() == "r-1"
