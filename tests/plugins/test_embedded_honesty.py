"""The embedded model is honest about what it is: a held-out check on the bundled SmolLM2-135M.

The answers are the model's own (nothing scripted). They fail the check when they echo the
system prompt — the old prompt's "# Rules 1. No tools are available…" came back word for word —
or loop on one line.  The questions are not the ones the prompt was tuned on.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import REPO

pytest.importorskip("llama_cpp")
pytestmark = pytest.mark.slow

PROMPT_TEXT = [
    "# Rules",
    "# Working strategy",
    "No tools are available",
    "small assistant model running offline",
    "You cannot read files",
    "when you do not know, say so",
    "This is how the project's README begins",
]
HELD_OUT = [
    "What does this project do?",
    "Which file should I read first, and why?",
    "Explain what a unit test is to a new programmer.",
    "List two risks of storing passwords in plain text.",
]


def _check(answer: str) -> None:
    lowered = answer.lower()
    for text in PROMPT_TEXT:
        assert text.lower() not in lowered, f"the answer repeats the prompt ({text!r}):\n{answer}"
    lines = [line.strip() for line in answer.splitlines() if len(line.strip()) > 8]
    repeated = [line for line, n in Counter(lines).items() if n >= 3]
    assert not repeated, f"the answer loops on {repeated[0]!r}:\n{answer}"
    assert answer.strip(), "no answer"


def test_memora_run_on_the_embedded_model(tmp_path: Path) -> None:
    project = tmp_path / "notes-cli"
    project.mkdir()
    (project / "README.md").write_text(
        "# notes-cli\nA command-line tool that keeps notes in SQLite, with full-text search.\n",
        encoding="utf-8",
    )
    env = {**os.environ, "MEMORA_HOME": str(tmp_path / "home")}
    answers: dict[str, str] = {}
    for question in HELD_OUT:
        r = subprocess.run(
            [sys.executable, "-m", "memora", "run", question, "--project", str(project)],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        assert r.returncode == 0, r.stderr
        _check(r.stdout)
        # said once, plainly, what answers
        assert r.stderr.count("a small offline model without tools") == 1, r.stderr
        assert "--base-url" in r.stderr
        answers[question] = r.stdout
    # about the project it says what its README says, not a made-up story (checked on the answer
    # to that question above: asking it a fifth time cost a model load and a turn, a fifth of
    # this test, for the same check)
    about = answers[HELD_OUT[0]].lower()
    assert "note" in about or "sqlite" in about, answers[HELD_OUT[0]]


def _demo(home: Path) -> subprocess.CompletedProcess[str]:
    """``make demo``'s job, run from the repository (where its data is kept between runs)."""
    r = subprocess.run(
        [sys.executable, "-m", "memora.cli.demo"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "MEMORA_HOME": str(home)},
        timeout=600,
        check=False,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return r


def test_the_demo_on_the_embedded_model(tmp_path: Path) -> None:
    r = _demo(tmp_path / "home")
    assert "a small offline model without tools" in r.stdout + r.stderr
    answers = [
        part.split("\n  [", 1)[0] for part in r.stdout.split("memora> ")[1:]
    ]  # each answer runs to its usage line
    assert len(answers) >= 2, r.stdout
    for answer in answers:
        _check(answer)

    # the demo's data is kept: a second run says what it wrote, and a memory several runs
    # stored alike (the model answers the same) is one line naming them, not two equal hits
    again = _demo(tmp_path / "home")
    assert "memory: 2 written by this run, " in again.stdout, again.stdout
    assert "kept from earlier runs" in again.stdout, again.stdout
    searches = again.stdout.split("memory_search(")[1:]
    assert len(searches) == 2, again.stdout
    for block in searches:
        shown = [line for line in block.splitlines() if line.startswith("  [")]
        assert shown and "this run and " in shown[0], block
        assert len(set(shown)) == len(shown), block
