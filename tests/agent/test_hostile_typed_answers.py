"""A fresh-eyed hostile review of #68 item 3: a typed turn's answer is data from outside too.

Found: an answer holding ``NaN``, ``Infinity`` or ``1e999`` (Python's json reads them) against a
schema with ``multipleOf``, or an integer of over 4,300 digits (Python's limit on reading one),
raised out of the check — the turn ended with ``OverflowError`` / ``ValueError`` as an internal
failure instead of telling the model what was wrong and letting it try again."""

from __future__ import annotations

from pathlib import Path

import pytest

from memora import Agent, OutputSpec
from memora.chunks import DoneChunk
from memora.testing import ScriptedProvider, text

SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "number", "multipleOf": 0.5}},
    "required": ["n"],
}


@pytest.mark.parametrize(
    "answer", ['{"n": NaN}', '{"n": Infinity}', '{"n": 1e999}', '{"n": ' + "7" * 5000 + "}"]
)
async def test_a_number_the_check_cannot_read_is_a_retry_not_a_failure(
    tmp_path: Path, answer: str
) -> None:
    provider = ScriptedProvider([text(answer), text('{"n": 2.5}')])
    async with Agent(
        project_path=tmp_path,
        data_dir=tmp_path / "data",
        config_dir=tmp_path / "user",
        provider=provider,
        load_entrypoints=False,
    ) as agent:
        chunks = [
            c async for c in agent.chat("n?", output_type=OutputSpec.from_json_schema(SCHEMA))
        ]
    done = chunks[-1]
    assert isinstance(done, DoneChunk), chunks[-1]
    assert done.output == {"n": 2.5}
    # the model was told what was wrong with its first answer, in words
    retry = provider.requests[1].messages[-1].content
    assert "number" in retry, retry
