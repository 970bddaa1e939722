"""AG-UI: memora's turns as Agent User Interaction Protocol events (``ag-ui-protocol``).

``POST /v1/projects/{project}/ag-ui`` takes a ``RunAgentInput``: ``threadId`` is the memora
session (created on first use), the last user message is the turn's text — memora keeps the
conversation itself, so earlier messages the client sends are not replayed.  An approval or a
question ends the run with an ``interrupt`` outcome; the next run answers it with ``resume``
entries (``payload``: ``{"decision": "approve" | "deny", "args": {...}, "reason": "..."}`` for an
approval, ``{"slot": "answer", ...}`` for questions; ``status: "cancelled"`` denies).
``forwardedProps.output_schema`` (a JSON schema) makes the run typed: its result is the
validated output.  A run whose round could not be written to the session's log (REST's
``done.saved`` false) sends a ``CUSTOM`` event ``memora.unsaved`` before ``RUN_FINISHED``.

The turn runs in the hub like any other (one per session, a client that goes away does not stop
it); only the encoding differs.  Every event is built with the package's own models.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    Interrupt,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from memora import OutputSpec
from memora.chunks import (
    AbortedChunk,
    AgentChunk,
    ApprovalPendingChunk,
    DoneChunk,
    ErrorChunk,
    PausedChunk,
    QuestionPendingChunk,
    QuestionSpec,
    TextChunk,
    ThoughtChunk,
    ToolResultChunk,
    ToolStartChunk,
)
from memora.errors import ErrorCode, InvalidInputError

from .hub import Hub
from .turns import TurnLog

__all__ = ["AguiTranslator", "encode", "run"]

QUESTIONS_PREFIX = "questions:"
UNSAVED_EVENT = "memora.unsaved"
"""The ``CUSTOM`` event before ``RUN_FINISHED`` when the round is not in the session's log."""


def _last_user_text(run_input: RunAgentInput) -> str:
    last = next(
        (m for m in reversed(run_input.messages) if getattr(m, "role", None) == "user"), None
    )
    content = getattr(last, "content", None)
    if isinstance(content, list):
        content = "\n".join(
            str(getattr(p, "text", "")) for p in content if getattr(p, "text", None)
        )
    if not isinstance(content, str) or not content.strip():
        raise InvalidInputError("RunAgentInput messages: the last user message has no text")
    return content


def _typed(run_input: RunAgentInput) -> OutputSpec | None:
    """A run asking for a typed result: ``forwardedProps.output_schema``, a JSON schema."""
    props = run_input.forwarded_props
    schema = props.get("output_schema") if isinstance(props, dict) else None
    if schema is None:
        return None
    if not isinstance(schema, dict):
        raise InvalidInputError("forwardedProps.output_schema must be a JSON schema (an object)")
    return OutputSpec.from_json_schema(schema)


async def run(
    hub: Hub, project: str, run_input: RunAgentInput, *, scope: str | None = None
) -> tuple[TurnLog, AguiTranslator]:
    """Start the run's turn (or answer the interrupt and continue it) in the hub, as the user
    ``scope`` (``forwardedProps.user``, checked by the route)."""
    session = run_input.thread_id
    if run_input.resume:
        entry = run_input.resume[0]
        payload = entry.payload if isinstance(entry.payload, dict) else {}
        if entry.interrupt_id.startswith(QUESTIONS_PREFIX):
            answers = {str(k): str(v) for k, v in payload.items()}
            log = await hub.continue_turn(project, session, answers=answers, scope=scope)
        elif entry.status == "cancelled" or payload.get("decision") == "deny":
            reason = str(payload.get("reason") or "denied")
            log = await hub.continue_turn(
                project, session, deny=(entry.interrupt_id, reason), scope=scope
            )
        else:
            args = payload.get("args")
            log = await hub.continue_turn(
                project,
                session,
                approve=(entry.interrupt_id, args if isinstance(args, dict) else None),
                scope=scope,
            )
    else:
        log = await hub.start_turn(
            project,
            session,
            _last_user_text(run_input),
            output=_typed(run_input),
            create=True,
            scope=scope,
        )
    return log, AguiTranslator(run_input.thread_id, run_input.run_id)


