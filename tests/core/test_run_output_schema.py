"""``memora run --output-schema``: a JSON schema file or ``module:Class``; stdout holds the
validated JSON only; a result that never validates exits 1 with the reason on stderr."""

from __future__ import annotations

import json
from pathlib import Path

from tests.core.test_approvals import _run
from tests.core.test_chat_cli import Script, say, server  # noqa: F401

SCHEMA = {
    "title": "Ticket",
    "type": "object",
    "properties": {
        "title": {"type": "string", "description": "What is wrong, in one line"},
        "severity": {"type": "integer", "minimum": 1, "maximum": 4},
    },
    "required": ["title", "severity"],
}


def test_a_json_schema_file(server: tuple[str, Script], tmp_path: Path) -> None:  # noqa: F811
    url, script = server
    (tmp_path / "p").mkdir()
    schema = tmp_path / "ticket.json"
    schema.write_text(json.dumps(SCHEMA), encoding="utf-8")
    script.answers += [
        say('{"title": "login", "severity": 7}'),
        say('{"title": "登录失败", "severity": 2}'),
    ]
    r = _run(tmp_path, url, "users cannot log in", "--output-schema", str(schema), "--no-tools")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"title": "登录失败", "severity": 2}  # stdout: the JSON only
    sent = [b for b in script.requests if b.get("stream")]
    assert sent[0]["response_format"]["json_schema"]["name"] == "ticket"
    assert "maximum of 4" in sent[1]["messages"][-1]["content"]
    # never valid: exit 1, the reason on stderr, nothing on stdout
    script.answers += [say("no idea")] * 3
    r = _run(tmp_path, url, "again", "--output-schema", str(schema), "--no-tools")
    assert r.returncode == 1 and r.stdout.strip() == ""
    assert "not a valid ticket" in r.stderr


def test_a_python_type(server: tuple[str, Script], tmp_path: Path) -> None:  # noqa: F811
    url, script = server
    project = tmp_path / "p"
    project.mkdir()
    (project / "shapes.py").write_text(
        "from pydantic import BaseModel\n\nclass Point(BaseModel):\n    x: int\n    y: int\n",
        encoding="utf-8",
    )
    script.answers += [say('{"x": 3, "y": 4}')]
    r = _run(tmp_path, url, "a point", "--output-schema", "shapes:Point", "--no-tools")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"x": 3, "y": 4}
    r = _run(tmp_path, url, "a point", "--output-schema", "shapes:Nope", "--no-tools")
    assert r.returncode == 2 and "--output-schema" in r.stderr
