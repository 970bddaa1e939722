"""Memories a person sees, corrects and forgets over `memora serve` (issue #39, item 3): one
memory whole, an edit that supersedes it, a forget — each audited with the token's name."""

from __future__ import annotations

from pathlib import Path

import httpx2

from memora.memory.types import NewMemory
from memora.testing import ScriptedProvider
from memora_plugin_server.config import ServerSettings, TokenEntry, hash_token

from .conftest import project_dir, scripted, serve


async def test_show_edit_forget_over_rest(tmp_path: Path) -> None:
    project = project_dir(tmp_path)
    settings = ServerSettings(
        tokens=[
            TokenEntry(name="ops", hash=hash_token("tok-w")),
            TokenEntry(name="viewer", hash=hash_token("tok-r"), access="read"),
        ]
    )
    async with serve(project, settings=settings, **scripted(tmp_path, ScriptedProvider())) as srv:
        runtime = srv.app.state.hub.project("proj").runtime
        first = await runtime.memory.write(
            NewMemory("The shop ships on Mondays", name="shipping", round_id="r1")
        )
        write = {"Authorization": "Bearer tok-w"}
        read = {"Authorization": "Bearer tok-r"}
        async with httpx2.AsyncClient(base_url=srv.url, timeout=30) as client:
            base = f"/v1/projects/proj/memory/{first.id}"
            shown = await client.get(base, headers=read)
            assert (
                shown.status_code == 200 and shown.json()["content"] == "The shop ships on Mondays"
            )
            refused = await client.post(f"{base}/edit", json={"content": "x"}, headers=read)
            assert refused.status_code == 403  # a read-only token sees, never changes
            edited = await client.post(
                f"{base}/edit", json={"content": "The shop ships on Tuesdays"}, headers=write
            )
            assert edited.status_code == 201
            new = edited.json()
            assert new["meta"]["edited"]["by"] == "token:ops"
            hits = await client.get("/v1/projects/proj/memory/search?q=ships", headers=read)
            assert [h["id"] for h in hits.json()["hits"]] == [new["id"]]
            stale = await client.post(f"{base}/edit", json={"content": "y"}, headers=write)
            assert stale.status_code == 409 and new["id"] in stale.json()["error"]["message"]
            gone = await client.post(f"/v1/projects/proj/memory/{new['id']}/forget", headers=write)
            assert gone.status_code == 201 and gone.json()["meta"]["forgotten"]["by"] == "token:ops"
            hits = await client.get("/v1/projects/proj/memory/search?q=ships", headers=read)
            assert hits.json()["hits"] == []
            missing = await client.get("/v1/projects/proj/memory/nope", headers=read)
            assert missing.status_code == 404
