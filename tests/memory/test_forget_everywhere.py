"""Forget everywhere (#68 item 6).

`memora memory forget` took a memory out of every recall path, but its text stayed in the
session log and `memora logs -q` printed it.  `forget --everywhere` also empties the memory's
history and forgets its round's text in the session's log (and in sessions forked from it),
leaving a tombstone that says who asked and when — checked on the files themselves.  Without
`--everywhere`, forget behaves as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from memora import Agent
from memora.testing import ScriptedProvider, text

SECRET = "otter-7731-vault"


def _memora(data: Path, project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORA_")}
    env["MEMORA_HOME"] = str(project.parent / "home")
    return subprocess.run(
        [sys.executable, "-m", "memora", *args, "--data-dir", str(data)],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def _conversation(project: Path, data: Path) -> tuple[str, str, str]:
    """A session whose first round says the secret (remembered as said), a fork of it, and
    a round about something else; the memory's id, the session's and the fork's."""
    provider = ScriptedProvider(default=text("noted"))
    async with Agent(
        project_path=project, data_dir=data, provider=provider, load_entrypoints=False
    ) as agent:
        await agent.chat_text(f"my vault code is {SECRET}")
        await agent.chat_text("the weather is fine today")
        await agent.idle()  # the rounds' memories are written
        hits = await agent.memory.search("vault")
        memory_id = hits[0].record.id
        first_round = hits[0].record.round_id
        session = agent.session_id
        fork = await agent.fork_session(first_round, switch=False)
        # a person corrected it once: the old text is in the chain too
        edited = await agent.memory.edit(memory_id, f"the vault code is {SECRET}!", by="ana")
    return edited.id, session, fork


def _bytes_under(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file())


async def test_forget_everywhere_from_the_command_line(tmp_path: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    data = project / ".memora" / "data"
    memory_id, session, fork = await _conversation(project, data)
    assert SECRET.encode() in _bytes_under(data)
    found = _memora(data, project, "logs", "-q", SECRET, "--json")
    assert len(json.loads(found.stdout)["rounds"]) == 2, "before: the round, and its fork's copy"

    done = _memora(data, project, "memory", "forget", memory_id, "--everywhere")
    assert done.returncode == 0, done.stderr
    assert "forgotten everywhere" in done.stdout and session in done.stdout and fork in done.stdout

    # nothing of it on disk: session logs, their caches, the memory database and its log
    assert SECRET.encode() not in _bytes_under(data)
    assert "7731" not in _memora(data, project, "logs", "-n", "50", "--json").stdout
    rounds = json.loads(_memora(data, project, "logs", "-n", "50", "--json").stdout)["rounds"]
    forgotten = [r for r in rounds if r["forgotten"]]
    assert len(forgotten) == 2 and {r["session_id"] for r in forgotten} == {session, fork}
    assert forgotten[0]["forgotten"]["by"].startswith("cli") and forgotten[0]["forgotten"]["at"]
    assert any("the weather is fine" in r["user"] for r in rounds), "other rounds stay"
    shown = _memora(data, project, "logs", "-n", "50")
    assert "(forgotten by cli" in shown.stdout and SECRET not in shown.stdout
    history = _memora(data, project, "memory", "history", memory_id)
    assert SECRET not in history.stdout and "text forgotten everywhere" in history.stdout
    assert history.stdout.count("\n") >= 3, "the chain keeps its links"
    search = _memora(data, project, "memory", "search", "vault", "--json")
    assert json.loads(search.stdout)["results"] == []

    # the session goes on: an Agent reopening it sees the forgotten round, not the words
    provider = ScriptedProvider(default=text("fine"))
    async with Agent(
        project_path=project,
        data_dir=data,
        provider=provider,
        session_id=session,
        load_entrypoints=False,
    ) as agent:
        await agent.chat_text("what was my code?")
    sent = json.dumps([m.content for m in provider.requests[0].messages])
    assert SECRET not in sent and "[forgotten]" in sent


async def test_forget_without_everywhere_behaves_as_before(tmp_path: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    data = project / ".memora" / "data"
    memory_id, _, _ = await _conversation(project, data)
    done = _memora(data, project, "memory", "forget", memory_id)
    assert done.returncode == 0 and done.stdout.startswith("forgotten:")
    assert (
        json.loads(_memora(data, project, "memory", "search", "vault", "--json").stdout)["results"]
        == []
    )
    found = json.loads(_memora(data, project, "logs", "-q", SECRET, "--json").stdout)["rounds"]
    assert len(found) == 2, "the session log keeps the round's text"
