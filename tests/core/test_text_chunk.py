"""The turn engine's per-token TextChunk (built without validating its values again) is the
same chunk, in every respect a host can see, as the validated ``TextChunk(...)``."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys

import pytest
from pydantic import ValidationError

from memora.chunks import TextChunk, chunk_adapter, text_chunk

CASES = [
    ("Kayaks ", "answer", "r-1", None),
    ("", "answer", None, None),
    ("你好，世界 🌍", "self_review", "r-2", None),
    ("I agree.", "meeting", "r-3", "critic"),
    ("summary", "answer", "r-4", "chair"),
]


def validated(content: str, stage: str, round_id: str | None, speaker: str | None) -> TextChunk:
    if speaker is None:
        return TextChunk(content=content, stage=stage, round_id=round_id)
    return TextChunk(content=content, stage=stage, round_id=round_id, speaker=speaker)


@pytest.mark.parametrize(("content", "stage", "round_id", "speaker"), CASES)
def test_same_chunk_as_validated(
    content: str, stage: str, round_id: str | None, speaker: str | None
) -> None:
    fast = text_chunk(content, stage, round_id, speaker)  # type: ignore[arg-type]
    slow = validated(content, stage, round_id, speaker)
    assert type(fast) is TextChunk
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert fast.model_fields_set == slow.model_fields_set
    assert fast.model_dump() == slow.model_dump()
    assert fast.model_dump(exclude_unset=True) == slow.model_dump(exclude_unset=True)
    assert fast.model_dump_json() == slow.model_dump_json()
    assert chunk_adapter.validate_json(fast.model_dump_json()) == fast
    assert pickle.loads(pickle.dumps(fast)) == slow
    assert copy.deepcopy(fast) == slow
    assert fast.model_copy(update={"content": "x"}) == slow.model_copy(update={"content": "x"})
    with pytest.raises(ValidationError):  # frozen, as every chunk
        fast.content = "changed"  # type: ignore[misc]


@pytest.mark.parametrize("bad", [5, None, ["a"]])
def test_anything_but_text_is_validated(bad: object) -> None:
    with pytest.raises(ValidationError):
        text_chunk(bad, "answer", "r-1")  # type: ignore[arg-type]


def test_bytes_are_taken_as_validation_takes_them() -> None:
    got = text_chunk(b"bytes", "answer", "r-1")  # type: ignore[arg-type]
    assert got == TextChunk(content=b"bytes", round_id="r-1")
    assert type(got.content) is str


def test_first_chunk_of_a_fresh_process_serialises() -> None:
    """TextChunk builds its validator and serialiser lazily (defer_build): a chunk made
    without validation before any other must still dump."""
    code = (
        "from memora.chunks import text_chunk\n"
        "c = text_chunk('你好', 'answer', 'r-1')\n"
        "print(c.model_dump_json())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.strip() == (
        '{"round_id":"r-1","type":"text","content":"你好","stage":"answer","speaker":null}'
    )
