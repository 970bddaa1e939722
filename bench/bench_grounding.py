"""Round memories that say only what the round said (issue #39, item 1), measured.

Long rounds (over the 100-token verbatim threshold, so a model writes the summary) are built
from LoCoMo's dev conversations (../shared/data/locomo, read in place): one speaker's turn is the
user's request, the other speaker's next turns the answer.  The summariser is the bundled
SmolLM2-135M, what a new user gets.  Two pipelines over the same summaries:

* before: the model's summary stored as written;
* after: the summary checked against its round (memora.memory.grounding) — kept, with the
  user's request ahead of it when it lacks its words, or replaced by an extractive summary.

Printed: the share of stored memories whose content terms are mostly (>= 70%) their round's,
and the share of rounds found again (top 5) by a keyword search for their own request's key
terms in a store holding every round's memory.  And the data the grounding rule was chosen on:
each summary's grounding against its own round and against another round of the run.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from memora.llm.types import estimate_text_tokens
from memora.memory.grounding import (
    MIN_GROUNDING,
    extractive_summary,
    grounded,
    grounding,
    with_request,
)
from memora.memory.keywords import extract_keywords
from memora.memory.summary import summarize_round
from memora.memory.types import NewMemory

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "locomo" / "locomo_dev.json"
ROUNDS = 24
VERBATIM = 100


def rounds_from_locomo(path: Path, count: int) -> list[tuple[str, str]]:
    """``(user, answer)`` pairs: a turn, then the other speaker's next turns until the round
    is over the verbatim threshold; spread evenly over the dev conversations."""
    conversations = json.loads(path.read_text(encoding="utf-8"))
    found: list[tuple[str, str]] = []
    for conv in conversations:
        c = conv["conversation"]
        sessions = sorted(
            (k for k in c if k.startswith("session_") and not k.endswith("date_time")),
            key=lambda k: int(k.split("_")[1]),
        )
        for key in sessions:
            turns = c[key]
            i = 0
            while i < len(turns) - 1:
                asker = turns[i]["speaker"]
                user = turns[i]["text"]
                answer: list[str] = []
                j = i + 1
                while j < len(turns) and estimate_text_tokens(user + " ".join(answer)) < 130:
                    if turns[j]["speaker"] != asker:
                        answer.append(turns[j]["text"])
                    j += 1
                if answer and estimate_text_tokens(user + " ".join(answer)) > VERBATIM:
                    found.append((user, " ".join(answer)))
                i = j
    step = max(1, len(found) // count)
    return found[::step][:count]


async def main() -> None:
    if not DATA.exists():
        print(f"skipped: {DATA} is not here")
        return
    try:
        from memora_plugin_llamacpp import LlamaCppProvider
    except ImportError:
        print("skipped: memora-plugin-llamacpp is not installed")
        return
    rounds = rounds_from_locomo(DATA, ROUNDS)
    provider = LlamaCppProvider()
    summaries: list[str] = []
    started = time.monotonic()
    for user, answer in rounds:
        _, text = await summarize_round(provider, user=user, assistant=answer, verbatim_tokens=0)
        summaries.append(text)
    took = time.monotonic() - started
    await provider.aclose()

    sources = [f"{u}\n{a}" for u, a in rounds]
    before = summaries
    after = [
        with_request(s, u) if grounded(s, src, user=u) else extractive_summary(u, a)
        for s, (u, a), src in zip(summaries, rounds, sources, strict=True)
    ]
    own = [grounding(s, src) for s, src in zip(summaries, sources, strict=True)]
    other = [
        grounding(s, sources[(i + len(sources) // 2) % len(sources)])
        for i, s in enumerate(summaries)
    ]
    print(
        f"{len(rounds)} long LoCoMo rounds (> {VERBATIM} tokens), summarised by the bundled "
        f"SmolLM2-135M ({took / len(rounds):.1f} s a summary)"
    )
    print("  grounding of each model summary (share of its content terms its round has):")
    print(f"    against its own round:   {_quantiles(own)}")
    print(f"    against another round:   {_quantiles(other)}")
    kept = sum(
        1
        for s, src, (u, _) in zip(summaries, sources, rounds, strict=True)
        if grounded(s, src, user=u)
    )
    print(
        f"  rule: >= {MIN_GROUNDING:.0%} of the terms, no number the round lacks, a 'User:' "
        f"line from the user's text; "
        f"{kept}/{len(rounds)} model summaries kept, the rest replaced by extractive ones"
    )
    for label, stored in (("before", before), ("after", after)):
        true_share = sum(
            1 for m, src in zip(stored, sources, strict=True) if grounding(m, src) >= 0.7
        ) / len(stored)
        found = await _found_again(stored, rounds)
        print(
            f"  {label:6} memories mostly from their round {true_share:6.1%}   "
            f"rounds found again by their key terms (top 5) {found:6.1%}"
        )


def _quantiles(values: list[float]) -> str:
    qs = statistics.quantiles(values, n=10) if len(values) > 1 else values
    return (
        f"min {min(values):.2f}  p10 {qs[0]:.2f}  median {statistics.median(values):.2f}  "
        f"max {max(values):.2f}"
    )


async def _found_again(stored: list[str], rounds: list[tuple[str, str]]) -> float:
    from memora.memory.sqlite_store import open_sqlite_storage

    with tempfile.TemporaryDirectory() as tmp:
        store = open_sqlite_storage(Path(tmp) / "memory.db")
        try:
            ids = []
            for i, text in enumerate(stored):
                record = await store.add(
                    NewMemory(content=text, source="round_summary", round_id=f"r{i}")
                )
                ids.append(record.id)
            hits = 0
            for i, (user, _) in enumerate(rounds):
                query = " ".join(extract_keywords(user, 5))
                found = await store.search_by_keyword(query, limit=5)
                hits += any(h.record.id == ids[i] for h in found)
            return hits / len(rounds)
        finally:
            await store.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
