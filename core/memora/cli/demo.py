"""`make demo`: the main job on embedded defaults — SQLite storage and a local model.

1. lists the installed plugins;
2. validates the example role packs;
3. runs two real turns with the embedded SmolLM2-135M model (offline), streaming the answer,
   writing round summaries into SQLite memory;
4. recalls them with a keyword search, as the ``memory_search`` tool would.

Nothing is scripted: every answer comes from the model.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from pathlib import Path

import click

from ..memory.grounding import short_name
from ..security.terminal import clean

QUESTIONS = [
    "In two sentences: why should a notes app store data in SQLite instead of one JSON file?",
    "Give me three short tips for writing clear commit messages.",
]


def _repo_root() -> Path | None:
    here = Path.cwd()
    for folder in (here, *here.parents):
        if (folder / "role_packs").is_dir() and (folder / "core" / "memora").is_dir():
            return folder
    return None


async def _conversation(base: Path, packs: Path | None) -> None:
    from ..agent import Agent

    project = base / "project"
    project.mkdir(parents=True, exist_ok=True)
    (project / "README.md").write_text("# Demo project\nA tiny notes app.\n", encoding="utf-8")
    agent = Agent(
        project_path=project,
        data_dir=base / "data",
        provider="llamacpp",
        role_pack_dirs=[packs] if packs else [],
        active_role_pack=None,  # the built-in fallback pack: short prompt for a tiny model
        # a 135M model cannot drive tools; keep the demo to conversation + memory
        strategy_override={
            "act": {"toolMode": "block", "outputLimit": 160},
            "reflect": {"selfReview": 0, "userFollowup": "silent"},
        },
    )
    await agent.init()
    # a new conversation every run: resuming the last one would make the model read every
    # earlier demo's turns again (the first answer took 9 s after a few runs instead of ~1 s)
    await agent.new_session(title="make demo")
    from .common import say_small_model

    say_small_model(agent)
    try:
        click.secho(
            f"role pack: {agent.role_pack.active.name}   provider: {agent.router.chat.name}",
            bold=True,
        )
        for question in QUESTIONS:
            click.secho(f"\nyou> {question}", fg="cyan")
            click.echo("memora> ", nl=False)
            started = time.perf_counter()
            first: float | None = None
            async for chunk in agent.chat(question):
                if chunk.type == "text":
                    if first is None:
                        first = time.perf_counter() - started
                    click.echo(clean(chunk.content), nl=False)
                elif chunk.type == "error":
                    click.secho(f"\nerror: {clean(chunk.message)}", fg="red")
                elif chunk.type == "done":
                    usage = chunk.usage
                    took = time.perf_counter() - started
                    to_first = f"first text {first:.1f}s, " if first is not None else ""
                    click.secho(
                        f"\n  [{usage.output_tokens if usage else '?'} tokens, "
                        f"{to_first}{took:.1f}s]",
                        dim=True,
                    )
        click.secho("\n(waiting for the round summaries, written after each answer)", dim=True)
        await agent.idle()
        snapshot = await agent.memory.snapshot()
        # the demo's data is kept between runs (and `make test` runs the demo too): say which
        # memories this run wrote, so a second run's identical memories do not read as doubles
        session = agent.session_id
        newest = await agent.memory.list(limit=4 * len(QUESTIONS), include_superseded=False)
        this_run = {r.content for r in newest if r.session_id == session}
        written = sum(1 for r in newest if r.session_id == session)
        earlier = snapshot.total - written
        click.secho(
            f"\nmemory: {written} written by this run"
            + (f", {earlier} kept from earlier runs" if earlier else "")
            + f" {snapshot.by_source}",
            bold=True,
        )
        limit = 10  # what the model's memory_search returns at most
        for query in ("SQLite", "commit"):
            hits = await agent.memory.search(query, limit=limit)
            click.secho(f"memory_search({query!r}) -> {len(hits)} hit(s)", fg="green")
            # the same text stored by several runs (the embedded model answers alike) is
            # shown once, saying which runs stored it
            same: dict[str, tuple[str | None, list[str | None]]] = {}
            for h in hits:
                kind_and_sessions = same.setdefault(h.record.content, (h.record.summary_type, []))
                kind_and_sessions[1].append(h.record.session_id)
            for content, (kind, sessions) in list(same.items())[:2]:
                # after many runs the search's ten hits may all be earlier runs' copies of the
                # text this run stored as well: the line stands for this run's too
                mine = session in sessions or content in this_run
                others = len(sessions) - (session in sessions)
                at_least = "+" if len(hits) >= limit else ""  # the search stopped at its limit
                if mine:
                    runs = f"this run and {others}{at_least} earlier" if others else "this run"
                else:
                    runs = f"{others}{at_least} earlier runs" if others > 1 else "an earlier run"
                click.echo(f"  [{kind}, {runs}] {clean(short_name(content, 160))}")
    finally:
        await agent.close()


def main() -> None:
    from .main import main as cli_main

    root = _repo_root()
    base = (root or Path.cwd()) / ".memora-demo"
    click.secho("== installed plugins", bold=True)
    with contextlib.suppress(SystemExit):
        cli_main(["plugins", "--all"])
    if root is not None:
        click.secho("\n== example role packs", bold=True)
        try:
            cli_main(["role-pack", "validate", str(root / "role_packs")])
        except SystemExit as exc:
            if exc.code:
                sys.exit(exc.code)
    click.secho("\n== a conversation with the embedded model (offline)", bold=True)
    asyncio.run(_conversation(base, root / "role_packs" if root else None))
    click.secho(
        f"\nDemo data kept in {base} (memora memory search QUERY --data-dir {base / 'data'})",
        dim=True,
    )


if __name__ == "__main__":
    main()
