"""The adversarial test of memory scopes (#39 item 2): random users writing, correcting and
forgetting memories, then every reader reading by every path — keyword search, semantic search
(fused with keywords), list, counts, the snapshot, get and history by every id — on every
backend (memory, json, SQLite, PostgreSQL).  Zero results of another scope, and exactly the
results of the reader's own scope plus the project's unscoped ones."""

from __future__ import annotations

import asyncio
import hashlib
import math
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from memora.errors import MemoraError
from memora.memory.manager import MemoryManager
from memora.memory.simple_backends import InMemoryStorage, JsonFileStorage
from memora.memory.sqlite_store import SqliteStorage
from memora.memory.types import NewMemory
from memora.memory.vectors import SemanticSearch

USERS: list[str | None] = [None, "alice", "bob", "王芳"]
WORDS = ["harbor", "locker", "river", "记忆", "kettle"]
BACKENDS = ["memory", "json", "sqlite", "postgres"]


class HashEmbedder:
    """A deterministic bag-of-words embedder (no model): similar words, similar vectors."""

    name = "fuzz:hash16"

    async def embed(self, texts: Sequence[str], *, kind: str) -> list[list[float]]:
        out = []
        for text in texts:
            v = [0.0] * 16
            for word in text.lower().split():
                v[hashlib.sha1(word.encode()).digest()[0] % 16] += 1.0
            norm = math.sqrt(sum(x * x for x in v)) or 1.0
            out.append([x / norm for x in v] if any(v) else [1.0] + [0.0] * 15)
        return out

    async def aclose(self) -> None:
        return None


# one operation: (user index, what) — write words, or edit / forget the n-th memory written
Op = tuple[int, str, Any]
ops = st.lists(
    st.one_of(
        st.tuples(
            st.integers(0, len(USERS) - 1),
            st.just("write"),
            st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
        ),
        st.tuples(
            st.integers(0, len(USERS) - 1), st.sampled_from(["edit", "forget"]), st.integers(0, 30)
        ),
    ),
    min_size=1,
    max_size=30,
)


def _open(backend: str, folder: Path, dsn: str | None) -> Any:
    if backend == "memory":
        return InMemoryStorage()
    if backend == "json":
        return JsonFileStorage(folder / "memories.json")
    if backend == "sqlite":
        return SqliteStorage(folder / "memory.db")
    from memora_plugin_postgres.database import Database
    from memora_plugin_postgres.storage import PostgresStorage

    assert dsn is not None
    return PostgresStorage(Database(dsn), namespace=f"fuzz-{uuid.uuid4().hex}")


async def _play(backend: str, folder: Path, dsn: str | None, script: list[Op]) -> int:
    """Run ``script``, then check every reader by every path; the number of reads checked."""
    storage = _open(backend, folder, dsn)
    root = MemoryManager(storage, semantic=SemanticSearch(HashEmbedder(), storage))
    written: list[Any] = []  # every memory id written, in order
    try:
        for who, what, arg in script:
            view = root.for_scope(USERS[who])
            if what == "write":
                written.append(
                    (await view.write(NewMemory(" ".join(arg), name=f"note {len(written)}"))).id
                )
            elif written:
                target = written[arg % len(written)]
                record = await storage.get(target)
                # a user changes their own memories only; the project's (unscoped) are every
                # user's to recall, and only the project's owner (the unscoped view) changes them
                allowed = record.scope == USERS[who] and record.superseded_by is None
                try:
                    if what == "edit":
                        new = await view.edit(target, record.content + " river", by=str(who))
                    else:
                        new = await view.forget(target, by=str(who))
                    written.append(new.id)
                    assert allowed, f"{USERS[who]!r} changed {record.scope!r}'s memory"
                except MemoraError as exc:
                    # another scope's memory is refused as missing, the project's (to a user)
                    # and a superseded one as a conflict — all leave it untouched
                    assert not allowed or record.superseded_by is not None, exc
        await root.idle()  # the vectors, for the semantic path
        everything = await storage.list(limit=1000)
        return await _check(root, storage, everything)
    finally:
        await root.close()
        await storage.close()


async def _check(root: MemoryManager, storage: Any, everything: list[Any]) -> int:
    reads = 0
    for reader in USERS:
        view = root.for_scope(reader)
        mine = [r for r in everything if r.scope in (None, reader)]
        ids = {r.id for r in mine}
        listed = await view.list(limit=1000)
        assert {r.id for r in listed} == ids
        assert await view.count() == len(mine)
        snapshot = await view.snapshot()
        assert snapshot.total == len(mine)
        reads += 3
        for word in WORDS:
            expect = {
                r.id
                for r in mine
                if r.superseded_by is None and word in f"{r.name} {r.content}".split()
            }
            keyword = await storage.search_by_keyword(word, limit=1000, scopes=view.scopes)
            assert {h.record.id for h in keyword} == expect, (reader, word)
            fused = await view.search(word, limit=1000)
            found = {h.record.id for h in fused}
            assert found <= ids, f"{reader!r} recalled another scope's memory"
            assert expect <= found, (reader, word)
            reads += 2
        for record in everything:
            visible = record.scope in (None, reader)
            try:
                got = await view.get(record.id)
                chain = await view.history(record.id)
            except MemoraError:
                assert not visible, f"{reader!r} could not read its own memory"
            else:
                assert visible and got.id == record.id, f"{reader!r} read {record.scope!r}'s"
                assert all(r.scope in (None, reader) for r in chain)
            reads += 2
    return reads


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_path_returns_another_scopes_memory(
    backend: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> None:
    dsn = request.getfixturevalue("pg_dsn") if backend == "postgres" else None
    totals = {"examples": 0, "reads": 0}

    @settings(
        max_examples=40,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        derandomize=True,
    )
    @given(script=ops)
    def run(script: list[Op]) -> None:
        folder = tmp_path_factory.mktemp(f"fuzz-{backend}")
        totals["reads"] += asyncio.run(_play(backend, folder, dsn, script))
        totals["examples"] += 1

    run()
    assert totals["examples"] >= 40
    print(f"\n{backend}: {totals['examples']} scripts, {totals['reads']} scoped reads checked")
