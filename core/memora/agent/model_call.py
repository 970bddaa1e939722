"""One streaming LLM call of a turn: its request, its deltas turned into chunks, its failures.

:class:`ModelCall` is what the turn's ``model``, ``review`` and ``meeting`` steps ask of the
model (:mod:`memora.agent.loop`): the request built from the turn's window, prompt and tools
(:meth:`ModelCall.request`), the stream read delta by delta into chunks (:meth:`ModelCall.run`),
a provider's failure or a stall turned into the transition that ends the turn, and what the
call produced (:class:`ModelOutput`) kept for the step that asked.

The per-token path — a text delta in, a ``text`` chunk out — stays in one loop on purpose: each
helper call there would be paid per delta; ``bench/bench_loop.py`` measures it (first text bytes
to the first chunk out, ~15 µs p50).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Literal

from ..chunks import (
    AgentChunk,
    ErrorChunk,
    OutputPartialChunk,
    RetryChunk,
    ThoughtChunk,
    ToolPendingChunk,
    text_chunk,
)
from ..llm.assemble import ToolCallAssembler
from ..llm.provider import ProviderError
from ..llm.retry import RetryNotice, RetryPolicy, stream_with_retries
from ..llm.types import LLMRequest, Message, ToolCallDelta, clean_delta, clean_text
from .output import OutputSpec
from .timing import StallWatch
from .transitions import Goto, Stop, Transition

if TYPE_CHECKING:
    from .loop import TurnEngine

__all__ = ["ModelCall", "ModelOutput", "PartialProgress", "partial_chunk"]

Stage = Literal["answer", "self_review", "meeting"]


class ModelOutput:
    """What one LLM call produced."""

    __slots__ = ("calls", "finish_reason", "reasoning", "streamed", "text")

    def __init__(self) -> None:
        self.text = ""
        self.streamed = ""
        self.reasoning = ""
        self.calls: list[Any] = []
        self.finish_reason: str | None = None


_PARTIAL_EVERY = 24
"""A typed answer's partial result is parsed again once it has grown by this many characters
(or a value closed): parsing the whole prefix at every token would be quadratic."""


class PartialProgress:
    """How far one model call's typed answer has been read for partial results: its length
    now, its length at the last parse, and what that parse gave.  The call's own — never the
    host's :class:`OutputSpec`, which one host may pass to many Agents and turns at once."""

    __slots__ = ("parsed_at", "size", "value")

    def __init__(self) -> None:
        self.size = 0
        self.parsed_at = 0
        self.value: Any = None


def partial_chunk(
    spec: OutputSpec, progress: PartialProgress, parts: list[str], round_id: str
) -> OutputPartialChunk | None:
    """The ``output_partial`` chunk for the answer's text so far, when it has grown enough
    since the last one and says something new; ``None`` otherwise."""
    last = parts[-1]
    size = progress.size + len(last)  # the answer's length so far, kept instead of summed again
    progress.size = size
    if size - progress.parsed_at < _PARTIAL_EVERY and not any(c in last for c in ",}]"):
        return None
    value = spec.partial("".join(parts))
    if value is None or value == progress.value:
        progress.parsed_at = size
        return None
    progress.parsed_at, progress.value = size, value
    return OutputPartialChunk(output=value, round_id=round_id)


