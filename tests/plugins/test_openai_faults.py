"""memora-plugin-openai against a scripted server on 127.0.0.1: parsing and every fault."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from memora.llm import LLMRequest, Message, ProviderError
from memora.llm.assemble import ToolCallAssembler
from memora.llm.retry import RetryNotice, RetryPolicy, stream_with_retries
from memora.llm.types import FinishDelta, ReasoningDelta, TextDelta, ToolCallDelta, UsageDelta
from memora_plugin_openai import OpenAIEmbedder, OpenAIProvider, SSEDecoder

from .fault_server import (
    STREAM_HEAD,
    FaultServer,
    Scenario,
    chunked,
    cut_scenario,
    json_scenario,
    reset_scenario,
    sse_chunk,
    stall_scenario,
    status_scenario,
    stream_scenario,
)

REQ = LLMRequest([Message.system("be brief"), Message.user("你好")], max_tokens=64, temperature=0.2)


@pytest.fixture
async def server() -> AsyncIterator[FaultServer]:
    s = FaultServer()
    await s.start()
    yield s
    await s.stop()


@pytest.fixture
async def provider(server: FaultServer) -> AsyncIterator[OpenAIProvider]:
    p = OpenAIProvider(
        model="test-model", base_url=server.url, stall_timeout=1.0, connect_timeout=2.0
    )
    yield p
    await p.aclose()


async def collect(p: OpenAIProvider, req: LLMRequest = REQ) -> list[object]:
    return [d async for d in p.stream(req)]


TEXT_EVENTS = [
    sse_chunk({"role": "assistant", "reasoning_content": "想一想"}),
    sse_chunk({"content": "你好，"}),
    sse_chunk({"content": "world 🌍"}),
    sse_chunk(finish="stop"),
    sse_chunk(usage={"prompt_tokens": 12, "completion_tokens": 5}),
]


@pytest.mark.parametrize("split", [0, 1, 3, 7, 64])
async def test_stream_split_anywhere(
    server: FaultServer, provider: OpenAIProvider, split: int
) -> None:
    server.script = [stream_scenario(TEXT_EVENTS, split=split)]
    out = await collect(provider)
    assert "".join(d.text for d in out if isinstance(d, TextDelta)) == "你好，world 🌍"
    assert [d.text for d in out if isinstance(d, ReasoningDelta)] == ["想一想"]
    assert FinishDelta("stop") in out
    usage = [d for d in out if isinstance(d, UsageDelta)]
    assert usage[0].usage.input_tokens == 12 and usage[0].usage.output_tokens == 5


async def test_request_body(server: FaultServer, provider: OpenAIProvider) -> None:
    server.script = [stream_scenario(TEXT_EVENTS)]
    await collect(provider)
    body = server.requests[0]["body"]
    assert body["model"] == "test-model" and body["stream"] is True and body["max_tokens"] == 64
    assert body["messages"][1] == {"role": "user", "content": "你好"}
    assert body["stream_options"] == {"include_usage": True}
    server.script = [stream_scenario(TEXT_EVENTS)]
    await collect(provider, LLMRequest([Message.user("x")], max_tokens=0))
    assert (
        "max_tokens" not in server.requests[1]["body"]
        and "temperature" not in server.requests[1]["body"]
    )


async def test_malformed_lines_comments_keepalives_multiline(
    server: FaultServer, provider: OpenAIProvider
) -> None:
    events = [
        b": keep-alive\n\n",
        b"data: {not json}\n\n",
        b"event: ping\ndata: 42\n\n",
        b'data: {"choices": [{"index": 0,\ndata: "delta": {"content": "multi"}, "finish_reason": null}]}\n\n',
        b"retry: 1000\n\n",
        b"\r\n",
        sse_chunk({"content": "-line"}).replace(b"\n", b"\r\n"),
        sse_chunk(finish="stop"),
    ]
    server.script = [stream_scenario(events, split=5)]
    out = await collect(provider)
    assert "".join(d.text for d in out if isinstance(d, TextDelta)) == "multi-line"


async def test_tool_calls_assembled_from_fragments(
    server: FaultServer, provider: OpenAIProvider
) -> None:
    events = [
        sse_chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": ""},
                    }
                ]
            }
        ),
        sse_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"pa'}}]}),
        sse_chunk(
            {
                "tool_calls": [
                    {
                        "index": 1,
                        "id": "call_b",
                        "type": "function",
                        "function": {"name": "list_dir", "arguments": "{}"},
                    }
                ]
            }
        ),
        sse_chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'th": "注意.md"}'}}]}),
        sse_chunk(finish="tool_calls"),
    ]
    server.script = [stream_scenario(events, split=11)]
    asm = ToolCallAssembler()
    for d in await collect(provider):
        if isinstance(d, ToolCallDelta):
            asm.feed(d)
    calls = asm.calls()
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        ("call_a", "read_file", '{"path": "注意.md"}'),
        ("call_b", "list_dir", "{}"),
    ]


def event_per_chunk(events: list[bytes]) -> Scenario:
    """What LLM APIs send: each event (and ``[DONE]``) in an HTTP chunk of its own."""

    async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: bytes) -> None:
        writer.write(STREAM_HEAD)
        for event in [*events, b"data: [DONE]\n\n"]:
            writer.write(chunked(event))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    return run


async def test_an_event_per_chunk_reads_as_the_full_reading_does(
    server: FaultServer, provider: OpenAIProvider
) -> None:
    # a chunk holding one text-only event takes the decoder's and the event reader's short
    # ways; the same events with CRLF line ends and a field memora ignores take the full
    # reading of both: the deltas are the same, and what they should be
    deltas: list[dict[str, object]] = [
        {"content": "你好，"},
        {"content": ""},
        {"content": None},
        {"content": "world 🌍"},
    ]
    events = [sse_chunk(d) for d in deltas]
    events.append(b'data:{"choices":[{"delta":{"content":" no space"}}]}\n\n')
    events += [
        sse_chunk({"content": "!"}, finish="stop"),
        sse_chunk(usage={"prompt_tokens": 3, "completion_tokens": 4}),
    ]
    full = [sse_chunk({"role": "assistant", **d}).replace(b"\n", b"\r\n") for d in deltas]
    full.append(b'data:{"choices":[{"delta":{"role":"assistant","content":" no space"}}]}\r\n\r\n')
    full += [e.replace(b"\n", b"\r\n") for e in events[-2:]]
    server.script = [event_per_chunk(events), event_per_chunk(full)]
    short_way, full_way = await collect(provider), await collect(provider)
    assert short_way == full_way
    assert [d.text for d in short_way if isinstance(d, TextDelta)] == [
        "你好，",
        "world 🌍",
        " no space",
        "!",
    ]
    assert [type(d).__name__ for d in short_way][-2:] == ["FinishDelta", "UsageDelta"]

    # a wrong type in a text-only event is refused on the short way too
    server.script = [event_per_chunk([sse_chunk({"content": 7})])]
    with pytest.raises(ProviderError, match="wrong shape"):
        await collect(provider)


async def test_a_burst_of_events_in_one_read_streams_as_few_deltas(
    server: FaultServer, provider: OpenAIProvider
) -> None:
    # a fast local server sends a whole answer in one write: its 200 tokens reach the loop as
    # a few deltas (one per read), the same text in the same order
    tokens = [f"词{i} " for i in range(200)]
    events = [sse_chunk({"reasoning_content": "想"}), sse_chunk({"reasoning_content": "好了"})]
    events += [sse_chunk({"content": t}) for t in tokens]
    events += [sse_chunk(finish="stop"), sse_chunk(usage={"prompt_tokens": 3})]
    server.script = [stream_scenario(events)]
    out = await collect(provider)
    texts = [d.text for d in out if isinstance(d, TextDelta)]
    assert "".join(texts) == "".join(tokens) and len(texts) < 20
    assert [d.text for d in out if isinstance(d, ReasoningDelta)] == ["想好了"]
    kinds = [type(d).__name__ for d in out]
    assert kinds.index("ReasoningDelta") < kinds.index("TextDelta") < kinds.index("FinishDelta")

    # a tool call's fragments in one read: one fragment with the whole arguments; a second
    # call in the same read stays its own
    call = [
        sse_chunk(
            {"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": ""}}]}
        ),
        *(
            sse_chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
            for piece in ('{"pa', 'th": ', '"x.md"}')
        ),
        sse_chunk(
            {"tool_calls": [{"index": 1, "id": "b", "function": {"name": "g", "arguments": "{}"}}]}
        ),
        sse_chunk(finish="tool_calls"),
    ]
    server.script = [stream_scenario(call)]
    fragments = [d for d in await collect(provider) if isinstance(d, ToolCallDelta)]
    assert [(d.index, d.id, d.name, d.arguments) for d in fragments] == [
        (0, "a", "f", '{"path": "x.md"}'),
        (1, "b", "g", "{}"),
    ]

    # an error event after text in the same read: the text first, then the error (and the
    # text was output, so the failure is not retried)
    server.script = [
        stream_scenario(
            [
                sse_chunk({"content": "part"}),
                sse_chunk({"content": "ial"}),
                b'data: {"error": {"message": "overloaded"}}\n\n',
            ]
        )
    ]
    seen: list[object] = []
    with pytest.raises(ProviderError) as info:
        async for d in provider.stream(REQ):
            seen.append(d)
    assert seen == [TextDelta("partial")] and not info.value.retryable


async def test_stream_cut_mid_tool_call(server: FaultServer, provider: OpenAIProvider) -> None:
    server.script = [
        cut_scenario(
            [
                sse_chunk(
                    {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "c",
                                "function": {"name": "write_file", "arguments": '{"pa'},
                            }
                        ]
                    }
                )
            ]
        )
    ]
    seen = []
    with pytest.raises(ProviderError) as info:
        async for d in provider.stream(REQ):
            seen.append(d)
    assert info.value.category == "connection" and not info.value.retryable  # output had started
    assert any(isinstance(d, ToolCallDelta) for d in seen)


async def test_connection_reset_is_retryable_connection(
    server: FaultServer, provider: OpenAIProvider
) -> None:
    server.script = [reset_scenario()]
    with pytest.raises(ProviderError) as info:
        await collect(provider)
    assert info.value.category == "connection" and info.value.retryable


async def test_429_with_retry_after_then_success(
    server: FaultServer, provider: OpenAIProvider
) -> None:
    server.script = [
        status_scenario(429, headers={"Retry-After": "1"}),
        stream_scenario(TEXT_EVENTS),
    ]
    t = time.monotonic()
    items = [d async for d in stream_with_retries(provider, REQ, RetryPolicy(max_attempts=3))]
    notices = [i for i in items if isinstance(i, RetryNotice)]
    assert len(notices) == 1 and notices[0].delay == 1.0 and notices[0].error.status == 429
    assert "slow down" in str(notices[0].error)
    assert time.monotonic() - t >= 0.9
    assert "".join(d.text for d in items if isinstance(d, TextDelta)) == "你好，world 🌍"


async def test_500_then_success_with_backoff(server: FaultServer, provider: OpenAIProvider) -> None:
    server.script = [status_scenario(500), status_scenario(503), stream_scenario(TEXT_EVENTS)]
    items = [
        d
        async for d in stream_with_retries(
            provider, REQ, RetryPolicy(max_attempts=4, base_delay=0.05)
        )
    ]
    assert [i.attempt for i in items if isinstance(i, RetryNotice)] == [1, 2]
    assert FinishDelta("stop") in items


async def test_retries_exhausted_and_non_retryable(
    server: FaultServer, provider: OpenAIProvider
) -> None:
    server.script = [status_scenario(500)]
    with pytest.raises(ProviderError) as info:
        [
            d
            async for d in stream_with_retries(
                provider, REQ, RetryPolicy(max_attempts=2, base_delay=0.01)
            )
        ]
    assert info.value.status == 500
    server.script = [status_scenario(401, b'{"error": {"message": "bad key"}}')]
    with pytest.raises(ProviderError) as info:
        [
            d
            async for d in stream_with_retries(
                provider, REQ, RetryPolicy(max_attempts=5, base_delay=0.01)
            )
        ]
    assert (
        info.value.status == 401
        and not info.value.retryable
        and "MEMORA_API_KEY" in str(info.value)
    )
    assert len([r for r in server.requests if r]) >= 3


async def test_stall_is_timeout(server: FaultServer, provider: OpenAIProvider) -> None:
    server.script = [stall_scenario()]
    t = time.monotonic()
    with pytest.raises(ProviderError) as info:
        await collect(provider)
    assert info.value.category == "timeout"
    assert time.monotonic() - t < 5
    server.script = [stall_scenario([sse_chunk({"content": "partial"})])]
    got = []
    with pytest.raises(ProviderError) as info:
        async for d in provider.stream(REQ):
            got.append(d)
    assert info.value.category == "timeout" and got == [TextDelta("partial")]


async def test_empty_answer_with_length(server: FaultServer, provider: OpenAIProvider) -> None:
    server.script = [stream_scenario([sse_chunk({"content": ""}), sse_chunk(finish="length")])]
    out = await collect(provider)
    assert out == [FinishDelta("length")]


async def test_error_object_mid_stream(server: FaultServer, provider: OpenAIProvider) -> None:
    server.script = [stream_scenario([b'data: {"error": {"message": "model overloaded"}}\n\n'])]
    with pytest.raises(ProviderError, match="model overloaded"):
        await collect(provider)


async def test_connect_refused_is_connection() -> None:
    p = OpenAIProvider(model="m", base_url="http://127.0.0.1:9/v1", connect_timeout=1)
    try:
        with pytest.raises(ProviderError) as info:
            await collect(p)
        assert info.value.category == "connection" and info.value.retryable
    finally:
        await p.aclose()


async def test_non_streaming_complete(server: FaultServer, provider: OpenAIProvider) -> None:
    server.script = [
        json_scenario(
            {
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {
                            "role": "assistant",
                            "content": "done",
                            "tool_calls": [
                                {
                                    "id": "t1",
                                    "type": "function",
                                    "function": {"name": "x", "arguments": "{}"},
                                }
                            ],
                        },
                    }
                ],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1},
            }
        )
    ]
    c = await provider.complete(REQ)
    assert c.text == "done" and c.finish_reason == "stop" and c.usage.input_tokens == 3
    assert c.tool_calls[0].name == "x"
    assert server.requests[0]["body"].get("stream") is None


async def test_cancellation_releases_connection(
    server: FaultServer, provider: OpenAIProvider
) -> None:
    server.script = [
        stream_scenario(
            [sse_chunk({"content": "tok"})] * 200 + [sse_chunk(finish="stop")], split=40, delay=0.01
        )
    ]

    async def consume() -> None:
        async for _ in provider.stream(REQ):
            pass

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.1)
    assert server.open_connections == 0


async def test_no_connection_leaks_after_faults(
    server: FaultServer, provider: OpenAIProvider
) -> None:
    scenarios = [
        reset_scenario(),
        status_scenario(500),
        cut_scenario([sse_chunk({"content": "x"})]),
        stream_scenario([b"data: garbage\n\n"], done=False),
        stream_scenario(TEXT_EVENTS),
    ]
    for sc in scenarios:
        server.script = [sc]
        with contextlib.suppress(ProviderError):
            await collect(provider)
    # pooled keep-alive connections may stay open while the client lives; at most one here
    assert server.open_connections <= 1
    await provider.aclose()
    await asyncio.sleep(0.1)
    assert server.open_connections == 0


def test_sse_decoder_edge_cases() -> None:
    d = SSEDecoder()
    raw = "data: 你好\r\n\r\ndata: a\ndata: b\n\n: comment\n\ndata:no-space\n\n".encode()
    out: list[str] = []
    for i in range(len(raw)):  # one byte at a time, through multi-byte characters and \r\n
        out.extend(d.feed(raw[i : i + 1]))
    assert out == ["你好", "a\nb", "no-space"]
    d = SSEDecoder()
    assert d.feed(b"data: tail-without-blank-line") == []
    assert d.flush() == ["tail-without-blank-line"]


async def test_incremental_history_encoding() -> None:
    p = OpenAIProvider(model="m", base_url="http://127.0.0.1:9/v1")
    import memora_plugin_openai.provider as prov

    calls = 0
    real = prov.encode_message

    def counting(m: Message) -> str:
        nonlocal calls
        calls += 1
        return real(m)

    prov.encode_message = counting  # type: ignore[assignment]
    try:
        history = [Message.system("s"), Message.user("q1")]
        first = p.encode(LLMRequest(history, history_key="k"), stream=True)
        assert calls == 2
        history.append(Message.assistant("a1"))
        history.append(Message.user("q2"))
        second = p.encode(LLMRequest(history, history_key="k"), stream=True)
        assert calls == 4  # only the two new messages were encoded
        assert second.startswith(first[: first.index(b"]")])
        trimmed = [history[0], *history[2:]]  # a new list with a different prefix
        p.encode(LLMRequest(trimmed, history_key="k"), stream=True)
        assert calls == 4 + 2
    finally:
        prov.encode_message = real  # type: ignore[assignment]
        await p.aclose()


TOOL_EVENTS = [
    sse_chunk(
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "list_dir", "arguments": "{}"},
                }
            ],
        }
    ),
    sse_chunk(finish="tool_calls"),
]


async def test_a_conversation_uses_one_connection(server: FaultServer, tmp_path: Path) -> None:
    """Three tool steps, an answer and the round summary: five requests, one TCP connection."""
    from memora import Agent

    answer = stream_scenario(TEXT_EVENTS)
    tool = stream_scenario(TOOL_EVENTS, split=7)
    server.script = [tool, tool, tool, answer, answer]
    project = tmp_path / "p"
    project.mkdir()
    async with Agent(
        project_path=project,
        data_dir=tmp_path / "data",
        provider="openai",
        provider_options={"model": "m", "base_url": server.url},
        load_entrypoints=True,
        summary_verbatim_tokens=0,  # the round summary is a model call even for this short round
    ) as agent:
        chunks = [c async for c in agent.chat("look around, then answer")]
        await agent.idle()
    assert chunks[-1].type == "done"
    assert len(server.requests) == 5
    assert server.accepted == 1


async def test_a_body_left_open_after_done_is_not_waited_for(
    server: FaultServer, provider: OpenAIProvider
) -> None:
    async def open_after_done(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: bytes
    ) -> None:
        writer.write(STREAM_HEAD + chunked(b"".join(TEXT_EVENTS) + b"data: [DONE]\n\n"))
        await writer.drain()
        await asyncio.sleep(3600)  # never ends the chunked body

    server.script = [open_after_done]
    started = time.monotonic()
    out = await collect(provider)
    assert any(isinstance(d, FinishDelta) for d in out)
    assert time.monotonic() - started < 1.0  # not the 1 s stall timeout, not forever


# -- untrusted streams: whatever the server sends, only ProviderError leaves stream() ------------


def _raw(head: bytes, body: bytes = b"") -> Scenario:
    async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: bytes) -> None:
        writer.write(head + body)
        await writer.drain()

    return run


@pytest.mark.parametrize(
    ("scenario", "needle"),
    [
        (
            _raw(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: 13\r\n\r\n",
                b"<html></html>",
            ),
            "an HTML page",
        ),
        (
            _raw(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n",
                b"{}",
            ),
            "a JSON body",
        ),
        (
            _raw(
                b"HTTP/1.1 302 Found\r\nlocation: http://elsewhere.invalid/v1\r\n"
                b"content-length: 0\r\n\r\n"
            ),
            "redirected to http://elsewhere.invalid/v1",
        ),
    ],
    ids=["html", "json-body", "redirect"],
)
async def test_not_an_event_stream_is_a_clear_provider_error(
    server: FaultServer, provider: OpenAIProvider, scenario: Scenario, needle: str
) -> None:
    server.script = [scenario]
    with pytest.raises(ProviderError, match=needle):
        await collect(provider)


MALFORMED = {
    "choices-string": b'data: {"choices": "nope"}\n\n',
    "delta-list": b'data: {"choices": [{"delta": ["x"]}]}\n\n',
    "tool-index-string": (
        b'data: {"choices": [{"delta": {"tool_calls": [{"index": "x", "function": {}}]}}]}\n\n'
    ),
    "usage-nan": b'data: {"choices": [], "usage": {"prompt_tokens": NaN}}\n\n',
    "content-int": b'data: {"choices": [{"delta": {"content": 5}}]}\n\n',
}


@pytest.mark.parametrize("event", list(MALFORMED.values()), ids=list(MALFORMED))
async def test_events_of_the_wrong_shape_are_provider_errors(
    server: FaultServer, provider: OpenAIProvider, event: bytes
) -> None:
    server.script = [stream_scenario([event])]
    with pytest.raises(ProviderError, match="wrong shape"):
        await collect(provider)


async def test_deeply_nested_json_is_skipped_not_a_crash(
    server: FaultServer, provider: OpenAIProvider
) -> None:
    deep = b"data: " + b"[" * 10_000 + b"]" * 10_000 + b"\n\n"
    server.script = [stream_scenario([deep, *TEXT_EVENTS])]
    out = await collect(provider)
    assert any(isinstance(d, FinishDelta) for d in out)


async def test_a_line_without_end_is_cut(server: FaultServer, provider: OpenAIProvider) -> None:
    async def endless_line(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: bytes
    ) -> None:
        writer.write(STREAM_HEAD + chunked(b"data: "))
        for _ in range(20):  # 10 MB, no newline
            writer.write(chunked(b"x" * 500_000))
            await writer.drain()
        await asyncio.sleep(3600)

    server.script = [endless_line]
    with pytest.raises(ProviderError, match="longer than"):
        await collect(provider)


async def test_response_size_is_bounded_even_compressed(server: FaultServer) -> None:
    import gzip

    payload = gzip.compress(b"data: " + b"y" * 50_000_000 + b"\n\n")  # ~50 KB on the wire

    async def bomb(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: bytes) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-encoding: gzip\r\n"
            + f"content-length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        await writer.drain()

    server.script = [bomb]
    p = OpenAIProvider(model="m", base_url=server.url, max_response_bytes=1_000_000)
    try:
        with pytest.raises(ProviderError, match="passed 1000000 bytes"):
            await collect(p)
        assert server.requests[0]["headers"]["accept-encoding"] == "identity"
    finally:
        await p.aclose()


async def test_a_dripping_server_hits_the_total_deadline(server: FaultServer) -> None:
    async def drip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: bytes) -> None:
        writer.write(STREAM_HEAD)
        for _ in range(600):  # a keep-alive comment every 0.1 s: no read ever times out
            writer.write(chunked(b": keep-alive\n"))
            await writer.drain()
            await asyncio.sleep(0.1)

    server.script = [drip]
    p = OpenAIProvider(model="m", base_url=server.url, stall_timeout=1.0, total_timeout=1.0)
    started = time.monotonic()
    try:
        with pytest.raises(ProviderError) as info:
            await collect(p)
    finally:
        await p.aclose()
    assert info.value.category == "timeout"
    assert time.monotonic() - started < 5


async def test_a_malformed_answer_does_not_stick_to_the_session(
    server: FaultServer, tmp_path: Path
) -> None:
    from memora import Agent

    server.script = [stream_scenario([MALFORMED["delta-list"]]), stream_scenario(TEXT_EVENTS)]
    project = tmp_path / "p"
    project.mkdir()
    async with Agent(
        project_path=project,
        data_dir=tmp_path / "d",
        provider="openai",
        provider_options={"model": "m", "base_url": server.url},
        strategy_override={"reflect": {"summary": "off"}},
        retry_attempts=1,
        load_entrypoints=True,
    ) as agent:
        first = [c async for c in agent.chat("one")]
        assert first[-1].type == "error" and "wrong shape" in first[-1].message  # type: ignore[union-attr]
        second = [c async for c in agent.chat("two")]
        assert second[-1].type == "done"


def _gzip_bomb(megabytes: int) -> bytes:
    import zlib

    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: a gzip header
    block = bytes(1 << 20)
    return b"".join(packer.compress(block) for _ in range(megabytes)) + packer.flush()


_BOMB = _gzip_bomb(512)  # 512 MB inflated, ~0.5 MB on the wire


@pytest.mark.parametrize(
    ("status", "kind", "complete"),
    [
        (500, "application/json", False),  # an error body, streamed request
        (500, "application/json", True),  # an error body, non-streamed request
        (200, "application/json", True),  # a success body, non-streamed request
    ],
)
async def test_a_gzip_bomb_in_any_body_is_read_only_to_its_cap(
    server: FaultServer, status: int, kind: str, complete: bool
) -> None:
    import tracemalloc

    async def bomb(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: bytes) -> None:
        writer.write(
            f"HTTP/1.1 {status} X\r\ncontent-type: {kind}\r\ncontent-encoding: gzip\r\n".encode()
            + f"content-length: {len(_BOMB)}\r\n\r\n".encode()
            + _BOMB
        )
        await writer.drain()

    server.script = [bomb]
    p = OpenAIProvider(model="m", base_url=server.url, max_response_bytes=1_000_000)
    tracemalloc.start()
    try:
        with pytest.raises(ProviderError) as info:
            if complete:
                await p.complete(REQ)
            else:
                await collect(p)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        await p.aclose()
    # reading it whole held the 512 MB (and its decoded copy); capped, one inflated chunk at most
    assert peak < 256 * 1024 * 1024, peak
    if status >= 400:
        assert info.value.status == status and "HTTP 500" in str(info.value)
    else:
        assert "passed 1000000 bytes" in str(info.value)


async def test_a_stream_ended_by_finish_reason_without_done_is_done(
    server: FaultServer, provider: OpenAIProvider
) -> None:
    """#43: a server that sends finish_reason and then neither usage nor [DONE], keeping the
    body open: the answer is complete, not a stall."""
    events = [sse_chunk({"role": "assistant", "content": "all here"}), sse_chunk(finish="stop")]
    server.script = [stall_scenario(events)]
    started = time.monotonic()
    items = await collect(provider)
    assert TextDelta("all here") in items and FinishDelta("stop") in items
    assert time.monotonic() - started < 3.5  # the 1 s stall timeout was not what ended it


@pytest.mark.parametrize("suffix", ["/gateway/v1", "/gateway/v1/"])
async def test_requests_go_under_the_base_url(server: FaultServer, suffix: str) -> None:
    """The endpoint URL is merged with base_url once (not per request): every request still
    goes to the path under base_url's own path, streamed or not, chat or embeddings."""
    base = f"http://127.0.0.1:{server.port}{suffix}"
    server.script = [
        stream_scenario(TEXT_EVENTS),
        stream_scenario(TEXT_EVENTS),
        json_scenario({"choices": [{"index": 0, "message": {"content": "ok"}}]}),
        json_scenario({"data": [{"index": 0, "embedding": [0.6, 0.8]}]}),
    ]
    p = OpenAIProvider(model="m", base_url=base, stall_timeout=1.0, connect_timeout=2.0)
    e = OpenAIEmbedder(model="e", base_url=base)
    try:
        await collect(p)
        await collect(p)
        assert (await p.complete(REQ)).text == "ok"
        assert await e.embed(["hello"], kind="document") == [[0.6, 0.8]]
    finally:
        await p.aclose()
        await e.aclose()
    assert [r["line"] for r in server.requests] == [
        "POST /gateway/v1/chat/completions HTTP/1.1",
        "POST /gateway/v1/chat/completions HTTP/1.1",
        "POST /gateway/v1/chat/completions HTTP/1.1",
        "POST /gateway/v1/embeddings HTTP/1.1",
    ]


