"""Text from a model, a tool or a server never drives the terminal: any bytes a model sends leave
no control sequence outside the renderer's own."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from memora.security.terminal import TerminalGuard, clean
from tests.core.test_chat_cli import Script, _chat, _env, call, pexpect, say, server  # noqa: F401

EVIL = (
    "Done.\x1b]52;c;cm0gLXJmIH4=\x07"  # OSC 52: write the clipboard
    "\x1b]8;;https://evil.invalid/\x1b\\click\x1b]8;;\x1b\\"  # OSC 8: a lying link
    "\x1b]0;pwned\x07"  # the window title
    "\x1b[2J\x1b[H"  # clear the screen, cursor home
    "\x1b[1A\x1b[2K"  # up a line, erase it: rewrite what the user read
    "\x9b31m\x9d0;x\x9c"  # the 8-bit forms
    "\x1bP+q\x1b\\"  # DCS
    " \u202eevil\u202c 中文 ok"  # a bidi override
)
"""An answer a prompt injection could make a model write."""

# what memora's renderer writes itself: SGR styles, its live display's cursor steps and line
# erases, show/hide cursor, hyperlinks in Rich's own form (none comes from the model here), and
# readline's bracketed-paste switch around the prompt
RENDERER = re.compile(r"\x1b\[[0-9;:]*m|\x1b\[[0-9]*[ABCDGK]|\x1b\[\?(?:25|2004)[hl]|\r")
FORBIDDEN = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _leftover(output: str) -> str:
    """``output`` with the renderer's own sequences removed: what remains must hold no control
    character at all."""
    return RENDERER.sub("", output)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"])))
def test_clean_leaves_no_control_character(text: str) -> None:
    out = clean(text)
    assert not FORBIDDEN.search(out.replace("\r", "\x00") if "\r" in out else out)
    one_line = clean(text, newlines=False)
    assert "\n" not in one_line and "\t" not in one_line


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["\x1b", "]", "[", "52;", "8;;", "\x07", "\\", "2J", "m", "x"])))
def test_sequences_split_across_chunks_do_not_reassemble(parts: list[str]) -> None:
    """A stream cleaned chunk by chunk: no escape can be formed across two chunks."""
    assert "\x1b" not in "".join(clean(p) for p in parts)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_the_guard_passes_only_the_renderers_sequences(text: str) -> None:
    class Sink:
        def __init__(self) -> None:
            self.parts: list[str] = []

        def write(self, s: str) -> int:
            self.parts.append(s)
            return len(s)

        def flush(self) -> None:
            pass

    sink = Sink()
    guard = TerminalGuard(sink)  # type: ignore[arg-type]
    guard.write(text)
    out = "".join(sink.parts)
    # strip what the guard lets through on purpose (OSC 8 in Rich's form included)
    left = re.sub(r"\x1b\]8;[^\x07\x1b;]*;[^\x07\x1b]*\x1b\\", "", _leftover(out))
    assert not FORBIDDEN.search(left), repr(left)


def test_clean_keeps_text_and_newlines() -> None:
    assert clean(EVIL) == "Done.click evil 中文 ok"
    assert clean("a\r\nb\tc\n") == "a\nb\tc\n"
    assert clean("plain 中文") == "plain 中文"


def test_memora_run_prints_a_models_escapes_as_nothing(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    url, script = server
    project = tmp_path / "p"
    project.mkdir()
    script.answers += [
        call("list_dir", {"path": "\x1b]52;c;eA==\x07."}),
        say(EVIL),
    ]
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "memora",
            "run",
            "hi",
            "--project",
            str(project),
            "--base-url",
            url,
            "--model",
            "m",
        ],
        capture_output=True,
        env=_env(tmp_path),
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    out, err = r.stdout.decode(), r.stderr.decode()
    assert "中文 ok" in out and "Done." in out
    for stream in (out, err):
        assert not FORBIDDEN.search(_leftover(stream)), repr(stream)
    assert "\x1b" not in out  # not a terminal: no styling at all


def test_memora_chat_renders_markdown_but_no_model_escapes(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    url, script = server
    project = tmp_path / "p"
    project.mkdir()
    script.answers += [
        call("list_dir", {}, "c1"),
        say("**bold** " + EVIL + " [x](https://example.invalid/)"),
    ]
    child = _chat(project, url, _env(tmp_path))
    log = io.StringIO()
    child.logfile_read = log  # everything the terminal receives
    child.sendline("hello")
    child.expect(r"\d+ in · \d+ out")
    seen = log.getvalue()
    assert "中文 ok" in seen
    child.sendline("/quit")
    child.expect(pexpect.EOF)
    child.close()
    for bad in ("\x1b]52", "\x1b]0;", "\x1b[2J", "\x1b[H", "\x1bP", "\x9b", "\x9d", "\u202e"):
        assert bad not in seen, (bad, seen)
    left = re.sub(r"\x1b\]8;[^\x07\x1b;]*;[^\x07\x1b]*\x1b\\", "", _leftover(seen))
    assert not FORBIDDEN.search(left), repr(left)
    assert "\x1b[1mbold" in seen  # the Markdown is still rendered (bold, in Rich's SGR)


@pytest.mark.parametrize("bad", ["\x1b]52;c;eA==\x07", "\x1b[2J"])
def test_a_tool_description_with_escapes_is_listed_clean(bad: str) -> None:
    from memora.cli.common import safe

    assert safe(f"reads files{bad}[red]x[/red]") == "reads files\\[red]x\\[/red]"


def test_cursor_moves_pass_only_while_a_live_display_runs() -> None:
    from memora.security.terminal import live_display

    class Sink:
        def __init__(self) -> None:
            self.text = ""

        def write(self, s: str) -> int:
            self.text += s
            return len(s)

        def flush(self) -> None:
            pass

    overwrite = "safe line\r\x1b[1A\x1b[2Kfake line\x1b[31m red\x1b[0m"
    sink = Sink()
    TerminalGuard(sink).write(overwrite)  # type: ignore[arg-type]
    assert sink.text == "safe linefake line\x1b[31m red\x1b[0m"  # styles stay, moves do not
    sink = Sink()
    with live_display():  # Rich's Live redraws its lines with exactly these
        TerminalGuard(sink).write(overwrite)  # type: ignore[arg-type]
    assert sink.text == overwrite


def test_memory_search_on_a_terminal_prints_no_sequence_from_a_memory(tmp_path: Path) -> None:
    import json
    import os

    pexpect = pytest.importorskip("pexpect")
    src = tmp_path / "in.jsonl"
    hostile = (
        "deploy notes\r\x1b[1A\x1b[2K\x1b]52;c;eA==\x07\x1b]8;;https://evil.invalid/\x1b\\here"
    )
    src.write_text(json.dumps({"content": hostile, "name": "n\x1b[2J"}) + "\n", encoding="utf-8")
    env = {**os.environ, "MEMORA_HOME": str(tmp_path / "home"), "TERM": "xterm"}
    data = ["--data-dir", str(tmp_path / "d")]
    r = subprocess.run(
        [sys.executable, "-m", "memora", "memory", "import", str(src), *data],
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    child = pexpect.spawn(
        sys.executable,
        ["-m", "memora", "memory", "search", "deploy", *data],
        env=env,
        encoding="utf-8",
        timeout=60,
    )
    child.expect(pexpect.EOF)
    seen = child.before
    assert "deploy notes" in seen and "here" in seen
    for bad in ("\x1b[1A", "\x1b[2K", "\x1b[2J", "\x1b]52", "\x1b]8"):
        assert bad not in seen, (bad, seen)


def test_the_chat_header_names_the_model_once() -> None:
    """#41: the header said `openai:m m`."""
    from pathlib import Path
    from types import SimpleNamespace

    from memora.cli.chat_cmd import header

    def agent(name: str, model: str | None) -> SimpleNamespace:
        provider = SimpleNamespace(name=name, model=model)
        return SimpleNamespace(
            router=SimpleNamespace(chat=provider),
            session_id="s1",
            role_pack=SimpleNamespace(active=SimpleNamespace(name="assistant")),
            approvals="ask",
        )

    line = header(agent("openai:gpt-4o-mini", "gpt-4o-mini"), Path("/p"))
    assert line.count("gpt-4o-mini") == 1
    other = header(agent("custom", "big-model"), Path("/p"))
    assert "custom big-model" in other
