"""`memora memory ...` and `memora sessions ...`: inspect a data directory."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import click

from ..security.terminal import clean
from .base import emit_json
from .common import StorageTarget, progress, store_options

T = TypeVar("T")


def _run(
    where: StorageTarget, work: Callable[[Any], Awaitable[T]], *, read_only: bool = False
) -> T:
    from ..errors import MemoraError

    async def main() -> T:
        store = where.open(read_only=read_only)
        try:
            return await work(store)
        finally:
            await store.close()

    try:
        import asyncio

        return asyncio.run(main())
    except MemoraError as exc:
        raise click.ClickException(str(exc)) from exc


@click.group("memory")
def memory_group() -> None:
    """Search, count, export and import memories."""


@memory_group.command("search")
@click.argument("query")
@store_options
@click.option("--source", default=None, help="Only this source label (e.g. round_summary).")
@click.option("--limit", default=10, show_default=True, type=click.IntRange(1, 1000))
@click.option("--json", "as_json", is_flag=True)
def search_cmd(
    query: str, where: StorageTarget, source: str | None, limit: int, as_json: bool
) -> None:
    """Keyword search (Chinese and English), most relevant first: the project's unscoped
    memories, with --scope NAME also that scope's, with --all-scopes every scope's."""

    async def work(store: Any) -> list[Any]:
        return list(await where.memory(store).search(query, source=source, limit=limit))

    hits = _run(where, work, read_only=True)
    if as_json:
        emit_json(
            {
                "results": [
                    {
                        "id": h.record.id,
                        "source": h.record.source,
                        "name": h.record.name,
                        "content": h.record.content,
                        "score": round(h.score, 6),
                        # as in an export: the scope when the memory has one
                        **({"scope": h.record.scope} if h.record.scope else {}),
                    }
                    for h in hits
                ]
            }
        )
        return
    if not hits:
        click.echo("no results")
    for h in hits:
        # memory text was written by a model or imported from a file: cleaned for the terminal
        owner = f" ({h.record.scope})" if h.record.scope else ""
        click.echo(
            clean(f"{h.score:7.3f}  {h.record.id}  [{h.record.source}]{owner} {h.record.name}")
        )
        click.echo(f"         {clean(h.record.content[:200], newlines=False)}")


@memory_group.command("stats")
@store_options
@click.option("--json", "as_json", is_flag=True)
def stats_cmd(where: StorageTarget, as_json: bool) -> None:
    """Totals by source label (of the memories the scope options select)."""

    async def work(store: Any) -> Any:
        return await where.memory(store).snapshot()

    snap = _run(where, work, read_only=True)
    if as_json:
        emit_json(snap.to_dict())
        return
    click.echo(f"total: {snap.total}")
    for source, n in sorted(snap.by_source.items()):
        click.echo(f"  {source}: {n}")


@memory_group.command("history")
@click.argument("memory_id")
@store_options
@click.option("--json", "as_json", is_flag=True)
def history_cmd(memory_id: str, where: StorageTarget, as_json: bool) -> None:
    """Show a memory's supersede chain, oldest first."""

    async def work(store: Any) -> list[Any]:
        return list(await where.memory(store).history(memory_id))

    chain = _run(where, work, read_only=True)
    if as_json:
        emit_json({"history": [r.to_dict() for r in chain]})
        return
    for r in chain:
        if r.superseded_by:
            mark = "superseded by " + r.superseded_by
        elif "forgotten" in r.meta:  # the chain's last link when it was forgotten
            mark = _change("forgotten", r.meta["forgotten"], link=False)
        else:
            mark = "current"
        click.echo(clean(f"{r.id}  ({mark})  session={r.session_id} round={r.round_id}"))
        text = r.content[:200] if r.content else "(no text)"
        if "redacted" in r.meta:  # forgotten everywhere: its text is gone from the chain too
            text = _change("text forgotten everywhere", r.meta["redacted"], link=False)
        click.echo(f"    {clean(text, newlines=False)}")


