"""Privileged tools, exposed only when the role pack declares the capability and a plugin
provides the service: web_search, web_fetch, run_code."""

from __future__ import annotations

import inspect
from typing import Annotated, Any, Literal

from pydantic import Field

from ..errors import ToolError, ToolErrorCode
from .base import ToolOutput, builtin_tool
from .context import ToolContext

__all__ = ["PRIVILEGED_TOOLS"]


@builtin_tool(idempotency="read-only", capability="web:search")
async def web_search(
    ctx: ToolContext,
    query: Annotated[str, Field(min_length=1, max_length=500)],
    max_results: Annotated[int, Field(ge=1, le=20)] = 5,
    region: Annotated[
        str | None,
        Field(max_length=10, description="Region and language, e.g. us-en, uk-en, cn-zh, de-de"),
    ] = None,
    safesearch: Literal["on", "moderate", "off"] | None = None,
    time_limit: Annotated[
        Literal["d", "w", "m", "y"] | None,
        Field(description="Only results from the last day, week, month or year"),
    ] = None,
) -> ToolOutput:
    """Search the web; returns titles, URLs and snippets."""
    options: dict[str, Any] = {}
    if region:
        options["region"] = region
    if safesearch:
        options["safesearch"] = safesearch
    if time_limit:
        options["timelimit"] = time_limit
    # the loop refuses a call over the cap before it starts (tool_result(blocked=True), see
    # memora.agent.gates); this check keeps direct callers of the tool within it too
    used = ctx.counters.get("web_search", 0)
    if used >= ctx.web_search_limit:
        raise ToolError(
            ToolErrorCode.PERMISSION_DENIED,
            f"web_search limit reached ({ctx.web_search_limit} per turn); answer with what "
            "you found",
        )
    svc = ctx.service("web_search", "web:search")
    ctx.counters["web_search"] = used + 1
    hits = await svc.search(query, max_results=max_results, **options)
    if not hits:
        return ToolOutput(
            f"no results for {query!r} (rephrase the query; if results were expected, the search "
            "engine may be limiting requests: try again later)",
            "0 results",
        )
    lines = [f"{i}. {h.title}\n   {h.url}\n   {h.snippet}" for i, h in enumerate(hits, 1)]
    return ToolOutput("\n".join(lines), f"{len(hits)} results")


@builtin_tool(idempotency="read-only", capability="web:fetch")
async def web_fetch(
    ctx: ToolContext,
    url: Annotated[str, Field(min_length=1, max_length=4000)],
    max_chars: Annotated[int, Field(ge=500, le=200_000)] = 20_000,
) -> ToolOutput:
    """Fetch a web page and return its main text."""
    svc = ctx.service("web_fetch", "web:fetch")
    if ctx.progress:
        ctx.progress(f"fetching {url}")
    result = await svc.fetch(url, max_chars=max_chars)
    head = [f"[{result.url} — {result.status} {result.content_type}]"]
    if result.title:
        head.append(f"# {result.title}")
    byline = " · ".join(x for x in (result.author, result.date) if x)
    if byline:
        head.append(byline)
    more = "\n[truncated]" if result.truncated else ""
    return ToolOutput(
        "\n".join(head) + "\n\n" + result.text + more,
        f"{result.url}: {len(result.text)} chars",
    )


@builtin_tool(runs_code=True, idempotency="non-idempotent", capability="code:execute")
async def run_code(
    ctx: ToolContext,
    code: Annotated[str, Field(min_length=1, max_length=100_000)],
    language: Annotated[str, Field(description="python, javascript, ...")] = "python",
    timeout: Annotated[float, Field(gt=0, le=300)] = 30,
) -> ToolOutput:
    """Run a code snippet in the code-execution sandbox and return its output."""
    svc = ctx.service("code_executor", "code:execute")
    hide = ctx.hiding()
    if hide:
        # one of several people's Agents: the snippet must not find memora's data; an executor
        # that cannot hide it (it takes no ``hide``) is refused, not run unhidden
        if "hide" not in inspect.signature(svc.execute).parameters:
            raise ToolError(
                ToolErrorCode.NOT_AVAILABLE,
                f"run_code is refused: the code executor {type(svc).__name__} cannot hide "
                "memora's data from a snippet (it takes no `hide`), and this Agent's tools "
                "must not reach it (isolate_tools)",
            )
        result = await svc.execute(code, language=language, timeout=timeout, hide=hide)
    else:
        result = await svc.execute(code, language=language, timeout=timeout)
    isolation = f"\n[isolation: {result.isolation}]" if result.isolation else ""
    text = (
        f"[exit {result.exit_code}]\n{result.stdout}"
        + (f"\n[stderr]\n{result.stderr}" if result.stderr else "")
        + ("\n[output truncated]" if result.truncated else "")
        + isolation
    )
    if result.timed_out:
        raise ToolError(
            ToolErrorCode.TIMEOUT,
            f"the snippet ran longer than {timeout:g}s and was killed\n{text}",
        )
    if result.exit_code != 0:
        raise ToolError(ToolErrorCode.EXECUTION_FAILED, text)
    return ToolOutput(text, f"exit {result.exit_code}")


PRIVILEGED_TOOLS = (web_search, web_fetch, run_code)