async def test_idle_connections_the_server_closed_are_not_reused(
    server: FaultServer, provider: OpenAIProvider
) -> None:
    """An endpoint that closes keep-alive connections between requests (its idle timeout, a
    proxy's restart): the pool must see each close and connect afresh, never send the next
    request on a dead connection.  The provider checks idle connections its own cheaper way
    (``memora_plugin_openai.net``), so this pins that the check still tells."""
    answer = stream_scenario(TEXT_EVENTS)

    async def answer_then_close(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: bytes
    ) -> None:
        await answer(reader, writer, body)
        await asyncio.sleep(0.05)  # after the client has read the whole answer
        writer.close()

    server.script = [answer_then_close]
    for accepted in (4, 8):
        outs = await asyncio.gather(*(collect(provider) for _ in range(4)))
        assert all(any(isinstance(d, FinishDelta) for d in out) for out in outs)
        for _ in range(200):  # the server has closed every connection (idle in the pool)
            if server.open_connections == 0:
                break
            await asyncio.sleep(0.01)
        assert server.open_connections == 0
        assert server.accepted == accepted
    assert len(server.requests) == 8


SLOW_EVENTS = [sse_chunk({"content": "x"}) for _ in range(6)] + [sse_chunk(finish="stop")]


def slow_stream(seconds: float) -> Scenario:
    """An answer streamed over about ``seconds``, one event at a time."""
    return stream_scenario(SLOW_EVENTS, split=len(SLOW_EVENTS[0]), delay=seconds / len(SLOW_EVENTS))


