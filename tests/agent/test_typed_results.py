"""Typed results: ``output_type`` on a turn — the shape given to the model, the result checked
(JSON, pydantic, the host's validators), sent back with what was wrong, bounded by
``output_retries``; the final-answer tool when the turn has tools; partial results while the
model writes; the host's ``deps`` for its tools; a typed turn across a pause."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from memora import Agent, OutputRetry, OutputValidationError
from memora.chunks import DoneChunk, ErrorChunk, NarrateChunk, OutputPartialChunk
from memora.errors import ErrorCode, InvalidInputError
from memora.testing import ScriptedProvider, text, tool_call
from memora.tools import ToolContext, tool

from .conftest import collect, team_agent, types

NO_TOOLS = {"act": {"toolMode": "block"}, "reflect": {"summary": "off"}}


class Invoice(BaseModel):
    number: str = Field(description="The invoice number, as printed")
    total: float = Field(ge=0, description="The amount due")
    items: list[str] = Field(default_factory=list)


async def test_a_result_that_does_not_validate_goes_back_with_the_error(make_agent: Any) -> None:
    provider = ScriptedProvider(
        [
            text('{"number": "A-1", "total": "lots"}'),
            text('{"number": "A-1", "total": 12.5, "items": ["pen"]}'),
        ]
    )
    agent = await make_agent(provider, strategy=NO_TOOLS)
    invoice = await agent.run("Extract the invoice", output_type=Invoice)
    assert invoice == Invoice(number="A-1", total=12.5, items=["pen"])
    assert len(provider.requests) == 2
    first, second = provider.requests
    # the shape reaches the model: the schema with its descriptions, as the provider's format
    assert first.output is not None and first.output.name == "Invoice"
    assert "The amount due" in json.dumps(first.output.schema)
    assert "The amount due" in first.messages[0].content  # and in the prompt, for any provider
    retry = second.messages[-1]
    assert retry.role == "user" and "total" in retry.content and "Invoice" in retry.content
    rounds = await agent.sessions.rounds()
    assert rounds[-1].output == {"number": "A-1", "total": 12.5, "items": ["pen"]}


async def test_past_the_retries_the_turn_ends_with_output_invalid(make_agent: Any) -> None:
    provider = ScriptedProvider(default=text("not json at all"))
    agent = await make_agent(provider, strategy=NO_TOOLS, output_retries=1)
    with pytest.raises(OutputValidationError) as info:
        await agent.run("Extract", output_type=Invoice)
    assert info.value.code == ErrorCode.OUTPUT_INVALID
    assert info.value.raw == "not json at all"
    assert info.value.errors[0]["type"] == "json_invalid"
    assert len(provider.requests) == 2  # one try + one retry
    # the stream says the same as an error chunk; the failed attempts are withdrawn as text
    chunks = await collect(agent.chat("again", output_type=Invoice, output_retries=0))
    assert isinstance(chunks[-1], ErrorChunk) and chunks[-1].code == "OUTPUT_INVALID"
    assert any(isinstance(c, NarrateChunk) and c.withdrawn for c in chunks)
    assert types(await collect(agent.chat("plain text is fine")))[-1] == "done"


async def test_any_type_pydantic_validates(make_agent: Any) -> None:
    class Point(TypedDict):
        x: int
        y: int

    @dataclass
    class Pet:
        name: str

    class Cat(BaseModel):
        kind: Literal["cat"]
        lives: int

    class Dog(BaseModel):
        kind: Literal["dog"]
        good: bool

    provider = ScriptedProvider(
        [
            text('{"result": [1, 2, 3]}'),
            text('{"x": 1, "y": 2}'),
            text('{"name": "Tom"}'),
            text('```json\n{"result": "just words"}\n```'),
            text('{"result": {"kind": "dog", "good": true}}'),
        ]
    )
    agent = await make_agent(provider, strategy=NO_TOOLS)
    assert await agent.run("numbers", output_type=list[int]) == [1, 2, 3]
    assert await agent.run("point", output_type=Point) == {"x": 1, "y": 2}
    assert await agent.run("pet", output_type=Pet) == Pet("Tom")
    assert await agent.run("words", output_type=str) == "just words"
    pet = Annotated[Cat | Dog, Field(discriminator="kind")]
    assert await agent.run("which", output_type=pet) == Dog(kind="dog", good=True)
    # a non-object result travels wrapped, so every provider's schema mode can carry it
    wrapped = provider.requests[0].output
    assert wrapped is not None and wrapped.schema["required"] == ["result"]
    assert provider.requests[1].output is not None and provider.requests[1].output.strict


async def test_a_turn_with_tools_ends_by_calling_final_result(make_agent: Any) -> None:
    provider = ScriptedProvider(
        [
            tool_call(("read_file", {"path": "notes.txt"}, "c1")),
            tool_call(("final_result", {"number": "B-7", "total": "oops"}, "c2")),
            tool_call(("final_result", {"number": "B-7", "total": 3}, "c3")),
        ]
    )
    agent = await make_agent(provider)
    chunks = await collect(agent.chat("read the notes, then give the invoice", output_type=Invoice))
    done = chunks[-1]
    assert isinstance(done, DoneChunk)
    assert done.output == {"number": "B-7", "total": 3.0, "items": []}
    assert json.loads(done.answer or "") == done.output
    names = [t.name for t in provider.requests[0].tools]
    assert "final_result" in names and "read_file" in names
    assert provider.requests[0].output is None  # the tool carries the shape
    # the failed call got the error as its tool result, and the model tried again
    retry = provider.requests[2].messages[-1]
    assert retry.role == "tool" and "total" in retry.content


async def test_host_output_validators_can_send_the_model_back(make_agent: Any) -> None:
    provider = ScriptedProvider(
        [text('{"number": "X", "total": 1}'), text('{"number": "INV-2", "total": 1}')]
    )
    agent = await make_agent(provider, strategy=NO_TOOLS)
    seen: list[str] = []

    @agent.output_validator
    async def numbered(value: Invoice) -> Invoice:
        seen.append(value.number)
        if not value.number.startswith("INV-"):
            raise OutputRetry("the number starts with INV-")
        return value.model_copy(update={"items": ["checked"]})

    invoice = await agent.run("invoice", output_type=Invoice)
    assert invoice.number == "INV-2" and invoice.items == ["checked"]
    assert seen == ["X", "INV-2"]
    assert "INV-" in provider.requests[1].messages[-1].content


async def test_partial_results_stream_while_the_model_writes(make_agent: Any) -> None:
    answer = '{"number": "C-3", "total": 9.5, "items": ["a", "b", "c"]}'
    provider = ScriptedProvider([text(answer, chunks=len(answer))])
    agent = await make_agent(provider, strategy=NO_TOOLS)
    chunks = await collect(agent.chat("invoice", output_type=Invoice))
    partials = [c.output for c in chunks if isinstance(c, OutputPartialChunk)]
    assert len(partials) >= 3
    assert set(partials[0]) == {"number"}  # the form fills field by field
    assert any(p.get("number") == "C-3" and "total" not in p for p in partials)
    assert partials[-1]["total"] == 9.5 and partials[-1]["items"][:2] == ["a", "b"]
    assert all(p != partials[i + 1] for i, p in enumerate(partials[:-1]))  # each says more
    done = chunks[-1]
    assert isinstance(done, DoneChunk) and done.output == json.loads(answer)


@dataclass
class Shop:
    name: str
    secret: str


async def test_deps_reach_the_hosts_tools_and_never_the_log(make_agent: Any) -> None:
    got: list[Shop] = []

    @tool(name="shop_name", description="The shop's name")
    async def shop_name(ctx: ToolContext[Shop]) -> str:
        got.append(ctx.deps)
        return ctx.deps.name if ctx.deps is not None else "no shop given"

    provider = ScriptedProvider([tool_call(("shop_name", {}, "c1")), text("Corner shop")])
    agent = await make_agent(provider)
    agent.tools.register(shop_name)
    shop = Shop("Corner", "s3cr3t-token")
    assert await agent.run("what is the shop?", deps=shop) == "Corner shop"
    assert got == [shop]
    for request in provider.requests:
        assert "s3cr3t-token" not in json.dumps([m.content for m in request.messages])
    logs = list((agent.options.data_dir / "sessions").rglob("*.jsonl"))
    assert logs and all("s3cr3t-token" not in p.read_text() for p in logs)
    # absent: None
    provider.extend([tool_call(("shop_name", {}, "c2")), text("no shop")])
    assert await agent.run("again") == "no shop"
    assert got[-1] is None


async def test_a_typed_turn_keeps_its_type_across_a_durable_pause(
    make_agent: Any, tmp_path: Any, project: Any
) -> None:
    script = [
        tool_call(("write_file", {"path": "inv.txt", "content": "B-9"}, "w1")),
        tool_call(("final_result", {"number": "B-9", "total": 4}, "f1")),
    ]
    agent = await make_agent(ScriptedProvider(list(script)), confirm_writes=True)
    chunks = await collect(agent.chat("write it down, then the invoice", output_type=Invoice))
    assert chunks[-1].type == "paused"
    # in the same process: approve and resume into the typed result
    paused = agent.paused_turn
    assert paused is not None
    paused.approve()
    resumed = await collect(paused.resume())
    assert isinstance(resumed[-1], DoneChunk) and resumed[-1].output["number"] == "B-9"

    # across a restart: the saved pause needs the same output_type again
    agent.set_provider(ScriptedProvider(list(script)))
    chunks = await collect(agent.chat("once more", output_type=Invoice))
    state = agent.paused_turn.to_json()  # type: ignore[union-attr]
    assert state["turn"]["output_schema"] == Invoice.model_json_schema()
    await agent.close()
    fresh = await make_agent(ScriptedProvider([script[1]]), confirm_writes=True)
    with pytest.raises(InvalidInputError, match="output_type"):
        await fresh.resume(state)
    with pytest.raises(InvalidInputError, match="not the type"):
        await fresh.resume(state, output_type=list[int])
    await fresh.resume(state, output_type=Invoice)
    fresh.paused_turn.approve()  # type: ignore[union-attr]
    done = (await collect(fresh.paused_turn.resume()))[-1]  # type: ignore[union-attr]
    assert isinstance(done, DoneChunk) and done.output == {
        "number": "B-9",
        "total": 4.0,
        "items": [],
    }


def test_output_retries_is_bounded(tmp_path: Any, project: Any) -> None:
    with pytest.raises(Exception, match="output_retries"):
        Agent(project_path=project, data_dir=tmp_path / "d", output_retries=-1)


async def test_a_typed_meeting_ends_with_the_chairs_typed_result(
    tmp_path: Any, project: Any
) -> None:
    provider = ScriptedProvider(
        [
            text("I would use SQLite."),  # the member
            text('{"number": "D-1"}'),  # the chair, missing the total
            text('{"number": "D-1", "total": 0}'),  # the chair again, valid
        ]
    )
    async with team_agent(tmp_path, project, provider, NO_TOOLS) as agent:
        chunks = await collect(agent.meeting("which database?", output_type=Invoice))
    done = chunks[-1]
    assert isinstance(done, DoneChunk), chunks[-1]
    assert done.output == {"number": "D-1", "total": 0.0, "items": []}
    chair = provider.requests[1]
    assert chair.output is not None and "Invoice" in chair.messages[0].content
    assert "total" in provider.requests[2].messages[-2].content  # the retry, then the prompt


async def test_one_output_spec_serves_two_agents_and_two_turns_at_once(
    make_agent: Any, tmp_path: Any
) -> None:
    """#70 item 1: per-turn state lived on the host's OutputSpec — the Agent appended its
    validators to it and the loop kept the partial result in it — so one spec passed to two
    Agents ran agent A's validator in agent B's turn, and two turns at once reset each other's
    partial results.  Now the spec is the host's and stays as it was; the turn keeps its own."""
    import asyncio
    import dataclasses

    from memora import OutputSpec

    spec = OutputSpec(Invoice)
    slow = '{"number": "%s", "total": 9.5, "items": ["a", "b", "c", "d", "e"]}'

    def answer(number: str) -> Any:
        body = slow % number
        return dataclasses.replace(text(body, chunks=len(body)), delay=0.001)

    a = await make_agent(ScriptedProvider(default=answer("A-1")), strategy=NO_TOOLS)
    (tmp_path / "project-b").mkdir()
    b = await make_agent(
        ScriptedProvider(default=answer("B-1")),
        strategy=NO_TOOLS,
        project_path=tmp_path / "project-b",
        data_dir=tmp_path / "data-b",
    )
    ran: list[str] = []

    @a.output_validator
    def agent_a_rule(value: Invoice) -> Invoice:
        ran.append(value.number)
        if not value.number.startswith("A-"):
            raise OutputRetry("agent A's rule: the number starts with A-")
        return value

    assert (await a.run("invoice", output_type=spec)).number == "A-1"
    assert ran == ["A-1"]
    assert (await b.run("invoice", output_type=spec)).number == "B-1"
    assert ran == ["A-1"], "agent A's validator ran in agent B's turn"
    assert spec.validators == [], "the host's spec is as the host made it"

    async def partials(agent: Any) -> list[Any]:
        chunks = await collect(agent.chat("invoice", output_type=spec))
        assert isinstance(chunks[-1], DoneChunk), chunks[-1]
        return [c.output for c in chunks if isinstance(c, OutputPartialChunk)]

    alone_a, alone_b = await partials(a), await partials(b)
    both_a, both_b = await asyncio.gather(partials(a), partials(b))
    assert (both_a, both_b) == (alone_a, alone_b), "two turns at once reset each other's partials"
