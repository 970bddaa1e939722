"""The chunk stream of ``agent.chat()``: one tagged union, discriminated by ``type``.

Every chunk may carry ``round_id`` so a host can group what it shows and persists.  Chunks are
pydantic models so they serialise to JSON (``chunk.model_dump_json()``) and parse back with
:data:`chunk_adapter` (``chunk_adapter.validate_json(line)``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

__all__ = [
    "AbortedChunk",
    "AgentChunk",
    "ApprovalPendingChunk",
    "DoneChunk",
    "ErrorChunk",
    "MeetingTurnChunk",
    "NarrateChunk",
    "OutputPartialChunk",
    "PausedChunk",
    "PlanItemBoundaryChunk",
    "QuestionPendingChunk",
    "QuestionSpec",
    "RetryChunk",
    "SelfReviewChunk",
    "StepBoundaryChunk",
    "TextChunk",
    "ThinkingChunk",
    "ThoughtChunk",
    "ToolPendingChunk",
    "ToolProgressChunk",
    "ToolResultChunk",
    "ToolStartChunk",
    "Usage",
    "chunk_adapter",
]


# defer_build: each chunk class builds its validator the first time it is used, not when memora
# is imported (18 classes and the union cost ~100 ms of start-up otherwise)
class _Chunk(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    round_id: str | None = None
    """The round (one user question and its answer) this chunk belongs to."""


class Usage(BaseModel):
    """Token usage, summed over every LLM call of a turn."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    llm_calls: int = 0

    def add(self, other: Usage) -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.reasoning_tokens += other.reasoning_tokens
        self.llm_calls += other.llm_calls


class ThinkingChunk(_Chunk):
    """Progress phase of the kernel (not model output)."""

    type: Literal["thinking"] = "thinking"
    phase: Literal["assembling", "processing", "archiving", "llm_calling"]


class TextChunk(_Chunk):
    """Answer text, streamed.  ``stage="self_review"`` marks the final self-review pass;
    ``stage="meeting"`` a team member's contribution to a meeting, ``speaker`` naming the
    member (the chair's summary is ``stage="answer"`` with its ``speaker``)."""

    type: Literal["text"] = "text"
    content: str
    stage: Literal["answer", "self_review", "meeting"] = "answer"
    speaker: str | None = None


_new = object.__new__
_set = object.__setattr__
_TEXT_SET = frozenset({"content", "stage", "round_id"})
_SPOKEN_SET = frozenset({"content", "stage", "round_id", "speaker"})


def text_chunk(
    content: str,
    stage: Literal["answer", "self_review", "meeting"],
    round_id: str | None,
    speaker: str | None = None,
) -> TextChunk:
    """``TextChunk(content=..., stage=..., round_id=..., speaker=...)`` for the turn engine,
    once per streamed token: the stage and round are its own, and ``content`` is the provider's
    text already cleaned, so checking them again was most of a chunk's cost (2.7 -> 1.5 µs).
    Built as pydantic's ``model_construct`` builds a model, without its per-field loop; the
    chunk equals the validated one in every respect (tests/core/test_text_chunk.py).  Anything
    but a ``str`` as ``content`` goes through validation (and fails there)."""
    if type(content) is not str:
        if speaker is None:
            return TextChunk(content=content, stage=stage, round_id=round_id)
        return TextChunk(content=content, stage=stage, round_id=round_id, speaker=speaker)
    chunk = _new(TextChunk)
    _set(
        chunk,
        "__dict__",
        {
            "round_id": round_id,
            "type": "text",
            "content": content,
            "stage": stage,
            "speaker": speaker,
        },
    )
    _set(chunk, "__pydantic_fields_set__", set(_TEXT_SET if speaker is None else _SPOKEN_SET))
    _set(chunk, "__pydantic_extra__", None)
    _set(chunk, "__pydantic_private__", None)
    return chunk


class ThoughtChunk(_Chunk):
    """Model reasoning (``reasoning_content``): shown folded, never stored as answer or memory."""

    type: Literal["thought"] = "thought"
    content: str
    step_index: int = 0


class ToolPendingChunk(_Chunk):
    """A tool call is being generated: its name is known, its arguments are still streaming."""

    type: Literal["tool_pending"] = "tool_pending"
    tool_call_id: str | None = None
    name: str


class ToolStartChunk(_Chunk):
    """The runtime decided to execute a tool call with exactly these arguments."""

    type: Literal["tool_start"] = "tool_start"
    tool_call_id: str
    name: str
    args: dict[str, Any] = Field(default_factory=dict)
    step_index: int = 0


class ToolProgressChunk(_Chunk):
    """Output of a long-running tool (a command, a fetch) while it runs."""

    type: Literal["tool_progress"] = "tool_progress"
    tool_call_id: str
    name: str
    content: str


class ToolResultChunk(_Chunk):
    """A tool call's result.  ``blocked`` means a policy refused it and it never ran."""

    type: Literal["tool_result"] = "tool_result"
    tool_call_id: str
    name: str
    ok: bool
    summary: str = ""
    blocked: bool = False
    error_code: str | None = None


