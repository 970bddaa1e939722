from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from tests.loopback import QuietHTTPServer


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    """``(project, user config folder)``, both empty."""
    project, user = tmp_path / "project", tmp_path / "user"
    project.mkdir()
    user.mkdir()
    return project, user


class Endpoint:
    """An OpenAI-compatible endpoint on 127.0.0.1 that records the keys it was sent."""

    def __init__(self) -> None:
        self.auth: list[str | None] = []


def start_endpoint() -> tuple[str, Endpoint, QuietHTTPServer]:
    """An :class:`Endpoint` serving on 127.0.0.1: its URL, its record, its server."""
    seen = Endpoint()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _send(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            seen.auth.append(self.headers.get("Authorization"))
            if self.path == "/v1/models":
                models = {"object": "list", "data": [{"id": "qwen-7b"}, {"id": "llama-3-8b"}]}
                self._send(200, json.dumps(models).encode(), "application/json")
            else:
                self._send(404, b"{}", "application/json")

        def do_POST(self) -> None:
            seen.auth.append(self.headers.get("Authorization"))
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            delta = {"choices": [{"index": 0, "delta": {"content": "hello from the endpoint"}}]}
            done = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
            if body.get("stream"):
                text = f"data: {json.dumps(delta)}\n\ndata: {json.dumps(done)}\n\ndata: [DONE]\n\n"
                self._send(200, text.encode(), "text/event-stream")
            else:
                message = {"role": "assistant", "content": "a summary"}
                answer = {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
                self._send(200, json.dumps(answer).encode(), "application/json")

    httpd = QuietHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{httpd.server_address[1]}/v1", seen, httpd


@pytest.fixture
def endpoint() -> Iterator[tuple[str, Endpoint]]:
    url, seen, httpd = start_endpoint()
    yield url, seen
    httpd.shutdown()
    httpd.server_close()