def _who() -> str:
    """Who acts from the command line, for the memory's audit (``cli:<login>``)."""
    import getpass

    try:
        return f"cli:{getpass.getuser()}"
    except Exception:  # no login name (a container without a passwd entry)
        return "cli"


def _when(at: Any) -> str:
    """A stored time (seconds since the epoch) as a person reads it, in UTC."""
    try:
        return datetime.fromtimestamp(float(at), UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (TypeError, ValueError, OverflowError, OSError):
        return repr(at)


_WRITTEN = {
    "verbatim": "as it was said (a short round)",
    "model": "the model's summary, checked against the round",
    "extractive": "from the round's own sentences (the model's summary failed the check)",
}

_CHANGES = {"edited": "from", "forgotten": "was"}
"""A change's key in ``meta`` -> how its link to the memory it replaced reads."""


def _change(key: str, value: object, *, link: bool = True) -> str:
    """``edited: by cli:ana on 2026-12-03 09:35:36 UTC (from ID)`` — who and when, as the
    audit in ``meta`` records it; a value of another shape (an import) is shown as JSON."""
    if not isinstance(value, dict) or not {"by", "at"} <= value.keys():
        return f"{key}: {json.dumps(value, ensure_ascii=False)}"
    text = f"{key}: by {value['by']} on {_when(value['at'])}"
    replaced = value.get("from") or value.get("memory")
    if replaced and link:
        text += f" ({_CHANGES.get(key, 'of')} {replaced})"
    return text


def _provenance(meta: dict[str, Any]) -> list[str]:
    """How the memory was written and what people did to it, one line each."""
    lines = []
    how, score = meta.get("written"), meta.get("grounding")
    if how is not None:
        lines.append(f"written: {_WRITTEN.get(str(how), json.dumps(how, ensure_ascii=False))}")
    if isinstance(score, int | float) and not isinstance(score, bool):
        lines.append(f"grounding: {score:.2f} (the share of its content words the round said)")
    elif score is not None:
        lines.append(f"grounding: {json.dumps(score, ensure_ascii=False)}")
    lines.extend(
        _change(key, meta[key])
        for key in ("edited", "forgotten", "pinned", "unpinned", "redacted")
        if key in meta
    )
    return lines


def _show_record(r: Any) -> None:
    # a memory's text was written by a model or imported from a file: cleaned for the terminal
    click.echo(clean(f"{r.id}  [{r.source}] {r.name}"))
    if r.superseded_by:
        state = f"superseded by {r.superseded_by}"
    else:  # the last of its chain: in recall, unless it is the mark of a forgetting
        state = "forgotten" if "forgotten" in r.meta and not r.content else "current"
    owner = f" · scope {r.scope}" if r.scope else ""
    came = [f"{k} {v}" for k, v in (("session", r.session_id), ("round", r.round_id)) if v]
    click.echo(clean(f"  {state} · {' · '.join(came) or 'from no session'}{owner}"))
    click.echo(f"  created {_when(r.created_at)}")
    for line in _provenance(r.meta):
        click.echo(clean(f"  {line}"))
    click.echo("")
    click.echo(clean(r.content) if r.content else "(forgotten: no text)")


@memory_group.command("show")
@click.argument("memory_id")
@store_options
@click.option("--json", "as_json", is_flag=True)
def show_cmd(memory_id: str, where: StorageTarget, as_json: bool) -> None:
    """Show one memory whole: its text, where it came from (session, round), how it was
    written, and whether it was edited, forgotten or superseded."""

    async def work(store: Any) -> Any:
        return await where.memory(store).get(memory_id)

    record = _run(where, work, read_only=True)
    if as_json:
        emit_json(record.to_dict())
        return
    _show_record(record)


@memory_group.command("edit")
@click.argument("memory_id")
@store_options
@click.option(
    "--content", default=None, help="The corrected text (default: edit it in $VISUAL/$EDITOR)."
)
def edit_cmd(memory_id: str, where: StorageTarget, content: str | None) -> None:
    """Correct a memory: the new text supersedes it (`memora memory history ID` keeps the
    chain, with who edited it and when)."""
    if content is None:
        current = _run(where, lambda store: where.memory(store).get(memory_id), read_only=True)
        edited = click.edit(current.content, extension=".md", require_save=True)
        if edited is None or edited.strip() == current.content.strip():
            click.echo("unchanged: nothing written", err=True)
            return
        content = edited.strip()

    async def work(store: Any) -> Any:
        return await where.memory(store).edit(memory_id, content, by=_who())

    record = _run(where, work)
    click.echo(f"{record.id} supersedes {memory_id}")


@memory_group.command("forget")
@click.argument("memory_id")
@store_options
@click.option(
    "--everywhere",
    is_flag=True,
    help="Also empty its history's texts and forget the text of the round it came from in the "
    "session's log (and its forks): `memora logs` and `sessions show` then say who asked and "
    "when.",
)
def forget_cmd(memory_id: str, where: StorageTarget, everywhere: bool) -> None:
    """Take a memory out of recall (searches, the model's memory_search, exports of current
    memories); the chain records who forgot it and when.  --everywhere: its text out of the
    chain and out of the session's log too."""
    if not everywhere:

        async def work(store: Any) -> Any:
            return await where.memory(store).forget(memory_id, by=_who())

        _run(where, work)
        click.echo(f"forgotten: {memory_id}")
        return
    from ..memory.forgetting import forget_everywhere

    async def everywhere_work(store: Any) -> Any:
        sessions = where.open_sessions()
        try:
            return await forget_everywhere(where.memory(store), sessions, memory_id, by=_who())
        finally:
            await sessions.close()

    done = _run(where, everywhere_work)
    rounds = ", ".join(f"{s}/{r}" for s, r in done.rounds) or "none"
    click.echo(
        f"forgotten everywhere: {memory_id} ({len(done.memories)} version(s) emptied; rounds: "
        f"{rounds})"
    )


def _pin(memory_id: str, where: StorageTarget, *, on: bool) -> None:
    async def work(store: Any) -> Any:
        memory = where.memory(store)
        change = memory.pin if on else memory.unpin
        return await change(memory_id, by=_who())

    _run(where, work)
    click.echo(f"{'pinned' if on else 'unpinned'}: {memory_id}")


@memory_group.command("pin")
@click.argument("memory_id")
@store_options
def pin_cmd(memory_id: str, where: StorageTarget) -> None:
    """Keep a memory in mind: it goes into the system prompt of every turn of its scope (at
    most 10 a scope; the memory records who pinned it and when)."""
    _pin(memory_id, where, on=True)


@memory_group.command("unpin")
@click.argument("memory_id")
@store_options
def unpin_cmd(memory_id: str, where: StorageTarget) -> None:
    """Take a pinned memory out of the prompt again (it stays in memory and recall)."""
    _pin(memory_id, where, on=False)


@memory_group.command("pinned")
@store_options
@click.option("--json", "as_json", is_flag=True)
def pinned_cmd(where: StorageTarget, as_json: bool) -> None:
    """The pinned memories the scope's turns keep in mind, newest first."""

    async def work(store: Any) -> list[Any]:
        return list(await where.memory(store).pinned(fresh=True))

    records = _run(where, work, read_only=True)
    if as_json:
        emit_json({"pinned": [r.to_dict() for r in records]})
        return
    if not records:
        click.echo("nothing pinned")
    for r in records:
        owner = f" ({r.scope})" if r.scope else ""
        click.echo(clean(f"{r.id}{owner}  {r.name}"))
        click.echo(f"    {clean(r.content[:200], newlines=False)}")


@memory_group.command("export")
@store_options
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="File to write (default: stdout).",
)
def export_cmd(where: StorageTarget, output: Path | None) -> None:
    """Export memories as JSONL, one memory a line: the project's unscoped ones, with --scope
    NAME that scope's too, with --all-scopes every memory (a whole backup)."""

    async def work(store: Any) -> tuple[list[Any], int]:
        memory = where.memory(store)
        out, offset = [], 0
        with progress("exporting", await memory.count()) as advance:
            while True:
                page = await memory.list(limit=1000, offset=offset)
                out.extend(page)
                advance(len(page))
                if len(page) < 1000:
                    break
                offset += 1000
        total = await memory.all_scopes().count() if memory.scopes is not None else len(out)
        return out, int(total) - len(out)

    records, left = _run(where, work, read_only=True)
    if left > 0:
        click.echo(
            f"memora: {left} memories of other scopes were not exported "
            "(--all-scopes exports every scope's)",
            err=True,
        )
    lines = [
        json.dumps(
            {
                k: v
                for k, v in r.to_dict().items()
                if v not in (None, {}) or k in ("source", "name", "content")
            },
            ensure_ascii=False,
        )
        for r in reversed(records)
    ]
    text = "".join(line + "\n" for line in lines)
    if output is None:
        sys.stdout.write(text)
    else:
        from ..security.atomic import atomic_write_text

        atomic_write_text(output, text)
        click.echo(f"exported {len(lines)} memories to {output}", err=True)


