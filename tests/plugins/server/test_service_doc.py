"""docs/service.md as written (#41 item 4): its shell session with curl, its A2A client in Python
and its acting-for-a-user curl run against a real `memora serve` with tokens — only the port
is the test server's.  A doc whose snippet no longer works fails here."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest

from tests.core.test_chat_cli import Script, call, say, server  # noqa: F401
from tests.plugins.server.test_workers import _free_port
from tests.test_docs import _blocks

from .conftest import scripted_home

pytestmark = pytest.mark.slow

DOC = Path(__file__).resolve().parents[3] / "docs" / "service.md"


def _block(lang: str, needle: str) -> str:
    found = [b.code for b in _blocks() if b.path == DOC and b.lang == lang and needle in b.code]
    assert len(found) == 1, f"docs/service.md: one {lang} block with {needle!r}"
    return found[0]


def _memora(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "memora", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout.strip()


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)


def test_the_service_doc_runs_as_written(
    server: tuple[str, Script],  # noqa: F811
    tmp_path: Path,
) -> None:
    url, script = server
    env = scripted_home(tmp_path, url)
    project = tmp_path / "webshop"
    project.mkdir()
    token = _memora(env, "serve-tokens", "add", "me")
    backend = _memora(env, "serve-tokens", "add", "shop-backend", "--act-for-users", "--no-scope")
    port = _free_port()
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "memora", "serve", "--project", str(project), "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        for _ in range(600):
            try:
                if httpx2.get(f"http://127.0.0.1:{port}/ready", timeout=2).status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            time.sleep(0.1)
        here = f"127.0.0.1:{port}"
        shell_env = {**env, "MEMORA_TOKEN": token, "BACKEND_TOKEN": backend}

        # the curl session: a turn that asks to write, its pause, the approval
        script.answers += [
            call("write_file", {"path": "README.md", "content": "# webshop\n"}, "w1"),
            say("The README is written."),
        ]
        session = _block("bash", "approvals/$CALL").replace("127.0.0.1:8765", here)
        ran = _run(["bash", "-euo", "pipefail", "-c", session], shell_env)
        assert ran.returncode == 0, ran.stderr
        assert '"type":"approval_pending"' in ran.stdout.replace(": ", ":")
        assert "The README is written." in ran.stdout.replace('"content":"', "").replace('"', "")
        assert (project / "README.md").read_text(encoding="utf-8") == "# webshop\n"

        # the A2A client
        script.answers += [say("It sells shoes.")]
        client = _block("python", "A2ACardResolver").replace("127.0.0.1:8765", here)
        ran = _run([sys.executable, "-c", client], shell_env)
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.strip().splitlines()[-1] == "It sells shoes."

        # acting for a user
        acting = _block("bash", "X-Memora-User: alice").replace("127.0.0.1:8765", here)
        ran = _run(["bash", "-euo", "pipefail", "-c", acting], shell_env)
        assert ran.returncode == 0 and ran.stdout.startswith('{"hits":'), ran.stdout + ran.stderr
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()
