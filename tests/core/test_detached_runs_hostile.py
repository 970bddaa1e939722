"""`memora run --detach` and `memora runs`, tried as an attacker and a careless user would
(#71 item 3, hostile review H10): planted run folders, model text that wants to drive the
terminal, races between cancel and a run's end, a locale that is not UTF-8, a relative config
folder.  Real processes against a scripted OpenAI-compatible server on 127.0.0.1, as in
tests/core/test_detached_runs.py."""

from __future__ import annotations

import json
from pathlib import Path

from tests.core.test_chat_cli import Script, say, server  # noqa: F401 - the fixture
from tests.core.test_detached_runs import (
    _detach,
    _env,
    _memora,
    _project,
    _runs,
)


def _texts(stdout: str) -> str:
    chunks = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    return "".join(c["content"] for c in chunks if c["type"] == "text")


def test_a_run_keeps_its_events_in_utf8_whatever_the_launching_locale(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    """Launched from a shell whose output encoding is not UTF-8 (a Latin-1 locale, or
    PYTHONIOENCODING set for some other tool), the run still writes its events as UTF-8 —
    its events file is memora's own data, read back as UTF-8 — so French, Chinese and an
    emoji reach `runs follow` as the model wrote them (the events file took the launching
    shell's encoding: é became a Latin-1 byte, read back as U+FFFD, and an emoji an
    escape that is no JSON, so its whole event was dropped)."""
    url, script = server
    answer = "café au lait, 你好世界 😀"
    script.answers = [say(answer)]
    project, env = _project(tmp_path), _env(tmp_path)
    launching = {**env, "PYTHONIOENCODING": "latin-1"}
    run_id = _detach(project, launching, url, "用中文打个招呼")
    followed = _memora(project, env, "runs", "follow", run_id, "--events", "jsonl")
    assert followed.returncode == 0, followed.stderr
    assert _texts(followed.stdout) == answer
    assert _runs(project, env)[run_id]["prompt"] == "用中文打个招呼"
    text = _memora(project, env, "runs", "follow", run_id)
    assert text.returncode == 0 and answer in text.stdout, text.stderr
