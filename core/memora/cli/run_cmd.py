"""`memora run PROMPT`: one turn from the command line (a host of the kernel)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..errors import ErrorCode, InvalidInputError, MemoraError
from ..security.seal import user_key
from ..security.state import user_config_dir
from ..security.terminal import clean
from .approvals import (
    agent_mode,
    answer_approval,
    apply_default_mode,
    approval_options,
    how_to_allow,
)
from .common import (
    agent_arguments,
    data_dir_for,
    location_options,
    provider_options,
    role_pack_options,
    say_small_model,
    scope_option,
    start_agent,
    storage_option,
)
from .paused import PAUSED_FILE, PauseClaim, keep_pause
from .trust_cmd import ask_trust

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from ..chunks import AgentChunk

EXIT_DONE, EXIT_ERROR, EXIT_PAUSED, EXIT_ABORTED = 0, 1, 3, 130


def choose_provider(
    provider: str | None, base_url: str | None, model: str | None
) -> tuple[str | None, dict[str, Any]]:
    """--provider wins (a provider of your config by that name, else a plugin type); else
    --base-url / MEMORA_BASE_URL means openai; else None: the Agent uses the configured
    provider (see memora config show), else the embedded llamacpp model.  ``--base-url`` with
    ``--provider NAME`` runs NAME's type at that endpoint, never with NAME's key (see
    :meth:`~memora.agent.resolved.AgentSettings.provider_choice`)."""
    options: dict[str, Any] = {}
    if model:
        options["model"] = model
    base = base_url or os.environ.get("MEMORA_BASE_URL")
    if provider is None and base:
        provider, options["base_url"] = "openai", base
    elif base_url:
        options["base_url"] = base_url
    # --provider NAME with MEMORA_BASE_URL alone: NAME's own endpoint when it is a provider of
    # yours; the openai type reads MEMORA_BASE_URL itself
    return provider, options


async def run_turn(
    spec: dict[str, Any],
    *,
    events: str,
    data_dir: Path,
    config_dir: Path | None,
    resume: bool = False,
    output: Any = None,
    take_over: bool = False,
    on_start: Callable[[str], None] | None = None,
) -> int:
    """One turn as ``memora run`` runs it, with the options ``spec`` holds (``memora run``'s,
    as a detached run keeps them; :func:`run_spec`): its exit code.  ``take_over``: go on with
    the durable turn a dead process left in the session (its turn executor kept it);
    ``on_start`` is told the session's id once the Agent is open."""
    from ..chunks import DoneChunk
    from ..memory.sessions import new_session_id

    state_file = data_dir / PAUSED_FILE
    user_dir = user_config_dir(config_dir)  # its key seals a pause (made when first needed)
    # the paused turn this process continues, taken before anything else and given back
    # unless the turn goes on: a `runs cancel` at the same moment finds it gone, never both
    claim = PauseClaim(state_file, user_key(user_dir)) if resume else None
    try:
        session = spec["session"]
        # a new conversation unless told -c or --session: a fresh id, so the most recent
        # session is never read only to be left
        if session is None and not spec["continue_last"] and not resume:
            session = new_session_id()
        agent = new_agent(spec, data_dir=data_dir, config_dir=config_dir, session=session)
        approvals = await _ready(agent, spec["role_pack"], on_start, events)
        interrupt = _Interrupt(agent)
        interactive = events == "text" and sys.stdin.isatty()
        always: set[str] = set()
        unsaved = False  # a finished round the session's log did not take (done.saved)
        code = EXIT_ERROR
        try:
            if take_over:
                stream = agent.take_over(await left_turn(agent))
            elif claim is not None:
                await agent.resume(claim.state, output_type=output)
                stream = _after_pause(agent, approvals, interactive, always)
                if interrupt.asked:  # before the turn went on: its approved call has not run
                    return _stopped_before_resume(events)
                claim.use()
            else:
                stream = agent.chat(spec["prompt"] or "", output_type=output)
            while stream is not None:
                last = await interrupt.drain(stream, events, typed=output is not None)
                if last is None:
                    break
                if isinstance(last, DoneChunk):
                    code = EXIT_DONE
                    unsaved = not last.saved
                elif last.type == "aborted":
                    code = EXIT_ABORTED
                elif last.type == "paused":
                    stream = _after_pause(agent, approvals, interactive, always)
                    if stream is None:
                        code = EXIT_PAUSED
                        keep_pause(agent, state_file, user_dir)
                    continue
                else:
                    code = EXIT_ERROR
                break
        finally:
            await agent.close()
        return _unsaved(agent) if unsaved and code == EXIT_DONE else code
    finally:
        if claim is not None:
            claim.give_back()  # a no-op once the turn went on