async def test_more_turns_at_once_than_httpx2s_default_pool_all_stream(
    server: FaultServer,
) -> None:
    """A server's concurrent turns share their project's provider.  With httpx2's default pool
    (100 connections) the 101st concurrent request waited for a free connection and failed
    after ``connect_timeout`` when the streams ahead of it ran longer; 110 now all stream."""
    # a connect may take a while on a loaded machine (110 at once): the timeout leaves it
    # room, and is still shorter than the streams a request would wait for a pool slot behind
    server.script = [slow_stream(3.0)]
    provider = OpenAIProvider(model="m", base_url=server.url, connect_timeout=1.5)
    try:
        outs = await asyncio.gather(
            *(collect(provider) for _ in range(110)), return_exceptions=True
        )
    finally:
        await provider.aclose()
    failed = [o for o in outs if isinstance(o, BaseException)]
    assert not failed, failed[:1]
    assert server.accepted == 110


async def test_a_full_pool_says_which_option_to_raise(server: FaultServer) -> None:
    server.script = [slow_stream(1.5)]
    provider = OpenAIProvider(
        model="m", base_url=server.url, connect_timeout=0.3, max_connections=2
    )
    try:
        outs = await asyncio.gather(*(collect(provider) for _ in range(3)), return_exceptions=True)
    finally:
        await provider.aclose()
    errors = [o for o in outs if isinstance(o, ProviderError)]
    assert len(errors) == 1 and errors[0].category == "timeout" and errors[0].retryable
    assert "all 2 are in use" in str(errors[0]) and "max_connections" in str(errors[0])
    assert "connecting" not in str(errors[0])  # not mistaken for an unreachable server


