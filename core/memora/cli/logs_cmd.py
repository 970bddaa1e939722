"""`memora logs`: past rounds across sessions, newest first — what was asked, the answer, the
tool calls with their arguments and results, tokens and time (simonw/llm's ``llm logs``)."""

from __future__ import annotations

import datetime
import json
import sys
from typing import Any

import click

from ..security.terminal import clean
from .base import emit_json
from .common import StorageTarget, store_options


async def _newest_rounds(
    store: Any, count: int, session: str | None, words: list[str], where: StorageTarget
) -> list[tuple[Any, Any]]:
    """``(session info, round)`` pairs, newest first, at most ``count``: sessions are read in
    the order they were last updated, and reading stops once no older session can hold a
    round newer than those found."""
    if session is not None:
        infos = [i for i in [await store.get(session)] if where.sees_session(i)]
    else:
        infos = sorted(
            (i for i in await store.list(include_archived=True) if where.sees_session(i)),
            key=lambda i: i.updated_at,
            reverse=True,
        )
    found: list[tuple[Any, Any]] = []
    for info in infos:
        if len(found) >= count and info.updated_at < found[count - 1][1].ended_at:
            break
        for record in await store.rounds(info.id):
            if words and not _matches(record, words):
                continue
            found.append((info, record))
        found.sort(key=lambda pair: pair[1].ended_at or pair[1].started_at, reverse=True)
    return found[:count]


def _matches(record: Any, words: list[str]) -> bool:
    haystack = f"{record.user}\n{record.assistant}".lower()
    return all(word in haystack for word in words)


def _tools(record: Any) -> list[dict[str, Any]]:
    """The round's tool calls: name, arguments, and how each ended."""
    calls: dict[str, dict[str, Any]] = {}
    for event in record.events:
        kind = event.get("type")
        call_id = str(event.get("tool_call_id") or len(calls))
        if kind == "tool_start":
            calls[call_id] = {"name": event.get("name"), "args": event.get("args", {})}
        elif kind == "tool_result":
            entry = calls.setdefault(call_id, {"name": event.get("name"), "args": {}})
            entry.update(
                ok=bool(event.get("ok")),
                blocked=bool(event.get("blocked")),
                summary=str(event.get("summary") or ""),
            )
    return list(calls.values())


def _when(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else "?"


def _doc(info: Any, record: Any) -> dict[str, Any]:
    return {
        "session_id": info.id,
        "session_title": info.title,
        "round_id": record.round_id,
        "status": record.status,
        "started_at": record.started_at,
        "ended_at": record.ended_at,
        "seconds": round(max(0.0, record.ended_at - record.started_at), 3),
        "user": record.user,
        "answer": record.assistant,
        "output": record.output,
        "tools": _tools(record),
        "usage": dict(record.usage),
        "model": record.model or None,
        "forgotten": record.forgotten,
    }


@click.command("logs")
@store_options
@click.option("-n", "--count", default=3, show_default=True, type=click.IntRange(1, 10_000))
@click.option("--session", default=None, help="Only this session's rounds.")
@click.option("-q", "--query", default=None, help="Only rounds whose request or answer say it.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document: {rounds: [...]}.")
def logs_cmd(
    where: StorageTarget, count: int, session: str | None, query: str | None, as_json: bool
) -> None:
    """Past rounds across sessions, newest first: the request, the answer (Markdown at a
    terminal, plain when piped), each tool call with its arguments and result, tokens and
    time."""
    import asyncio

    from ..errors import MemoraError

    words = [w for w in (query or "").lower().split() if w]

    async def main() -> list[tuple[Any, Any]]:
        store = where.open_sessions()
        try:
            return await _newest_rounds(store, count, session, words, where)
        finally:
            await store.close()

    try:
        found = asyncio.run(main())
    except MemoraError as exc:
        raise click.ClickException(str(exc)) from exc
    docs = [_doc(info, record) for info, record in found]
    if as_json:
        emit_json({"rounds": docs})
        return
    if not docs:
        click.echo("no rounds")
        return
    _print(docs, rich=sys.stdout.isatty())


def _print(docs: list[dict[str, Any]], *, rich: bool) -> None:
    console: Any = None
    if rich:
        from rich.console import Console

        console = Console()
    for doc in docs:
        usage = doc["usage"]
        head = (
            f"## {_when(doc['started_at'])} · session {doc['session_id']} · "
            f"round {doc['round_id']} · {doc['status']} · {doc['seconds']:.1f} s · "
            + (f"{doc['model']} · " if doc["model"] else "")
            + f"{usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out"
        )
        if doc["forgotten"] is not None:  # its text was forgotten: who asked and when
            gone = doc["forgotten"]
            said = f"(forgotten by {gone.get('by', '?')} on {_when(float(gone.get('at') or 0))})"
            click.echo(clean(f"{head}\n\n{said}\n", newlines=True))
            continue
        lines = [clean(head, newlines=False), "", "> " + clean(doc["user"]).replace("\n", "\n> ")]
        for tool in doc["tools"]:
            state = "refused" if tool.get("blocked") else "ok" if tool.get("ok") else "failed"
            args = json.dumps(tool.get("args", {}), ensure_ascii=False)[:200]
            summary = tool.get("summary", "")
            lines.append(clean(f"- `{tool['name']}` {args} → {state}: {summary}", newlines=False))
        answer = doc["output"] if doc["output"] is not None else doc["answer"]
        text = answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)
        lines += ["", clean(text), ""]
        block = "\n".join(lines)
        if console is not None:
            from rich.markdown import Markdown

            console.print(Markdown(block))  # cleaned first: Rich renders, nothing else drives it
        else:
            click.echo(block)
