"""The storage conformance suite, unchanged, against a real PostgreSQL server."""

from __future__ import annotations

from pathlib import Path

import pytest

from memora.memory.storage import MemoryStorage
from memora.testing.storage_conformance import StorageConformance
from memora_plugin_postgres.database import Database
from memora_plugin_postgres.storage import PostgresStorage


class TestPostgresConformance(StorageConformance):
    persistent = True

    @pytest.fixture(autouse=True)
    def _dsn(self, pg_dsn: str) -> None:
        self.dsn = pg_dsn

    async def open_storage(self, path: Path) -> MemoryStorage:
        return PostgresStorage(Database(self.dsn), namespace=str(path))