class ModelCall:
    """One streaming LLM call of ``engine``'s turn (see the module docstring).  ``messages``
    replaces the conversation (a meeting member's own view of it); ``speaker`` names the member
    who speaks."""

    def __init__(
        self,
        engine: TurnEngine,
        out: ModelOutput,
        *,
        tools: bool,
        stage: Stage,
        messages: list[Message] | None = None,
        speaker: str | None = None,
    ) -> None:
        self.engine = engine
        self.out = out
        self.tools = tools
        self.stage = stage
        self.messages = messages
        self.speaker = speaker
        deps = engine.deps
        self.spec = deps.output if stage == "answer" else None
        self.asks_exhausted = engine.record.questions_asked >= deps.strategy.ask_limit

    def request(self) -> LLMRequest:
        """The request: the window's messages under the turn's prompt (or the meeting's own),
        the tools the model sees, a typed turn's result format or final-result tool."""
        engine, tools, spec = self.engine, self.tools, self.spec
        deps, record = engine.deps, engine.record
        if self.messages is not None:
            request_messages = self.messages
        else:
            window = deps.window
            prompt = deps.prompts.system()
            if spec is not None:  # the result's shape, as the model must give it
                prompt = f"{prompt}\n\n{spec.instruction(tool=deps.output_tool and tools)}"
            # the tool schemas go with every request: the history gets what they leave, and
            # 10% stays free for the estimates' error (a local model's window is a hard limit)
            schemas = deps.exposure.spec_tokens(self.asks_exhausted) if tools else 0
            room = deps.window_tokens * 9 // 10 - schemas
            request_messages = window.wire(
                prompt,
                room,
                deps.output_reserve,
                deps.prompts.plan_section(),
                effective=deps.window_tokens,
                tools=schemas,
            )
            if not record.soft_limit_sent and window.near_soft_limit(
                prompt, deps.window_tokens, deps.output_reserve
            ):
                # still near the limit after trimming: ask the model to converge (the message
                # is appended to the list being sent)
                record.soft_limit_sent = True
                engine.append(Message.user(deps.messages.soft_limit_wrapup))
        request = LLMRequest(
            messages=request_messages,
            tools=deps.exposure.specs(self.asks_exhausted) if tools else [],
            temperature=deps.strategy.temperature,
            max_tokens=deps.max_tokens,
            history_key=deps.history_key if self.messages is None else None,
        )
        if spec is not None:
            if deps.output_tool and tools:
                request.tools = [*request.tools, spec.tool()]
            else:
                request.output = spec.format
        return request

    def _failed(self, exc: ProviderError, parts: list[str]) -> Transition:
        """What a provider's failure does to the turn: a stall ends it ``aborted(timeout)``;
        under ``errorHandling: degrade`` the answer so far is the answer; else an error."""
        engine, record = self.engine, self.engine.record
        record.note("error", category=exc.category, message=exc.message)
        if exc.category == "timeout":
            return engine.stalled()
        if engine.deps.strategy.error_handling == "degrade" and (record.answer or parts):
            # fall back to the answer so far: the turn ends here, no self-review
            engine.keep_partial(marker=False)
            record.note("degraded")
            return Goto("finish")
        engine.keep_partial()
        chunk = ErrorChunk(
            message=exc.message, category=exc.category, code=str(exc.code), round_id=record.round_id
        )
        return Stop("error", chunk)

    async def run(self) -> AsyncIterator[AgentChunk | Transition]:
        """The call: its chunks as they come, then — only when the turn cannot go on — the
        transition that ends it.  Kept as one loop on purpose (see the module docstring): the
        branches are the delta kinds, each a few lines."""
        engine, out, stage, speaker = self.engine, self.out, self.stage, self.speaker
        deps, record = engine.deps, engine.record
        rid = record.round_id
        request = self.request()
        # a typed answer written as text streams its result as it grows
        partial = self.spec if request.output is not None else None
        progress = PartialProgress()  # this call's, not the spec's
        provider = deps.review_provider if stage == "self_review" else deps.provider
        policy = (
            deps.retry_policy
            if deps.strategy.error_handling == "retry"
            else RetryPolicy(max_attempts=1)
        )
        assembler = ToolCallAssembler()
        parts = engine.partial_text = []
        engine.partial_stage = stage
        streamed: list[str] = []
        reasoning: list[str] = []
        step_index = record.iteration
        span = deps.tracer.start_span(
            "llm_call",
            {
                "round_id": rid,
                "iteration": step_index,
                "provider": provider.name,
                "model": getattr(provider, "model", None) or provider.name.split(":", 1)[-1],
                "stage": stage,
            },
        )
        used_in = used_out = 0
        loop = asyncio.get_running_loop()
        now = time.monotonic
        began = now()
        seen_tool = False
        err: BaseException | None = None
        try:
            async with asyncio.timeout(None) as deadline:
                watch = StallWatch(loop, deps.stall_timeout, deadline)
                try:
                    async for raw in stream_with_retries(provider, request, policy):
                        watch.last = now()
                        kind = raw.kind
                        if kind == "text":
                            # no lone surrogate enters the turn (clean_delta's check, inline:
                            # most text is ASCII, one flag read a token)
                            piece = raw.text  # type: ignore[union-attr]
                            if not piece.isascii():
                                piece = clean_text(piece)
                            parts.append(piece)
                            if not seen_tool:
                                streamed.append(piece)
                                yield text_chunk(piece, stage, rid, speaker)
                                if partial is not None:
                                    grown = partial_chunk(partial, progress, parts, rid)
                                    if grown is not None:
                                        yield grown
                            continue
                        delta = clean_delta(raw)  # no lone surrogate enters the turn
                        if kind == "reasoning":
                            thought = delta.text  # type: ignore[union-attr]
                            reasoning.append(thought)
                            yield ThoughtChunk(content=thought, step_index=step_index, round_id=rid)
                        elif kind == "tool_call":
                            seen_tool = True
                            fragment: ToolCallDelta = delta  # type: ignore[assignment]
                            announced = assembler.feed(fragment)
                            if announced:
                                yield ToolPendingChunk(
                                    tool_call_id=assembler.pending_id(fragment.index),
                                    name=announced,
                                    round_id=rid,
                                )
                        elif kind == "finish":
                            out.finish_reason = delta.reason  # type: ignore[union-attr]
                        elif kind == "usage":
                            u = delta.usage  # type: ignore[union-attr]
                            record.add_usage(u.input_tokens, u.output_tokens, u.reasoning_tokens)
                            used_in += u.input_tokens
                            used_out += u.output_tokens
                        elif kind == "retry":
                            notice: RetryNotice = delta  # type: ignore[assignment]
                            watch.last = now() + notice.delay
                            record.note("retry", attempt=notice.attempt, error=str(notice.error))
                            yield RetryChunk(
                                attempt=notice.attempt,
                                max_attempts=notice.max_attempts,
                                delay_ms=int(notice.delay * 1000),
                                error=notice.error.message,
                                round_id=rid,
                            )
                finally:
                    watch.close()
                    if stage == "answer" and streamed:
                        # once per call, not per delta (a str grown by += on an attribute is
                        # copied each time); here, so an interrupted call keeps its text too
                        record.answer += "".join(streamed)
        except TimeoutError as exc:
            err = exc
            record.note("error", category="timeout", message="LLM stalled")
            yield engine.stalled()
            return
        except ProviderError as exc:
            err = exc
            yield self._failed(exc, parts)
            return
        finally:
            span.set_attribute("input_tokens", used_in)
            span.set_attribute("output_tokens", used_out)
            if out.finish_reason:
                span.set_attribute("finish_reason", out.finish_reason)
            span.end(err)
        engine.partial_text = []
        record.add_usage(0, 0, 0, 1)
        # the turn's trace: each LLM call with its tokens and time (the page's trace view)
        record.note(
            "llm_call",
            step=step_index,
            stage=stage,
            input_tokens=used_in,
            output_tokens=used_out,
            ms=round((now() - began) * 1000),
            finish=out.finish_reason,
        )
        out.text = "".join(parts)
        out.streamed = "".join(streamed)
        out.reasoning = "".join(reasoning)
        out.calls = assembler.calls()
        if out.reasoning:
            record.note("thought", content=out.reasoning, step_index=step_index)
