"""A memora server in a real uvicorn on 127.0.0.1 (a free port), in the test's event loop, and
an SSE reader for its turn streams."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import uvicorn

from memora_plugin_server import create_app


@dataclass
class Served:
    url: str
    app: Any


@contextlib.asynccontextmanager
async def serve(projects: Any, **kwargs: Any) -> AsyncIterator[Served]:
    app = create_app(projects, **kwargs)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()  # raises why it did not start
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield Served(f"http://127.0.0.1:{port}", app)
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 30)


@dataclass
class Event:
    id: str | None
    data: dict[str, Any]

    @property
    def type(self) -> str:
        return str(self.data.get("type"))


async def read_events(response: httpx2.Response, *, stop_after: int | None = None) -> list[Event]:
    """The SSE events of ``response`` (comments skipped), to the end or ``stop_after`` events."""
    events: list[Event] = []
    current_id: str | None = None
    data: list[str] = []
    async for line in response.aiter_lines():
        if line.startswith(":") or line.startswith("retry:"):
            continue
        if line.startswith("id: "):
            current_id = line[4:]
        elif line.startswith("data: "):
            data.append(line[6:])
        elif line == "" and data:
            events.append(Event(current_id, json.loads("\n".join(data))))
            current_id, data = None, []
            if stop_after is not None and len(events) >= stop_after:
                break
    return events


def project_dir(root: Path, name: str = "proj") -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def scripted_config(home: Path, url: str, **config: object) -> None:
    """Write a user config in ``home`` naming the scripted OpenAI-compatible server at ``url``
    (plus ``config``)."""
    home.mkdir(parents=True, exist_ok=True)
    provider = {"type": "openai", "base_url": url, "model": "m"}
    (home / "config.json").write_text(
        json.dumps({"active_provider": "scripted", "providers": {"scripted": provider}, **config})
    )


def scripted_home(root: Path, url: str, **config: object) -> dict[str, str]:
    """:func:`scripted_config` in ``root/home``, and the environment of a `memora` process
    that uses it."""
    import os

    scripted_config(root / "home", url, **config)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORA_")}
    env["MEMORA_HOME"] = str(root / "home")
    return env


ASK = {"reflect": {"userFollowup": "ask", "summary": "off"}}
"""A strategy under which the model may ask the user (`ask_user`)."""


def scripted(tmp_path: Path, provider: object, *, ask: bool = False) -> dict[str, object]:
    """`create_app` options for a test: ``provider``, a user config folder of the test's own,
    no installed plugins; ``ask``: the model may ask questions."""
    options: dict[str, object] = {
        "provider": provider,
        "config_dir": tmp_path / "user",
        "load_entrypoints": False,
    }
    if ask:
        options["strategy_override"] = ASK
    return options