async def _ready(
    agent: Any, role_pack: str | None, on_start: Callable[[str], None] | None, events: str
) -> str:
    """The Agent started (``on_start`` told its session), its approval mode chosen."""
    await start_agent(agent, role_pack)
    if on_start is not None:
        on_start(agent.session_id)
    approvals = apply_default_mode(agent)
    if events == "text":
        say_small_model(agent)
    return approvals


def _unsaved(agent: Any) -> int:
    """The answer was printed, but `memora run -c` would not see it: a script must know (the
    error line before says why)."""
    click.echo(
        f"memora: error: the round is not in session {clean(agent.session_id)}'s log", err=True
    )
    return EXIT_ERROR


def _stopped_before_resume(events: str) -> int:
    """A stop asked while the paused turn was being made ready: nothing of it ran, and its
    pause is given back for another `--resume`."""
    from ..chunks import AbortedChunk

    reason = (
        "stopped before the paused turn went on: nothing of it ran, and it is kept — continue "
        "it with `memora run --resume`, or drop it with `memora runs cancel`"
    )
    if events == "jsonl":
        emit(AbortedChunk(reason=reason, stop_reason="user"), events)
    else:
        click.echo(f"memora: {clean(reason)}", err=True)
    return EXIT_ABORTED


class _Interrupt:
    """SIGINT for `memora run` (a detached run's `runs cancel` sends it too): the running turn
    ends aborted.  One that comes before the turn runs — while it gets ready, its tools
    loading — is remembered, and the turn aborted as soon as it runs: ``agent.abort()`` alone
    has no turn to end then, and the turn would run to its end."""

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.asked = False
        import asyncio

        with contextlib.suppress(NotImplementedError, RuntimeError):
            asyncio.get_running_loop().add_signal_handler(signal.SIGINT, self._on_sigint)

    def _on_sigint(self) -> None:
        self.asked = True
        self.agent.abort()

    async def drain(
        self, stream: AsyncIterator[AgentChunk], events: str, *, typed: bool
    ) -> AgentChunk | None:
        """Emit ``stream``'s chunks; its last one (``None``: it had none)."""
        last: AgentChunk | None = None
        async for chunk in stream:
            if last is None and self.asked:
                self.agent.abort()  # asked before the turn ran: it runs now, and ends aborted
            last = chunk
            emit(chunk, events, typed=typed)
        return last


def new_agent(
    spec: dict[str, Any], *, data_dir: Path, config_dir: Path | None, session: str | None
) -> Any:
    """The Agent ``memora run`` runs a turn with, for the options ``spec`` holds, in
    ``session`` (not started)."""
    from ..agent import Agent

    override = None if spec["tools"] else {"act": {"toolMode": "block"}}
    explicit = agent_arguments(
        provider=spec["provider"],
        provider_options=spec["provider_options"],
        storage=spec["storage"],
        role_pack=spec["role_pack"],
    )
    return Agent(
        project_path=Path(spec["project"]),
        data_dir=data_dir,
        config_dir=config_dir,
        project_trust=ask_trust,
        role_pack_dirs=[Path(d) for d in spec["role_pack_dirs"]],
        session_id=session,
        strategy_override=override,
        memory_scope=spec["scope"],
        **agent_mode(spec["approvals"]),
        **explicit,
    )


async def abandon_left_turns(spec: dict[str, Any], data_dir: Path, config_dir: Path | None) -> int:
    """Give up the durable turns a dead process left in ``spec``'s session (``memora runs
    cancel``): their executor stops keeping them, so nobody goes on with them.  How many."""
    if spec["session"] is None:
        return 0
    agent = new_agent(spec, data_dir=data_dir, config_dir=config_dir, session=spec["session"])
    try:
        await start_agent(agent, spec["role_pack"])
        executor = agent.runtime.turn_executor
        left = await executor.unfinished(spec["session"]) if executor is not None else []
        for turn in left:
            await executor.abandon(turn.key)
        return len(left)
    finally:
        await agent.close()


async def left_turn(agent: Any) -> str:
    """The key of the durable turn a dead process left in the agent's session."""
    executor = agent.runtime.turn_executor
    if executor is None:
        raise MemoraError(
            ErrorCode.NOT_FOUND,
            'the run\'s process died and no turn executor kept its turn ("turn_executor" in '
            "your config, see docs/durability.md): what it did before is in its session; ask "
            "again",
        )
    left = await executor.unfinished(agent.session_id)
    if not left:
        raise MemoraError(
            ErrorCode.NOT_FOUND,
            f"no unfinished turn of session {clean(agent.session_id)} is kept by the turn "
            "executor: the run's process died before its turn's first step was kept; ask again",
        )
    return str(left[0].key)


