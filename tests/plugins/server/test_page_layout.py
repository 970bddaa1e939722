"""The page finished (#41 item 3), in headless Chromium: laid out at phone, tablet and desktop
widths (screenshots saved, layout asserted: the chat's width, no sideways scroll, the side panel
folded behind a menu on a phone); Markdown tables; a reload brings back every past round with
its tool cards and approvals, and a running turn's message; each round's trace (LLM calls with
tokens and time, tool calls with arguments, result and duration, the approval, the stop) and
"branch from here"; a token kept for the tab's life and no stale UNAUTHORIZED banner."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import httpx2

from memora.llm.types import FinishDelta, TextDelta
from memora.testing import ScriptedProvider, ScriptedResponse, text, tool_call
from memora_plugin_server.config import ServerSettings, TokenEntry, hash_token

from .conftest import project_dir, read_events, scripted, serve
from .test_page import _chromium, browser_page  # noqa: F401

TABLE = "Prices:\n\n| item | price |\n|---|---:|\n| tea <b>x</b> | **3** |\n| cake | 5 |\n"
AUTH = {"Authorization": "Bearer tok-page"}
SETTINGS = ServerSettings(tokens=[TokenEntry(name="page", hash=hash_token("tok-page"))])


async def _turn(client: httpx2.AsyncClient, path: str, body: dict[str, Any]) -> list[Any]:
    async with client.stream("POST", path, json=body, headers=AUTH) as response:
        assert response.status_code == 200, await response.aread()
        return await read_events(response)


async def _layout(page: Any) -> dict[str, float]:
    return dict(
        await page.evaluate(
            """() => {
              const box = (id) => document.getElementById(id).getBoundingClientRect();
              return {
                inner: window.innerWidth,
                scroll: document.documentElement.scrollWidth,
                log: box("log").width,
                composer: box("composer").width,
                sideLeft: box("side").left,
                sideRight: box("side").right,
                sideWidth: box("side").width,
              };
            }"""
        )
    )


async def test_the_page_at_three_widths_with_traces_branches_and_reloads(tmp_path: Path) -> None:
    project = project_dir(tmp_path)
    write = ("write_file", {"path": "notes.md", "content": "# hi"}, "w1")
    slow = ScriptedResponse([TextDelta(f"w{i} ") for i in range(60)] + [FinishDelta("stop")])
    slow.delay = 0.05
    provider = ScriptedProvider([tool_call(write), text(TABLE), text("second answer"), slow])
    options = scripted(tmp_path, provider)
    shots = tmp_path / "screenshots"
    shots.mkdir()
    async with (
        serve(project, settings=SETTINGS, **options) as srv,
        httpx2.AsyncClient(base_url=srv.url, timeout=60) as client,
        browser_page(tmp_path) as page,
    ):
        sessions = "/v1/projects/proj/sessions"
        sid = (await client.post(sessions, json={"title": "prices"}, headers=AUTH)).json()["id"]
        turns = f"{sessions}/{sid}/turns"
        events = await _turn(client, turns, {"text": "write notes and list the prices"})
        assert events[-1].type == "paused"
        events = await _turn(client, f"{sessions}/{sid}/approvals/w1", {"decision": "approve"})
        assert events[-1].type == "done"
        assert (await _turn(client, turns, {"text": "and then?"}))[-1].type == "done"

        # the token: asked once, kept for the tab, the UNAUTHORIZED banner gone once it works
        await page.goto(srv.url + "/")
        await page.locator("#token-form").wait_for()
        await page.fill("#token", "tok-page")
        await page.press("#token", "Enter")
        await page.wait_for_selector("#sessions li.active")
        assert await page.locator("#notice").is_hidden()
        await page.reload()
        await page.wait_for_selector("#sessions li.active")
        assert await page.locator("#token-form").is_hidden(), "the tab kept its token"

        # every past round as it was: the user's words, the tool card, the approval, the table
        await page.locator(".msg.user", has_text="and then?").wait_for()
        first = page.locator(".msg.assistant").first
        assert await first.locator('.tool[data-tool-call="w1"] .status').inner_text() == "done"
        assert "approved: write_file" in await first.inner_text()
        cells = first.locator(".md table td")
        assert [await c.inner_text() for c in await cells.all()] == [
            "tea <b>x</b>",
            "3",
            "cake",
            "5",
        ]
        assert await first.locator(".md table b").count() == 0  # escaped, never HTML
        assert await first.locator(".md table td.right strong").count() == 1

        # the trace of a round: LLM calls (tokens, time), the tool call, the approval, the stop
        trace = first.locator("details.trace")
        await trace.locator("summary").click()
        steps = [await li.inner_text() for li in await trace.locator("li").all()]
        assert sum(s.startswith("LLM call") and " ms" in s for s in steps) == 2, steps
        assert any(s.startswith("tool write_file") and "notes.md" in s for s in steps), steps
        assert any(s.startswith("→ write_file ok") and s.endswith("ms") for s in steps), steps
        assert any(s.startswith("approved: write_file") for s in steps), steps
        assert steps[-1].startswith("stop: done")

        # three widths: screenshots, and the layout they must have
        widths = {}
        for width, height in ((1280, 800), (768, 1024), (390, 844)):
            await page.set_viewport_size({"width": width, "height": height})
            await page.wait_for_timeout(300)
            await page.screenshot(path=str(shots / f"page-{width}.png"))
            widths[width] = await _layout(page)
            assert widths[width]["scroll"] <= width, f"no sideways scroll at {width} px"
        assert widths[1280]["sideWidth"] == 280 and widths[1280]["log"] >= 950
        assert widths[768]["sideWidth"] == 220 and widths[768]["log"] >= 540
        phone = widths[390]
        assert phone["log"] >= 380 and phone["composer"] >= 380, "the chat takes the width"
        assert phone["sideRight"] <= 0, "the side panel is folded away"
        await page.click("#menu")
        await page.wait_for_timeout(400)
        opened = await _layout(page)
        assert opened["sideLeft"] == 0 and opened["sideWidth"] <= 390
        await page.screenshot(path=str(shots / "page-390-menu.png"))
        await page.click("#close-side")
        await page.wait_for_timeout(400)
        assert (await _layout(page))["sideRight"] <= 0, "closed again"
        await page.set_viewport_size({"width": 1280, "height": 800})

        # branch from the first round: a new session with that round only, opened
        await first.locator("button.branch").click()
        await page.wait_for_function(
            "() => document.querySelectorAll('#log .msg.user').length === 1"
        )
        await page.wait_for_function("() => document.querySelectorAll('#sessions li').length === 2")
        listed = (await client.get(sessions, headers=AUTH)).json()["sessions"]
        fork = next(s for s in listed if s["id"] != sid)
        assert fork["parent_id"] == sid and fork["round_count"] == 1

        # a reload while a turn runs: its message, and the answer as it streams
        await page.click(f'#sessions li[data-session="{sid}"]')
        await page.locator(".msg.user", has_text="and then?").wait_for()
        running = asyncio.create_task(_turn(client, turns, {"text": "a long one"}))
        for _ in range(100):
            info = (await client.get(f"{sessions}/{sid}", headers=AUTH)).json()
            if info["running_turn"]:
                break
            await asyncio.sleep(0.05)
        await page.reload()
        await page.locator(".msg.user", has_text="a long one").wait_for()
        await page.locator(".msg.assistant .md", has_text="w59").wait_for(timeout=15_000)
        await running
        with contextlib.suppress(Exception):
            await page.screenshot(path=str(shots / "page-after.png"))
    for width in (1280, 768, 390):
        assert (shots / f"page-{width}.png").stat().st_size > 10_000
