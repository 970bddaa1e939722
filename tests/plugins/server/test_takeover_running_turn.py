"""A turn taken over on a worker that served the session before (#71): the session names the
taken-over turn as its running one — the turn its followers must read — not the worker's last
turn of its own, ended long ago."""

from __future__ import annotations

import time
from pathlib import Path

import httpx2
import pytest

from tests.core.test_chat_cli import Script, say, server  # noqa: F401
from tests.plugins.server.test_hosts import durable_hosts
from tests.plugins.server.test_workers import _events

pytestmark = pytest.mark.slow

pytest.importorskip("dbos")


def test_a_session_names_the_turn_taken_over_as_running_not_an_earlier_one(
    server: tuple[str, Script],  # noqa: F811
    pg_dsn: str,
    tmp_path: Path,
) -> None:
    """Found: the worker that takes a turn over keeps its log out of the session's own logs
    (its first events are where the workers share them), and `GET` of the session named the
    last of those logs while the session was busy: on a worker that had served an earlier turn
    of the session, `running_turn` was that ended turn — a page reloaded there followed it, and
    showed its message above the answer being written."""
    url, script = server
    with durable_hosts(tmp_path, url, pg_dsn, "running") as (a, b):
        sessions = "/v1/projects/shop/sessions"
        sid = b.request("POST", sessions, json={}).json()["id"]
        script.answers.append(say("first, on b"))
        b.turn(f"{sessions}/{sid}/turns", {"text": "first"})  # b serves the session once
        script.answers += [say("second " * 200, delay=0.05), say("second, taken over", 0.02)]
        started = a.request(
            "POST", f"{sessions}/{sid}/turns", json={"text": "second", "background": True}
        )
        assert started.status_code == 202, started.text
        turn = started.json()["turn_id"]
        for _ in range(600):  # the turn's LLM call streams on a
            if len([q for q in script.requests if q.get("stream")]) >= 2:
                break
            time.sleep(0.05)
        a.proc.kill()
        a.proc.wait()
        named = None
        for _ in range(600):  # b takes the turn over and runs it
            named = b.request("GET", f"{sessions}/{sid}").json().get("running_turn")
            if named is not None:
                break
            time.sleep(0.05)
        assert named == turn, (named, turn)
        with (
            httpx2.Client(base_url=b.base, timeout=120) as cb,
            cb.stream("GET", f"{sessions}/{sid}/turns/{named}/events") as follower,
        ):
            chunks = [chunk for _, chunk in _events(follower.iter_lines())]
        assert chunks[-1]["type"] == "done" and chunks[-1]["answer"] == "second, taken over"
