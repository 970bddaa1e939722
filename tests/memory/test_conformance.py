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


def test_a_failing_conformance_check_says_what_was_expected(tmp_path: Path) -> None:
    """Run as a plugin author runs it (plain pytest on their own test file): a backend that
    lists oldest first fails with the rule and the values, not a bare AssertionError."""
    import subprocess
    import sys

    (tmp_path / "test_broken.py").write_text(
        "from memora.memory import InMemoryStorage\n"
        "from memora.testing.storage_conformance import StorageConformance\n\n\n"
        "class Oldest(InMemoryStorage):\n"
        "    async def list(self, **kw):\n"
        "        return list(reversed(await super().list(**kw)))\n\n\n"
        "class TestBroken(StorageConformance):\n"
        "    async def open_storage(self, path):\n"
        "        return Oldest()\n",
        encoding="utf-8",
    )
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-k",
            "newest",
            "test_broken.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 1, r.stdout
    assert "list() is newest first (by created_at) and takes limit" in r.stdout
    assert "assert ['m4', 'p'] == ['p', 'm4']" in r.stdout
