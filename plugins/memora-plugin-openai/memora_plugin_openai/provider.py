"""The OpenAI-compatible provider."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import httpx2

from memora.llm import ProviderError
from memora.llm.openai_format import message_to_openai, tool_to_openai
from memora.llm.types import (
    Delta,
    LLMRequest,
    Message,
    TokenUsage,
    ToolCall,
    ToolSpec,
)

from .deadline import Deadline, DeadlineExceeded
from .endpoint import (
    MAX_CONNECTIONS,
    MAX_KEEPALIVE,
    HTTPEndpoint,
    default_base_url,
    endpoint_client,
    endpoint_url,
    seconds,
)
from .events import coalesce, event_deltas
from .sse import SSEDecoder, SSELineTooLong

__all__ = ["Completion", "OpenAIProvider", "encode_message"]

logger = logging.getLogger("memora.plugins.openai")

_DRAIN_LIMIT = 64 * 1024
_DRAIN_SECONDS = 0.25
"""Bytes and seconds spent reading after ``data: [DONE]`` so the connection can be reused; past
either the connection is closed instead."""
_AFTER_FINISH_SECONDS = 2.0
"""How long the usage event or [DONE] may take after finish_reason before the answer is
taken as complete."""
_HISTORY_CACHE = 64


def encode_message(m: Message) -> str:
    """One message as OpenAI Chat Completions JSON."""
    return json.dumps(message_to_openai(m), ensure_ascii=False)


def _encode_tools(tools: list[ToolSpec]) -> str:
    return json.dumps([tool_to_openai(t) for t in tools], ensure_ascii=False)


@dataclass
class _HistoryEntry:
    ref: list[Message] | None = None
    count: int = 0
    last: Message | None = None
    parts: list[str] = field(default_factory=list)
    snapshot: list[Message] = field(default_factory=list)
    snapshot_ref: list[Message] | None = None


@dataclass
class Completion:
    """A non-streamed answer."""

    text: str
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    usage: TokenUsage = field(default_factory=TokenUsage)


def _refuses_schema(exc: ProviderError) -> bool:
    """An HTTP 400/422 whose message is about the structured-output request (a server that
    has no ``response_format`` or no ``json_schema`` in it), before anything was streamed."""
    text = exc.message.lower()
    return exc.status in (400, 422) and any(
        word in text for word in ("response_format", "json_schema", "response format", "schema")
    )


@dataclass
class _Progress:
    """How far one streamed answer has come."""

    produced: bool = False
    """A delta went out: a failure now is not retried (the caller saw part of an answer)."""
    finished: bool = False
    """The model said ``finish_reason``."""
    done: bool = False
    """``data: [DONE]`` arrived."""


async def _after_finish(chunks: AsyncIterator[bytes], deadline: Deadline) -> bytes | None:
    """The next piece of a body once the model finished (``finish_reason``), or ``None``: the
    usage event and ``[DONE]`` follow at once from a well-behaved server, and a server that
    sends neither and keeps the body open must not turn a finished answer into a stall, nor
    (at the deadline) into an error."""
    try:
        with deadline:
            async with asyncio.timeout(_AFTER_FINISH_SECONDS):
                return await anext(chunks)
    except (StopAsyncIteration, TimeoutError, httpx2.TimeoutException, DeadlineExceeded):
        return None


async def _drain(chunks: AsyncIterator[bytes], deadline: Deadline) -> None:
    """Read the rest of a body after ``[DONE]`` (the chunked terminator, usually a few bytes)
    so httpx2 returns the connection to the pool: leaving at ``[DONE]`` closes it, and the next
    request pays a new connection (a TLS handshake against a real API).  A server that keeps
    sending, or keeps the body open, loses its connection instead: past :data:`_DRAIN_LIMIT`
    bytes, :data:`_DRAIN_SECONDS` in all, or the deadline (the answer is complete: no error)."""
    drained = 0
    try:
        with deadline:
            async with asyncio.timeout(_DRAIN_SECONDS):
                async for chunk in chunks:
                    drained += len(chunk)
                    if drained > _DRAIN_LIMIT:
                        return
    except (TimeoutError, DeadlineExceeded):
        return


class _Failures:
    """Whatever a streamed answer fails with leaves as :class:`ProviderError`: the deadline, a
    transport error, an SSE line too long, a bug on either side; a failure after a delta went
    out is not retryable.  Cancellation and a closed generator pass as they are."""

    __slots__ = ("_base_url", "_past_total", "_progress", "_transport_error")

    def __init__(
        self,
        progress: _Progress,
        base_url: str,
        past_total: Callable[[str], ProviderError],
        transport_error: Callable[[Exception], ProviderError],
    ) -> None:
        self._progress = progress
        self._base_url = base_url
        self._past_total = past_total
        self._transport_error = transport_error

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None or not isinstance(exc, Exception):
            return  # done, cancelled, or the consumer closed the stream
        fresh = not self._progress.produced
        if isinstance(exc, DeadlineExceeded):
            raise self._past_total("the answer") from None
        if isinstance(exc, ProviderError):
            exc.retryable = exc.retryable and fresh
            return
        if isinstance(exc, httpx2.HTTPError):
            err = self._transport_error(exc)
            err.retryable = err.retryable and fresh
            raise err from exc
        if isinstance(exc, SSELineTooLong):
            raise ProviderError(f"{self._base_url} sent {exc}", category="unknown") from exc
        # a bug on either side must not escape as a raw exception
        raise ProviderError(
            f"unexpected failure reading {self._base_url}: {type(exc).__name__}: {exc}",
            category="unknown",
        ) from exc


class OpenAIProvider(HTTPEndpoint):
    """Chat Completions over httpx2: pooled connections, SSE streaming, classified errors.

    The API key comes from the environment (``api_key_env``, default ``MEMORA_API_KEY`` then
    ``OPENAI_API_KEY``) or, with ``api_key_name``, from the user's private key file
    (``memora keys set``); it is never read from or written to a config file.  Retries are the
    caller's policy (see :func:`memora.llm.retry.stream_with_retries`): this class raises
    :class:`ProviderError` with ``retryable`` and ``retry_after`` set.
    """

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key_env: str | None = None,
        api_key_name: str | None = None,
        headers: Mapping[str, str] | None = None,
        connect_timeout: float = 10.0,
        stall_timeout: float = 60.0,
        context_window: int = 128_000,
        http2: bool = False,
        extra_body: Mapping[str, Any] | None = None,
        transport: httpx2.AsyncBaseTransport | None = None,
        total_timeout: float = 900.0,
        max_response_bytes: int = 32 * 1024 * 1024,
        max_connections: int = MAX_CONNECTIONS,
        max_keepalive_connections: int = MAX_KEEPALIVE,
    ) -> None:
        self.model = model
        self.total_timeout = seconds("total_timeout", total_timeout)
        self.max_response_bytes = int(max_response_bytes)
        self.base_url = default_base_url(base_url)
        self._context_window = int(context_window)
        self._extra = dict(extra_body or {})
        self._client = endpoint_client(
            self.base_url,
            api_key_env=api_key_env,
            api_key_name=api_key_name,
            headers=headers,
            accept="text/event-stream, application/json",
            connect_timeout=connect_timeout,
            read_timeout=stall_timeout,
            http2=http2,
            transport=transport,
            max_connections=max_connections,
            max_keepalive_connections=max_keepalive_connections,
        )
        self.max_connections = max_connections  # checked by endpoint_client
        # the endpoint's absolute URL, merged with base_url once: httpx2 parses and merges a
        # relative path on every request (~80 µs of CPU each on the benchmark machine, more
        # than the rest of building the request)
        self._chat_url = endpoint_url(self._client, "/chat/completions")
        self._history: OrderedDict[str, _HistoryEntry] = OrderedDict()
        self._tools_cache: tuple[tuple[int, ...], str] | None = None
        self.structured_output = True
        """Typed turns get ``response_format: json_schema``; ``False`` once the server refused
        it (memora then relies on the prompt and its own validation)."""

    @property
    def name(self) -> str:
        return f"openai:{self.model}"

    async def list_models(self) -> list[str]:
        """The model ids the endpoint serves (``GET {base_url}/models``; ``memora models``)."""
        raw, cut = await self._fetch("GET", "/models", 4 * 1024 * 1024, what="the model list")
        try:
            data = json.loads(raw) if not cut else None
            items = data.get("data") if isinstance(data, dict) else None
            if not isinstance(items, list):
                raise ValueError("no data list")
        except ValueError as exc:
            raise ProviderError(
                f"{self.base_url}/models did not answer an OpenAI model list ({exc})",
                category="unknown",
                retryable=False,
            ) from None
        return sorted(str(m["id"]) for m in items if isinstance(m, dict) and m.get("id"))

    @property
    def context_window(self) -> int:
        return self._context_window

    # -- request encoding (incremental) -----------------------------------------------------------

    def _messages_json(self, request: LLMRequest) -> str:
        """Messages JSON, encoding only what is new since the last request with the same
        ``history_key``.  When the caller passes the same (append-only) list object again the
        check is O(1); otherwise the common prefix is found by object identity."""
        msgs = request.messages
        key = request.history_key
        if key is None:
            return ",".join(encode_message(m) for m in msgs)
        entry = self._history.get(key)
        if entry is None:
            entry = _HistoryEntry()
            self._history[key] = entry
            while len(self._history) > _HISTORY_CACHE:
                self._history.popitem(last=False)
        else:
            self._history.move_to_end(key)
        n = entry.count
        fast = entry.ref is msgs and len(msgs) >= n and (n == 0 or msgs[n - 1] is entry.last)
        if not fast:
            same = 0
            old = entry.snapshot
            limit = min(len(old), len(msgs))
            while same < limit and old[same] is msgs[same]:
                same += 1
            del entry.parts[same:]
            n = same
        entry.parts.extend(encode_message(m) for m in msgs[n:])
        entry.ref = msgs
        entry.count = len(msgs)
        entry.last = msgs[-1] if msgs else None
        if fast and entry.snapshot_ref is msgs:
            entry.snapshot.extend(msgs[len(entry.snapshot) :])
        else:
            entry.snapshot = list(msgs)
            entry.snapshot_ref = msgs
        return ",".join(entry.parts)

    def _tools_json(self, tools: list[ToolSpec]) -> str:
        ident = tuple(id(t) for t in tools)
        if self._tools_cache is None or self._tools_cache[0] != ident:
            self._tools_cache = (ident, _encode_tools(tools))
        return self._tools_cache[1]

    def encode(self, request: LLMRequest, *, stream: bool) -> bytes:
        head = f'{{"model":{json.dumps(request.model or self.model)},"messages":[{self._messages_json(request)}]'
        extra: list[str] = []
        if stream:
            extra.append('"stream":true,"stream_options":{"include_usage":true}')
        if request.tools:
            extra.append(f'"tools":{self._tools_json(request.tools)}')
        output = request.output
        if output is not None and self.structured_output and not request.tools:
            schema = {"name": output.name, "schema": output.schema, "strict": output.strict}
            extra.append(
                '"response_format":'
                + json.dumps({"type": "json_schema", "json_schema": schema}, ensure_ascii=False)
            )
        if request.temperature is not None:
            extra.append(f'"temperature":{float(request.temperature)!r}')
        if (
            isinstance(request.max_tokens, int)
            and not isinstance(request.max_tokens, bool)
            and request.max_tokens > 0
        ):
            extra.append(f'"max_tokens":{request.max_tokens}')
        more = {**self._extra, **request.extra}
        if more:
            extra.append(json.dumps(more, ensure_ascii=False)[1:-1])
        return (head + ("," + ",".join(e for e in extra if e) if extra else "") + "}").encode(
            "utf-8"
        )

    # -- streaming ---------------------------------------------------------------------------------

    def stream(self, request: LLMRequest) -> AsyncIterator[Delta]:
        """Stream one request.  Whatever the server sends, only :class:`ProviderError` leaves:
        an HTML page, a JSON body or a redirect instead of an event stream, malformed events,
        a body or a line past its size limit, a request past ``total_timeout``.  A server that
        refuses a typed turn's ``response_format`` is asked again without it, and not sent it
        again (:attr:`structured_output`)."""
        if request.output is None or not self.structured_output or request.tools:
            return self._stream(request)
        return self._stream_typed(request)

    async def _stream_typed(self, request: LLMRequest) -> AsyncIterator[Delta]:
        try:
            async for delta in self._stream(request):
                yield delta
            return
        except ProviderError as exc:
            if not _refuses_schema(exc):
                raise
            self.structured_output = False
            logger.warning(
                "%s refused response_format json_schema (%s); typed results from it are "
                "checked by memora alone",
                self.base_url,
                exc.message,
            )
        async for delta in self._stream(request):
            yield delta

    async def _stream(self, request: LLMRequest) -> AsyncIterator[Delta]:
        body = self.encode(request, stream=True)
        progress = _Progress()
        # one clock from connect to the last byte: connecting, a head that trickles in (or
        # `100 Continue` sent forever), an error body and every read of the answer; a read
        # timeout alone restarts with each byte
        deadline = Deadline(self.total_timeout)
        try:
            # one generator, the failures mapped by a context manager around it: a generator
            # around another costs each delta a hop more (about 1 µs a read)
            with _Failures(progress, self.base_url, self._past_total, self._transport_error):
                with deadline:
                    response = await self._client.send(
                        self._client.build_request("POST", self._chat_url, content=body),
                        stream=True,
                    )
                try:
                    await self._check_answer(response, deadline)
                    decoder = SSEDecoder()
                    received = 0
                    chunks = response.aiter_bytes()
                    while not progress.done:
                        try:
                            if progress.finished:
                                piece = await _after_finish(chunks, deadline)
                                if piece is None:
                                    break
                                chunk = piece
                            else:
                                with deadline:
                                    chunk = await anext(chunks)
                        except StopAsyncIteration:
                            break
                        received += len(chunk)
                        if received > self.max_response_bytes:
                            raise ProviderError(
                                f"the answer from {self.base_url} passed "
                                f"{self.max_response_bytes} bytes; stopped reading",
                                category="unknown",
                            )
                        # the events of one read go on together: adjacent pieces of text (or of
                        # one call's arguments) as one delta, so a fast server's burst of tokens
                        # costs the loop one chunk, not one per token; an error event still
                        # comes after what preceded it
                        batch, failure = self._events(decoder, chunk, progress)
                        for delta in coalesce(batch) if len(batch) > 1 else batch:
                            progress.produced = True
                            if delta.kind == "finish":
                                progress.finished = True
                            yield delta
                        if failure is not None:
                            raise failure
                    if progress.done:
                        await _drain(chunks, deadline)
                    for delta in self._flushed(decoder, progress):
                        progress.produced = True
                        progress.finished = progress.finished or delta.kind == "finish"
                        yield delta
                    if not progress.finished:
                        raise ProviderError(
                            f"the stream from {self.base_url} ended before the model finished",
                            category="connection",
                            retryable=not progress.produced,
                        )
                finally:
                    await response.aclose()
        finally:
            deadline.cancel()

    async def _check_answer(self, response: httpx2.Response, deadline: Deadline) -> None:
        """An error status (its body read for the message), a redirect or a body that is not
        an event stream, as :class:`ProviderError`."""
        if response.status_code >= 400:
            with deadline:
                error = await self._http_error(response)
            raise error
        self._check_stream_response(response)

    def _flushed(self, decoder: SSEDecoder, progress: _Progress) -> list[Delta]:
        """The deltas of an event the body ended inside (no blank line after it); none after
        ``[DONE]``."""
        if progress.done:
            return []
        return [d for data in decoder.flush() if data != "[DONE]" for d in self._translate(data)]

    def _events(
        self, decoder: SSEDecoder, chunk: bytes, progress: _Progress
    ) -> tuple[list[Delta], ProviderError | None]:
        """The deltas of the events ``chunk`` completes, and the error event among them (the
        deltas before it still go out); ``[DONE]`` ends the answer."""
        batch: list[Delta] = []
        try:
            for data in decoder.feed(chunk):
                if data == "[DONE]":
                    progress.done = True
                    break
                batch.extend(self._translate(data))
        except ProviderError as exc:
            return batch, exc
        return batch, None

    def _check_stream_response(self, response: httpx2.Response) -> None:
        if 300 <= response.status_code < 400:
            where = response.headers.get("location", "elsewhere")
            raise ProviderError(
                f"{self.base_url} redirected to {where}; memora does not follow redirects for "
                "LLM requests: set base_url to the final address",
                category="unknown",
                status=response.status_code,
            )
        kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind and kind != "text/event-stream":
            what = {
                "text/html": "an HTML page (a proxy, a login page or a wrong base_url?)",
                "application/json": "a JSON body, not an event stream (does it stream?)",
            }.get(kind, f"{kind!r}")
            raise ProviderError(
                f"{self.base_url} answered with {what} instead of an event stream",
                category="unknown",
            )

    def _translate(self, data: str) -> list[Delta]:
        try:
            obj = json.loads(data)
        except (ValueError, RecursionError):
            logger.warning("skipping a malformed SSE data line: %.200r", data)
            return []
        if not isinstance(obj, dict):
            return []
        error = obj.get("error")
        if error:
            msg = error.get("message") if isinstance(error, dict) else str(error)
            raise ProviderError(
                f"{self.base_url} reported an error mid-stream: {msg}", category="unknown"
            )
        try:
            return event_deltas(obj)
        except (AttributeError, TypeError, ValueError, KeyError, IndexError) as exc:
            raise ProviderError(
                f"{self.base_url} sent an event of the wrong shape ({exc}): {data[:200]!r}",
                category="unknown",
            ) from exc

    async def complete(self, request: LLMRequest) -> Completion:
        """A non-streamed request."""
        body = self.encode(request, stream=False)
        raw, more = await self._fetch(
            "POST", self._chat_url, self.max_response_bytes, content=body, what="the answer"
        )
        if more:
            raise ProviderError(
                f"the answer from {self.base_url} passed {self.max_response_bytes} bytes; "
                "stopped reading",
                category="unknown",
            )
        try:
            obj = json.loads(raw)
            choice = obj["choices"][0]
            msg = choice.get("message") or {}
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ProviderError(
                f"unexpected response from {self.base_url}: "
                f"{raw[:300].decode('utf-8', errors='replace')}"
            ) from exc
        usage = obj.get("usage") or {}
        calls = [
            ToolCall(
                tc.get("id") or f"call_{i}",
                (tc.get("function") or {}).get("name", ""),
                (tc.get("function") or {}).get("arguments") or "",
            )
            for i, tc in enumerate(msg.get("tool_calls") or [])
        ]
        return Completion(
            text=msg.get("content") or "",
            reasoning=msg.get("reasoning_content") or "",
            tool_calls=calls,
            finish_reason=choice.get("finish_reason"),
            usage=TokenUsage(
                int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
            ),
        )

    async def aclose(self) -> None:
        await self._client.aclose()
