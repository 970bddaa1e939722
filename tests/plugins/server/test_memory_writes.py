"""Where a server writes its memories: on the SQLite store's worker thread, where the rounds of
many conversations share commits (``plugins.sqlite.write_inline`` off), unless the user's
config says otherwise."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx2

from memora.testing import ScriptedProvider, text

from .conftest import project_dir, read_events, scripted, serve


async def _rounds_remembered(tmp_path: Path) -> tuple[object, int]:
    """Serve one project, run one turn; the memory store's ``write_inline`` and how many
    memories the turn left."""
    options = scripted(tmp_path, ScriptedProvider(default=text("the ferry leaves at ten")))
    async with (
        serve(project_dir(tmp_path), **options) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=30) as client,
    ):
        r = await client.post("/v1/projects/proj/sessions", json={})
        sid = r.json()["id"]
        async with client.stream(
            "POST", f"/v1/projects/proj/sessions/{sid}/turns", json={"text": "when is the ferry?"}
        ) as turn:
            assert [e.type for e in await read_events(turn)][-1] == "done"
        storage = srv.app.state.hub.project("proj").runtime.memory.storage
        for _ in range(100):  # the round's memory is written after `done`
            if await storage.count():
                break
            await asyncio.sleep(0.05)
        return getattr(storage, "write_inline", None), await storage.count()


async def test_a_server_writes_memories_on_the_worker_unless_the_user_says(
    tmp_path: Path,
) -> None:
    assert await _rounds_remembered(tmp_path / "a") == (False, 1)
    user = tmp_path / "b" / "user"
    user.mkdir(parents=True)
    (user / "config.json").write_text(json.dumps({"plugins": {"sqlite": {"write_inline": True}}}))
    assert await _rounds_remembered(tmp_path / "b") == (True, 1)
