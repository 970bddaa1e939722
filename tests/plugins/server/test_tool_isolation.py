"""One user's tools never see another user's data (#68 item 2).

On a `memora serve` with users, bob asked for `grep` over `.memora/data/sessions`, approved his own
pause and got alice's session log.  Now every process a tool starts — commands, scripts,
`run_code` — runs where memora's data folder and the user's config folder (keys, server tokens)
are empty, memora's own process is closed to it, and the file tools refuse both folders.  Bob
runs `grep`, `cat`, `find`, `python -c` and `run_code` at them, by absolute path, approved, on
SQLite and on PostgreSQL (whose server demands a password memora never hands to a tool), and
none of alice's words comes back."""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from memora.llm.types import LLMRequest
from memora.testing import ScriptedProvider, ScriptedResponse, text, tool_call
from memora_plugin_server.config import ServerSettings, TokenEntry, hash_token

from .conftest import project_dir, read_events, serve

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux namespaces"),
]

SECRET = "heron-4711-kestrel"
PART = "4711-kes"
"""What bob's commands look for: a part of alice's words, so that a command echoed back (in an
error) is not mistaken for her words coming back."""
TOKENS = ServerSettings(
    tokens=[
        TokenEntry(name="alice", hash=hash_token("tok-alice"), scope="alice"),
        TokenEntry(name="bob", hash=hash_token("tok-bob"), scope="bob"),
    ]
)
ALICE = {"Authorization": "Bearer tok-alice"}
BOB = {"Authorization": "Bearer tok-bob"}


class Model:
    """Runs the tool a user's message names (``TOOL name {json args}``) and keeps what each
    tool gave back, as the model would read it."""

    def __init__(self) -> None:
        self.results: list[str] = []

    def __call__(self, request: LLMRequest) -> ScriptedResponse:
        last = request.messages[-1]
        if last.role == "tool":
            self.results.append(last.content)
            return text("done")
        if last.role == "user" and last.content.startswith("TOOL "):
            _, name, args = last.content.split(" ", 2)
            return tool_call((name, json.loads(args), "c-" + uuid.uuid4().hex[:8]))
        return text(f"noted: {last.content}")


@pytest.fixture(params=["sqlite", "postgres"])
def backend(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, Any]]:
    """The runtime options of a backend; on PostgreSQL, a server that demands a password (in
    memora's environment, where a deployment keeps it)."""
    if request.param == "sqlite":
        yield {}
        return
    from memora_plugin_postgres.testing import ClusterUnavailable, temporary_cluster

    try:
        with temporary_cluster(password="pw-" + uuid.uuid4().hex) as dsn:
            namespace = f"iso-{os.getpid()}-{time.time_ns()}"
            monkeypatch.setenv("MEMORA_POSTGRES_DSN", dsn)
            yield {
                "storage": "postgres",
                "plugin_options": {"postgres": {"namespace": namespace}},
                "dsn": dsn,
            }
    except ClusterUnavailable as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"PostgreSQL tests cannot run: {exc}")
        pytest.skip(f"PostgreSQL tests SKIPPED: {exc}")


def _pack(user_dir: Path) -> None:
    folder = user_dir / "role-packs" / "coder"
    folder.mkdir(parents=True)
    manifest = {
        "name": "coder",
        "formatVersion": "1.0.0",
        "capabilities": [{"capability": "code:execute"}],
        "strategy": {"reflect": {"summary": "off"}},
    }
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


async def _approved(client: httpx2.AsyncClient, base: str, said: str) -> list[Any]:
    """Bob's turn: the tool call pauses for his approval, which he gives."""
    async with client.stream("POST", f"{base}/turns", json={"text": said}, headers=BOB) as r:
        assert r.status_code == 200, await r.aread()
        events = await read_events(r)
    if events[-1].type == "paused":
        call = next(e.data["tool_call_id"] for e in events if e.type == "approval_pending")
        async with client.stream(
            "POST", f"{base}/approvals/{call}", json={"decision": "approve"}, headers=BOB
        ) as r:
            assert r.status_code == 200
            events += await read_events(r)
    assert events[-1].type == "done", events[-1].data
    return events


def _database_folder(dsn: str) -> str:
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute("SHOW data_directory").fetchone()
    assert row is not None
    return str(row[0])


