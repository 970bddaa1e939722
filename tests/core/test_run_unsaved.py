"""`memora run` exits 1 when the round it answered could not be saved to the session's log: the
answer is printed, but a script must know that `memora run -c` will not see it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
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
    # the session's log moves to an earlier day's name, and a link to a file elsewhere is put
    # where today's (and tomorrow's) log goes: memora reads the session without it and refuses
    # to append through it
    folder = project / ".memora" / "data" / "sessions" / "s1"
    (log,) = folder.glob("*.jsonl")
    log.rename(folder / "2000-01-01.jsonl")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "victim.txt").write_text("not memora's")
    now = datetime.now(UTC)
    for day in (now, now + timedelta(days=1)):
        (folder / f"{day:%Y-%m-%d}.jsonl").symlink_to(elsewhere / "victim.txt")
    before = {p.name: p.read_bytes() for p in elsewhere.iterdir()}
    script.answers.append(say("second answer"))
    second = _memora(env, *run, "again", cwd=project)
    assert "second answer" in second.stdout  # the answer was given
    assert second.returncode == 1, second.stderr
    assert "symbolic link" in second.stderr
    assert "the round is not in session s1's log" in second.stderr
    assert {p.name: p.read_bytes() for p in elsewhere.iterdir()} == before
