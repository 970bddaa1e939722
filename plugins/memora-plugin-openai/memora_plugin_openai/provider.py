"""The OpenAI-compatible provider."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any

import httpx2

from memora.llm import ProviderError
from memora.llm.openai_format import message_to_openai, tool_to_openai
from memora.llm.types import (
    Delta,
    FinishDelta,
    LLMRequest,
    Message,
    ReasoningDelta,
    TextDelta,
    TokenUsage,
    ToolCall,
    ToolCallDelta,
    ToolSpec,
    UsageDelta,
)
from memora.settings.secrets import stored_key

from . import pool
from .sse import SSEDecoder, SSELineTooLong

__all__ = ["Completion", "OpenAIProvider", "encode_message"]

logger = logging.getLogger("memora.plugins.openai")

_RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529})
_DRAIN_LIMIT = 64 * 1024
_DRAIN_SECONDS = 0.25
_AFTER_FINISH_SECONDS = 2.0
"""How long the usage event or [DONE] may take after finish_reason before the answer is
taken as complete."""
_ERROR_BODY_LIMIT = 64 * 1024
"""How much of an HTTP error body is read (its message is shown, 500 characters of it)."""
"""Bytes and seconds spent reading after ``data: [DONE]`` so the connection can be reused; past
either the connection is closed instead."""
_HISTORY_CACHE = 64


def encode_message(m: Message) -> str:
    """One message as OpenAI Chat Completions JSON."""
    return json.dumps(message_to_openai(m), ensure_ascii=False)


def _encode_tools(tools: list[ToolSpec]) -> str:
    return json.dumps([tool_to_openai(t) for t in tools], ensure_ascii=False)


def coalesce(deltas: list[Delta]) -> list[Delta]:
    """``deltas`` with each run of text, of reasoning, or of one tool call's argument fragments
    joined into one delta (order kept; a fragment naming a call starts a new one)."""
    out: list[Delta] = []
    run: list[str] = []  # the pieces of the run that out[-1] starts

    def close() -> None:
        if len(run) > 1:
            head = out[-1]
            text = "".join(run)
            if isinstance(head, TextDelta):
                out[-1] = TextDelta(text)
            elif isinstance(head, ReasoningDelta):
                out[-1] = ReasoningDelta(text)
            elif isinstance(head, ToolCallDelta):
                out[-1] = ToolCallDelta(head.index, head.id, head.name, text)
        run.clear()

    for delta in deltas:
        head = out[-1] if out else None
        if head is not None and run:
            if isinstance(delta, TextDelta) and isinstance(head, TextDelta):
                run.append(delta.text)
                continue
            if isinstance(delta, ReasoningDelta) and isinstance(head, ReasoningDelta):
                run.append(delta.text)
                continue
            if (
                isinstance(delta, ToolCallDelta)
                and isinstance(head, ToolCallDelta)
                and delta.index == head.index
                and delta.id is None
                and delta.name is None
            ):
                run.append(delta.arguments)
                continue
        close()
        out.append(delta)
        if isinstance(delta, (TextDelta, ReasoningDelta)):
            run.append(delta.text)
        elif isinstance(delta, ToolCallDelta):
            run.append(delta.arguments)
    close()
    return out


def _retry_after(headers: Mapping[str, str]) -> float | None:
    raw = headers.get("retry-after")
    if not raw:
        ms = headers.get("retry-after-ms")
        return float(ms) / 1000 if ms and ms.replace(".", "", 1).isdigit() else None
    raw = raw.strip()
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        from datetime import UTC, datetime

        return max(0.0, (parsedate_to_datetime(raw) - datetime.now(UTC)).total_seconds())
    except (TypeError, ValueError):
        return None


@dataclass
class _HistoryEntry:
    ref: list[Message] | None = None
    count: int = 0
    last: Message | None = None
    parts: list[str] = field(default_factory=list)
    snapshot: list[Message] = field(default_factory=list)
    snapshot_ref: list[Message] | None = None


def _count(value: Any, what: str) -> int:
    """A token count: a non-negative integer (NaN, strings, floats with a fraction refused)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} is {type(value).__name__}, not a number")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"{what} is {value!r}, not a whole number")
    return max(0, int(value))