class NarrateChunk(_Chunk):
    """Text the model wrote before calling tools ("let me read the files").

    ``withdrawn`` is the suffix of it that had already been streamed as ``text`` and must be taken
    back by the host.
    """

    type: Literal["narrate"] = "narrate"
    content: str
    withdrawn: str | None = None


class AbortedChunk(_Chunk):
    type: Literal["aborted"] = "aborted"
    reason: str
    stop_reason: Literal["user", "timeout", "interrupted", "connection"]
    usage: Usage | None = None


class ErrorChunk(_Chunk):
    """An error as data: the iterator never raises."""

    type: Literal["error"] = "error"
    message: str
    category: Literal["connection", "timeout", "unknown"] = "unknown"
    code: str | None = None


class RetryChunk(_Chunk):
    """A transient LLM failure is being retried after ``delay_ms``."""

    type: Literal["retry"] = "retry"
    attempt: int
    max_attempts: int
    delay_ms: int
    error: str


class PausedChunk(_Chunk):
    """The turn is paused (waiting for an answer or an approval)."""

    type: Literal["paused"] = "paused"


class QuestionSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    slot: str = "ask"
    """The answer's key (``ask`` unless the model named it; ``ask_2``... for more questions)."""
    question: str
    options: list[str] | None = None
    allow_custom: bool = False
    """Whether an answer outside ``options`` is accepted (the seed's default: no)."""


class QuestionPendingChunk(_Chunk):
    """``ask_user`` asked; answer with ``agent.answer_question`` then ``continue_after_pause``."""

    type: Literal["question_pending"] = "question_pending"
    questions: list[QuestionSpec]


class ApprovalPendingChunk(_Chunk):
    """A pre-execution check asked for approval of exactly this call."""

    type: Literal["approval_pending"] = "approval_pending"
    tool_call_id: str
    name: str
    args: dict[str, Any] = Field(default_factory=dict)
    reason: str = ""


class SelfReviewChunk(_Chunk):
    """The single final self-review pass is starting."""

    type: Literal["self_review"] = "self_review"


class PlanItemBoundaryChunk(_Chunk):
    """The active task-table item advanced (emitted at iteration start)."""

    type: Literal["plan_item_boundary"] = "plan_item_boundary"
    plan_item_id: str
    title: str


class StepBoundaryChunk(_Chunk):
    """One LLM iteration ended: the host's moment to persist."""

    type: Literal["step_boundary"] = "step_boundary"
    step_index: int = 0


class DoneChunk(_Chunk):
    """The turn finished; ``usage`` sums every LLM call of the turn; ``answer`` is the final
    answer (the self-review's rewrite when it changed it)."""

    type: Literal["done"] = "done"
    usage: Usage | None = None
    answer: str | None = None
    output: Any = None
    """A typed turn's validated result, as JSON data (``agent.run(..., output_type=T)``
    returns it as a ``T``); ``None`` for a text turn."""
    saved: bool = True
    """``False`` when the round could not be written to the session's log (the answer above is
    complete, but a later turn, ``memora run -c`` or another worker will not see this round);
    the reason is logged and emitted as an ``ArchiveFailed`` event with ``stage="round"``."""


class OutputPartialChunk(_Chunk):
    """A typed turn's result as far as the model has written it (JSON data, partially
    validated): a UI can fill a form while it grows; ``done.output`` is the checked one."""

    type: Literal["output_partial"] = "output_partial"
    output: Any = None


class MeetingTurnChunk(_Chunk):
    """In a meeting, ``member`` speaks next (``role="chair"`` for the summary)."""

    type: Literal["meeting_turn"] = "meeting_turn"
    member: str
    role: Literal["member", "chair"] = "member"


AgentChunk = Annotated[
    ThinkingChunk
    | TextChunk
    | ThoughtChunk
    | ToolPendingChunk
    | ToolStartChunk
    | ToolProgressChunk
    | ToolResultChunk
    | NarrateChunk
    | AbortedChunk
    | ErrorChunk
    | RetryChunk
    | PausedChunk
    | QuestionPendingChunk
    | ApprovalPendingChunk
    | SelfReviewChunk
    | PlanItemBoundaryChunk
    | StepBoundaryChunk
    | MeetingTurnChunk
    | OutputPartialChunk
    | DoneChunk,
    Field(discriminator="type"),
]
"""Any chunk of the stream."""

_adapter: TypeAdapter[AgentChunk] | None = None


def __getattr__(name: str) -> Any:
    # ``chunk_adapter`` — validate or parse chunks: ``chunk_adapter.validate_json(line)`` —
    # is built on first use
    global _adapter
    if name == "chunk_adapter":
        if _adapter is None:
            _adapter = TypeAdapter(AgentChunk)
        return _adapter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if TYPE_CHECKING:
    chunk_adapter: TypeAdapter[AgentChunk]
    """Validate or parse chunks: ``chunk_adapter.validate_json(line)``."""
