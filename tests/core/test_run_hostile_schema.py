"""``memora run --output-schema`` with a schema that would drive the machinery: refused before
any model loads, exit 2 with the reason (a ``$ref`` cycle killed the process with SIGSEGV on
the embedded model; ``minLength: 5000`` held it for minutes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CYCLE = {
    "type": "object",
    "properties": {"a": {"$ref": "#/$defs/n"}},
    "required": ["a"],
    "$defs": {"n": {"$ref": "#/$defs/m"}, "m": {"$ref": "#/$defs/n"}},
}
LONG = {"type": "object", "properties": {"a": {"type": "string", "minLength": 5000}}}
REMOTE = {"type": "object", "properties": {"a": {"$ref": "http://127.0.0.1:9/a.json"}}}


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        (CYCLE, "$ref cycle with no object or array in between"),
        (LONG, "minLength 5000 at '#/properties/a' is over 1000"),
        (REMOTE, "points outside the schema"),
    ],
    ids=["cycle", "minLength", "remote-ref"],
)
def test_a_hostile_schema_exits_2_with_the_reason(
    tmp_path: Path, schema: dict[str, object], reason: str
) -> None:
    project = tmp_path / "p"
    project.mkdir()
    path = tmp_path / "shape.json"
    path.write_text(json.dumps(schema), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORA_")}
    env["MEMORA_HOME"] = str(tmp_path / "home")
    # no provider named: the embedded model would answer, were the schema let through
    r = subprocess.run(
        [sys.executable, "-m", "memora", "run", "hi", "--output-schema", str(path)],
        cwd=project,
        capture_output=True,
        text=True,
        env=env,
        timeout=90,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 2, r.stderr
    assert reason in r.stderr and "--output-schema" in r.stderr
    assert r.stdout == ""