def _text(value: Any, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError(f"{what} is {type(value).__name__}, not a string")
    return value


def _deltas(obj: dict[str, Any]) -> list[Delta]:
    """The deltas of one event; a wrong type anywhere raises TypeError/ValueError."""
    choices = obj.get("choices")
    if type(choices) is list and len(choices) == 1 and not obj.get("usage"):
        # the usual event mid-answer, a choice whose delta is a piece of text and nothing else:
        # what the full reading below makes of it, with a fraction of its checks
        choice = choices[0]
        if type(choice) is dict and not choice.get("finish_reason"):
            delta = choice.get("delta")
            if type(delta) is dict and len(delta) == 1:
                content = delta.get("content")
                if type(content) is str:
                    return [TextDelta(content)] if content else []
    out: list[Delta] = []
    if choices:
        if not isinstance(choices, list) or not isinstance(choices[0], dict):
            raise TypeError("choices is not a list of objects")
        choice = choices[0]
        delta = choice.get("delta") or choice.get("message") or {}
        if not isinstance(delta, dict):
            raise TypeError(f"delta is {type(delta).__name__}, not an object")
        reasoning = _text(delta.get("reasoning_content") or delta.get("reasoning"), "reasoning")
        if reasoning:
            out.append(ReasoningDelta(reasoning))
        content = _text(delta.get("content"), "content")
        if content:
            out.append(TextDelta(content))
        calls = delta.get("tool_calls")
        if calls:
            if not isinstance(calls, list):
                raise TypeError("tool_calls is not a list")
            for pos, tc in enumerate(calls):
                if not isinstance(tc, dict):
                    raise TypeError("a tool call is not an object")
                fn = tc.get("function") or {}
                if not isinstance(fn, dict):
                    raise TypeError("a tool call's function is not an object")
                index = tc.get("index", pos)
                if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < 128:
                    raise ValueError(f"tool call index {index!r} is not an integer in 0..127")
                call_id = tc.get("id")
                out.append(
                    ToolCallDelta(
                        index,
                        _text(call_id, "tool call id") or None,
                        _text(fn.get("name"), "tool name") or None,
                        _text(fn.get("arguments"), "tool arguments"),
                    )
                )
        reason = choice.get("finish_reason")
        if reason:
            out.append(FinishDelta(_text(reason, "finish_reason")))
    usage = obj.get("usage")
    if usage:
        if not isinstance(usage, dict):
            raise TypeError("usage is not an object")
        details = usage.get("completion_tokens_details") or {}
        if not isinstance(details, dict):
            raise TypeError("completion_tokens_details is not an object")
        out.append(
            UsageDelta(
                TokenUsage(
                    _count(usage.get("prompt_tokens"), "prompt_tokens"),
                    _count(usage.get("completion_tokens"), "completion_tokens"),
                    _count(details.get("reasoning_tokens"), "reasoning_tokens"),
                )
            )
        )
    return out


@dataclass
class Completion:
    """A non-streamed answer."""

    text: str
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    usage: TokenUsage = field(default_factory=TokenUsage)


MAX_CONNECTIONS = 1000
"""Requests one provider has in flight at once, by default: a server's concurrent turns share
its project's provider, and httpx2's own default (100) made the 101st concurrent turn wait for
a connection, and fail after ``connect_timeout`` when the streams ahead of it ran longer (the
OpenAI Python SDK's default is the same 1000)."""

MAX_KEEPALIVE = 100
"""Idle connections kept for the next requests, by default (httpx2's is 20: under 100
concurrent turns, most requests opened a new connection, a TLS handshake each on a hosted
API)."""


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a whole number of at least 1, not {value!r}")
    return value


class HTTPEndpoint:
    """What the chat provider and the embedder share: capped reads and classified errors of
    one OpenAI-compatible server (``base_url``, ``model``)."""

    base_url: str
    model: str
    max_connections: int = MAX_CONNECTIONS
    _client: httpx2.AsyncClient

    async def _read_capped(self, response: httpx2.Response, limit: int) -> tuple[bytes, bool]:
        """At most ``limit`` bytes of the (decompressed) body, and whether there was more.
        ``aread()`` would hold all of it: a gzip bomb of a few kilobytes inflates to gigabytes."""
        parts: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            parts.append(chunk)
            size += len(chunk)
            if size > limit:
                await response.aclose()
                return b"".join(parts)[:limit], True
        return b"".join(parts), False

    async def _http_error(self, response: httpx2.Response) -> ProviderError:
        # an error body is only read for its message: a small cap, whatever the server sends
        try:
            raw, _ = await self._read_capped(response, _ERROR_BODY_LIMIT)
            body = raw.decode("utf-8", errors="replace")
        except httpx2.HTTPError:
            body = ""
        message = body[:500]
        try:
            parsed = json.loads(body)
            err = parsed.get("error") if isinstance(parsed, dict) else None
            if isinstance(err, dict) and err.get("message"):
                message = str(err["message"])
            elif isinstance(err, str):
                message = err
        except ValueError:
            pass
        status = response.status_code
        hint = ""
        if status in (401, 403):
            hint = " (check MEMORA_API_KEY / OPENAI_API_KEY)"
        elif status == 404:
            hint = f" (check the base URL {self.base_url} and the model {self.model!r})"
        return ProviderError(
            f"HTTP {status} from {self.base_url}: {message}{hint}",
            category="unknown",
            retryable=status in _RETRYABLE_STATUS,
            retry_after=_retry_after(response.headers),
            status=status,
        )

    def _transport_error(self, exc: Exception) -> ProviderError:
        if isinstance(exc, httpx2.PoolTimeout):
            return ProviderError(
                f"no free connection to {self.base_url} within {self._client.timeout.pool:g} s: "
                f"all {self.max_connections} are in use (the provider's max_connections)",
                category="timeout",
                retryable=True,
            )
        if isinstance(exc, httpx2.TimeoutException):
            kind = "connect" if isinstance(exc, httpx2.ConnectTimeout) else "stall"
            what = "connecting to" if kind == "connect" else "waiting for tokens from"
            return ProviderError(
                f"timed out {what} {self.base_url}", category="timeout", retryable=True
            )
        return ProviderError(
            f"connection to {self.base_url} failed: {type(exc).__name__}: {exc}",
            category="connection",
            retryable=True,
        )


def _refuses_schema(exc: ProviderError) -> bool:
    """An HTTP 400/422 whose message is about the structured-output request (a server that
    has no ``response_format`` or no ``json_schema`` in it), before anything was streamed."""
    text = exc.message.lower()
    return exc.status in (400, 422) and any(
        word in text for word in ("response_format", "json_schema", "response format", "schema")
    )


def default_base_url(base_url: str | None) -> str:
    """``base_url``, else ``MEMORA_BASE_URL``, else OpenAI's; without a trailing slash."""
    return (base_url or os.environ.get("MEMORA_BASE_URL") or "https://api.openai.com/v1").rstrip(
        "/"
    )


def endpoint_url(client: httpx2.AsyncClient, path: str) -> httpx2.URL:
    """``path`` under ``client``'s base URL, as the client itself would merge it per request."""
    return client.build_request("GET", path).url


def endpoint_client(
    base_url: str,
    *,
    api_key_env: str | None,
    headers: Mapping[str, str] | None,
    accept: str,
    api_key_name: str | None = None,
    connect_timeout: float,
    read_timeout: float,
    http2: bool = False,
    transport: httpx2.AsyncBaseTransport | None = None,
    max_connections: int = MAX_CONNECTIONS,
    max_keepalive_connections: int = MAX_KEEPALIVE,
) -> httpx2.AsyncClient:
    """An httpx2 client for ``base_url``: the key from the environment (``api_key_env``), else
    the key the user stored as ``api_key_name`` (``memora keys set``; a user-side option only),
    else ``MEMORA_API_KEY`` then ``OPENAI_API_KEY``; no proxy from the environment, an
    uncompressed answer (a compressed one could expand without bound); ``read_timeout`` is the
    longest silence while reading an answer.  ``max_connections``: the most requests in flight
    at once (a server's concurrent turns share one provider); ``max_keepalive_connections``:
    the idle connections kept for the next requests."""
    if api_key_env:
        key = os.environ.get(api_key_env)
    elif api_key_name:
        key = stored_key(api_key_name)
        if key is None:
            raise ProviderError(
                f"no key {api_key_name!r} is stored; store it with `memora keys set "
                f"{api_key_name}`",
                category="unknown",
                retryable=False,
            )
    else:
        key = os.environ.get("MEMORA_API_KEY") or os.environ.get("OPENAI_API_KEY")
    hdrs = {"Content-Type": "application/json", "Accept": accept, "Accept-Encoding": "identity"}
    if key:
        hdrs["Authorization"] = f"Bearer {key}"
    hdrs.update(headers or {})
    limits = {
        "max_connections": _positive("max_connections", max_connections),
        "max_keepalive_connections": _positive(
            "max_keepalive_connections", max_keepalive_connections
        ),
    }
    return httpx2.AsyncClient(
        base_url=base_url,
        headers=hdrs,
        timeout=httpx2.Timeout(
            connect=connect_timeout, read=read_timeout, write=30.0, pool=connect_timeout
        ),
        http2=http2,
        # a host's transport as it is; else the provider's pools, on asyncio's own network
        # with the cheaper idle check (see .pool and .net)
        transport=transport or pool.transport_for(http2=http2, **limits),
        trust_env=False,
        limits=httpx2.Limits(**limits),
    )


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
        self.total_timeout = float(total_timeout)
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
        try:
            response = await self._client.send(
                self._client.build_request("GET", "/models"), stream=True
            )
        except httpx2.HTTPError as exc:
            raise self._transport_error(exc) from exc
        try:
            if response.status_code >= 400:
                raise await self._http_error(response)
            raw, cut = await self._read_capped(response, 4 * 1024 * 1024)
        finally:
            await response.aclose()
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
        produced = False
        finished = False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.total_timeout
        try:
            async with self._client.stream("POST", self._chat_url, content=body) as response:
                if response.status_code >= 400:
                    raise await self._http_error(response)
                self._check_stream_response(response)
                decoder = SSEDecoder()
                done = False
                drained = 0
                received = 0
                chunks = response.aiter_bytes()
                while True:
                    try:
                        if not done and finished:
                            # the model finished (finish_reason); the usage event and [DONE]
                            # follow at once from a well-behaved server, and a server that
                            # sends neither and keeps the body open must not turn a finished
                            # answer into a stall
                            try:
                                async with asyncio.timeout(_AFTER_FINISH_SECONDS):
                                    chunk = await anext(chunks)
                            except httpx2.TimeoutException:  # the read timeout came first
                                break
                        elif not done:
                            chunk = await anext(chunks)
                        else:
                            # Read the rest of the body (the chunked terminator, usually a few
                            # bytes) so httpx2 returns the connection to the pool: leaving at
                            # [DONE] closes it, and the next request pays a new connection (a
                            # TLS handshake against a real API).  A server that keeps sending,
                            # or keeps the body open, after [DONE] loses its connection instead.
                            async with asyncio.timeout(_DRAIN_SECONDS):
                                chunk = await anext(chunks)
                            drained += len(chunk)
                            if drained > _DRAIN_LIMIT:
                                break
                            continue
                    except (StopAsyncIteration, TimeoutError):
                        break
                    received += len(chunk)
                    if received > self.max_response_bytes:
                        raise ProviderError(
                            f"the answer from {self.base_url} passed "
                            f"{self.max_response_bytes} bytes; stopped reading",
                            category="unknown",
                        )
                    # a server that drips bytes just often enough to beat the read timeout
                    # still ends here (checked per chunk: a clock read, not a timer)
                    if loop.time() > deadline:
                        raise ProviderError(
                            f"the answer from {self.base_url} took longer than "
                            f"{self.total_timeout:g} s",
                            category="timeout",
                        )
                    # the events of one read go on together: adjacent pieces of text (or of
                    # one call's arguments) as one delta, so a fast server's burst of tokens
                    # costs the loop one chunk, not one per token; an error event still comes
                    # after what preceded it
                    batch: list[Delta] = []
                    failure: ProviderError | None = None
                    try:
                        for data in decoder.feed(chunk):
                            if data == "[DONE]":
                                done = True
                                break
                            batch.extend(self._translate(data))
                    except ProviderError as exc:
                        failure = exc
                    for delta in coalesce(batch) if len(batch) > 1 else batch:
                        produced = True
                        if delta.kind == "finish":
                            finished = True
                        yield delta
                    if failure is not None:
                        raise failure
                if not done:
                    for data in decoder.flush():
                        if data != "[DONE]":
                            for delta in self._translate(data):
                                produced = True
                                finished = finished or delta.kind == "finish"
                                yield delta
                if not finished:
                    raise ProviderError(
                        f"the stream from {self.base_url} ended before the model finished",
                        category="connection",
                        retryable=not produced,
                    )
        except ProviderError as exc:
            exc.retryable = exc.retryable and not produced
            raise
        except httpx2.HTTPError as exc:
            err = self._transport_error(exc)
            err.retryable = err.retryable and not produced
            raise err from exc
        except SSELineTooLong as exc:
            raise ProviderError(f"{self.base_url} sent {exc}", category="unknown") from exc
        except (asyncio.CancelledError, GeneratorExit):
            raise
        except Exception as exc:  # a bug on either side must not escape as a raw exception
            raise ProviderError(
                f"unexpected failure reading {self.base_url}: {type(exc).__name__}: {exc}",
                category="unknown",
            ) from exc

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
            return _deltas(obj)
        except (AttributeError, TypeError, ValueError, KeyError, IndexError) as exc:
            raise ProviderError(
                f"{self.base_url} sent an event of the wrong shape ({exc}): {data[:200]!r}",
                category="unknown",
            ) from exc

    async def complete(self, request: LLMRequest) -> Completion:
        """A non-streamed request."""
        body = self.encode(request, stream=False)
        try:
            async with self._client.stream("POST", self._chat_url, content=body) as response:
                if response.status_code >= 400:
                    raise await self._http_error(response)
                raw, more = await self._read_capped(response, self.max_response_bytes)
        except httpx2.HTTPError as exc:
            raise self._transport_error(exc) from exc
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