@memory_group.command("import")
@click.argument(
    "file", type=click.Path(path_type=Path, dir_okay=False, exists=True, allow_dash=True)
)
@store_options
def import_cmd(file: Path, where: StorageTarget) -> None:
    """Import JSONL memories (idempotent on "id" when given). Nothing is written if a line is
    bad.  A line keeps its "scope"; with --scope NAME, lines without one go into NAME."""
    from dataclasses import replace

    from ..memory.types import NewMemory

    raw = sys.stdin.buffer.read() if str(file) == "-" else file.read_bytes()
    items: list[NewMemory] = []
    # JSONL lines end at "\n" only: str.splitlines() would also split inside content holding
    # U+2028, U+2029 or U+0085, which an export writes as they are
    chunks = raw.split(b"\n")
    with progress("checking", len(chunks)) as advance:
        for n, chunk in enumerate(chunks, 1):
            advance(1)
            _parse_line(file, n, chunk, items)
    if where.scope is not None:
        items = [i if i.scope else replace(i, scope=where.scope) for i in items]

    async def work(store: Any) -> int:
        before = await store.count()
        with progress(f"writing {len(items)} memories", None):
            await store.add_many(items)
        return int(await store.count()) - int(before)

    added = _run(where, work)
    noun = "memory" if added == 1 else "memories"
    click.echo(f"imported {added} new {noun} ({len(items) - added} already present)")


