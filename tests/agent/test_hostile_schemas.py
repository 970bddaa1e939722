"""A JSON schema from outside is data, never an instruction (issue #68, item 3): no ``$ref`` is
followed outside the document, size, depth, refs, patterns and lengths are bounded, and a
result is checked off the event loop under a deadline (``memora.llm.schema_guard``)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memora import OutputValidationError
from memora.agent.output import OutputSpec
from memora.errors import InvalidInputError
from memora.llm import schema_guard
from memora.testing import ScriptedProvider, text

NO_TOOLS = {"act": {"toolMode": "block"}, "reflect": {"summary": "off"}}


@pytest.fixture
def silent_listener() -> Iterator[tuple[int, list[socket.socket]]]:
    """A port on 127.0.0.1 that accepts connections and never answers, and the connections
    it has accepted."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.1)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    stop.set()
    thread.join(5)
    for conn in accepted:
        conn.close()
    server.close()


def _refused(schema: Any) -> str:
    with pytest.raises(InvalidInputError) as info:
        OutputSpec.from_json_schema(schema)
    message = info.value.message
    assert message.startswith("output_schema")
    return message


async def test_a_ref_to_a_url_is_refused_without_a_connection(
    silent_listener: tuple[int, list[socket.socket]],
) -> None:
    port, accepted = silent_listener
    url = f"http://127.0.0.1:{port}/schema.json"
    schema = {"type": "object", "properties": {"a": {"$ref": url}}, "required": ["a"]}
    message = _refused(schema)
    assert url in message and "outside the schema" in message
    # a local ref under a root $id that names the same listener resolves in the document: the
    # validator's registry retrieves nothing
    local = {
        "$id": url,
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/word"}},
        "$defs": {"word": {"type": "string"}},
    }
    spec = OutputSpec.from_json_schema(local)
    assert (await spec.validate('{"a": "x"}')).ok
    assert not (await spec.validate('{"a": 1}')).ok
    await asyncio.sleep(0.3)  # a connection, had one been made, would be accepted by now
    assert accepted == []


def test_a_ref_to_a_file_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text('{"type": "string"}', encoding="utf-8")
    for ref in (secret.as_uri(), "secret.json", f"{secret.as_uri()}#/type"):
        message = _refused({"$ref": ref})
        assert "no file is read" in message


def test_a_ref_cycle_is_refused_and_a_recursive_tree_is_not() -> None:
    cycle = {
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/n"}},
        "required": ["a"],
        "$defs": {"n": {"$ref": "#/$defs/m"}, "m": {"anyOf": [{"$ref": "#/$defs/n"}]}},
    }
    message = _refused(cycle)
    assert "cycle" in message and "#/$defs/n -> #/$defs/m -> #/$defs/n" in message
    assert "cycle" in _refused({"$ref": "#"})
    # recursion through a property or an item is a tree: allowed, and checked
    tree = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "kids": {"type": "array", "items": {"$ref": "#"}},
        },
        "required": ["name"],
    }
    spec = OutputSpec.from_json_schema(tree)
    assert spec.check('{"name": "a", "kids": [{"name": "b", "kids": []}]}').ok
    assert not spec.check('{"name": "a", "kids": [{"kids": []}]}').ok


def test_refs_must_point_at_a_schema_in_the_document() -> None:
    assert "does not point at a schema" in _refused({"$ref": "#/$defs/missing"})
    # into a map of properties (names read as keywords) or into data: refused
    assert "does not point at a schema" in _refused(
        {"properties": {"pattern": {"type": "string"}}, "$ref": "#/properties"}
    )
    assert "does not point at a schema" in _refused({"enum": [{}], "$ref": "#/enum/0"})
    assert "$dynamicRef" in _refused({"$dynamicRef": "#meta"})
    assert "embedded resource" in _refused({"$defs": {"x": {"$id": "https://e.example/x"}}})
    refs = {"allOf": [{"$ref": "#/$defs/a"}] * 101, "$defs": {"a": {"type": "string"}}}
    assert "more than 100 $ref" in _refused(refs)
    # a "$ref" inside data is a value, never followed
    spec = OutputSpec.from_json_schema({"const": {"$ref": "http://127.0.0.1:9/x"}})
    assert spec.check('{"$ref": "http://127.0.0.1:9/x"}').ok


def test_lengths_and_counts_a_grammar_would_expand_are_bounded() -> None:
    for key in ("minLength", "maxLength"):
        message = _refused({"type": "object", "properties": {"a": {"type": "string", key: 5000}}})
        assert f"{key} 5000 at '#/properties/a' is over 1000" in message
    assert "maxItems" in _refused({"type": "array", "maxItems": 10_000})
    # an A2A peer's numbers arrive as doubles (protobuf)
    assert "minLength 5000" in _refused({"type": "string", "minLength": 5000.0})
    OutputSpec.from_json_schema({"type": "string", "minLength": 1000, "maxLength": 1000})


