from __future__ import annotations

import json
from typing import Any, get_args

import pytest

from memora import chunks
from memora.chunks import AgentChunk, Usage, chunk_adapter
from memora.errors import (
    RETRYABLE_TOOL_ERRORS,
    ErrorCode,
    MemoraError,
    ToolError,
    ToolErrorCode,
    is_retryable,
)


def test_tool_error_codes_ten_and_five_retryable() -> None:
    assert len(ToolErrorCode) == 10
    assert len(RETRYABLE_TOOL_ERRORS) == 5
    assert is_retryable("TIMEOUT") and is_retryable(ToolErrorCode.INVALID_ARGS)
    assert not is_retryable(ToolErrorCode.PATH_NOT_ALLOWED)
    assert not is_retryable("NO_SUCH_CODE")
    err = ToolError("FILE_NOT_FOUND", "no such file; use list_dir")
    assert err.retryable and str(err) == "FILE_NOT_FOUND: no such file; use list_dir"


def test_memora_error_has_code_message_context() -> None:
    err = MemoraError(ErrorCode.NOT_AVAILABLE, "nothing here", context={"available": ["a"]})
    assert err.code is ErrorCode.NOT_AVAILABLE
    assert err.to_dict() == {
        "code": "NOT_AVAILABLE",
        "message": "nothing here",
        "context": {"available": ["a"]},
    }
    with pytest.raises(ValueError):
        MemoraError("NOT_A_CODE", "x")


SAMPLES: list[dict[str, Any]] = [
    {"type": "thinking", "phase": "assembling"},
    {"type": "text", "content": "你好 world", "stage": "self_review"},
    {"type": "thought", "content": "hmm", "step_index": 2},
    {"type": "tool_pending", "name": "read_file"},
    {"type": "tool_start", "tool_call_id": "c1", "name": "read_file", "args": {"path": "a"}},
    {"type": "tool_progress", "tool_call_id": "c1", "name": "run_command", "content": "line"},
    {"type": "tool_result", "tool_call_id": "c1", "name": "x", "ok": False, "blocked": True},
    {"type": "narrate", "content": "let me look", "withdrawn": "look"},
    {"type": "aborted", "reason": "stopped", "stop_reason": "user", "usage": {"input_tokens": 3}},
    {"type": "error", "message": "boom", "category": "connection"},
    {"type": "retry", "attempt": 1, "max_attempts": 3, "delay_ms": 500, "error": "429"},
    {"type": "paused"},
    {
        "type": "question_pending",
        "questions": [{"slot": "s", "question": "which?", "options": ["a", "b"]}],
    },
    {"type": "approval_pending", "tool_call_id": "c2", "name": "write_file", "args": {"p": 1}},
    {"type": "self_review"},
    {"type": "plan_item_boundary", "plan_item_id": "1", "title": "outline"},
    {"type": "step_boundary", "step_index": 1},
    {"type": "meeting_turn", "member": "poet", "role": "member"},
    {"type": "text", "content": "autumn", "stage": "meeting", "speaker": "poet"},
    {"type": "done", "usage": {"input_tokens": 10, "output_tokens": 5, "llm_calls": 2}},
    {"type": "output_partial", "output": {"number": "A-1", "items": ["页"]}},
    {"type": "done", "answer": '{"n": 1}', "output": {"n": 1}},
]


def test_every_chunk_type_has_a_sample() -> None:
    union = get_args(get_args(AgentChunk)[0])
    types = {cls.model_fields["type"].default for cls in union}
    assert types == {s["type"] for s in SAMPLES}


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s["type"])
def test_chunk_json_round_trip(sample: dict[str, Any]) -> None:
    data = {**sample, "round_id": "r-1"}
    chunk = chunk_adapter.validate_python(data)
    line = chunk.model_dump_json()
    back = chunk_adapter.validate_json(line)
    assert back == chunk
    assert back.round_id == "r-1"
    assert json.loads(line)["type"] == sample["type"]


def test_chunk_rejects_unknown_type_and_fields() -> None:
    with pytest.raises(ValueError):
        chunk_adapter.validate_python({"type": "nope"})
    with pytest.raises(ValueError):
        chunk_adapter.validate_python({"type": "text", "content": "x", "bogus": 1})
    with pytest.raises(ValueError):
        chunk_adapter.validate_python({"type": "aborted", "reason": "r", "stop_reason": "cosmic"})


def test_usage_adds() -> None:
    u = Usage(input_tokens=1, output_tokens=2, llm_calls=1)
    u.add(Usage(input_tokens=3, output_tokens=4, reasoning_tokens=1, llm_calls=1))
    assert (u.input_tokens, u.output_tokens, u.reasoning_tokens, u.llm_calls) == (4, 6, 1, 2)
    assert chunks.DoneChunk(usage=u).usage == u