def _after_pause(agent: Any, mode: str, interactive: bool, always: set[str]) -> Any:
    """The stream that continues a paused turn once it is answered, or None when it cannot be
    answered here (no terminal; the line saying how to allow it is printed)."""
    from memora.agent import ApprovalPause, QuestionPause

    paused = agent.paused_turn.paused
    if isinstance(paused, ApprovalPause) and mode == "full-auto":
        agent.paused_turn.approve(
            tool_call_id=paused.tool_call_id
        )  # --yes: the user's word, given up front
        return agent.paused_turn.resume()
    if not interactive:
        if isinstance(paused, ApprovalPause):
            click.echo(how_to_allow(paused.name, mode), err=True)
        return None
    if isinstance(paused, QuestionPause):
        answers = {}
        for q in paused.questions:
            options = f" [{' / '.join(q.options)}]" if q.options else ""
            answers[q.slot] = click.prompt(clean(f"{q.question}{options}"), err=True)
        agent.paused_turn.answer(answers)
    elif isinstance(paused, ApprovalPause):

        def ask(prompt: str) -> str | None:
            try:
                return str(click.prompt(prompt, err=True, default="", show_default=False))
            except click.Abort:
                return None

        if not answer_approval(agent, paused, ask, lambda text: click.echo(text, err=True), always):
            return None
    return agent.paused_turn.resume()


def emit(chunk: Any, events: str, *, typed: bool = False) -> None:
    if events == "jsonl":
        sys.stdout.write(chunk.model_dump_json() + "\n")
        sys.stdout.flush()
        return
    t = chunk.type
    if typed and t in ("text", "narrate", "output_partial"):
        return  # stdout holds the validated result only, printed with `done`
    if typed and t == "done":
        # JSON from json.dumps: escapes any control character, nothing to clean
        sys.stdout.write(json.dumps(chunk.output, ensure_ascii=False, indent=2) + "\n")
        sys.stdout.flush()
        return
    if t == "text":
        sys.stdout.write(clean(chunk.content))  # the model's: cleaned before it is printed
        sys.stdout.flush()
    elif t == "done":
        sys.stdout.write("\n")
    else:
        said = _ON_STDERR.get(t)
        if said is not None:
            for line, style in said(chunk):
                # a thought streams on: no newline after its piece
                click.secho(line, err=True, nl=t != "thought", **style)


Said = list[tuple[str, dict[str, Any]]]
"""Lines for stderr and their style (``click.secho``'s keywords)."""


def _questions(chunk: Any) -> Said:
    return [(f"\n? {clean(q.question)}", {"fg": "magenta"}) for q in chunk.questions]


def _tool_start(chunk: Any) -> Said:
    args = json.dumps(chunk.args, ensure_ascii=False)[:200]
    return [(f"\n→ {clean(chunk.name)} {clean(args)}", {"fg": "cyan"})]


def _tool_result(chunk: Any) -> Said:
    mark = "blocked" if chunk.blocked else ("ok" if chunk.ok else "failed")
    return [(f"  {mark}: {clean(chunk.summary)}", {"fg": "green" if chunk.ok else "yellow"})]


_ON_STDERR: dict[str, Callable[[Any], Said]] = {
    # every string here comes from the model, a tool or a server: cleaned before it is printed
    "thought": lambda c: [(clean(c.content), {"dim": True})],
    "tool_start": _tool_start,
    "tool_result": _tool_result,
    "retry": lambda c: [(f"\n(retrying in {c.delay_ms} ms: {clean(c.error)})", {"fg": "yellow"})],
    "error": lambda c: [(f"\nerror ({c.category}): {clean(c.message)}", {"fg": "red"})],
    "aborted": lambda c: [(f"\naborted: {clean(c.reason)}", {"fg": "red"})],
    "question_pending": _questions,
    "approval_pending": lambda c: [
        (f"\n? approve {clean(c.name)}: {clean(c.reason or '')}", {"fg": "magenta"})
    ],
}
"""What each chunk type (other than text and done) says on stderr."""


