"""Durable turns across `memora serve` processes (#71): two hosts on one PostgreSQL database with
`"turn_executor": "dbos"`; the host running a turn is SIGKILLed between two tool steps, and the
other takes the turn over from DBOS's journal — a follower on it sees the turn go on and end
`done` (not `TURN_LOST`), each command ran once, the session holds one round."""

from __future__ import annotations

import time
from pathlib import Path

import httpx2
import pytest

from tests.core.test_chat_cli import Script, call, say, server  # noqa: F401
from tests.plugins.server.test_hosts import durable_hosts
from tests.plugins.server.test_workers import _events

pytestmark = pytest.mark.slow

pytest.importorskip("dbos")


def test_a_host_killed_between_two_tool_steps_leaves_its_turn_to_the_other(
    server: tuple[str, Script],  # noqa: F811
    pg_dsn: str,
    tmp_path: Path,
) -> None:
    url, script = server
    counter = tmp_path / "ran.txt"
    with durable_hosts(tmp_path, url, pg_dsn, "durable") as (a, b):
        sessions = "/v1/projects/shop/sessions"
        sid = a.request("POST", sessions, json={}).json()["id"]
        base = f"{sessions}/{sid}"
        script.answers += [
            call("run_command", {"command": f"echo one >> {counter}"}, "c1"),
            say("still thinking " * 300, delay=0.05),  # host A dies in this LLM call
            call("run_command", {"command": f"echo two >> {counter}"}, "c2"),
            say("both steps done"),
        ]
        with (
            httpx2.Client(base_url=a.base, timeout=120) as ca,
            ca.stream("POST", f"{base}/turns", json={"text": "run both steps"}) as r,
        ):
            turn = r.headers["x-memora-turn"]
            seen = [ch for _, ch in _until(_events(r.iter_lines()), "tool_result")]
            assert seen[-1]["type"] == "tool_result"
            with (
                httpx2.Client(base_url=b.base, timeout=120) as cb,
                cb.stream("GET", f"{base}/turns/{turn}/events") as follower,
            ):
                events = _events(follower.iter_lines())
                ids = []
                for event_id, chunk in events:
                    ids.append(event_id)
                    if chunk["type"] == "tool_result":
                        break
                for _ in range(300):  # the second LLM call has begun on A
                    if len([q for q in script.requests if q.get("stream")]) >= 2:
                        break
                    time.sleep(0.05)
                a.proc.kill()
                a.proc.wait()
                rest = [ch for _, ch in events]
        assert rest[-1]["type"] == "done", rest[-3:]
        assert "TURN_LOST" not in {c.get("code") for c in rest}
        assert rest[-1]["answer"] == "both steps done"
        assert counter.read_text() == "one\ntwo\n"  # each command ran once
        info = b.request("GET", base).json()
        assert [r["status"] for r in info["rounds"]] == ["done"]
        results = [
            e["tool_call_id"] for e in info["rounds"][0]["events"] if e["type"] == "tool_result"
        ]
        assert results == ["c1", "c2"]
        # the session is free for the next message, on either host
        script.answers.append(say("next"))
        assert b.turn(f"{base}/turns", {"text": "next"})[-1]["type"] == "done"


def _until(events, kind):  # type: ignore[no-untyped-def]
    for _, chunk in events:
        yield None, chunk
        if chunk["type"] == kind:
            return
