"""Typed results from the bundled SmolLM2-135M: llama.cpp turns each schema into a grammar, so
even this small model answers with a valid instance at the first try (``output_retries=0``:
a retry would fail the test).  The schemas are held out: none was used to write the code."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field

from memora import Agent

pytest.importorskip("llama_cpp")
pytestmark = pytest.mark.slow


class Recipe(BaseModel):
    dish: str = Field(description="The name of the dish")
    minutes: int = Field(description="Cooking time in minutes")
    vegetarian: bool


class Contact(BaseModel):
    name: str
    email: str
    tags: list[str] = Field(description="Up to three labels")


class Weather(BaseModel):
    kind: Literal["weather"]
    celsius: float


class Mood(BaseModel):
    kind: Literal["mood"]
    happy: bool


HELD_OUT = [
    (Recipe, "Suggest a quick pasta dinner."),
    (Contact, "Ada Lovelace writes from ada@example.org about maths."),
    (list[str], "Name three colours."),
    (Annotated[Weather | Mood, Field(discriminator="kind")], "It is 21 degrees and sunny."),
    (int, "How many legs does a spider have?"),
]


async def test_the_bundled_model_answers_each_schema_in_shape(tmp_path: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    async with Agent(
        project_path=project,
        data_dir=tmp_path / "data",
        config_dir=tmp_path / "config",
        output_retries=0,
    ) as agent:
        for output_type, prompt in HELD_OUT:
            result = await agent.run(prompt, output_type=output_type)
            assert result is not None, prompt
        rounds = await agent.sessions.rounds()
    assert len(rounds) == len(HELD_OUT)
    assert all(r.output is not None for r in rounds)
