from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from memora.cli.main import cli


def test_import_search_stats_export_history(tmp_path: Path) -> None:
    data = tmp_path / "data"
    src = tmp_path / "in.jsonl"
    src.write_text(
        json.dumps(
            {
                "id": "m1",
                "source": "round_summary",
                "name": "大纲",
                "content": "第三章大纲重写",
                "summary_type": "progress",
                "created_at": 100.0,
                "session_id": "s",
                "round_id": "r",
            },
            ensure_ascii=False,
        )
        + "\n"
        + json.dumps({"source": "persona", "name": "tone", "content": "Keep answers short"})
        + "\n",
        encoding="utf-8",
    )
    runner = CliRunner()
    r = runner.invoke(cli, ["memory", "import", str(src), "--data-dir", str(data)])
    assert r.exit_code == 0 and "imported 2" in r.output
    r = runner.invoke(cli, ["memory", "import", str(src), "--data-dir", str(data)])
    assert (
        "imported 1 new memory (1 already present)" in r.output
    )  # the line with an id: idempotent
    r = runner.invoke(cli, ["memory", "search", "大纲", "--data-dir", str(data), "--json"])
    doc = json.loads(r.stdout)
    assert [x["id"] for x in doc["results"]] == ["m1"]
    assert set(doc["results"][0]) == {"id", "source", "name", "content", "score"}
    r = runner.invoke(
        cli,
        [
            "memory",
            "search",
            "short",
            "--data-dir",
            str(data),
            "--source",
            "round_summary",
            "--json",
        ],
    )
    assert json.loads(r.stdout)["results"] == []
    r = runner.invoke(cli, ["memory", "stats", "--data-dir", str(data), "--json"])
    assert json.loads(r.stdout) == {"total": 3, "by_source": {"persona": 2, "round_summary": 1}}
    r = runner.invoke(cli, ["memory", "export", "--data-dir", str(data)])
    lines = [json.loads(x) for x in r.output.splitlines()]
    assert len(lines) == 3 and lines[0]["id"] == "m1" and lines[0]["summary_type"] == "progress"
    r = runner.invoke(cli, ["memory", "history", "m1", "--data-dir", str(data), "--json"])
    assert [h["id"] for h in json.loads(r.stdout)["history"]] == ["m1"]
    # round trip into a fresh store
    out = tmp_path / "out.jsonl"
    runner.invoke(cli, ["memory", "export", "--data-dir", str(data), "-o", str(out)])
    r = runner.invoke(cli, ["memory", "import", str(out), "--data-dir", str(tmp_path / "copy")])
    assert "imported 3" in r.output


def test_bad_import_writes_nothing(tmp_path: Path) -> None:
    src = tmp_path / "bad.jsonl"
    src.write_text('{"content": "fine"}\n{"no content": 1}\n', encoding="utf-8")
    r = CliRunner().invoke(cli, ["memory", "import", str(src), "--data-dir", str(tmp_path / "d")])
    assert r.exit_code != 0 and "line 2" in r.output and "nothing was imported" in r.output
    r = CliRunner().invoke(cli, ["memory", "stats", "--data-dir", str(tmp_path / "d"), "--json"])
    assert r.exit_code != 0  # no database was created by the failed import


def test_sessions_commands(tmp_path: Path) -> None:
    import asyncio

    from memora.memory import JsonlSessionStore, RoundRecord

    async def seed() -> None:
        store = JsonlSessionStore(tmp_path)
        s = await store.create(session_id="main")
        for i in range(3):
            await store.append_round(s.id, RoundRecord(f"r{i}", f"q{i}", f"a{i}"))

    asyncio.run(seed())
    runner = CliRunner()
    r = runner.invoke(cli, ["sessions", "list", "--data-dir", str(tmp_path), "--json"])
    assert [x["id"] for x in json.loads(r.stdout)["sessions"]] == ["main"]
    r = runner.invoke(cli, ["sessions", "show", "main", "--data-dir", str(tmp_path), "--json"])
    assert len(json.loads(r.stdout)["rounds"]) == 3
    r = runner.invoke(
        cli, ["sessions", "fork", "main", "--at-round", "r1", "--data-dir", str(tmp_path), "--json"]
    )
    assert json.loads(r.stdout)["round_count"] == 2
    r = runner.invoke(cli, ["sessions", "show", "ghost", "--data-dir", str(tmp_path)])
    assert r.exit_code != 0 and "no session" in r.output


def test_export_import_round_trips_line_separators_exactly(tmp_path: Path) -> None:
    tricky = "line\u2028sep\u2029para\u0085next\r\nwindows\x0bvt\x0cff 记忆"
    src = tmp_path / "in.jsonl"
    src.write_text(
        json.dumps({"id": "m1", "source": "persona", "content": tricky}, ensure_ascii=False) + "\n",
        encoding="utf-8",
    )
    runner = CliRunner()
    data, again = tmp_path / "data", tmp_path / "again"
    r = runner.invoke(cli, ["memory", "import", str(src), "--data-dir", str(data)])
    assert r.exit_code == 0, r.output
    out = tmp_path / "out.jsonl"
    r = runner.invoke(cli, ["memory", "export", "--data-dir", str(data), "-o", str(out)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(cli, ["memory", "import", str(out), "--data-dir", str(again)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(cli, ["memory", "export", "--data-dir", str(again)])
    (line,) = [x for x in r.output.split("\n") if x.startswith("{")]
    assert json.loads(line)["content"] == tricky


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (b'{"content": "ok"}\n{"content": "bad \xff\xfe bytes"}\n', "line 2: not UTF-8"),
        (b'{"content": "lone \\ud800 surrogate"}\n', "line 1: memory content is not valid"),
        (b'{"content": "x", "created_at": NaN}\n', 'line 1: "created_at" must be'),
        (b'{"content": "x", "created_at": "soon"}\n', "line 1:"),
        (b"[1, 2]\n", "line 1: not a JSON object"),
        (b'{"content": "x", "id": ["a"]}\n', "line 1: memory id must be a string, not list"),
        (b'{"content": "x", "id": {"a": 1}}\n', "line 1: memory id must be a string, not dict"),
        (b'{"content": "x", "id": ""}\n', "line 1: memory id must not be empty"),
        (b'{"content": "x", "round_id": [1]}\n', "line 1: memory round_id must be a string"),
    ],
    ids=[
        "not-utf8",
        "lone-surrogate",
        "nan-time",
        "string-time",
        "not-object",
        "id-list",
        "id-object",
        "id-empty",
        "round-id-list",
    ],
)
@pytest.mark.parametrize("storage", ["sqlite", "json", "memory"])
def test_bad_imports_are_clear_errors_and_write_nothing(
    tmp_path: Path, raw: bytes, needle: str, storage: str
) -> None:
    src = tmp_path / "in.jsonl"
    src.write_bytes(raw)
    r = CliRunner().invoke(
        cli,
        ["memory", "import", str(src), "--data-dir", str(tmp_path / "d"), "--storage", storage],
    )
    assert r.exit_code == 1 and needle in r.output and "nothing was imported" in r.output
    assert not isinstance(r.exception, (UnicodeError, TypeError, AttributeError))


def test_a_numeric_id_is_imported_as_text(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text('{"content": "x", "id": 3}\n', encoding="utf-8")
    runner = CliRunner()
    args = ["--data-dir", str(tmp_path / "d"), "--storage", "json"]
    r = runner.invoke(cli, ["memory", "import", str(src), *args])
    assert r.exit_code == 0, r.output
    r = runner.invoke(cli, ["memory", "export", *args])
    assert json.loads(r.stdout.splitlines()[0])["id"] == "3"
