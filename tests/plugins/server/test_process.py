"""`memora serve` settles the garbage collector of the process it owns once the app has started
(start-up objects frozen, larger thresholds, full collections on the clock); an app a host
embeds leaves the host's collector alone.  Run in a child process: the collector's settings
are the whole process's."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

CHILD = textwrap.dedent(
    """
    import asyncio, gc, json, sys
    from memora_plugin_server import create_app
    from memora_plugin_server.process import owning_process
    from memora.testing import ScriptedProvider

    def app(own):
        made = create_app([sys.argv[1]], provider=ScriptedProvider([]), config_dir=sys.argv[2],
                          load_entrypoints=False)
        return owning_process(made, full_every=0.05) if own else made

    async def started(app):
        # the ASGI lifespan as a server drives it: start-up, then (once seen) shut-down
        inbox = asyncio.Queue()
        sent = []
        async def receive():
            return await inbox.get()
        async def send(message):
            sent.append(message["type"])
            if message["type"] == "lifespan.startup.complete":
                full = gc.get_stats()[2]["collections"]
                await asyncio.sleep(0.5)  # serving, idle: only the clock starts a full collection
                full = gc.get_stats()[2]["collections"] - full
                seen.append((gc.get_freeze_count(), gc.get_threshold(), full))
                await inbox.put({"type": "lifespan.shutdown"})
        seen = []
        await inbox.put({"type": "lifespan.startup"})
        await app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send)
        return seen[0], sent

    embedded = asyncio.run(started(app(False)))
    owned = asyncio.run(started(app(True)))
    print(json.dumps({"embedded": embedded, "owned": owned}))
    """
)


def test_the_served_process_freezes_its_start_up_and_an_embedded_app_does_not(
    tmp_path: Path,
) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(project), str(tmp_path / "user")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    (frozen, thresholds, full), sent = result["embedded"]
    assert frozen == 0 and thresholds == [700, 10, 10]  # CPython's defaults, untouched
    assert full == 0
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    (frozen, thresholds, full), sent = result["owned"]
    assert frozen > 10_000  # the runtimes, plugins and modules loaded at start-up
    assert thresholds == [10_000, 10, 10]
    assert full >= 3  # every 0.05 s while it serves (half a second here, on a slow machine too)
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
