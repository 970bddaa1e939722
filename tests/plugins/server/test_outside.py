"""`memora serve` as a user gets it: the kernel, openai and server wheels built and installed with
the pip of a fresh `python -m venv`, the command run as a process on 127.0.0.1 with the user's
config naming a scripted OpenAI-compatible server; a conversation with an approval over HTTP,
the page and its files served from the installed wheel, then a clean stop on SIGINT."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest

from tests.conftest import REPO
from tests.core.test_chat_cli import Script, call, say, server  # noqa: F401
from tests.test_outside_the_repo import _uv

from .conftest import scripted_config

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _sse(body: str) -> list[dict[str, object]]:
    return [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: ")]


def test_memora_serve_from_the_wheels(server: tuple[str, Script], tmp_path: Path) -> None:  # noqa: F811
    url, script = server
    wheels = tmp_path / "wheels"
    for source in (
        REPO,
        REPO / "plugins/memora-plugin-openai",
        REPO / "plugins/memora-plugin-server",
    ):
        subprocess.run(
            [_uv(), "build", "--wheel", "--quiet", "--out-dir", str(wheels), str(source)],
            check=True,
            capture_output=True,
            timeout=600,
        )
    venv = tmp_path / "venv"
    subprocess.run(
        [getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(venv)], check=True
    )
    env = {
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(tmp_path / "home"),
        "MEMORA_HOME": str(tmp_path / "home" / "memora"),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_CACHE_DIR": os.environ.get("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip")),
        "PYTHONNOUSERSITE": "1",
    }
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", *map(str, sorted(wheels.glob("*.whl")))],
        check=True,
        env=env,
        capture_output=True,
        timeout=900,
    )
    scripted_config(tmp_path / "home" / "memora", url)
    project = tmp_path / "shop"
    project.mkdir()
    script.answers += [
        call("write_file", {"path": "hello.txt", "content": "hi"}, "w1"),
        say("Wrote hello.txt"),
    ]

    port = _free_port()
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen(
        [str(venv / "bin" / "memora"), "serve", "--project", str(project), "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx2.Client(base_url=base, timeout=30) as client:
            for _ in range(300):
                try:
                    if client.get("/ready").status_code == 200:
                        break
                except httpx2.TransportError:
                    pass
                assert proc.poll() is None, (tmp_path / "serve.log").read_text()
                time.sleep(0.1)
            page = client.get("/")
            assert (
                page.status_code == 200
                and '<script type="module" src="/static/app.js">' in page.text
            )
            assert "script-src 'self'" in page.headers["content-security-policy"]
            assert "renderMarkdown" in client.get("/static/app.js").text

            sid = client.post("/v1/projects/shop/sessions", json={}).json()["id"]
            turn = client.post(f"/v1/projects/shop/sessions/{sid}/turns", json={"text": "write it"})
            assert [c["type"] for c in _sse(turn.text)][-2:] == ["approval_pending", "paused"]
            rest = client.post(
                f"/v1/projects/shop/sessions/{sid}/approvals/w1", json={"decision": "approve"}
            )
            chunks = _sse(rest.text)
            assert chunks[-1]["type"] == "done", chunks
            assert (project / "hello.txt").read_text() == "hi"
            card = client.get("/.well-known/agent-card.json").json()
            assert card["name"] == "memora: shop"
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=30)
        finally:
            proc.kill()
            log.close()
    output = (tmp_path / "serve.log").read_text()
    assert code == 0, output
    assert "no server token is configured" in output
