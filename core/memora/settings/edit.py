"""Changing the user's own ``config.json`` from commands (``memora init --base-url``, ``memora
providers add/remove/default``): read, checked, changed, written atomically and private.

A file with comments is not rewritten (JSON has no comments to keep: they would be lost);
the change to make by hand is said instead.  A broken file is an error naming it, never
overwritten.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import InvalidInputError
from ..security.atomic import atomic_write_text
from ..security.state import user_config_dir
from .files import read_config_file, strip_json_comments

__all__ = ["edit_user_config", "user_config_path"]


def user_config_path(config_dir: str | Path | None = None) -> Path:
    return user_config_dir(config_dir) / "config.json"


def edit_user_config(
    change: Callable[[dict[str, Any]], str | None],
    *,
    config_dir: str | Path | None = None,
) -> Path:
    """Apply ``change`` to the user config's data and write it back.  ``change`` edits the
    dict in place and returns ``None``, or returns a sentence saying what a person must change
    by hand when the file has comments (then nothing is written and that sentence is the
    ``INVALID_INPUT`` error)."""
    path = user_config_path(config_dir)
    text = path.read_text(encoding="utf-8-sig") if path.exists() else "{}"
    if path.exists():
        read_config_file(path)  # a broken file is an error naming it, not overwritten
    plain = strip_json_comments(text)
    data = json.loads(plain)
    if not isinstance(data, dict):
        raise InvalidInputError(f"{path} must hold one JSON object", context={"path": str(path)})
    before = json.dumps(data, sort_keys=True)
    by_hand = change(data)
    if json.dumps(data, sort_keys=True) == before:
        return path  # nothing changed: nothing written
    if plain != text:
        raise InvalidInputError(
            f"{path} has comments, which rewriting it would lose; "
            + (by_hand or "make the change by hand"),
            context={"path": str(path)},
        )
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    atomic_write_text(path, json.dumps(data, ensure_ascii=False, indent=2) + "\n")
    os.chmod(path, 0o600)  # the user's own config: private, as every file memora writes
    return path
