"""What a typed turn costs over a text turn (issue #40).

One Agent, the in-process scripted provider (no network: what is left is memora's own work),
no tools and no round summary, the same 60-token answer each turn — plain text for the text
turn, a JSON object for the typed one (``output_type=Ticket``: the schema built for the turn,
the instruction in the prompt, partial parses while it streams, the result validated and
dumped).  Text and typed turns alternate, so machine noise hits both alike; the ratio of CPU
per turn is printed, and the parts of the typed overhead measured alone: building the
``OutputSpec`` (the schema, once per turn), checking a finished answer, and parsing partial
results over one streamed answer.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel, Field

from memora import Agent
from memora.agent.output import OutputSpec
from memora.testing import ScriptedProvider, text

ROUNDS = 7
TURNS = 40


class Ticket(BaseModel):
    title: str = Field(description="What is wrong, in one line")
    severity: int = Field(ge=1, le=4, description="1 is the most urgent")
    component: str
    steps: list[str] = Field(description="How to reproduce it")


ANSWER = (
    '{"title": "Login fails after the password reset", "severity": 2, "component": "auth", '
    '"steps": ["reset the password", "log out", "log in with the new password"]}'
)
PLAIN = "Login fails after the password reset; severity two, in auth: reset, log out, log in."


async def turns(agent: Agent, typed: bool, n: int) -> float:
    """CPU seconds per turn over ``n`` turns."""
    start = time.process_time()
    for i in range(n):
        if typed:
            await agent.run(f"ticket {i}", output_type=Ticket)
        else:
            await agent.run(f"note {i}")
    return (time.process_time() - start) / n


def micro(n: int = 2000) -> tuple[float, float, float]:
    """(building the spec, checking the answer, partial parses of one answer) in µs."""
    start = time.perf_counter()
    for _ in range(n):
        spec = OutputSpec(Ticket)
    build = (time.perf_counter() - start) / n * 1e6
    start = time.perf_counter()
    for _ in range(n):
        assert spec.check(ANSWER).ok
    check = (time.perf_counter() - start) / n * 1e6
    pieces = [ANSWER[i : i + 4] for i in range(0, len(ANSWER), 4)]  # one token ~ 4 characters
    from memora.agent.model_call import PartialProgress, partial_chunk

    start = time.perf_counter()
    for _ in range(n // 20):
        progress = PartialProgress()  # each model call reads its answer with its own
        parts: list[str] = []
        for piece in pieces:
            parts.append(piece)
            partial_chunk(spec, progress, parts, "r")
    partial = (time.perf_counter() - start) / (n // 20) * 1e6
    return build, check, partial


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / "p"
        project.mkdir()
        deltas = 60  # tokens streamed per answer, for both kinds
        typed_answer = text(ANSWER, chunks=deltas)
        plain_answer = text(PLAIN, chunks=deltas)
        provider = ScriptedProvider(
            default=lambda request: typed_answer if request.output is not None else plain_answer
        )
        async with Agent(
            project_path=project,
            data_dir=Path(tmp) / "data",
            provider=provider,
            load_entrypoints=False,
            session_store="memory",
            storage="memory",
            strategy_override={"reflect": {"summary": "off"}, "act": {"toolMode": "block"}},
        ) as agent:
            await turns(agent, True, 5)  # warm-up: imports, validators built
            await turns(agent, False, 5)
            plain: list[float] = []
            typed: list[float] = []
            for _ in range(ROUNDS):
                plain.append(await turns(agent, False, TURNS))
                typed.append(await turns(agent, True, TURNS))
    ratios = [t / p for t, p in zip(typed, plain, strict=True)]
    print(
        f"typed turn vs text turn, client CPU per turn ({ROUNDS} alternating rounds of {TURNS}; "
        f"{deltas}-token answers, scripted provider, no tools, no summary)"
    )
    print(
        f"  text  {statistics.median(plain) * 1e3:6.3f} ms   typed "
        f"{statistics.median(typed) * 1e3:6.3f} ms   ratio {statistics.median(ratios):.2f}x "
        f"(min {min(ratios):.2f}, max {max(ratios):.2f})"
    )
    build, check, partial = micro()
    print(
        f"  per typed turn: OutputSpec (schema) {build:6.1f} us, checking the answer "
        f"{check:5.1f} us, partial results over the stream {partial:6.1f} us"
    )


if __name__ == "__main__":
    asyncio.run(main())
