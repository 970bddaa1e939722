"""State that memora hands to a later run of itself, sealed for the user who wrote it.

A project's folder is untrusted input (a cloned repository): a file found in its
``.memora/data`` may have been written by anyone.  Where such a file would act for the user —
a paused turn, whose pending tool call ``memora run --resume --yes`` approves — memora seals
it with a key of the user's own (``seal.key`` in the user's memora folder, private, made on
first use): a file sealed with another key (another user, another machine, a cloned project)
or changed since is refused, never acted on.

The seal is an HMAC-SHA256 over the data's canonical JSON (sorted keys, no spaces), so it
survives the file being re-indented but not a changed value.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import tempfile
from pathlib import Path
from typing import Any

from ..errors import ErrorCode, MemoraError
from .atomic import fsync_dir

__all__ = ["KEY_FILE", "seal", "unseal", "user_key"]

KEY_FILE = "seal.key"
_KEY_BYTES = 32


def user_key(user_dir: Path) -> bytes:
    """The user's sealing key in ``user_dir``, made (0600, whole or not at all) when missing."""
    path = Path(user_dir) / KEY_FILE
    try:
        key = path.read_bytes()
    except FileNotFoundError:
        key = _make_key(path)
    if len(key) != _KEY_BYTES:
        raise MemoraError(
            ErrorCode.STORAGE_ERROR,
            f"{path} is not a memora key ({len(key)} bytes, not {_KEY_BYTES}); remove it and "
            "memora makes a new one (state sealed with the old one is then refused)",
            context={"path": str(path)},
        )
    return key


def _make_key(path: Path) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:  # mkstemp: 0600
            fh.write(secrets.token_bytes(_KEY_BYTES))
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)  # never replaces a key another process made meanwhile
        except FileExistsError:
            pass
        else:
            fsync_dir(path.parent)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return path.read_bytes()


def _mac(data: Any, key: bytes) -> str:
    canonical = json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hmac.new(key, canonical.encode("utf-8"), hashlib.sha256).hexdigest()


def seal(data: Any, key: bytes) -> dict[str, Any]:
    """``data`` (JSON data) with its seal: ``{"sealed": data, "mac": ...}``."""
    return {"sealed": data, "mac": _mac(data, key)}


def unseal(doc: Any, key: bytes) -> Any | None:
    """The data of a document :func:`seal` made with ``key``; None for anything else (no
    seal, another key's, or data changed since)."""
    if not isinstance(doc, dict) or set(doc) != {"sealed", "mac"}:
        return None
    mac = doc["mac"]
    if not isinstance(mac, str) or not mac.isascii():
        return None
    if not hmac.compare_digest(mac, _mac(doc["sealed"], key)):
        return None
    return doc["sealed"]
