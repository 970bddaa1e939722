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
