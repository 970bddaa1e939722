"""A person can see, correct and forget what memora remembers (issue #39, item 3): through the
library (`agent.memory.get/edit/forget`) and the command line (`memora memory show/edit/
forget`); each change supersedes the memory, so its chain keeps who changed it and when, and
recall no longer finds the old text."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from memora.cli.main import cli
from memora.errors import ConflictError, InvalidInputError, NotFoundError
from memora.events import EventEmitter
from memora.memory import MemoryManager
from memora.memory.simple_backends import InMemoryStorage
from memora.memory.sqlite_store import open_sqlite_storage
from memora.memory.types import NewMemory


async def test_edit_and_forget_in_the_library(tmp_path: Path) -> None:
    for storage in (InMemoryStorage(), open_sqlite_storage(tmp_path / "memory.db")):
        manager = MemoryManager(storage, EventEmitter())
        first = await manager.write(
            NewMemory("The user prefers PostgreSQL for the shop", name="database", round_id="r1")
        )
        fixed = await manager.edit(first.id, "The user prefers SQLite for the shop", by="alice")
        assert fixed.id != first.id and fixed.round_id == "r1" and fixed.name == "database"
        assert fixed.meta["edited"]["by"] == "alice" and fixed.meta["edited"]["from"] == first.id
        assert [h.record.id for h in await manager.search("PostgreSQL")] == []
        assert [h.record.id for h in await manager.search("SQLite")] == [fixed.id]
        # the old text is superseded: editing it again is a conflict naming the current one
        with pytest.raises(ConflictError, match=fixed.id):
            await manager.edit(first.id, "again", by="alice")
        with pytest.raises(InvalidInputError):
            await manager.edit(fixed.id, "   ", by="alice")

        gone = await manager.forget(fixed.id, by="bob")
        assert gone.content == "" and gone.meta["forgotten"]["by"] == "bob"
        assert await manager.search("SQLite") == []
        chain = await manager.history(first.id)
        assert [r.id for r in chain] == [first.id, fixed.id, gone.id]
        assert chain[1].superseded_by == gone.id
        with pytest.raises(NotFoundError):
            await manager.get("no-such-memory")
        await storage.close()


def test_show_edit_forget_from_the_command_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    src = tmp_path / "in.jsonl"
    src.write_text(
        json.dumps(
            {
                "id": "m1",
                "source": "round_summary",
                "name": "数据库",
                "content": "用户选择 PostgreSQL",
                "session_id": "s1",
                "round_id": "r1",
            },
            ensure_ascii=False,
        )
        + "\n",
        encoding="utf-8",
    )
    runner = CliRunner()
    assert (
        runner.invoke(cli, ["memory", "import", str(src), "--data-dir", str(data)]).exit_code == 0
    )
    shown = runner.invoke(cli, ["memory", "show", "m1", "--data-dir", str(data)])
    assert shown.exit_code == 0 and "用户选择 PostgreSQL" in shown.output
    assert "session s1 · round r1" in shown.output

    edited = runner.invoke(
        cli, ["memory", "edit", "m1", "--content", "用户选择 SQLite", "--data-dir", str(data)]
    )
    assert edited.exit_code == 0, edited.output
    new_id = edited.output.split()[0]
    found = runner.invoke(cli, ["memory", "search", "SQLite", "--json", "--data-dir", str(data)])
    assert [r["id"] for r in json.loads(found.output)["results"]] == [new_id]
    again = runner.invoke(cli, ["memory", "edit", "m1", "--content", "x", "--data-dir", str(data)])
    assert again.exit_code == 1 and new_id in again.output  # superseded: edit the current one

    forgot = runner.invoke(cli, ["memory", "forget", new_id, "--data-dir", str(data)])
    assert forgot.exit_code == 0
    found = runner.invoke(cli, ["memory", "search", "SQLite", "--json", "--data-dir", str(data)])
    assert json.loads(found.output)["results"] == []
    history = runner.invoke(cli, ["memory", "history", "m1", "--json", "--data-dir", str(data)])
    chain = json.loads(history.output)["history"]
    assert len(chain) == 3 and chain[-1]["meta"]["forgotten"]["by"].startswith("cli")
    missing = runner.invoke(cli, ["memory", "show", "nope", "--data-dir", str(data)])
    assert missing.exit_code == 1 and "no memory 'nope'" in missing.output


def test_show_and_history_say_who_changed_a_memory_and_when(tmp_path: Path) -> None:
    """A person reads the audit as sentences (who, when, which memory it replaced), not as
    JSON; an imported memory whose ``meta`` has another shape is shown as it is."""
    data = tmp_path / "data"
    src = tmp_path / "in.jsonl"
    rows = [
        {"id": "m1", "source": "round_summary", "name": "猫", "content": "用户的猫叫小花"},
        {"id": "m2", "source": "round_summary", "content": "x", "meta": {"edited": "by hand"}},
        {"id": "m3", "content": "y", "meta": {"written": "model", "grounding": 0.875}},
    ]
    src.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    runner = CliRunner()
    assert (
        runner.invoke(cli, ["memory", "import", str(src), "--data-dir", str(data)]).exit_code == 0
    )
    edited = runner.invoke(
        cli, ["memory", "edit", "m1", "--content", "用户的猫叫小花，三岁", "--data-dir", str(data)]
    )
    new_id = edited.output.split()[0]
    shown = runner.invoke(cli, ["memory", "show", new_id, "--data-dir", str(data)])
    assert shown.exit_code == 0, shown.output
    assert re.search(
        r"edited: by cli\S* on \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(from m1\)", shown.output
    )
    assert "current ·" in shown.output and "created 20" in shown.output

    runner.invoke(cli, ["memory", "forget", new_id, "--data-dir", str(data)])
    history = runner.invoke(cli, ["memory", "history", "m1", "--data-dir", str(data)])
    last = history.output.strip().splitlines()[-2:]
    assert re.search(r"\(forgotten: by cli\S* on \d{4}-\d\d-\d\d [\d:]+ UTC\)", last[0])
    assert "(current)" not in history.output and last[1].strip() == "(no text)"
    tombstone = last[0].split()[0]
    shown = runner.invoke(cli, ["memory", "show", tombstone, "--data-dir", str(data)])
    assert "forgotten ·" in shown.output and f"(was {new_id})" in shown.output

    odd = runner.invoke(cli, ["memory", "show", "m2", "--data-dir", str(data)])
    assert odd.exit_code == 0 and 'edited: "by hand"' in odd.output
    summary = runner.invoke(cli, ["memory", "show", "m3", "--data-dir", str(data)])
    assert "written: the model's summary, checked against the round" in summary.output
    assert "grounding: 0.88" in summary.output
    assert "current · from no session" in summary.output  # not "session None · round None"


async def test_a_corrected_word_no_longer_names_or_finds_the_memory(tmp_path: Path) -> None:
    """A round's memory is named after the request; when a person corrects a word of it, the
    name follows (it is shown with the memory and searched with it), in English and Chinese;
    a name the correction leaves true stays, and a host's own name wins."""
    for storage in (InMemoryStorage(), open_sqlite_storage(tmp_path / "memory.db")):
        manager = MemoryManager(storage, EventEmitter())
        kayak = await manager.write(
            NewMemory(
                "User: My kayak is green, locker 4711\nAssistant: Noted.",
                name="My kayak is green, locker 4711",
                source="round_summary",
            )
        )
        fixed = await manager.edit(
            kayak.id, "User: My kayak is blue, locker 4712\nAssistant: Noted."
        )
        assert fixed.name == "My kayak is blue, locker 4712"
        assert await manager.search("green") == [] and await manager.search("4711") == []
        assert [h.record.id for h in await manager.search("blue kayak")] == [fixed.id]

        boat = await manager.write(
            NewMemory("User: 我的皮划艇是绿色的\nAssistant: 好的", name="我的皮划艇是绿色的")
        )
        blue = await manager.edit(boat.id, "User: 我的皮划艇是蓝色的\nAssistant: 好的")
        assert blue.name == "我的皮划艇是蓝色的"
        assert await manager.search("绿色") == []

        # what the correction left true keeps its name; a host's name wins over both
        kept = await manager.edit(blue.id, "User: 我的皮划艇是蓝色的，放在车库\nAssistant: 好的")
        assert kept.name == "我的皮划艇是蓝色的"
        named = await manager.edit(kept.id, "User: sold the kayak", name="kayak sold")
        assert named.name == "kayak sold"
        await storage.close()
