"""`memora init` and `memora chat`, driven through a pseudo-terminal (pexpect) against a scripted
OpenAI-compatible server on 127.0.0.1, as a person would use them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from memora.config import strip_json_comments
from tests.loopback import QuietHTTPServer

pexpect = pytest.importorskip("pexpect")


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {
        "id": "c",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n".encode()


def say(text: str, delay: float = 0.0) -> list[tuple[bytes, float]]:
    words = text.split(" ")
    events = [
        (_chunk({"content": w + (" " if i < len(words) - 1 else "")}), delay)
        for i, w in enumerate(words)
    ]
    return [*events, (_chunk({}, "stop"), 0.0)]


def call(name: str, args: dict[str, Any], call_id: str = "c1") -> list[tuple[bytes, float]]:
    tool = {
        "index": 0,
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }
    return [(_chunk({"tool_calls": [tool]}), 0.0), (_chunk({}, "tool_calls"), 0.0)]


class Script:
    """Streams the next scripted answer for every streamed request; answers round-summary
    requests (not streamed) with a fixed summary."""

    def __init__(self) -> None:
        self.answers: list[list[tuple[bytes, float]]] = []
        self.requests: list[dict[str, Any]] = []


def _handler(script: Script) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            script.requests.append(body)
            if not body.get("stream"):
                message = {"role": "assistant", "content": "TYPE: fact\nThe user greeted memora."}
                data = json.dumps(
                    {
                        "id": "s",
                        "object": "chat.completion",
                        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            events = script.answers.pop(0) if script.answers else say("(no script left)")
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for event, delay in [*events, (b"data: [DONE]\n\n", 0.0)]:
                    if delay:
                        time.sleep(delay)
                    self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                pass  # the client stopped listening (Ctrl-C)

    return Handler


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    script = Script()
    httpd = QuietHTTPServer(("127.0.0.1", 0), _handler(script))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", script
    httpd.shutdown()
    httpd.server_close()


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORA_")}
    env.update({"MEMORA_HOME": str(tmp_path / "home"), "TERM": "xterm", "COLUMNS": "120"})
    return env


def _chat(project: Path, url: str, env: dict[str, str]) -> Any:
    child = pexpect.spawn(
        sys.executable,
        ["-m", "memora", "chat", "--project", str(project), "--base-url", url, "--model", "m"],
        env=env,
        encoding="utf-8",
        timeout=60,
        dimensions=(40, 120),
    )
    child.expect("/help")
    return child


def test_init_then_chat_tools_questions_stop_and_resume(
    server: tuple[str, Script], tmp_path: Path
) -> None:
    url, script = server
    project = tmp_path / "proj"
    project.mkdir()
    (project / "notes.txt").write_text("alpha\n", encoding="utf-8")
    env = _env(tmp_path)
    made = subprocess.run(
        [sys.executable, "-m", "memora", "init", str(project)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    assert ".memora/config.json" in made.stdout
    again = subprocess.run(
        [sys.executable, "-m", "memora", "init", str(project)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 1 and "does not overwrite" in again.stderr
    # /memory below finds the summary the model wrote: summarise even this short round
    config_path = project / ".memora" / "config.json"
    config = json.loads(strip_json_comments(config_path.read_text(encoding="utf-8")))
    config.setdefault("options", {})["summary_verbatim_tokens"] = 0
    config_path.write_text(json.dumps(config), encoding="utf-8")

    child = _chat(project, url, env)
    found = re.search(r"session\s+\S*?(\d{8}-\d{6}-[0-9a-f]+)", child.before)
    assert found is not None, child.before
    session = found.group(1)
    # a plain answer, streamed, with its usage
    script.answers.append(say("Hello from the script"))
    # the scripted summary of every round is "The user greeted memora.": stored for the round
    # that said so, replaced by the round's own words for the others (a memory never says
    # what its round did not)
    child.sendline("hello memora, I greeted you")
    child.expect("Hello from the script")
    child.expect(r"\d+ in · \d+ out")
    # a tool call, shown as one line with its status and duration
    script.answers += [call("list_dir", {}), say("There is notes.txt")]
    child.sendline("what files are there?")
    child.expect(r"✓\S* list_dir path=\. .*?\(\d+ ms\)")  # the arguments sent, the duration
    child.expect("There is notes.txt")
    # a question with numbered options
    ask = {"questions": [{"question": "Which database?", "options": ["PostgreSQL", "SQLite"]}]}
    script.answers += [call("ask_user", ask, "q1"), say("SQLite it is")]
    child.sendline("set up storage")
    child.expect("1. PostgreSQL")
    child.expect("answer>")
    child.sendline("2")
    child.expect("SQLite it is")
    # the turn's last model request (the round's summary, not streamed, is asked in the
    # background once the answer is done, and may already have arrived after it)
    last_turn_request = [r for r in script.requests if r.get("stream")][-1]
    tool_msg = [m for m in last_turn_request["messages"] if m["role"] == "tool"][-1]
    assert json.loads(tool_msg["content"]) == {"answers": {"ask": "SQLite"}}
    # Ctrl-C stops the answer, not the program
    script.answers.append(say("one two three four five six seven eight nine ten", delay=0.4))
    child.sendline("count slowly")
    child.expect("one")
    child.sendintr()
    child.expect("stopped")
    child.sendline("/tasks")
    child.expect(r"\(no plan\)")
    child.sendline("/roles")
    child.expect(r"\* assistant")
    child.sendline("/tools")
    child.expect("read_file")
    child.sendline("/nonsense")
    child.expect("unknown command")
    child.sendline("/quit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0

    # the next day: the same session, and yesterday's round in memory
    child = _chat(project, url, env)
    assert session in child.before
    child.sendline("/memory greeted")
    child.expect("The user greeted memora")
    child.sendline("/sessions")
    child.expect(re.escape(session))
    child.sendline("/fork")
    child.expect("forked into session")
    # Ctrl-D once the prompt is back, as a person presses it: sent while the CLI is between
    # prompts, it is the terminal's end of an empty line and is gone when the prompt takes the
    # terminal into raw mode (a test that sent it at once timed out under load)
    child.expect("› ")
    child.sendcontrol("d")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    history = (tmp_path / "home" / "chat_history").read_text(encoding="utf-8")
    assert "what files are there?" in history


@pytest.mark.slow
def test_chat_on_the_embedded_model(tmp_path: Path) -> None:
    """`memora init` then `memora chat` with no flags: the embedded GGUF model answers."""
    pytest.importorskip("llama_cpp")
    from memora_plugin_llamacpp import default_model_path

    if not default_model_path().is_file():
        pytest.skip("the embedded model is not downloaded")
    project = tmp_path / "proj"
    project.mkdir()
    env = _env(tmp_path)
    made = subprocess.run(
        [sys.executable, "-m", "memora", "init", str(project)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    child = pexpect.spawn(
        sys.executable,
        ["-m", "memora", "chat", "--project", str(project)],
        env=env,
        encoding="utf-8",
        timeout=300,
        dimensions=(40, 120),
    )
    child.expect("/help")
    child.sendline("Say hello in one short sentence.")
    child.expect(r"\d+ in · \d+ out · \d+ LLM call")
    child.sendline("/tools")  # the bundled 135M model is sent no tools, and chat says why
    child.expect("no tools: the model of llamacpp")
    child.sendline("/quit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_chat_says_when_a_round_was_not_saved(server: tuple[str, Script], tmp_path: Path) -> None:
    url, script = server
    project = tmp_path / "proj"
    project.mkdir()
    child = _chat(project, url, _env(tmp_path))
    script.answers.append(say("first answer"))
    child.sendline("hello")
    child.expect("first answer")
    child.expect(r"\d+ in · \d+ out")
    # today's log moves aside and a link takes its place: the next append is refused
    (folder,) = (project / ".memora" / "data" / "sessions").iterdir()
    (log,) = folder.glob("*.jsonl")
    log.rename(folder / "2000-01-01.jsonl")
    victim = tmp_path / "victim.txt"
    victim.write_text("not memora's", encoding="utf-8")
    now = datetime.now(UTC)
    for day in (now, now + timedelta(days=1)):
        (folder / f"{day:%Y-%m-%d}.jsonl").symlink_to(victim)
    script.answers.append(say("second answer"))
    child.sendline("again")
    child.expect("second answer")
    child.expect("not saved: this round could not be written")
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    assert victim.read_text(encoding="utf-8") == "not memora's"
