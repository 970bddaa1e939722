"""API keys stored outside the configuration: ``memora keys set NAME``.

A key lives in ``keys.json`` in the user's memora folder (``$MEMORA_HOME``, else
``~/.config/memora``) — never in a project, never in ``config.json`` (which people share and
paste) — written atomically and readable by its owner only (0600).  A provider of the user's
config names the key it sends with ``"api_key_name": NAME``; a project's config may not (it
would choose where the user's key goes), as it may not set ``base_url``.

The file, not the system keyring: memora runs in containers, CI and servers where no keyring
daemon is, and the keyring package is not a dependency; a file only its owner reads is what
``ssh``, ``gh`` and ``llm`` do too.  A key is never printed back (``memora keys list`` shows
names).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Final

from ..errors import InvalidConfigError, InvalidInputError
from ..security.atomic import atomic_write_text
from ..security.state import user_config_dir

__all__ = ["KEYS_FILE", "delete_key", "key_names", "keys_path", "set_key", "stored_key"]

KEYS_FILE: Final = "keys.json"
_NAME = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")


def keys_path(user_dir: Path | None = None) -> Path:
    """Where the keys are: ``keys.json`` in ``user_dir`` (default: the user's memora folder)."""
    return (user_dir or user_config_dir()) / KEYS_FILE


def _read(path: Path) -> dict[str, str]:
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise InvalidConfigError(
            f"{path} is not JSON ({exc}); it was left untouched", context={"path": str(path)}
        ) from exc
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in data.items()
    ):
        raise InvalidConfigError(
            f"{path} must hold one JSON object of key names to keys", context={"path": str(path)}
        )
    return data


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise InvalidInputError(
            f"{name[:40]!r} is not a key name: 1-64 letters, digits, '_', '.', '@' or '-'",
            context={"field": "name"},
        )
    return name


def set_key(name: str, secret: str, user_dir: Path | None = None) -> Path:
    """Store ``secret`` as key ``name`` (replacing one of that name); the file stays 0600."""
    check_name(name)
    secret = secret.strip()
    if not secret or any(ord(c) < 32 for c in secret):
        raise InvalidInputError(
            "the key is empty or holds control characters (a pasted newline?); nothing stored",
            context={"field": "key"},
        )
    path = keys_path(user_dir)
    keys = _read(path)
    keys[name] = secret
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    atomic_write_text(path, json.dumps(keys, indent=1, sort_keys=True) + "\n")
    os.chmod(path, 0o600)
    return path


def delete_key(name: str, user_dir: Path | None = None) -> bool:
    path = keys_path(user_dir)
    keys = _read(path)
    if name not in keys:
        return False
    del keys[name]
    atomic_write_text(path, json.dumps(keys, indent=1, sort_keys=True) + "\n")
    os.chmod(path, 0o600)
    return True


def key_names(user_dir: Path | None = None) -> list[str]:
    return sorted(_read(keys_path(user_dir)))


def stored_key(name: str, user_dir: Path | None = None) -> str | None:
    """The key stored as ``name``, or None.  A file others may read is refused: a key in it
    may already be known to them, and sending it on would hide that."""
    path = keys_path(user_dir)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return None
    if os.name == "posix" and mode & 0o077:
        raise InvalidConfigError(
            f"{path} is readable by others (mode {oct(mode & 0o777)}); make it private "
            f"(chmod 600 {path}) and consider the keys in it exposed",
            context={"path": str(path)},
        )
    return _read(path).get(name)