def test_patterns_are_bounded_in_length_and_in_what_they_expand() -> None:
    assert "over 512 characters" in _refused({"type": "string", "pattern": "a" * 513})
    # the regex engine copies counted repeats when it compiles: 10,000 copies refused
    assert "repeats up to 10000 times" in _refused({"type": "string", "pattern": "(?:a{100}){100}"})
    message = _refused({"type": "object", "patternProperties": {"^x{2000}$": {}}})
    assert "patternProperties key" in message and "2000" in message
    assert "regular expression" in _refused({"type": "string", "pattern": "(unclosed"})
    # side by side is not nested; a quantifier inside a class is a literal
    OutputSpec.from_json_schema({"type": "string", "pattern": "^a{1000}b{1000}[{]{5}$"})
    assert "unevaluatedProperties" in _refused(
        {"patternProperties": {"^a": {}}, "unevaluatedProperties": False}
    )


def test_a_large_schema_is_refused_by_size_before_it_is_read_whole() -> None:
    big = {
        "type": "object",
        "properties": {
            f"field_{i}": {"type": "string", "description": "x" * 80} for i in range(8000)
        },
    }
    assert len(json.dumps(big)) > 800_000
    message = _refused(big)
    assert "over 16384 characters" in message
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(40):
        deep = {"type": "array", "items": deep}
    assert "nested deeper than 32" in _refused(deep)
    assert "not JSON" in _refused({"type": "number", "maximum": float("nan")})
    assert "not a draft memora knows" in _refused({"$schema": "http://127.0.0.1:9/meta"})


async def _longest_stall(work: Any) -> tuple[Any, float]:
    """``await work``, and the longest the event loop went without running a 10 ms tick
    meanwhile."""
    longest = 0.0
    done = asyncio.Event()

    async def tick() -> None:
        nonlocal longest
        last = time.monotonic()
        while not done.is_set():
            await asyncio.sleep(0.01)
            now = time.monotonic()
            longest = max(longest, now - last)
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.05)  # the ticker is running before the work starts
    try:
        result = await work
    finally:
        done.set()
        await ticker
    return result, longest


async def test_a_catastrophic_pattern_is_checked_off_the_loop_and_bounded() -> None:
    # ^(a+)+$ against "aaa...b": seconds of the stdlib re, doubling per character, on the
    # event loop; the regex engine answers it at once
    spec = OutputSpec.from_json_schema({"type": "string", "pattern": "^(a+)+$"})
    result, stall = await _longest_stall(spec.validate(json.dumps("a" * 27 + "b")))
    assert not result.ok and "does not match" in result.message
    assert stall < 1.0
    # one the regex engine backtracks on too: ends at the deadline, a clear failure
    spec = OutputSpec.from_json_schema({"type": "string", "pattern": "^(a|aa)+$"})
    started = time.monotonic()
    result, stall = await _longest_stall(
        asyncio.wait_for(spec.validate(json.dumps("a" * 38 + "b")), 60)
    )
    assert not result.ok and "took over 2 s" in result.message
    assert time.monotonic() - started < 30  # a bound on a hang, not a speed measure
    assert stall < 1.0
    # property names go through the same engine and deadline
    spec = OutputSpec.from_json_schema(
        {"type": "object", "patternProperties": {"^(a|aa)+$": {}}, "additionalProperties": False}
    )
    result = await asyncio.wait_for(spec.validate(json.dumps({"a" * 38 + "b": 1})), 60)
    assert not result.ok and "took over 2 s" in result.message


async def test_a_typed_turn_with_a_catastrophic_pattern_ends_with_output_invalid(
    make_agent: Any,
) -> None:
    answer = text(json.dumps({"code": "a" * 38 + "b"}))
    provider = ScriptedProvider([answer, answer])
    agent = await make_agent(provider, strategy=NO_TOOLS, output_retries=1)
    spec = OutputSpec.from_json_schema(
        {
            "type": "object",
            "properties": {"code": {"type": "string", "pattern": "^(a|aa)+$"}},
            "required": ["code"],
        },
        retries=1,
    )
    with pytest.raises(OutputValidationError) as info:
        await asyncio.wait_for(agent.run("a code", output_type=spec), 60)
    assert "took over 2 s" in str(info.value)
    assert len(provider.requests) == 2


def test_the_limits_are_documented() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "agent.md").read_text("utf-8")
    for name in (
        "MAX_SCHEMA_CHARS",
        "MAX_SCHEMA_DEPTH",
        "MAX_SCHEMA_REFS",
        "MAX_PATTERN_CHARS",
        "MAX_SCHEMA_REPEAT",
        "CHECK_SECONDS",
        "MAX_GRAMMAR_CHARS",
        "GRAMMAR_SECONDS",
    ):
        assert hasattr(schema_guard, name) and f"`{name}`" in docs, name
