"""`memora chat`: an interactive session in the terminal (a host of the kernel, public API only).

Answers stream as Markdown; thoughts are folded into one line; tool calls are compact lines
with their status and duration; a spinner shows while the model thinks; each turn ends with its
token usage.  Questions are answered at the prompt (numbered options), approvals with y/n/e
(edit).  Ctrl-C stops the turn, not the program; Ctrl-D or /quit leaves.  Input history is kept
across runs, and the most recent session is resumed.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import click

from ..errors import MemoraError
from ..security.state import private_file
from ..security.terminal import clean, live_display
from .approvals import agent_mode, answer_approval, apply_default_mode, approval_options
from .common import (
    agent_arguments,
    data_dir_for,
    location_options,
    provider_options,
    role_pack_options,
    safe,
    say_small_model,
    scope_option,
    start_agent,
    storage_option,
)
from .run_cmd import choose_provider
from .trust_cmd import ask_trust

HELP = """commands:
  /help                this help
  /quit                leave (Ctrl-D too)
  /role NAME           switch the role pack          /roles      list role packs
  /session [ID]        show, or switch to, a session /sessions   list sessions
  /new                 start a new session           /fork       fork this session here
  /memory QUERY        search long-term memory       /tasks      the plan
  /tools               the tools the model sees
  /multi … /end        a message of several lines (or \"\"\" … \"\"\"; a paste is one message)
  /edit                compose the message in $EDITOR
Ctrl-C stops the running answer."""


class ChatUI:
    """Renders one Agent's chunks on a rich console and asks the user at pauses."""

    def __init__(self, agent: Any, console: Any, ask: Any) -> None:
        self.agent = agent
        self.console = console
        self.ask = ask  # (prompt) -> str | None ; None = end of input
        self.always: set[str] = set()
        """Tools the user allowed for the rest of the session ("a" at an approval)."""
        self._always_session: str | None = None

    # -- one turn ----------------------------------------------------------------------------

    async def turn(self, stream: AsyncIterator[Any]) -> None:
        while True:
            last = await self._render(stream)
            if last is None or last.type != "paused":
                return
            try:
                with _interruptible(self.agent.abort):
                    answered = self._answer_pause()
            except KeyboardInterrupt:  # Ctrl-C at the question: the turn stops at once
                self.agent.paused_turn.discard()
                self.console.print("\n[yellow]stopped[/yellow]")
                return
            if not answered:
                self.agent.paused_turn.discard()
                self.console.print("[yellow]turn dropped[/yellow]")
                return
            stream = self.agent.paused_turn.resume()

    async def _render(self, stream: AsyncIterator[Any]) -> Any:
        from rich.live import Live

        view = _StreamView(self)
        last: Any = None
        with (
            live_display(),
            Live(view.view(), console=self.console, refresh_per_second=12, transient=False) as live,
        ):
            view.live = live
            async for chunk in stream:
                last = chunk
                handler = view.handlers.get(chunk.type)
                if handler is not None:
                    handler(chunk)
        for line in view.footer:  # below the answer, once it is final
            self.console.print(line)
        return last

    def _flush(self, live: Any, answer: list[str]) -> None:
        """Print what streamed so far and start a fresh block (a new speaker, the review)."""
        from rich.markdown import Markdown

        text = "".join(answer)
        if text.strip():
            live.update("")
            live.console.print(Markdown(text))
        answer.clear()

    # -- pauses --------------------------------------------------------------------------------

    def _answer_pause(self) -> bool:
        from ..agent import ApprovalPause, QuestionPause

        paused = self.agent.paused_turn.paused
        if isinstance(paused, QuestionPause):
            answers: dict[str, str] = {}
            for q in paused.questions:
                self.console.print(f"[bold cyan]? {safe(q.question)}[/bold cyan]")
                for i, option in enumerate(q.options or [], 1):
                    self.console.print(f"  {i}. {safe(option)}")
                while True:
                    reply = self.ask("answer> ")
                    if reply is None:
                        return False
                    reply = reply.strip()
                    if q.options and reply.isdigit() and 1 <= int(reply) <= len(q.options):
                        answers[q.slot] = q.options[int(reply) - 1]
                        break
                    if not q.options or q.allow_custom or reply in q.options:
                        answers[q.slot] = reply
                        break
                    self.console.print(f"[yellow]pick 1–{len(q.options)}[/yellow]")
            self.agent.paused_turn.answer(answers)
            return True
        if isinstance(paused, ApprovalPause):
            # the session the "always" answers belong to: another session starts afresh
            if self._always_session != self.agent.session_id:
                self.always.clear()
                self._always_session = self.agent.session_id
            return answer_approval(
                self.agent,
                paused,
                self.ask,
                lambda text: self.console.print(f"[bold cyan]{safe(text)}[/bold cyan]"),
                self.always,
            )
        return True  # a pause the host asked for: continue

    # -- slash commands ----------------------------------------------------------------------------

    async def command(self, line: str) -> bool:
        """Run a slash command; False to leave."""
        name, _, arg = line[1:].partition(" ")
        if name in ("quit", "exit", "q"):
            return False
        handler = getattr(self, f"_cmd_{name}", None) if name.isidentifier() else None
        if handler is None:
            self.console.print(f"[yellow]unknown command /{name}; /help lists them[/yellow]")
        else:
            await handler(arg.strip())
        return True

    async def _cmd_help(self, arg: str) -> None:
        self.console.print(HELP, highlight=False)

    async def _cmd_roles(self, arg: str) -> None:
        for meta in self.agent.role_pack.list_meta():
            mark = "*" if meta.active else " "
            self.console.print(
                f"{mark} {safe(meta.name)}  [dim]{safe(meta.description or '')}[/dim]"
            )

    async def _cmd_role(self, arg: str) -> None:
        if arg:
            self.agent.switch_role_pack(arg)
        self.console.print(f"role pack: {arg or self.agent.role_pack.active.name}")

    async def _cmd_session(self, arg: str) -> None:
        if arg:
            await self.agent.switch_session(arg)
        self.console.print(f"session: {self.agent.session_id}")

    async def _cmd_sessions(self, arg: str) -> None:
        agent = self.agent
        for info in await agent.sessions.list():
            mark = "*" if info.id == agent.session_id else " "
            self.console.print(
                f"{mark} {safe(info.id)}  [dim]{safe(info.title or '')}[/dim]", highlight=False
            )

    async def _cmd_new(self, arg: str) -> None:
        self.console.print(f"session: {await self.agent.new_session(arg)}")

    async def _cmd_fork(self, arg: str) -> None:
        self.console.print(f"forked into session {await self.agent.fork_session()}")

    async def _cmd_memory(self, arg: str) -> None:
        if not arg:
            self.console.print("[yellow]/memory QUERY[/yellow]")
            return
        for hit in await self.agent.memory.search(arg, limit=8):
            self.console.print(f"- {safe(hit.record.content)}", highlight=False)

    async def _cmd_tasks(self, arg: str) -> None:
        plan = self.agent.plan
        for item in plan:
            self.console.print(
                safe(f"[{item.status}] {item.id}. {item.description}"), highlight=False
            )
        if not plan:
            self.console.print("[dim](no plan)[/dim]")

    async def _cmd_tools(self, arg: str) -> None:
        agent, out = self.agent, self.console
        await agent.load_capability_tools()  # MCP servers' tools, before the first turn too
        for t in agent.exposed_tools():
            first = t.description.splitlines()[0] if t.description else ""
            out.print(f"{safe(t.name)}  [dim]{safe(first)}[/dim]", highlight=False)
        if agent.tools_withheld:
            out.print(f"[dim](no tools: {agent.tools_withheld})[/dim]", highlight=False)


class _StreamView:
    """What one turn's chunks look like in the terminal: the answer as Markdown in a live
    region, each tool call as one line with its status and duration, thoughts folded, the
    usage (or the error) below once the answer is final."""

    def __init__(self, ui: ChatUI) -> None:
        self.ui = ui
        self.live: Any = None
        self.answer: list[str] = []
        self.started: dict[str, tuple[float, str]] = {}
        self.thought_chars = 0
        self.footer: list[str] = []
        self.handlers: dict[str, Any] = {
            "text": self.text,
            "meeting_turn": self.meeting_turn,
            "narrate": self.narrate,
            "thought": self.thought,
            "tool_start": self.tool_start,
            "tool_result": self.tool_result,
            "retry": self.retry,
            "self_review": self.self_review,
            "done": self.end,
            "aborted": self.end,
            "error": self.error,
            "question_pending": self.settle,
            "approval_pending": self.settle,
            "paused": self.settle,
        }

    def view(self) -> Any:
        from rich.markdown import Markdown
        from rich.spinner import Spinner

        text = "".join(self.answer)
        return Markdown(text) if text.strip() else Spinner("dots", text=" thinking…")

    def print(self, line: str, **kwargs: Any) -> None:
        self.live.console.print(line, **kwargs)

    def settle(self, chunk: Any = None) -> None:
        """The answer as it stands (nothing when there is none)."""
        self.live.update(self.view() if "".join(self.answer).strip() else "")

    def fold_thoughts(self) -> None:
        if self.thought_chars:
            self.print(f"[dim]💭 thought ({self.thought_chars} chars, folded)[/dim]")
            self.thought_chars = 0

    def text(self, chunk: Any) -> None:
        self.answer.append(clean(chunk.content))
        self.live.update(self.view())

    def meeting_turn(self, chunk: Any) -> None:
        self.ui._flush(self.live, self.answer)
        role = " (chair)" if chunk.role == "chair" else ""
        self.print(f"[bold magenta]{safe(chunk.member)}{role}[/bold magenta]")

    def narrate(self, chunk: Any) -> None:
        text = "".join(self.answer)
        withdrawn = chunk.withdrawn or ""
        if withdrawn and text.endswith(withdrawn):
            text = text[: len(text) - len(withdrawn)]
        self.answer[:] = [text] if text else []
        if chunk.content.strip():
            self.print(f"[dim]{safe(chunk.content.strip())}[/dim]")
        self.live.update(self.view())

    def thought(self, chunk: Any) -> None:
        self.thought_chars += len(chunk.content)

    def tool_start(self, chunk: Any) -> None:
        self.fold_thoughts()
        self.started[chunk.tool_call_id] = (time.monotonic(), _brief_args(chunk.args))

    def tool_result(self, chunk: Any) -> None:
        began, sent = self.started.pop(chunk.tool_call_id, (None, ""))
        took = max(0.0, time.monotonic() - began) if began is not None else 0.0
        if chunk.blocked:
            mark, color = "⊘", "yellow"
        else:
            mark, color = ("✓", "green") if chunk.ok else ("✗", "red")
        self.print(
            f"[{color}]{mark}[/{color}] {safe(chunk.name)}"
            f"{' ' + safe(sent) if sent else ''} "
            f"[dim]({took * 1000:.0f} ms)[/dim] {safe(chunk.summary)}",
            highlight=False,
        )

    def retry(self, chunk: Any) -> None:
        self.print(f"[yellow]retrying ({chunk.attempt}): {safe(chunk.error)}[/yellow]")

    def self_review(self, chunk: Any) -> None:
        self.ui._flush(self.live, self.answer)
        self.print("[dim]reviewing the answer…[/dim]")

    def end(self, chunk: Any) -> None:
        self.fold_thoughts()
        self.settle()
        if chunk.type == "aborted":
            self.footer.append(f"[yellow]stopped: {safe(chunk.reason)}[/yellow]")
        elif chunk.type == "done" and not chunk.saved:
            self.footer.append(
                "[red]not saved: this round could not be written to the session's log (the "
                "error above says why); the next turn and /resume will not see it[/red]"
            )
        u = chunk.usage
        if u is not None and (u.llm_calls or u.input_tokens or u.output_tokens):
            self.footer.append(
                f"[dim]{u.input_tokens} in · {u.output_tokens} out · {u.llm_calls} LLM call(s)[/dim]"
            )

    def error(self, chunk: Any) -> None:
        self.settle()
        self.footer.append(f"[red]error: {safe(chunk.message)}[/red]")


def _input_with_history(history: Path) -> Any:
    """``input()`` with line editing and a history file kept across runs (when readline is
    there)."""
    try:
        import readline
    except ImportError:  # pragma: no cover - Windows
        readline = None  # type: ignore[assignment]
    if readline is not None:
        with contextlib.suppress(OSError):
            readline.read_history_file(history)
        readline.set_history_length(1000)
        # a paste arrives whole, newlines and all, as one message (GNU readline 8.1+ has it
        # on by default; older ones and libedit get it asked for, or ignore the line)
        with contextlib.suppress(Exception):
            readline.parse_and_bind("set enable-bracketed-paste on")

    def ask(prompt: str) -> str | None:
        try:
            line = input(prompt)
        except EOFError:
            return None
        if readline is not None and line.strip():
            with contextlib.suppress(OSError):
                history.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                private_file(history)  # what the user typed: theirs alone
                readline.write_history_file(history)
        return line

    return ask


@click.command("chat")
@provider_options
@location_options
@storage_option
@role_pack_options
@click.option("--session", default=None, help="Session id (default: the most recent one).")
@scope_option
@approval_options
def chat_cmd(
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
    approvals: str | None,
) -> None:
    """Talk to memora in the terminal; the most recent session is resumed.  Tool calls that
    write or run ask first (y / n / a = always this session / e = edit in $EDITOR); see
    --approvals."""
    import asyncio

    from rich.console import Console

    from ..agent import Agent
    from ..settings import user_config_dir

    project = project.resolve()
    name, options = choose_provider(provider, base_url, model)
    explicit = agent_arguments(
        provider=name, provider_options=options, storage=storage, role_pack=role_pack
    )
    console = Console(highlight=False)
    ask = _input_with_history(user_config_dir(config_dir) / "chat_history")
    runner = asyncio.Runner()
    agent = Agent(
        project_path=project,
        data_dir=data_dir_for(project, data_dir),
        config_dir=config_dir,
        project_trust=ask_trust,
        role_pack_dirs=list(role_pack_dirs),
        session_id=session,
        memory_scope=scope,
        **agent_mode(approvals),
        **explicit,
    )
    ui = ChatUI(agent, console, ask)
    try:
        runner.run(start_agent(agent, role_pack))
        apply_default_mode(agent)
        console.print(header(agent, project), highlight=False)
        say_small_model(agent)
        while True:
            try:
                line = ask("› ")
            except KeyboardInterrupt:
                console.print("[dim](Ctrl-D or /quit to leave)[/dim]")
                continue
            if line is None:
                break
            composed = _compose(line, ask, console)
            if composed is None:
                continue
            line = composed.strip()
            if not line:
                continue
            try:
                if line.startswith("/") and "\n" not in line:
                    if not runner.run(ui.command(line)):
                        break
                    continue
                runner.run(_turn(agent, ui, line))
            except MemoraError as exc:
                console.print(f"[red]{exc}[/red]")
                if exc.code == "BUSY" and agent.session_state.status == "error":
                    agent.mark_recovered()
    finally:
        with contextlib.suppress(Exception):
            runner.run(agent.close())
        runner.close()
    sys.exit(0)


MULTI_END = {"/multi": "/end", '"""': '"""'}


def _compose(line: str, ask: Any, console: Any) -> str | None:
    """The message a prompt line stands for: a pasted block as it is; ``/multi`` … ``/end`` or
    ``\"\"\"`` … ``\"\"\"`` collect the lines between; ``/edit`` opens ``$EDITOR``.  None
    when there is nothing to send (an empty edit, input ending inside a block)."""
    head = line.strip()
    if head in MULTI_END:
        end = MULTI_END[head]
        console.print(f"[dim](composing: end with {end} on a line of its own)[/dim]")
        lines: list[str] = []
        while True:
            more = ask("… ")
            if more is None:
                return None
            if more.strip() == end:
                return "\n".join(lines)
            lines.append(more)
    if head == "/edit":
        text = click.edit("", extension=".md")
        if not text or not text.strip():
            console.print("[dim](nothing to send)[/dim]")
            return None
        return text
    return line


def _brief_args(args: dict[str, Any], limit: int = 80) -> str:
    """The arguments a call was sent with, on one short line (``path=README.md``)."""
    parts = [
        f"{k}={v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}"
        for k, v in args.items()
    ]
    text = " ".join(parts).replace("\n", "⏎")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def header(agent: Any, project: Path) -> str:
    """The first line: which project, session, provider and model, role pack and approval
    mode this conversation is in."""
    from ..llm.provider import model_label

    # "openai:gpt-4o-mini" already names its model: shown once
    shown = model_label(agent.router.chat)
    chosen = getattr(agent.router, "chosen", "")  # a host's own router may not say
    return (
        f"[bold]memora[/bold] · project [cyan]{safe(project)}[/cyan] · "
        f"session [cyan]{safe(agent.session_id)}[/cyan] · "
        f"[cyan]{safe(shown)}[/cyan] · role pack [cyan]{safe(agent.role_pack.active.name)}"
        f"[/cyan] · approvals [cyan]{agent.approvals or 'full-auto'}[/cyan] · /help"
        + (f"\n[dim]provider: {safe(chosen)}[/dim]" if chosen else "")
    )


async def _turn(agent: Any, ui: ChatUI, line: str) -> None:
    """One turn; Ctrl-C stops it (``agent.abort()``), not the program."""

    import asyncio

    loop = asyncio.get_running_loop()
    installed = False
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        loop.add_signal_handler(signal.SIGINT, agent.abort)
        installed = True
    try:
        with _no_control_echo():
            await ui.turn(agent.chat(line))
    finally:
        if installed:
            loop.remove_signal_handler(signal.SIGINT)


@contextlib.contextmanager
def _interruptible(abort: Any) -> Any:
    """While a pause's question waits for the person, Ctrl-C raises KeyboardInterrupt there.
    During the turn the event loop holds SIGINT (for ``agent.abort``), and a loop blocked in a
    prompt only saw it once the prompt was answered: Ctrl-C showed nothing until then."""
    import asyncio

    loop = asyncio.get_running_loop()
    held = False
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        held = loop.remove_signal_handler(signal.SIGINT)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if held:  # the turn goes on: Ctrl-C is the loop's again (agent.abort)
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(signal.SIGINT, abort)


@contextlib.contextmanager
def _no_control_echo() -> Any:
    """While an answer streams, the terminal does not echo ``^C``: the echo landed after the
    live line (padded to the terminal's width), wrapped, and the redraw printed the partial
    answer a second time."""
    try:
        import termios

        fd = sys.stdin.fileno()
        saved = termios.tcgetattr(fd)
    except (ImportError, OSError, ValueError, AttributeError):
        yield
        return
    quiet = list(saved)
    quiet[3] = quiet[3] & ~termios.ECHOCTL
    try:
        termios.tcsetattr(fd, termios.TCSANOW, quiet)
        yield
    finally:
        with contextlib.suppress(OSError):
            termios.tcsetattr(fd, termios.TCSANOW, saved)
