"""The session store conformance suite on the built-in stores (jsonl, memory); the PostgreSQL
store runs it in tests/plugins/postgres."""

from __future__ import annotations

from pathlib import Path

from memora.memory.sessions import InMemorySessionStore, JsonlSessionStore, SessionStore
from memora.testing.session_conformance import SECRET, SessionStoreConformance


class TestJsonl(SessionStoreConformance):
    async def open_store(self, path: Path) -> SessionStore:
        return JsonlSessionStore(path)

    async def test_the_log_files_hold_none_of_it(self, tmp_path: Path) -> None:
        """Forgotten in the files themselves, not only in what the store reads back; the
        logs keep their size, so an append another process made meanwhile is never lost."""
        store = JsonlSessionStore(tmp_path)
        info = await store.create()
        await self._append_turn(store, info.id, "r1", f"code {SECRET}", f"ok {SECRET}")
        logs = sorted((tmp_path / "sessions" / info.id).glob("*.jsonl"))
        sizes = [p.stat().st_size for p in logs]
        assert SECRET.encode() in b"".join(p.read_bytes() for p in logs)
        assert await store.redact_round(info.id, "r1", {"by": "cli:ana", "at": 1.0})
        assert [p.stat().st_size for p in logs] == sizes
        for path in (tmp_path / "sessions" / info.id).iterdir():
            assert SECRET.encode() not in path.read_bytes(), path


class TestInMemory(SessionStoreConformance):
    async def open_store(self, path: Path) -> SessionStore:
        return InMemorySessionStore()
