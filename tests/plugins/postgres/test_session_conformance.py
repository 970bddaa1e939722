"""The session store conformance suite on PostgreSQL."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from memora.memory.sessions import SessionStore
from memora.testing.session_conformance import SessionStoreConformance


class TestPostgresSessions(SessionStoreConformance):
    @pytest.fixture(autouse=True)
    def _dsn(self, pg_dsn: str) -> None:
        self.dsn = pg_dsn

    async def open_store(self, path: Path) -> SessionStore:
        from memora_plugin_postgres.database import Database
        from memora_plugin_postgres.sessions import PostgresSessionStore

        return PostgresSessionStore(Database(self.dsn), f"conf-{uuid.uuid4().hex}")
