"""Test-suite guards: no internet, and a private entry-point cache."""

from __future__ import annotations

import ipaddress
import os
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# stevedore caches entry-point scans under XDG_CACHE_HOME; keep tests out of the user's home.
_CACHE = tempfile.mkdtemp(prefix="memora-test-cache-")
os.environ["XDG_CACHE_HOME"] = _CACHE
# the user's own ~/.config/memora/config.json must not change what the tests see
_HOME = tempfile.mkdtemp(prefix="memora-test-home-")
# llama.cpp's threads (OpenMP) spin while they wait for each other: with the suite on both cores
# (pytest-xdist), a model sharing the cores with another process spun 3x as long, where waiting
# asleep costs the 2x sharing does (two bundled-model stress runs at once: 42 s each, 24 s with
# PASSIVE; 13 s alone either way).  Set before llama.cpp loads; subprocesses inherit it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

REPO = Path(__file__).resolve().parent.parent

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _is_local(address: Any) -> bool:
    if isinstance(address, (str, bytes)):
        return True  # AF_UNIX
    host = address[0]
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _guarded_connect(self: socket.socket, address: Any) -> Any:
    if not _is_local(address):
        raise ConnectionRefusedError(f"tests must not reach the network: connect to {address!r}")
    return _real_connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: Any) -> Any:
    if not _is_local(address):
        raise ConnectionRefusedError(f"tests must not reach the network: connect to {address!r}")
    return _real_connect_ex(self, address)


socket.socket.connect = _guarded_connect  # type: ignore[method-assign]
socket.socket.connect_ex = _guarded_connect_ex  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def _plugin_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with the default plugin-loading environment."""
    for name in (
        "MEMORA_LOAD_PLUGINS",
        "MEMORA_STRICT_PLUGINS",
        "MEMORA_STORAGE",
        "MEMORA_PROVIDER",
        "MEMORA_BACKGROUND_PROVIDER",
        "MEMORA_BASE_URL",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MEMORA_HOME", _HOME)


def make_dist(
    root: Path,
    dist: str,
    entry_points: dict[str, str],
    modules: dict[str, str],
    version: str = "0.1.0",
) -> Path:
    """Write a minimal installed distribution (dist-info + modules) under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n", encoding="utf-8"
    )
    eps = "[memora]\n" + "".join(f"{k} = {v}\n" for k, v in entry_points.items())
    (info / "entry_points.txt").write_text(eps, encoding="utf-8")
    for name, source in modules.items():
        (root / f"{name}.py").write_text(source, encoding="utf-8")
    return root


@pytest.fixture
def fake_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh directory on sys.path where tests install fake plugin distributions."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    yield site
