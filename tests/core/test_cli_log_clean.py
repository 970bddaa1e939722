"""The `memora` command's log lines on stderr: outside text in a message (a plugin's or a
server's error) loses its escape sequences, as every other text memora prints does."""

from __future__ import annotations

import logging

import pytest

from memora.cli.base import setup_logging


def test_log_messages_are_cleaned(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging(0, False)
    try:
        logging.getLogger("memora.server").warning(
            "turn failed: %s", "boom\x1b]0;owned\x07\x1b[2J 你好"
        )
    finally:
        setup_logging(0, True)
    err = capsys.readouterr().err
    assert err == "memora: warning: turn failed: boom 你好\n"
