"""A memory PostgreSQL's full-text index cannot hold whole is still stored whole and found."""

from __future__ import annotations

import uuid

import pytest

from memora.memory import NewMemory
from memora_plugin_postgres.database import Database
from memora_plugin_postgres.storage import PostgresStorage


@pytest.mark.parametrize(
    ("content", "query"),
    [
        # one word past PostgreSQL's 2,046-byte lexeme limit (a base64 blob, a minified line)
        ("the deploy key is " + "Q" * 3000 + " rotated monthly", "rotated"),
        ("中文" * 2000 + " 长期记忆", "长期记忆"),
        # 110,000 distinct words: past the 1 MiB a tsvector holds
        ("kiwi " + " ".join(f"w{i:06d}x" for i in range(110_000)), "kiwi"),
    ],
)
async def test_a_memory_past_the_index_limits_is_kept_and_found(
    pg_dsn: str, content: str, query: str
) -> None:
    store = PostgresStorage(Database(pg_dsn), namespace=f"limits-{uuid.uuid4().hex}")
    try:
        record = await store.add(NewMemory(source="round_summary", content=content))
        hits = await store.search_by_keyword(query)
        assert [h.record.id for h in hits] == [record.id]
        stored = await store.get(record.id)
        assert stored is not None and stored.content == content  # never cut
    finally:
        await store.close()
