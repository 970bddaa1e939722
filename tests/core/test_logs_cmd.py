"""`memora logs` (issue #41, item 2): past rounds across sessions, newest first, with the
tool calls, tokens and time; -n, --session, -q, --json; plain text when piped."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from memora import Agent
from memora.cli.main import cli
from memora.testing import ScriptedProvider, text, tool_call


async def _three_rounds(project: Path, data: Path) -> tuple[str, str]:
    provider = ScriptedProvider(
        [
            text("SQLite is a **file** database."),
            tool_call(("read_file", {"path": "notes.txt"}, "c1")),
            text("The notes say 第一行."),
            text("Third answer \x1b]0;title\x07 here."),
        ],
        name="openai:gpt-4o-mini",
    )
    async with Agent(
        project_path=project,
        data_dir=data,
        provider=provider,
        load_entrypoints=False,
        strategy_override={"reflect": {"summary": "off"}},
    ) as agent:
        first = agent.session_id
        await agent.run("what is SQLite?")
        second = await agent.new_session("other")
        await agent.run("read the notes")
        await agent.run("a third question")
    return first, second


def test_logs_across_sessions(tmp_path: Path) -> None:
    import asyncio

    project = tmp_path / "p"
    project.mkdir()
    (project / "notes.txt").write_text("第一行\n", encoding="utf-8")
    data = tmp_path / "data"
    first, second = asyncio.run(_three_rounds(project, data))

    runner = CliRunner()
    r = runner.invoke(cli, ["logs", "-n", "10", "--json", "--data-dir", str(data)])
    assert r.exit_code == 0, r.output
    rounds = json.loads(r.stdout)["rounds"]
    assert [x["user"] for x in rounds] == ["a third question", "read the notes", "what is SQLite?"]
    assert [x["session_id"] for x in rounds] == [second, second, first]
    read = rounds[1]
    (call,) = read["tools"]
    assert call["name"] == "read_file" and call["args"]["path"] == "notes.txt"
    assert call["ok"] and not call["blocked"] and "notes.txt" in call["summary"]
    assert read["usage"]["input_tokens"] > 0 and read["seconds"] >= 0
    assert {x["model"] for x in rounds} == {"openai:gpt-4o-mini"}  # which model answered

    one = runner.invoke(cli, ["logs", "-n", "1", "--json", "--data-dir", str(data)])
    assert [x["user"] for x in json.loads(one.output)["rounds"]] == ["a third question"]
    only = runner.invoke(cli, ["logs", "--session", first, "--json", "--data-dir", str(data)])
    assert [x["user"] for x in json.loads(only.output)["rounds"]] == ["what is SQLite?"]
    found = runner.invoke(cli, ["logs", "-q", "notes", "--json", "--data-dir", str(data)])
    assert [x["user"] for x in json.loads(found.output)["rounds"]] == ["read the notes"]

    plain = runner.invoke(cli, ["logs", "-n", "10", "--data-dir", str(data)])  # piped: plain
    assert plain.exit_code == 0
    assert "> read the notes" in plain.output and "`read_file`" in plain.output
    assert "SQLite is a **file** database." in plain.output
    assert "· openai:gpt-4o-mini · " in plain.output
    assert "\x1b" not in plain.output  # a model's escape sequence never reaches the terminal
    assert (
        runner.invoke(cli, ["logs", "--data-dir", str(tmp_path / "empty")]).output == "no rounds\n"
    )


def test_model_label_names_the_model_once() -> None:
    from types import SimpleNamespace

    from memora.llm.provider import model_label
    from memora.memory.sessions import RoundRecord

    assert model_label(SimpleNamespace(name="openai:gpt-4o-mini", model="gpt-4o-mini")) == (
        "openai:gpt-4o-mini"
    )
    local = SimpleNamespace(name="llamacpp", model_path="/m/SmolLM2-135M.Q8_0.gguf")
    assert model_label(local) == "llamacpp SmolLM2-135M.Q8_0.gguf"
    assert model_label(ScriptedProvider()) == "scripted"
    # a round stored before rounds recorded the model still reads; one with it round-trips
    old = {"round_id": "r1", "user": "hi"}
    assert RoundRecord.from_dict(old).model == ""
    assert "model" not in RoundRecord.from_dict(old).to_dict()
    kept = RoundRecord(round_id="r2", user="hi", model="llamacpp x.gguf")
    assert RoundRecord.from_dict(kept.to_dict()).model == "llamacpp x.gguf"