@pytest.mark.parametrize(
    "option", [{"max_connections": 0}, {"max_keepalive_connections": -1}, {"max_connections": "9"}]
)
def test_pool_sizes_are_whole_numbers_of_at_least_one(option: dict[str, object]) -> None:
    (name,) = option
    with pytest.raises(ValueError, match=f"{name} must be a whole number of at least 1"):
        OpenAIProvider(model="m", base_url="http://127.0.0.1:9/v1", **option)  # type: ignore[arg-type]


async def test_the_provider_pools_share_requests_evenly_and_count_every_end(
    server: FaultServer,
) -> None:
    """A provider's large pool is several (``pool.Shards``): concurrent requests go to the one
    with the fewest in flight, so they spread evenly; every answer's end — read whole, a reset,
    an error status, a cut stream, a request cancelled mid-stream — is counted, so requests
    one after another afterwards go to the first pool again and keep one connection."""
    import httpx2

    from memora_plugin_openai import pool

    transport = pool.transport_for(http2=False, max_connections=1000, max_keepalive_connections=100)
    assert isinstance(transport, pool.Shards) and len(transport.transports) == 4
    client = httpx2.AsyncClient(transport=transport, base_url=server.url, timeout=10)

    async def post() -> bytes:
        async with client.stream("POST", "/chat/completions", json={}) as response:
            return await response.aread()

    try:
        server.script = [slow_stream(1.0)]
        running = [asyncio.ensure_future(post()) for _ in range(40)]
        for _ in range(300):
            if len(server.requests) == 40:
                break
            await asyncio.sleep(0.01)
        assert transport.in_flight == [10, 10, 10, 10]
        running[0].cancel()  # a request cancelled mid-stream
        results = await asyncio.gather(*running, return_exceptions=True)
        assert isinstance(results[0], asyncio.CancelledError)
        assert all(isinstance(r, bytes) for r in results[1:])
        assert transport.in_flight == [0, 0, 0, 0]

        server.script = [
            reset_scenario(),
            status_scenario(500),
            cut_scenario([sse_chunk({"content": "x"})]),
            stream_scenario(TEXT_EVENTS),
        ]
        outs = await asyncio.gather(*(post() for _ in range(4)), return_exceptions=True)
        assert any(isinstance(o, httpx2.HTTPError) for o in outs)
        assert transport.in_flight == [0, 0, 0, 0]

        server.script = [stream_scenario(TEXT_EVENTS)]
        await post()
        before = server.accepted
        for _ in range(5):
            await post()
        assert server.accepted == before  # one after another: the same kept connection
        assert transport.in_flight == [0, 0, 0, 0]
    finally:
        await client.aclose()


def test_a_small_pool_is_one_pool() -> None:

    from memora_plugin_openai import pool

    one = pool.transport_for(http2=False, max_connections=10, max_keepalive_connections=10)
    assert isinstance(one, pool.AsyncioTransport)
    few = pool.transport_for(http2=False, max_connections=30, max_keepalive_connections=1000)
    assert isinstance(few, pool.AsyncioTransport)  # a request waits in a pool of 30
    two = pool.transport_for(http2=False, max_connections=60, max_keepalive_connections=1000)
    assert isinstance(two, pool.Shards) and len(two.transports) == 2
