"""The `memora` command's log lines on stderr: outside text in a message (a plugin's or a
server's error) loses its escape sequences, as every other text memora prints does."""

from __future__ import annotations

import logging

import pytest

from memora.cli.base import setup_logging
from memora.errors import ErrorCode, MemoraError


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


def test_a_logged_exception_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    """`logger.exception` lines carry the exception's reason (not its traceback), cleaned; a
    message that already says it is not repeated."""
    setup_logging(0, False)
    log = logging.getLogger("memora.agent")
    try:
        try:
            raise MemoraError(ErrorCode.STORAGE_ERROR, "/p/s is a symbolic link\x1b[2J")
        except MemoraError:
            log.exception("persisting round %s failed", "r-1")
        try:
            raise ValueError("boom")
        except ValueError as exc:
            log.exception("read failed: %s", exc)
        try:
            raise TimeoutError
        except TimeoutError:
            log.exception("waited")
    finally:
        setup_logging(0, True)
    assert capsys.readouterr().err.splitlines() == [
        "memora: error: persisting round r-1 failed: [STORAGE_ERROR] /p/s is a symbolic link",
        "memora: error: read failed: boom",
        "memora: error: waited: TimeoutError",
    ]
