"""Every built-in backend runs the shared conformance suite."""

from __future__ import annotations

from pathlib import Path

from memora.memory import InMemoryStorage, JsonFileStorage, MemoryStorage
from memora.memory.sqlite_store import SqliteStorage
from memora.plugins import create_plugin_manager
from memora.testing.storage_conformance import StorageConformance


class TestInMemory(StorageConformance):
    async def open_storage(self, path: Path) -> MemoryStorage:
        return InMemoryStorage()


class TestJsonFile(StorageConformance):
    persistent = True

    async def open_storage(self, path: Path) -> MemoryStorage:
        return JsonFileStorage(path / "memories.json")


class TestSqlite(StorageConformance):
    persistent = True

    async def open_storage(self, path: Path) -> MemoryStorage:
        return SqliteStorage(path / "memory.db")


class TestSqliteThroughPlugin(StorageConformance):
    """The same backend, created by name through the plugin manager."""

    persistent = True

    async def open_storage(self, path: Path) -> MemoryStorage:
        store: MemoryStorage = create_plugin_manager(load_entrypoints=False).create(
            "storage", "sqlite", {"path": path}
        )
        return store