@click.command("run")
@click.argument("prompt", required=False)
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
@click.option("--session", default=None, help="Continue this session (default: a new one).")
@scope_option
@click.option(
    "-c", "--continue", "continue_last", is_flag=True, help="Continue the most recent session."
)
@click.option(
    "--resume",
    is_flag=True,
    help="Continue the turn a run without a terminal paused (its approval or question).",
)
@click.option(
    "--tools/--no-tools", default=True, show_default=True, help="Expose tools to the model."
)
@click.option(
    "--output-schema",
    "output_schema",
    default=None,
    metavar="FILE.json|module:Class",
    help="End with a result of this shape: a JSON schema file, or a Python type (a pydantic "
    "model...) as module:Class. Prints the validated JSON on stdout; exit 1 when it never "
    "validates.",
)
@click.option(
    "--detach",
    is_flag=True,
    help="Run the turn in a process of its own and print its id at once; follow it with "
    "`memora runs follow ID` (see `memora runs`).",
)
@approval_options
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
    scope: str | None,
    continue_last: bool,
    resume: bool,
    tools: bool,
    output_schema: str | None,
    detach: bool,
    approvals: str | None,
) -> None:
    """Run one turn in a new session (-c: the most recent one; --session ID: that one).

    Tool calls that write or run ask first (--approvals; without a terminal they are refused
    with a line saying how to allow them).  Exit 0 on done, 1 on error, 130 on abort, 3 when
    paused without a terminal (continue with --resume).  --detach: print the run's id and
    leave it running (memora runs list / follow / cancel)."""
    project = project.resolve()
    if prompt is None and not resume:
        raise click.UsageError("give a PROMPT, or --resume to continue a paused turn")
    if prompt is not None and resume:
        raise click.UsageError("--resume continues the paused turn: give no PROMPT with it")
    if detach and resume:
        raise click.UsageError("--detach starts a new turn: give a PROMPT, not --resume")
    name, options = choose_provider(provider, base_url, model)
    spec: dict[str, Any] = {
        "prompt": prompt,
        "provider": name,
        "provider_options": options,
        "project": str(project),
        "storage": storage,
        "role_pack": role_pack,
        "role_pack_dirs": [str(d.resolve()) for d in role_pack_dirs],
        "session": session,
        "continue_last": continue_last,
        "tools": tools,
        "approvals": approvals,
        "output_schema": output_schema,
        "scope": scope,
        "cwd": os.getcwd(),
    }
    try:
        # a bad schema is this command's error, detached or not
        output = load_output_schema(output_schema, project) if output_schema else None
        if detach:
            code = _detach(spec, data_dir_for(project, data_dir), config_dir)
        else:
            code = run_spec(
                spec,
                events=events,
                data_dir=data_dir_for(project, data_dir),
                config_dir=config_dir,
                resume=resume,
                output=output,
            )
    except MemoraError as exc:
        if events == "jsonl":
            sys.stdout.write(
                json.dumps({"type": "error", "message": str(exc), "category": "unknown"}) + "\n"
            )
        else:
            click.secho(f"memora: error: {clean(str(exc))}", err=True, fg="red")
        code = EXIT_ERROR
    sys.exit(code)


def run_spec(
    spec: dict[str, Any],
    *,
    events: str,
    data_dir: Path,
    config_dir: Path | None,
    resume: bool = False,
    output: Any = None,
    take_over: bool = False,
    on_start: Callable[[str], None] | None = None,
) -> int:
    """:func:`run_turn` for the options ``spec`` holds (``memora run``'s, as a detached run
    keeps them): its exit code."""
    import asyncio

    if output is None and spec["output_schema"]:
        output = load_output_schema(spec["output_schema"], Path(spec["project"]))
    return asyncio.run(
        run_turn(
            spec,
            events=events,
            data_dir=data_dir,
            config_dir=config_dir,
            resume=resume,
            output=output,
            take_over=take_over,
            on_start=on_start,
        )
    )


def _detach(spec: dict[str, Any], data_dir: Path, config_dir: Path | None) -> int:
    from ..memory.sessions import new_session_id
    from .detached import launch

    if spec["session"] is None and not spec["continue_last"]:
        spec["session"] = new_session_id()  # named now: `memora runs list` shows it at once
    run = launch(spec, data_dir, config_dir)
    click.echo(run.id)
    click.echo(
        f"memora: run {run.id} started; follow it with `memora runs follow {run.id}`", err=True
    )
    return EXIT_DONE


def load_output_schema(spec: str, project: Path) -> Any:
    """``--output-schema``: a JSON schema file, or ``module:Class`` imported from the working
    folder or the project (the user's own flag: their code, as ``python -m`` would run it)."""
    import importlib

    from ..agent.output import OutputSpec

    path = Path(spec)
    if path.suffix == ".json" or path.is_file():
        try:
            schema = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise click.BadParameter(f"{spec}: {exc}", param_hint="--output-schema") from None
        if not isinstance(schema, dict):
            raise click.BadParameter(
                f"{spec} holds no JSON object (a JSON schema)", param_hint="--output-schema"
            )
        try:
            return OutputSpec.from_json_schema(schema, name=path.stem)
        except InvalidInputError as exc:
            # a schema refused as data (a $ref outside the file, a cycle, a limit): a usage
            # error, exit 2 with the reason, before any model is loaded
            raise click.BadParameter(
                clean(f"{spec}: {exc.message}"), param_hint="--output-schema"
            ) from None
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise click.BadParameter(
            f"{spec!r}: give a FILE.json or module:Class", param_hint="--output-schema"
        )
    for folder in (Path.cwd(), project):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise click.BadParameter(f"{spec}: {exc}", param_hint="--output-schema") from None
    return target
