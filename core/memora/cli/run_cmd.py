"""`memora run PROMPT`: one turn from the command line (a host of the kernel)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import click

from ..errors import MemoraError
from ..security.terminal import clean
from .common import (
    agent_arguments,
    data_dir_for,
    location_options,
    provider_options,
    role_pack_options,
    start_agent,
    storage_option,
)
from .main import cli
from .trust_cmd import ask_trust

EXIT_DONE, EXIT_ERROR, EXIT_PAUSED, EXIT_ABORTED = 0, 1, 3, 130


def choose_provider(
    provider: str | None, base_url: str | None, model: str | None
) -> tuple[str | None, dict[str, Any]]:
    """--provider wins; else --base-url / MEMORA_BASE_URL means openai; else None: the Agent
    uses the configured provider (see memora config show), else the embedded llamacpp model."""
    options: dict[str, Any] = {}
    if model:
        options["model"] = model
    base = base_url or os.environ.get("MEMORA_BASE_URL")
    if provider is None and base:
        provider = "openai"
    if base and provider == "openai":
        options["base_url"] = base
    return provider, options


async def _run(
    prompt: str,
    *,
    events: str,
    provider: str | None,
    provider_options: dict[str, Any],
    project: Path,
    data_dir: Path,
    config_dir: Path | None,
    storage: str | None,
    role_pack: str | None,
    role_pack_dirs: list[Path],
    session: str | None,
    tools: bool,
) -> int:
    from ..agent import Agent
    from ..chunks import AgentChunk

    override = None if tools else {"act": {"toolMode": "block"}}
    explicit = agent_arguments(
        provider=provider, provider_options=provider_options, storage=storage, role_pack=role_pack
    )
    agent = Agent(
        project_path=project,
        data_dir=data_dir,
        config_dir=config_dir,
        project_trust=ask_trust,
        role_pack_dirs=role_pack_dirs,
        session_id=session,
        strategy_override=override,
        **explicit,
    )
    await start_agent(agent, role_pack)
    import asyncio

    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, agent.abort)
    interactive = events == "text" and sys.stdin.isatty()
    code = EXIT_ERROR
    try:
        stream = agent.chat(prompt)
        while True:
            last: AgentChunk | None = None
            async for chunk in stream:
                last = chunk
                _emit(chunk, events)
            if last is None:
                break
            if last.type == "done":
                code = EXIT_DONE
            elif last.type == "aborted":
                code = EXIT_ABORTED
            elif last.type == "paused":
                if not interactive:
                    code = EXIT_PAUSED
                    state_file = data_dir / "paused-turn.json"
                    state_file.write_text(
                        json.dumps(agent.pause_state(), ensure_ascii=False), encoding="utf-8"
                    )
                    click.echo(f"turn paused; its state is in {state_file}", err=True)
                    break
                _answer_interactively(agent)
                stream = agent.continue_after_pause()
                continue
            else:
                code = EXIT_ERROR
            break
    finally:
        await agent.close()
    return code


def _answer_interactively(agent: Any) -> None:
    from memora.agent import QuestionPause

    paused = agent.paused_turn.paused
    if isinstance(paused, QuestionPause):
        answers = {}
        for q in paused.questions:
            options = f" [{' / '.join(q.options)}]" if q.options else ""
            answers[q.slot] = click.prompt(clean(f"{q.question}{options}"), err=True)
        agent.answer_question(answers)
    else:
        args = json.dumps(paused.args, ensure_ascii=False)
        if click.confirm(clean(f"Allow {paused.name} {args}?"), err=True, default=False):
            agent.approve(paused.tool_call_id)
        else:
            agent.reject(paused.tool_call_id, "declined at the prompt")


def _emit(chunk: Any, events: str) -> None:
    if events == "jsonl":
        sys.stdout.write(chunk.model_dump_json() + "\n")
        sys.stdout.flush()
        return
    t = chunk.type
    # every string below comes from the model, a tool or a server: cleaned before it is printed
    if t == "text":
        sys.stdout.write(clean(chunk.content))
        sys.stdout.flush()
    elif t == "thought":
        click.secho(clean(chunk.content), err=True, dim=True, nl=False)
    elif t == "tool_start":
        args = json.dumps(chunk.args, ensure_ascii=False)[:200]
        click.secho(f"\n→ {clean(chunk.name)} {clean(args)}", err=True, fg="cyan")
    elif t == "tool_result":
        mark = "blocked" if chunk.blocked else ("ok" if chunk.ok else "failed")
        click.secho(
            f"  {mark}: {clean(chunk.summary)}", err=True, fg="green" if chunk.ok else "yellow"
        )
    elif t == "retry":
        click.secho(
            f"\n(retrying in {chunk.delay_ms} ms: {clean(chunk.error)})", err=True, fg="yellow"
        )
    elif t == "error":
        click.secho(f"\nerror ({chunk.category}): {clean(chunk.message)}", err=True, fg="red")
    elif t == "aborted":
        click.secho(f"\naborted: {clean(chunk.reason)}", err=True, fg="red")
    elif t == "question_pending":
        for q in chunk.questions:
            click.secho(f"\n? {clean(q.question)}", err=True, fg="magenta")
    elif t == "approval_pending":
        click.secho(
            f"\n? approve {clean(chunk.name)}: {clean(chunk.reason or '')}", err=True, fg="magenta"
        )
    elif t == "done":
        sys.stdout.write("\n")


@cli.command("run")
@click.argument("prompt")
@click.option(
    "--events",
    type=click.Choice(["text", "jsonl"]),
    default="text",
    show_default=True,
    help="jsonl: every chunk as one JSON line on stdout, nothing else.",
)
@provider_options
@location_options
@storage_option
@role_pack_options
@click.option("--session", default=None, help="Session id (default: the most recent one).")
@click.option(
    "--tools/--no-tools", default=True, show_default=True, help="Expose tools to the model."
)
def run_cmd(
    prompt: str,
    events: str,
    provider: str | None,
    base_url: str | None,
    model: str | None,
    project: Path,
    data_dir: Path | None,
    config_dir: Path | None,
    storage: str | None,
    role_pack: str | None,
    role_pack_dirs: tuple[Path, ...],
    session: str | None,
    tools: bool,
) -> None:
    """Run one turn. Exit 0 on done, 1 on error, 130 on abort, 3 when paused without a terminal."""
    project = project.resolve()
    name, options = choose_provider(provider, base_url, model)
    try:
        import asyncio

        code = asyncio.run(
            _run(
                prompt,
                events=events,
                provider=name,
                provider_options=options,
                project=project,
                data_dir=data_dir_for(project, data_dir),
                config_dir=config_dir,
                storage=storage,
                role_pack=role_pack,
                role_pack_dirs=list(role_pack_dirs),
                session=session,
                tools=tools,
            )
        )
    except MemoraError as exc:
        if events == "jsonl":
            sys.stdout.write(
                json.dumps({"type": "error", "message": str(exc), "category": "unknown"}) + "\n"
            )
        else:
            click.secho(f"error: {exc}", err=True, fg="red")
        code = EXIT_ERROR
    sys.exit(code)
