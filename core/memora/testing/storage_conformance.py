"""The storage conformance suite: one set of tests every memory backend runs.

Use it from a plugin's tests by subclassing and providing ``open_storage``::

    from memora.testing.storage_conformance import StorageConformance

    class TestMyBackend(StorageConformance):
        persistent = True            # the backend keeps data across close/reopen

        async def open_storage(self, path):   # path: a fresh directory per test
            return MyStorage(path / "db")

Needs pytest and pytest-asyncio (``pip install memora-kernel[testing]``) and no pytest
configuration: the tests and the ``store`` fixture are marked for pytest-asyncio themselves, so
they run in its default strict mode as well as in ``asyncio_mode = "auto"``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from ..errors import MemoraError
from ..memory.storage import MemoryStorage, PinnedStorage, accepts_scopes
from ..memory.types import NewMemory
from ..memory.vectors import VectorStorage, normalize

__all__ = ["StorageConformance"]

HOSTILE_QUERIES = [
    'memory" OR "x',
    "NOT memory",
    "memory AND",
    "NEAR(memory summary, 2)",
    "*",
    "^memory",
    "content:memory",
    "(((",
    '"',
    "'",
    "%",
    "_",
    "%%__",
    "\x00",
    "mem\x00ory",
    "\\",
    ";DROP TABLE memories;--",
    "",
    "   ",
    "🙂" * 50,
    "x" * 10_000_000,
]


class StorageConformance:
    """Subclass and implement :meth:`open_storage`."""

    pytestmark = pytest.mark.asyncio(loop_scope="function")

    persistent: bool = False

    async def open_storage(self, path: Path) -> MemoryStorage:  # pragma: no cover - abstract
        raise NotImplementedError

    @pytest_asyncio.fixture(loop_scope="function")
    async def store(self, tmp_path: Path) -> AsyncIterator[MemoryStorage]:
        storage = await self.open_storage(tmp_path)
        try:
            yield storage
        finally:
            await storage.close()

    async def _seed(self, store: MemoryStorage) -> dict[str, Any]:
        records = await store.add_many(
            [
                NewMemory(
                    "用户决定把长期记忆改为摘要记忆，每轮写一条摘要。",
                    name="记忆设计",
                    summary_type="decision",
                ),
                NewMemory(
                    "第三章的大纲需要重写：主角在雨夜离开小镇。",
                    name="小说大纲",
                    summary_type="progress",
                ),
                NewMemory(
                    "The user prefers SQLite for local storage and short answers.",
                    summary_type="preference",
                ),
                NewMemory(
                    "Mixed 中英文 note: deploy the API 服务 on Friday 🚀", summary_type="fact"
                ),
                NewMemory("Persona text about tone.", source="persona"),
            ]
        )
        return {r.summary_type or r.source: r for r in records}

    # -- basics ---------------------------------------------------------------------------------

    async def test_add_and_get_round_trip(self, store: MemoryStorage) -> None:
        rec = await store.add(
            NewMemory(
                "content 内容",
                source="round_summary",
                name="n",
                summary_type="fact",
                session_id="s1",
                round_id="r1",
                meta={"k": [1, "二"]},
            )
        )
        assert rec.id and rec.created_at > 0, (
            "add() returns the stored record, with an id and a creation time"
        )
        got = await store.get(rec.id)
        assert got == rec, "get(id) returns exactly the record add() returned (every field)"
        assert await store.get("no-such-id") is None, (
            "get() of an unknown id returns None, it does not raise"
        )

    async def test_add_with_existing_id_is_idempotent(self, store: MemoryStorage) -> None:
        first = await store.add(NewMemory("original", id="fixed-id", created_at=1000.0))
        again = await store.add(NewMemory("different", id="fixed-id"))
        assert again == first and first.created_at == 1000.0, (
            "add() with an id that exists returns the stored record unchanged (imports are idempotent)"
        )
        assert await store.count() == 1, "add() with an id that exists adds nothing"

    async def test_list_paged_newest_first_and_by_source(self, store: MemoryStorage) -> None:
        await store.add_many([NewMemory(f"m{i}", created_at=1000.0 + i) for i in range(5)])
        await store.add(NewMemory("p", source="persona", created_at=2000.0))
        page = await store.list(limit=2)
        assert [r.content for r in page] == ["p", "m4"], (
            "list() is newest first (by created_at) and takes limit"
        )
        page2 = await store.list(limit=2, offset=2)
        assert [r.content for r in page2] == ["m3", "m2"], (
            "list(offset=) skips that many of the newest"
        )
        assert [r.content for r in await store.list(source="persona")] == ["p"], (
            "list(source=) returns that source only"
        )

    async def test_counts(self, store: MemoryStorage) -> None:
        await self._seed(store)
        assert await store.count() == 5, "count() counts every memory"
        assert await store.count_by_source("round_summary") == 4, (
            "count_by_source() counts one source"
        )
        assert await store.count_by_source("persona") == 1, "count_by_source() counts one source"
        assert await store.count_by_source("skill") == 0, (
            "count_by_source() of a source with no memory is 0"
        )

    async def test_unknown_source_warns_but_stores(
        self, store: MemoryStorage, caplog: pytest.LogCaptureFixture
    ) -> None:
        with caplog.at_level(logging.WARNING, logger="memora.memory"):
            rec = await store.add(NewMemory("x", source="mystery"))
        assert (await store.get(rec.id)) is not None, "an unknown source is stored all the same"
        assert "mystery" in caplog.text, (
            "an unknown source is logged as a warning on the memora.memory logger"
        )

    async def test_bad_content_refused_without_data_loss(self, store: MemoryStorage) -> None:
        keep = await store.add(NewMemory("keep me"))
        with pytest.raises(MemoraError):
            await store.add(NewMemory("nul \x00 byte"))
        with pytest.raises(MemoraError):
            await store.add(NewMemory("x" * 1_000_001))
        assert await store.count() == 1 and await store.get(keep.id) == keep, (
            "a refused add() (NUL, content over 1,000,000 characters) loses nothing already stored"
        )

    async def test_default_limits(self, store: MemoryStorage) -> None:
        """The protocol's defaults: ``list`` 50, ``search_by_keyword`` and ``pinned`` 10."""
        await store.add_many(
            [
                NewMemory(f"tide note {i}", created_at=1000.0 + i, meta={"pinned": True})
                for i in range(60)
            ]
        )
        assert len(await store.list()) == 50, "list() without a limit returns 50"
        newest = (await store.list(limit=1))[0]
        await store.supersede(newest.id, NewMemory("tide note, corrected", created_at=900.0))
        assert newest.id in {r.id for r in await store.list(limit=100)}, (
            "list() includes superseded memories unless include_superseded=False"
        )
        assert len(await store.search_by_keyword("tide")) == 10, (
            "search_by_keyword() without a limit returns 10"
        )
        if isinstance(store, PinnedStorage):
            assert len(await store.pinned()) == 10, "pinned() without a limit returns 10"

    async def test_every_write_checks_its_input_first(
        self, store: MemoryStorage, caplog: pytest.LogCaptureFixture
    ) -> None:
        keep = await store.add(NewMemory("keep me"))
        with pytest.raises(MemoraError):
            await store.add_many([NewMemory("fine"), NewMemory("nul \x00 byte")])
        with pytest.raises(MemoraError):
            await store.add_many([NewMemory("fine", scope="bad\nscope")])
        with pytest.raises(MemoraError):
            await store.supersede(keep.id, NewMemory("x" * 1_000_001))
        assert await store.count() == 1 and await store.get(keep.id) == keep, (
            "add_many() and supersede() refuse bad input before writing: nothing is stored "
            "and the old memory is not marked superseded"
        )
        with caplog.at_level(logging.WARNING, logger="memora.memory"):
            await store.add_many([NewMemory("x", source="mystery-many")])
            await store.supersede(keep.id, NewMemory("y", source="mystery-supersede"))
        assert "mystery-many" in caplog.text and "mystery-supersede" in caplog.text, (
            "add_many() and supersede() warn of an unknown source as add() does"
        )

    # -- search ---------------------------------------------------------------------------------

    @pytest.mark.parametrize(
        ("query", "expected"),
        [
            ("记忆", "decision"),
            ("大纲", "progress"),
            ("长期记忆", "decision"),
            ("SQLite", "preference"),
            ("sqlite storage", "preference"),
            ("服务", "fact"),
            ("API", "fact"),
            ("🚀 deploy", "fact"),
            ("雨夜", "progress"),
        ],
    )
    async def test_search_finds_chinese_english_mixed(
        self, store: MemoryStorage, query: str, expected: str
    ) -> None:
        seeded = await self._seed(store)
        hits = await store.search_by_keyword(query)
        assert hits, f"search_by_keyword({query!r}) found nothing; it should find the seeded memory"
        assert hits[0].record.id == seeded[expected].id, (
            "the best hit (first) is the memory that holds the query's words (CJK as bigram phrases)"
        )
        assert all(h.score > 0 for h in hits), "every hit has a positive score"

    async def test_search_does_not_match_partial_words(self, store: MemoryStorage) -> None:
        await self._seed(store)
        assert await store.search_by_keyword("sql") == [], (
            "a Latin query matches whole words only (sql is no hit for SQLite)"
        )
        assert await store.search_by_keyword("记录") == [], (
            "a CJK query matches its bigram phrase only"
        )

    async def test_search_ranks_by_relevance(self, store: MemoryStorage) -> None:
        await store.add_many(
            [
                NewMemory("outline outline outline of the novel"),
                NewMemory("an outline"),
                NewMemory("nothing relevant here at all, just words"),
            ]
        )
        hits = await store.search_by_keyword("outline")
        assert [h.record.content for h in hits] == [
            "outline outline outline of the novel",
            "an outline",
        ], "search returns the matching memories, most relevant first, and no other"
        assert hits[0].score > hits[1].score, "more occurrences score higher (BM25)"

    async def test_search_source_filter_and_limit(self, store: MemoryStorage) -> None:
        await store.add_many([NewMemory(f"tone note {i}", source="persona") for i in range(5)])
        await store.add(NewMemory("tone summary"))
        assert len(await store.search_by_keyword("tone", limit=3)) == 3, "search takes limit"
        only = await store.search_by_keyword("tone", source="round_summary")
        assert [h.record.content for h in only] == ["tone summary"], (
            "search(source=) returns that source only"
        )
        assert await store.search_by_keyword("tone", limit=0) == [], "limit=0 returns nothing"

    async def test_a_question_finds_its_answer_not_its_function_words(
        self, store: MemoryStorage
    ) -> None:
        """A recall case from LoCoMo (bench/bench_recall.py): asked as a question, the words
        that carry it win over "when", "did", "you" that every chat line has."""
        race = await store.add(NewMemory("Melanie: I ran a charity race for mental health"))
        await store.add_many(
            [
                NewMemory("Caroline: did you see it? I did, when you did"),
                NewMemory("Melanie: when did you get back? did you like it?"),
                NewMemory("Caroline: what did you do when you were there?"),
            ]
        )
        hits = await store.search_by_keyword("When did Melanie run a charity race?", limit=2)
        assert hits and hits[0].record.id == race.id, (
            "a question's content words rank the memory that holds them first"
        )

    async def test_very_long_text_is_found(self, store: MemoryStorage) -> None:
        long_text = ("lorem ipsum 填充文字 " * 20_000) + " needle 关键线索"
        rec = await store.add(NewMemory(long_text))
        for q in ("needle", "关键线索"):
            hits = await store.search_by_keyword(q)
            assert [h.record.id for h in hits] == [rec.id], (
                "a word at the end of a 300,000-character memory is found"
            )

    async def test_emoji_and_single_cjk_character(self, store: MemoryStorage) -> None:
        rec = await store.add(NewMemory("猫 likes 🐟 fish"))
        assert [h.record.id for h in await store.search_by_keyword("猫")] == [rec.id], (
            "a single CJK character is found (as a prefix)"
        )
        assert [h.record.id for h in await store.search_by_keyword("fish 🐟")] == [rec.id], (
            "an emoji in a query does not stop the words from matching"
        )

    @pytest.mark.parametrize("query", HOSTILE_QUERIES, ids=lambda q: repr(q[:20]))
    async def test_hostile_queries_never_raise_or_widen(
        self, store: MemoryStorage, query: str
    ) -> None:
        await self._seed(store)
        hits = await store.search_by_keyword(query)
        assert isinstance(hits, list), "a hostile query returns a list, it never raises"
        # operators and wildcards are never honoured: nothing matches everything
        assert len(hits) < 5, (
            "operators and wildcards are searched as plain words: nothing matches everything"
        )

    async def test_quote_injection_only_matches_literal_terms(self, store: MemoryStorage) -> None:
        await self._seed(store)
        hits = await store.search_by_keyword('nomatchword" OR "sqlite')
        # both words are searched as plain terms; only the SQLite memory contains one of them
        assert len(hits) == 1 and "SQLite" in hits[0].record.content, (
            "quotes and OR in a query are plain words, never query syntax"
        )

    # -- supersede / update / delete ----------------------------------------------------------

    async def test_supersede_chain_and_search_exclusion(self, store: MemoryStorage) -> None:
        a = await store.add(NewMemory("deadline is Monday", created_at=1.0))
        b = await store.supersede(a.id, NewMemory("deadline is Tuesday"))
        c = await store.supersede(b.id, NewMemory("deadline is Wednesday"))
        old = await store.get(a.id)
        assert old is not None and old.superseded_by == b.id, (
            "supersede(old, new) sets old.superseded_by to new's id"
        )
        hits = await store.search_by_keyword("deadline")
        assert [h.record.id for h in hits] == [c.id], (
            "search leaves superseded memories out by default"
        )
        all_hits = await store.search_by_keyword("deadline", include_superseded=True)
        assert {h.record.id for h in all_hits} == {a.id, b.id, c.id}, (
            "search(include_superseded=True) returns the whole chain"
        )
        for member in (a, b, c):
            assert [r.id for r in await store.history(member.id)] == [a.id, b.id, c.id], (
                "history(id) of any member is the whole chain, oldest first"
            )
        with pytest.raises(MemoraError):
            await store.supersede("missing", NewMemory("x"))
        assert await store.list(include_superseded=False, limit=10) != [], (
            "list(include_superseded=False) still lists the current memory"
        )

    async def test_update_reindexes(self, store: MemoryStorage) -> None:
        rec = await store.add(NewMemory("the old keyword banana"))
        updated = await store.update(rec.id, content="the new keyword 香蕉", summary_type="fact")
        assert updated.content == "the new keyword 香蕉" and updated.summary_type == "fact", (
            "update() returns the record with the new values"
        )
        assert await store.search_by_keyword("banana") == [], (
            "update() re-indexes: the old words no longer match"
        )
        assert [h.record.id for h in await store.search_by_keyword("香蕉")] == [rec.id], (
            "update() re-indexes: the new words match"
        )
        with pytest.raises(MemoraError):
            await store.update("missing", content="x")
        # forget --everywhere empties a memory's text and name in place (and scrubs, if it can)
        gone = await store.update(rec.id, content="", name="", meta={"redacted": {"by": "x"}})
        assert (gone.content, gone.name) == ("", "") and gone.meta["redacted"] == {"by": "x"}
        assert await store.search_by_keyword("香蕉") == [], "an emptied memory matches nothing"
        if getattr(store, "scrub", None) is not None:
            await store.scrub()  # type: ignore[attr-defined]

    async def test_delete(self, store: MemoryStorage) -> None:
        rec = await store.add(NewMemory("delete me please"))
        assert await store.delete(rec.id) is True, "delete() of a stored memory returns True"
        assert await store.delete(rec.id) is False, (
            "delete() of a memory that is gone returns False, it does not raise"
        )
        assert await store.get(rec.id) is None, "a deleted memory cannot be read"
        assert await store.search_by_keyword("delete") == [], "a deleted memory is not found"
        assert await store.count() == 0, "a deleted memory is not counted"

    async def test_a_deleted_memory_leaves_no_words_behind(self, store: MemoryStorage) -> None:
        """What a deleted memory said never matches a memory written after it (a backend that
        reuses row numbers must clear the index row too)."""
        gone = await store.add(NewMemory("zebra crossing"))
        await store.delete(gone.id)
        later = await store.add(NewMemory("lion enclosure"))
        assert await store.search_by_keyword("zebra") == [], (
            "a deleted memory's words match nothing, not the memory written after it"
        )
        assert [h.record.id for h in await store.search_by_keyword("lion")] == [later.id]

    async def test_round_scope(self, store: MemoryStorage) -> None:
        await store.add(NewMemory("plan alpha", round_id="r1"))
        await store.add(NewMemory("plan beta", round_id="r2"))
        await store.add(NewMemory("plan gamma", round_id="r3"))
        hits = await store.search_by_keyword("plan", round_ids=["r1", "r3"])
        assert {h.record.content for h in hits} == {"plan alpha", "plan gamma"}, (
            "search(round_ids=) returns memories of those rounds only"
        )
        assert await store.search_by_keyword("plan", round_ids=[]) == [], (
            "search(round_ids=[]) returns nothing"
        )

    # -- concurrency and persistence -----------------------------------------------------------

    async def test_two_concurrent_writers(self, store: MemoryStorage) -> None:
        async def writer(tag: str) -> None:
            for i in range(40):
                await store.add(NewMemory(f"{tag} writer entry {i}"))

        await asyncio.gather(writer("left"), writer("right"))
        assert await store.count() == 80, "two concurrent writers lose no memory"
        assert len(await store.search_by_keyword("left", limit=100)) == 40, (
            "every concurrent write is indexed"
        )

    async def test_reopen_keeps_everything(self, tmp_path: Path) -> None:
        if not self.persistent:
            pytest.skip("backend is not persistent")
        store = await self.open_storage(tmp_path)
        seeded = await self._seed(store)
        await store.supersede(seeded["fact"].id, NewMemory("deploy moved to Monday"))
        await store.close()
        again = await self.open_storage(tmp_path)
        try:
            assert await again.count() == 6, "a reopened store holds every memory"
            assert (await again.search_by_keyword("记忆"))[0].record.id == seeded["decision"].id, (
                "a reopened store still finds by keyword"
            )
            old = await again.get(seeded["fact"].id)
            assert old is not None and old.superseded_by is not None, (
                "a reopened store keeps supersede links"
            )
        finally:
            await again.close()

    # -- scopes (a user, tenant or agent per memory: memora.memory.types.check_scope) -------------

    async def _seed_scopes(self, store: MemoryStorage) -> dict[str, list[Any]]:
        """Memories of three scopes and the project's, all holding the word "harbor"; bob's
        rank highest, so a filter applied after a limited search would return nothing else."""
        out: dict[str, list[Any]] = {"": [], "alice": [], "bob": [], "王芳": []}
        for n in range(3):
            out[""].append(await store.add(NewMemory(f"project note {n}: harbor schedule")))
        for n in range(2):
            out["alice"].append(
                await store.add(NewMemory(f"alice asked about the harbor {n}", scope="alice"))
            )
        for n in range(30):
            out["bob"].append(
                await store.add(
                    NewMemory(f"harbor harbor harbor bob {n}", scope="bob", source="persona")
                )
            )
        out["王芳"].append(await store.add(NewMemory("王芳 的 harbor 记忆", scope="王芳")))
        return out

    async def test_backend_takes_scopes(self, store: MemoryStorage) -> None:
        assert accepts_scopes(store), (
            "search_by_keyword, list, count, count_by_source (and search_by_vector) must take "
            "scopes= (see memora.memory.storage)"
        )

    async def test_scopes_round_trip(self, store: MemoryStorage) -> None:
        mine = await store.add(NewMemory("a note of alice's", scope="alice"))
        project = await store.add(NewMemory("a note of the project's"))
        assert mine.scope == "alice" and project.scope is None
        got = await store.get(mine.id)
        assert got is not None and got.scope == "alice", "get returns the memory's scope"
        got = await store.get(project.id)
        assert got is not None and got.scope is None, "an unscoped memory reads back unscoped"
        newer = await store.supersede(mine.id, NewMemory("alice's corrected note", scope="alice"))
        assert newer.scope == "alice"
        chain = await store.history(newer.id)
        assert [r.scope for r in chain] == ["alice", "alice"]

    async def test_scopes_filter_every_read_in_the_query(self, store: MemoryStorage) -> None:
        seeded = await self._seed_scopes(store)
        ids = {scope: {r.id for r in records} for scope, records in seeded.items()}

        def scopes_of(hits: list[Any]) -> set[str]:
            return {(h.record if hasattr(h, "record") else h).scope or "" for h in hits}

        alice = await store.search_by_keyword("harbor", limit=5, scopes=("", "alice"))
        assert scopes_of(alice) <= {"", "alice"}, "a reader of alice sees no other scope"
        assert len(alice) == 5, (
            "the scope filter is part of the query: the limit counts only visible memories "
            "(bob's 30 better-ranked memories must not crowd alice's out)"
        )
        assert {h.record.id for h in alice} == ids[""] | ids["alice"]
        project = await store.search_by_keyword("harbor", limit=50, scopes=("",))
        assert {h.record.id for h in project} == ids[""], "an unscoped reader sees only unscoped"
        assert await store.search_by_keyword("harbor", scopes=()) == [], "no scope: nothing"
        cjk = await store.search_by_keyword("记忆", limit=50, scopes=("", "王芳"))
        assert {h.record.id for h in cjk} == ids["王芳"], "a scope in any script"
        assert await store.search_by_keyword("记忆", limit=50, scopes=("", "alice")) == []
        every = await store.search_by_keyword("harbor", limit=100)
        assert len(every) == 36, "without scopes= a search reads every memory (the owner's)"
        assert (
            scopes_of(
                await store.search_by_keyword("harbor", source="persona", scopes=("", "alice"))
            )
            == set()
        ), "source and scope filters combine"

    async def test_scopes_filter_every_list_and_count_in_the_query(
        self, store: MemoryStorage
    ) -> None:
        seeded = await self._seed_scopes(store)
        ids = {scope: {r.id for r in records} for scope, records in seeded.items()}
        listed = await store.list(limit=100, scopes=("", "alice"))
        assert {r.id for r in listed} == ids[""] | ids["alice"]
        page = await store.list(limit=2, offset=0, scopes=("alice",))
        assert {r.id for r in page} == ids["alice"], "list pages over visible memories only"
        assert len(await store.list(limit=100)) == 36
        assert await store.count(scopes=("", "alice")) == 5
        assert await store.count(scopes=("bob",)) == 30
        assert await store.count() == 36
        assert await store.count_by_source("persona", scopes=("", "alice")) == 0
        assert await store.count_by_source("persona", scopes=("bob",)) == 30
        assert await store.count_by_source("round_summary", scopes=("",)) == 3

    async def test_pinned_lists_current_pinned_memories_of_the_scopes(
        self, store: MemoryStorage
    ) -> None:
        if not isinstance(store, PinnedStorage):
            pytest.skip("backend lists no pins (no pinned(); the manager scans list())")
        plain = await store.add(NewMemory("not pinned"))
        mine = await store.add(NewMemory("alice's pin", scope="alice", meta={"pinned": {}}))
        theirs = await store.add(NewMemory("bob's pin", scope="bob", meta={"pinned": {}}))
        project = await store.add(NewMemory("the project's pin", meta={"pinned": {"by": "x"}}))
        assert [r.id for r in await store.pinned(scopes=("", "alice"))] == [project.id, mine.id]
        assert [r.id for r in await store.pinned(scopes=("bob",))] == [theirs.id]
        assert len(await store.pinned()) == 3 and plain.id not in {
            r.id for r in await store.pinned()
        }
        await store.update(mine.id, meta={})
        assert [r.id for r in await store.pinned(scopes=("alice",))] == [], "unpinned: gone"
        newer = await store.supersede(project.id, NewMemory("edited", meta={"pinned": {}}))
        assert [r.id for r in await store.pinned(scopes=("",))] == [newer.id], (
            "a superseded memory is not listed, its pinned successor is"
        )
        assert len(await store.pinned(limit=1)) == 1

    async def test_reopen_keeps_scopes(self, tmp_path: Path) -> None:
        if not self.persistent:
            pytest.skip("backend is not persistent")
        store = await self.open_storage(tmp_path)
        await store.add(NewMemory("alice's harbor", scope="alice"))
        await store.add(NewMemory("the project's harbor"))
        await store.close()
        again = await self.open_storage(tmp_path)
        try:
            hits = await again.search_by_keyword("harbor", scopes=("",))
            assert [h.record.content for h in hits] == ["the project's harbor"], (
                "a reopened store keeps every memory's scope"
            )
        finally:
            await again.close()

    # -- vectors (semantic recall; backends that keep them: memora.memory.vectors) ---------------

    async def _vector_store(self, store: MemoryStorage) -> VectorStorage:
        if not isinstance(store, VectorStorage):
            pytest.skip("backend keeps no vectors (no put_vectors/search_by_vector)")
        return store

    async def test_vectors_rank_by_cosine_with_filters(self, store: MemoryStorage) -> None:
        vs = await self._vector_store(store)
        dog, car, cat, old = await store.add_many(
            [
                NewMemory("Rex the puppy", round_id="r1"),
                NewMemory("the red automobile", round_id="r2"),
                NewMemory("a kitten", source="persona", round_id="r1"),
                NewMemory("an old dog note", round_id="r1"),
            ]
        )
        assert {r.id for r in await vs.missing_vectors("t:4")} == {dog.id, car.id, cat.id, old.id}
        await vs.put_vectors(
            "t:4",
            [
                (dog.id, normalize([1, 0, 0, 0])),
                (car.id, normalize([0, 1, 0, 0])),
                (cat.id, normalize([0.8, 0, 0.6, 0])),
                (old.id, normalize([0.9, 0.1, 0, 0])),
                ("no-such-memory", normalize([1, 1, 1, 1])),  # skipped, never an error
            ],
        )
        assert await vs.missing_vectors("t:4") == [], "every memory has a vector now"
        assert len(await vs.missing_vectors("other:8")) == 4, "vector spaces are separate"
        query = normalize([1, 0, 0, 0])
        hits = await vs.search_by_vector("t:4", query, limit=3)
        assert [h.record.id for h in hits] == [dog.id, old.id, cat.id], "closest first"
        assert abs(hits[0].score - 1.0) < 1e-4, "the score is the cosine"
        only = await vs.search_by_vector("t:4", query, source="persona")
        assert [h.record.id for h in only] == [cat.id], "source= filters"
        scoped = await vs.search_by_vector("t:4", query, round_ids=["r2"])
        assert [h.record.id for h in scoped] == [car.id], "round_ids= scopes"
        assert await vs.search_by_vector("t:4", query, round_ids=[]) == []
        assert await vs.search_by_vector("other:8", query) == [], "no vectors in that space"
        await store.supersede(old.id, NewMemory("the dog note, corrected"))
        hits = await vs.search_by_vector("t:4", query, limit=10)
        assert old.id not in {h.record.id for h in hits}, "superseded memories are excluded"
        with_old = await vs.search_by_vector("t:4", query, limit=10, include_superseded=True)
        assert old.id in {h.record.id for h in with_old}, "unless include_superseded"
        assert [r.content for r in await vs.missing_vectors("t:4")] == [
            "the dog note, corrected"
        ], "a new memory has no vector until one is put"

    async def test_vectors_respect_scopes(self, store: MemoryStorage) -> None:
        vs = await self._vector_store(store)
        mine = await store.add(NewMemory("alice's", scope="alice"))
        theirs = [await store.add(NewMemory(f"bob's {n}", scope="bob")) for n in range(60)]
        project = await store.add(NewMemory("the project's"))
        await vs.put_vectors(
            "t:2",
            [(mine.id, normalize([0.8, 0.6])), (project.id, normalize([0.6, 0.8]))]
            + [(r.id, normalize([1, 0])) for r in theirs],
        )
        hits = await vs.search_by_vector("t:2", [1.0, 0.0], limit=2, scopes=("", "alice"))
        assert [h.record.id for h in hits] == [mine.id, project.id], (
            "the scope filter is part of the vector search: bob's 60 closer vectors neither "
            "show nor crowd out what alice may see"
        )
        only = await vs.search_by_vector("t:2", [1.0, 0.0], limit=5, scopes=("",))
        assert [h.record.id for h in only] == [project.id]

    async def test_vectors_follow_updates_and_deletes(self, store: MemoryStorage) -> None:
        vs = await self._vector_store(store)
        a, b = await store.add_many([NewMemory("alpha text"), NewMemory("beta text")])
        await vs.put_vectors("t:2", [(a.id, normalize([1, 0])), (b.id, normalize([0, 1]))])
        assert (await vs.search_by_vector("t:2", [1.0, 0.0], limit=1))[0].record.id == a.id
        await store.update(a.id, meta={"k": 1})
        assert await vs.missing_vectors("t:2") == [], "a change of meta keeps the vector"
        await store.update(a.id, content="alpha, rewritten")
        assert [r.id for r in await vs.missing_vectors("t:2")] == [a.id], (
            "a memory whose content changed is embedded again"
        )
        assert a.id not in {h.record.id for h in await vs.search_by_vector("t:2", [1.0, 0.0])}, (
            "its old vector no longer finds it"
        )
        await store.delete(b.id)
        assert await vs.search_by_vector("t:2", [0.0, 1.0]) == [], "a deleted memory is not found"
        assert [r.id for r in await vs.missing_vectors("t:2")] == [a.id]

    async def test_vectors_are_current_after_writes(self, store: MemoryStorage) -> None:
        """A vector put after a search is found by the next one, a deleted memory's vector
        never belongs to a memory written after it, and the defaults are 10 hits and 32
        memories to embed."""
        vs = await self._vector_store(store)
        a = await store.add(NewMemory("alpha"))
        await vs.put_vectors("t:2", [(a.id, normalize([1, 0]))])
        assert [h.record.id for h in await vs.search_by_vector("t:2", [0.0, 1.0])] == [a.id]
        b = await store.add(NewMemory("beta"))
        await vs.put_vectors("t:2", [(b.id, normalize([0, 1]))])
        hits = await vs.search_by_vector("t:2", [0.0, 1.0])
        assert [h.record.id for h in hits] == [b.id, a.id], (
            "a vector put after a search is found by the next search"
        )
        await store.delete(b.id)
        c = await store.add(NewMemory("gamma"))
        assert [r.id for r in await vs.missing_vectors("t:2")] == [c.id], (
            "a memory written after a deleted one has no vector until one is put for it"
        )
        assert [h.record.id for h in await vs.search_by_vector("t:2", [0.0, 1.0])] == [a.id], (
            "a deleted memory's vector finds nothing, not the memory written after it"
        )
        many = await store.add_many([NewMemory(f"note {i}") for i in range(40)])
        missing = await vs.missing_vectors("t:2")
        assert len(missing) == 32, "missing_vectors() without a limit returns 32"
        await vs.put_vectors("t:2", [(r.id, normalize([1, 1])) for r in many])
        assert len(await vs.search_by_vector("t:2", [1.0, 1.0])) == 10, (
            "search_by_vector() without a limit returns 10"
        )
