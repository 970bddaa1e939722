"""`memora run` exits 1 when the round it answered could not be saved to the session's log: the
answer is printed, but a script must know that `memora run -c` will not see it."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.core.test_chat_cli import Script, _env, say, server  # noqa: F401
from tests.core.test_init_base_url import _memora


def test_a_round_the_log_refused_is_exit_1_with_the_reason(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    url, script = server
    env = _env(tmp_path)
    env["MEMORA_API_KEY"] = "sk-test"
    project = tmp_path / "shop"
    project.mkdir()
    run = ("run", "--base-url", url, "--model", "m", "--session", "s1")
    script.answers.append(say("first answer"))
    first = _memora(env, *run, "hello", cwd=project)
    assert first.returncode == 0, first.stderr
    # the session's folder becomes a link to a copy elsewhere: memora refuses to write through it
    folder = project / ".memora" / "data" / "sessions" / "s1"
    elsewhere = tmp_path / "elsewhere"
    shutil.move(folder, elsewhere)
    folder.symlink_to(elsewhere, target_is_directory=True)
    before = {p.name: p.read_bytes() for p in elsewhere.iterdir()}
    script.answers.append(say("second answer"))
    second = _memora(env, *run, "again", cwd=project)
    assert "second answer" in second.stdout  # the answer was given
    assert second.returncode == 1, second.stderr
    assert "symbolic link" in second.stderr
    assert "the round is not in session s1's log" in second.stderr
    assert {p.name: p.read_bytes() for p in elsewhere.iterdir()} == before