async def test_bobs_tools_find_none_of_alices_words(
    tmp_path: Path, backend: dict[str, Any]
) -> None:
    project = project_dir(tmp_path)
    user_dir = tmp_path / "user"
    _pack(user_dir)
    model = Model()
    dsn = backend.pop("dsn", None)
    options: dict[str, Any] = {
        "provider": ScriptedProvider(default=model),
        "config_dir": user_dir,
        "active_role_pack": "coder",
        **backend,
    }
    user_dir.chmod(0o700)  # as memora makes it
    (user_dir / "keys.json").write_text(json.dumps({"shop": "sk-" + SECRET}))
    os.chmod(user_dir / "keys.json", 0o600)
    async with serve(project, settings=TOKENS, **options) as srv:
        data = Path(srv.app.state.hub.project("proj").runtime.options.data_dir).resolve()
        async with httpx2.AsyncClient(base_url=srv.url, timeout=60) as client:
            made = await client.post("/v1/projects/proj/sessions", json={}, headers=ALICE)
            alice = f"/v1/projects/proj/sessions/{made.json()['id']}"
            async with client.stream(
                "POST", f"{alice}/turns", json={"text": f"my code is {SECRET}"}, headers=ALICE
            ) as r:
                assert (await read_events(r))[-1].type == "done"
            made = await client.post("/v1/projects/proj/sessions", json={}, headers=BOB)
            bob = f"/v1/projects/proj/sessions/{made.json()['id']}"

            places = [str(project), str(data), str(user_dir)]
            if dsn is not None:
                places.append(_database_folder(dsn))
            listing = (
                "import os,sys\n"
                f"for top in {places!r}:\n"
                "    for d, _, fs in os.walk(top):\n"
                "        for f in fs:\n"
                "            p = os.path.join(d, f)\n"
                "            try: b = open(p, 'rb').read()\n"
                "            except OSError as e: print('unreadable', p, e.strerror); continue\n"
                f"            print(p, {PART.encode()!r} in b)\n"
                f"print('env', [k for k, v in os.environ.items() if {PART!r} in v])\n"
                "pid = os.getppid()\n"
            )
            commands = [
                f"grep -r -a {PART} {' '.join(places)}; echo grep-done",
                f"find {data} {user_dir} -type f -exec cat {{}} + ; echo cat-done",
                f"find {data} {user_dir} | head -50",
                f"cat {data}/sessions/* {user_dir}/server.json {user_dir}/keys.json; echo cat2",
                f"python3 -c {shlex.quote(listing)}",
                f"cat /proc/{os.getpid()}/environ /proc/{os.getpid()}/cmdline | tr '\\0' ' '",
                f"ls -l /proc/{os.getpid()}/fd/ 2>&1 | head; echo fd-done",
            ]
            if dsn is not None:
                port = dsn.split("port=")[1].split()[0]
                commands.append(
                    f"psql -h 127.0.0.1 -p {port} -U memora -d memora -w -c "
                    f'"select * from pg_tables" 2>&1; echo psql-done'
                )
            before = len(model.results)
            for command in commands:
                args = json.dumps({"command": command, "timeout": 60})
                await _approved(client, bob, f"TOOL run_command {args}")
            snippet = json.dumps({"code": listing, "timeout": 60})
            await _approved(client, bob, f"TOOL run_code {snippet}")
            for path in (f"{data}/sessions", ".memora/data", str(user_dir / "keys.json")):
                await _approved(client, bob, f"TOOL read_file {json.dumps({'path': path})}")
                await _approved(client, bob, f"TOOL list_dir {json.dumps({'path': path})}")
            seen = model.results[before:]
            assert len(seen) == len(commands) + 1 + 6
            leaked = [s for s in seen if SECRET in s]
            assert leaked == [], leaked[0][:2000]
            # the commands ran (a refusal would hide nothing and prove nothing)
            assert any("grep-done" in s for s in seen) and any("cat-done" in s for s in seen)
            assert any("[exit 0]" in s for s in seen), "\n---\n".join(seen)
            assert all(s.startswith("PATH_NOT_ALLOWED") for s in seen[-6:]), seen[-6:]
            assert sum("is memora's own data" in s for s in seen) == 4, seen[-6:]

            # alice's words are there all along, for memora itself
            mine = await client.get(alice, headers=ALICE)
            assert SECRET in json.dumps(mine.json()["rounds"])
