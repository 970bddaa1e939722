"""`memora serve` with its project on a small disk that fills up (a 2 MiB tmpfs, as root;
skipped with the reason elsewhere): every turn whose `done` said `saved: true` is read back
through the API, none that said `saved: false` is there, a request that needs room on the
disk (a fork, an archive flag) is refused with `507 STORAGE_FULL`, and once space is back the
session goes on."""

from __future__ import annotations

import json
from pathlib import Path

import httpx2

from memora.testing import ScriptedProvider, text
from tests.small_disk import fill, small_disk

from .conftest import read_events, scripted, serve

TURNS = 20
FULL_AT, FREED_AT = 3, 14


async def test_a_full_disk_through_the_server(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", size="2m") as disk:
        project = disk / "proj"
        project.mkdir()
        provider = ScriptedProvider([text(f"answer {n} " + "z" * 1500) for n in range(TURNS)])
        options = scripted(tmp_path, provider)
        options["strategy_override"] = {"reflect": {"summary": "off"}}
        saved: dict[str, bool] = {}
        async with (
            serve(project, **options) as srv,
            httpx2.AsyncClient(base_url=srv.url, timeout=30) as client,
        ):
            sid = (await client.post("/v1/projects/proj/sessions", json={})).json()["id"]
            session = f"/v1/projects/proj/sessions/{sid}"
            filler = None
            for n in range(TURNS):
                if n == FULL_AT:
                    filler = fill(disk, leave_pages=3)
                if n == FREED_AT:
                    # a fork needs a file of its own: no room for it, and the client is told
                    fork = await client.post(session + "/fork", json={})
                    archive = await client.post(session + "/archive")
                    assert filler is not None
                    filler.unlink()
                async with client.stream(
                    "POST", session + "/turns", json={"text": f"question {n}"}
                ) as r:
                    assert r.status_code == 200
                    done = (await read_events(r))[-1].data
                assert done["type"] == "done" and done["answer"].startswith(f"answer {n} ")
                saved[f"question {n}"] = done["saved"]
            read = await client.get(session)
            assert read.status_code == 200, read.text
            rounds = [r["user"] for r in read.json()["rounds"]]
        unsaved = [q for q, ok in saved.items() if not ok]
        assert unsaved, "the disk never filled: the test proves nothing"
        assert all(saved[f"question {n}"] for n in range(FREED_AT, TURNS))
        assert rounds == [q for q, ok in saved.items() if ok]
        # the log holds whole lines only, and no word of an unsaved turn
        for log in (project / ".memora" / "data" / "sessions" / sid).glob("*.jsonl"):
            data = log.read_bytes()
            assert data.endswith(b"\n")
            users = {
                line.get("user") or line.get("content")
                for line in map(json.loads, data.splitlines())
            }
            assert not users & set(unsaved)
        for refused in (fork, archive):  # and nothing of either was kept
            assert refused.status_code == 507, refused.text
            assert refused.json()["error"]["code"] == "STORAGE_FULL"
        assert read.json()["archived"] is False