def _plain_id(value: Any) -> Any:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _parse_line(file: Path, n: int, chunk: bytes, items: list[Any]) -> None:
    """One JSONL line of an import, checked (a bad line stops the import before any write)."""
    from ..errors import MemoraError
    from ..memory.storage import check_new
    from ..memory.types import NewMemory

    try:
        line = chunk.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise click.ClickException(
            f"{file} line {n}: not UTF-8 (byte {exc.start + 1}); nothing was imported"
        ) from exc
    line = line.removesuffix("\r")
    if n == 1:
        line = line.removeprefix("\ufeff")
    if not line.strip():
        return
    try:
        data = json.loads(line)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        if not isinstance(data.get("content"), str):
            raise ValueError('"content" (a string) is required')
        items.append(
            NewMemory(
                content=data["content"],
                source=str(data.get("source", "unknown")),
                name=str(data.get("name", "")),
                summary_type=data.get("summary_type"),
                session_id=data.get("session_id"),
                round_id=data.get("round_id"),
                # a number is a fine id in a hand-written file; anything else is checked below
                id=_plain_id(data.get("id")),
                created_at=float(data["created_at"])
                if data.get("created_at") is not None
                else None,
                superseded_by=data.get("superseded_by"),
                meta=dict(data.get("meta") or {}),
                scope=data.get("scope") or None,
            )
        )
        created = items[-1].created_at
        if created is not None and not math.isfinite(created):
            raise ValueError('"created_at" must be a finite number')
        check_new(items[-1])  # lone surrogates, NULs, size: refused here, naming the line
    except (ValueError, TypeError, MemoraError) as exc:
        why = exc.message if isinstance(exc, MemoraError) else str(exc)
        raise click.ClickException(f"{file} line {n}: {why}; nothing was imported") from exc


