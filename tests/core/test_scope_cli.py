"""`--scope` and `--all-scopes` at the terminal (#39 item 2): `memora memory ...`, `memora
sessions ...`, `memora logs` and `memora run` read and write as the scope they are given; the
default is the project's unscoped memory; export says what it left out; import keeps scopes;
a memory file no writer has opened since scopes came is still read."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

from click.testing import CliRunner

from memora import Agent
from memora.cli.main import build_cli
from memora.memory.sqlite_store import SqliteStorage, open_sqlite_storage
from memora.memory.types import NewMemory
from memora.testing import ScriptedProvider, text
from tests.core.test_chat_cli import Script, _env, say, server  # noqa: F401
from tests.core.test_init_base_url import _memora


def _seed(project: Path) -> None:
    data = project / ".memora" / "data"

    async def main() -> None:
        for user, said in ((None, "harbor opens at six"), ("alice", "harbor pass 4711")):
            async with Agent(
                project_path=project,
                data_dir=data,
                provider=ScriptedProvider(default=text("noted")),
                load_entrypoints=False,
                memory_scope=user,
                session_id=f"s-{user or 'project'}",
            ) as agent:
                [c async for c in agent.chat(said)]
                await agent.idle()
                await agent.memory.write(NewMemory(f"{user or 'project'} river note"))

    asyncio.run(main())


def _cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(build_cli(), list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_memory_and_sessions_commands_keep_to_the_scope(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    _seed(project)
    where = ["--project", str(project)]

    code, out, _ = _cli("memory", "search", "harbor", "--json", *where)
    assert code == 0
    assert [h.get("scope") for h in json.loads(out)["results"]] == [None]
    code, out, _ = _cli("memory", "search", "harbor", "--json", "--scope", "alice", *where)
    assert sorted(h.get("scope") or "" for h in json.loads(out)["results"]) == ["", "alice"]
    code, out, _ = _cli("memory", "search", "harbor", "--scope", "alice", *where)
    assert "(alice)" in out, "the text view names the scope"
    code, out, _ = _cli("memory", "search", "pass", "--json", "--scope", "bob", *where)
    assert json.loads(out)["results"] == [], "bob does not see alice's"
    code, out, _ = _cli("memory", "stats", "--json", "--all-scopes", *where)
    assert json.loads(out)["total"] == 4
    code, out, _ = _cli("memory", "stats", "--json", *where)
    assert json.loads(out)["total"] == 2

    # show / forget of another scope's memory: not found; its own scope: works
    code, out, _ = _cli("memory", "search", "4711", "--json", "--scope", "alice", *where)
    alice_id = json.loads(out)["results"][0]["id"]
    result = CliRunner().invoke(build_cli(), ["memory", "show", alice_id, *where])
    assert result.exit_code != 0 and "no memory" in result.output
    code, out, _ = _cli("memory", "show", alice_id, "--scope", "alice", *where)
    assert code == 0 and "scope alice" in out

    # pin / pinned / unpin as alice
    code, out, _ = _cli("memory", "pin", alice_id, "--scope", "alice", *where)
    assert code == 0 and "pinned" in out
    code, out, _ = _cli("memory", "pinned", "--json", "--scope", "alice", *where)
    assert [r["id"] for r in json.loads(out)["pinned"]] == [alice_id]
    code, out, _ = _cli("memory", "pinned", *where)
    assert "nothing pinned" in out, "the project's view has no pins of alice's"
    code, out, _ = _cli("memory", "show", alice_id, "--scope", "alice", *where)
    assert "pinned:" in out and "cli:" in out, "who pinned it, and when"
    code, out, _ = _cli("memory", "unpin", alice_id, "--scope", "alice", *where)
    assert code == 0
    code, out, _ = _cli("memory", "pinned", "--json", "--scope", "alice", *where)
    assert json.loads(out)["pinned"] == []

    # export: the scope's own, saying what was left; --all-scopes: everything, scopes kept
    code, out, err = _cli("memory", "export", *where)
    assert len(out.splitlines()) == 2 and "2 memories of other scopes were not exported" in err
    code, out, _ = _cli("memory", "export", "--all-scopes", *where)
    lines = [json.loads(line) for line in out.splitlines()]
    assert sorted(line.get("scope") or "" for line in lines) == ["", "", "alice", "alice"]
    dump = tmp_path / "all.jsonl"
    dump.write_text(out, encoding="utf-8")
    other = tmp_path / "other"
    other.mkdir()
    code, out, _ = _cli("memory", "import", str(dump), "--project", str(other))
    assert code == 0 and "imported 4" in out
    code, out, _ = _cli("memory", "search", "4711", "--json", "--project", str(other))
    assert json.loads(out)["results"] == [], "imported memories keep their scope"
    code, out, _ = _cli(
        "memory", "search", "4711", "--json", "--scope", "alice", "--project", str(other)
    )
    assert len(json.loads(out)["results"]) == 1

    # sessions and logs
    code, out, _ = _cli("sessions", "list", "--json", *where)
    assert [s["id"] for s in json.loads(out)["sessions"]] == ["s-project"]
    code, out, _ = _cli("sessions", "list", "--json", "--scope", "alice", *where)
    assert [s["id"] for s in json.loads(out)["sessions"]] == ["s-alice"]
    result = CliRunner().invoke(build_cli(), ["sessions", "show", "s-alice", *where])
    assert result.exit_code != 0 and "belongs to scope alice" in result.output
    code, out, _ = _cli("logs", "--json", "--scope", "alice", *where)
    assert [r["user"] for r in json.loads(out)["rounds"]] == ["harbor pass 4711"]
    code, out, _ = _cli("logs", "--json", "--all-scopes", *where)
    assert len(json.loads(out)["rounds"]) == 2

    bad = CliRunner().invoke(build_cli(), ["memory", "stats", "--scope", " x", *where])
    assert bad.exit_code == 2 and "--scope" in bad.output
    both = CliRunner().invoke(
        build_cli(), ["memory", "stats", "--scope", "x", "--all-scopes", *where]
    )
    assert both.exit_code == 2 and "exclude each other" in both.output


def test_a_file_from_before_scopes_is_read_as_unscoped(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    store = SqliteStorage(path)
    asyncio.run(store.add(NewMemory("harbor from an older memora")))
    store.close_sync()
    db = sqlite3.connect(path)  # the file as a memora before scopes left it
    db.execute("DROP INDEX memories_scope")
    db.execute("ALTER TABLE memories DROP COLUMN scope")
    db.execute("DELETE FROM _memora_migrations WHERE name = '003_scopes'")
    db.commit()
    db.close()

    async def read() -> list[object]:
        view = open_sqlite_storage(path, read_only=True)  # `memora mcp serve` opens it so
        try:
            hits = await view.search_by_keyword("harbor", scopes=("",))
            return [h.record.scope for h in hits]
        finally:
            await view.close()

    assert asyncio.run(read()) == [None]


def test_run_remembers_in_its_scope(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    """`memora run --scope alice` (or MEMORA_SCOPE): the round is alice's, found with her
    scope, not without."""
    url, script = server
    env = _env(tmp_path)
    env["MEMORA_API_KEY"] = "sk-test"
    project = tmp_path / "shop"
    project.mkdir()
    script.answers.append(say("noted"))
    ran = _memora(
        env,
        "run",
        "--base-url",
        url,
        "--model",
        "m",
        "--scope",
        "alice",
        "my kayak is green",
        cwd=project,
    )
    assert ran.returncode == 0, ran.stderr
    found = _memora(env, "memory", "search", "kayak", "--json", "--scope", "alice", cwd=project)
    assert [h.get("scope") for h in json.loads(found.stdout)["results"]] == ["alice"]
    env["MEMORA_SCOPE"] = "bob"
    hidden = _memora(env, "memory", "search", "kayak", "--json", cwd=project)
    assert json.loads(hidden.stdout)["results"] == []