class AguiTranslator:
    """memora's typed chunks -> AG-UI events, keeping the open text or reasoning message and the
    pending interrupts between chunks."""

    def __init__(self, thread_id: str, run_id: str) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self._n = 0
        self._text: str | None = None
        self._reasoning: str | None = None
        self._interrupts: list[Interrupt] = []
        self._announced: set[str] = set()

    def _id(self, kind: str) -> str:
        self._n += 1
        return f"{self.run_id}-{kind}{self._n}"

    def start(self) -> BaseEvent:
        return RunStartedEvent(
            thread_id=self.thread_id, run_id=self.run_id, timestamp=int(time.time() * 1000)
        )

    def _close_text(self) -> Iterator[BaseEvent]:
        if self._text is not None:
            yield TextMessageEndEvent(message_id=self._text)
            self._text = None

    def _close_reasoning(self) -> Iterator[BaseEvent]:
        if self._reasoning is not None:
            yield ReasoningMessageEndEvent(message_id=self._reasoning)
            yield ReasoningEndEvent(message_id=self._reasoning)
            self._reasoning = None

    def _close(self) -> Iterator[BaseEvent]:
        yield from self._close_reasoning()
        yield from self._close_text()

    def _tool_call(self, call_id: str, name: str, args: Any) -> Iterator[BaseEvent]:
        if call_id in self._announced:
            return
        self._announced.add(call_id)
        yield from self._close()
        yield ToolCallStartEvent(tool_call_id=call_id, tool_call_name=name)
        yield ToolCallArgsEvent(tool_call_id=call_id, delta=json.dumps(args, ensure_ascii=False))
        yield ToolCallEndEvent(tool_call_id=call_id)

    def translate(self, chunk: AgentChunk) -> Iterator[BaseEvent]:
        """The AG-UI events for one memora chunk (none for chunks AG-UI has no event for)."""
        match chunk:
            case TextChunk(content=content, speaker=speaker) if content:
                yield from self._close_reasoning()
                if self._text is None:
                    self._text = self._id("m")
                    yield TextMessageStartEvent(message_id=self._text, name=speaker)
                yield TextMessageContentEvent(message_id=self._text, delta=content)
            case ThoughtChunk(content=content) if content:
                yield from self._close_text()
                if self._reasoning is None:
                    self._reasoning = self._id("r")
                    yield ReasoningStartEvent(message_id=self._reasoning)
                    yield ReasoningMessageStartEvent(message_id=self._reasoning, role="reasoning")
                yield ReasoningMessageContentEvent(message_id=self._reasoning, delta=content)
            case ToolStartChunk(tool_call_id=call_id, name=name, args=args):
                yield from self._tool_call(call_id, name, args)
            case ToolResultChunk(tool_call_id=call_id, name=name, ok=ok, summary=summary):
                yield from self._tool_call(call_id, name, {})
                yield ToolCallResultEvent(
                    message_id=self._id("t"),
                    tool_call_id=call_id,
                    content=summary or ("done" if ok else "failed"),
                    role="tool",
                )
            case ApprovalPendingChunk(tool_call_id=call_id, name=name, args=args, reason=reason):
                yield from self._tool_call(call_id, name, args)
                self._interrupts.append(
                    Interrupt(
                        id=call_id,
                        reason="approval",
                        message=f"run {name}? {reason}".strip(),
                        tool_call_id=call_id,
                        response_schema=_APPROVAL_SCHEMA,
                    )
                )
            case QuestionPendingChunk(questions=questions):
                self._interrupts.append(
                    Interrupt(
                        id=QUESTIONS_PREFIX + self.run_id,
                        reason="question",
                        message="\n".join(q.question for q in questions),
                        response_schema=_questions_schema(questions),
                    )
                )
            case PausedChunk():
                yield from self._finish(RunFinishedInterruptOutcome(interrupts=self._interrupts))
            case DoneChunk(answer=answer, output=output, saved=saved):
                # a typed run's result is its validated output (JSON data), else the answer
                result = output if output is not None else answer
                if not saved:  # the answer is whole, but the thread's log does not hold it
                    yield from self._close()
                    yield CustomEvent(name=UNSAVED_EVENT, value={"saved": False})
                yield from self._finish(RunFinishedSuccessOutcome(), result=result)
            case AbortedChunk():
                yield from self._finish(RunFinishedCancelledOutcome())
            case ErrorChunk(message=message, code=code):
                yield from self._close()
                yield RunErrorEvent(message=message, code=code or ErrorCode.TURN_FAILED.value)

    def _finish(
        self,
        outcome: RunFinishedSuccessOutcome
        | RunFinishedInterruptOutcome
        | RunFinishedCancelledOutcome,
        result: Any = None,
    ) -> Iterator[BaseEvent]:
        yield from self._close()
        yield RunFinishedEvent(
            thread_id=self.thread_id, run_id=self.run_id, result=result, outcome=outcome
        )


_APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {"enum": ["approve", "deny"]},
        "args": {"type": "object", "description": "edited arguments (approve only)"},
        "reason": {"type": "string"},
    },
    "required": ["decision"],
}


def _questions_schema(questions: list[QuestionSpec]) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for q in questions:
        prop: dict[str, Any] = {"type": "string", "description": q.question}
        if q.options and not q.allow_custom:
            prop["enum"] = list(q.options)
        properties[q.slot] = prop
    return {"type": "object", "properties": properties, "required": sorted(properties)}


async def encode(log: TurnLog, translator: AguiTranslator) -> AsyncIterator[bytes]:
    """The run as ``text/event-stream`` (``data:`` lines of camelCase JSON, as AG-UI's encoder)."""
    yield _sse(translator.start())
    async for chunk in log.chunks(0):
        for event in translator.translate(chunk):
            yield _sse(event)


def _sse(event: BaseEvent) -> bytes:
    return f"data: {event.model_dump_json(by_alias=True, exclude_none=True)}\n\n".encode()