@click.group("sessions")
def sessions_group() -> None:
    """List, show and fork sessions."""


def _with_sessions(where: StorageTarget, work: Callable[[Any], Awaitable[T]]) -> T:
    """Open the session store, run ``work`` on it and close it, in one event loop."""
    from ..errors import MemoraError

    async def main() -> T:
        store = where.open_sessions()
        try:
            return await work(store)
        finally:
            await store.close()

    try:
        import asyncio

        return asyncio.run(main())
    except MemoraError as exc:
        raise click.ClickException(str(exc)) from exc


async def _session_of(where: StorageTarget, store: Any, session_id: str) -> Any:
    """The session ``session_id`` if the scope options select it, else ``NOT_FOUND``."""
    from ..errors import NotFoundError

    info = await store.get(session_id)
    if not where.sees_session(info):
        hint = f"scope {info.scope}" if info.scope else "no scope"
        raise NotFoundError(
            f"no session {session_id!r} here: it belongs to {hint} (--scope, --all-scopes)"
        )
    return info


@sessions_group.command("list")
@store_options
@click.option("--all", "include_archived", is_flag=True, help="Include archived sessions.")
@click.option("--json", "as_json", is_flag=True)
def sessions_list(where: StorageTarget, include_archived: bool, as_json: bool) -> None:
    """Sessions, most recently updated first."""

    async def work(store: Any) -> list[Any]:
        infos = await store.list(include_archived=include_archived)
        return [i for i in infos if where.sees_session(i)]

    infos = _with_sessions(where, work)
    if as_json:
        emit_json({"sessions": [i.to_dict() for i in infos]})
        return
    for i in infos:
        flag = " (archived)" if i.archived else ""
        owner = f"  scope={i.scope}" if i.scope else ""
        click.echo(clean(f"{i.id}  rounds={i.round_count}{owner}  {i.title}{flag}", newlines=False))


@sessions_group.command("show")
@click.argument("session_id")
@store_options
@click.option("--json", "as_json", is_flag=True)
def sessions_show(session_id: str, where: StorageTarget, as_json: bool) -> None:
    """One session and its rounds."""

    async def work(store: Any) -> tuple[Any, list[Any]]:
        info = await _session_of(where, store, session_id)
        return info, list(await store.rounds(session_id))

    info, rounds = _with_sessions(where, work)
    if as_json:
        emit_json({"session": info.to_dict(), "rounds": [r.to_dict() for r in rounds]})
        return
    click.echo(clean(f"{info.id}: {info.title}", newlines=False))
    for r in rounds:
        click.echo(clean(f"-- round {r.round_id} [{r.status}]"))
        if r.forgotten is not None:
            by = r.forgotten.get("by", "?")
            click.echo(clean(f"   (forgotten by {by} on {_when(r.forgotten.get('at'))})"))
            continue
        click.echo(f"   user: {clean(r.user[:300], newlines=False)}")
        click.echo(f"   assistant: {clean(r.assistant[:300], newlines=False)}")


@sessions_group.command("fork")
@click.argument("session_id")
@store_options
@click.option("--at-round", default=None, help="Copy rounds up to and including this round id.")
@click.option("--json", "as_json", is_flag=True)
def sessions_fork(
    session_id: str, where: StorageTarget, at_round: str | None, as_json: bool
) -> None:
    """Copy a session's rounds (up to a round) into a new session."""

    async def work(store: Any) -> tuple[Any, int]:
        await _session_of(where, store, session_id)
        info, count = await store.fork(session_id, at_round)
        return info, int(count)

    info, count = _with_sessions(where, work)
    if as_json:
        emit_json({"session": info.to_dict(), "round_count": count})
        return
    click.echo(f"forked {session_id} -> {info.id} ({count} rounds)")
