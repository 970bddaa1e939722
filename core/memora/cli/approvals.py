"""Approvals at the command line: the mode flags every agent command takes, and the question a
terminal answers when a tool call needs the user's word.

Modes (:data:`memora.checks.ApprovalMode`): ``read-only`` refuses every call that writes or
runs; ``ask`` (the default here) asks for each; ``auto-edit`` lets the kernel's file edits run
and asks for the rest; ``full-auto`` asks for nothing.  A flag wins; else the configured mode
(the user config's, made stricter by the project's); else ``ask``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar, cast

import click

from ..checks import ApprovalMode
from ..security.terminal import clean

F = TypeVar("F", bound=Callable[..., Any])

MODES = ("read-only", "ask", "auto-edit", "full-auto")
DEFAULT_MODE: ApprovalMode = "ask"


def approval_options(fn: F) -> F:
    """``--approvals MODE``, ``--approve`` (ask), ``--yes``/``-y`` (full-auto), ``--read-only``;
    the command receives ``approvals`` (a mode, or None when no flag was given)."""
    import functools

    @functools.wraps(fn)
    def wrapper(
        *args: Any,
        approvals: str | None,
        approve: bool,
        yes: bool,
        read_only: bool,
        **kwargs: Any,
    ) -> Any:
        chosen = [
            m
            for m, on in (
                (approvals, approvals is not None),
                ("ask", approve),
                ("full-auto", yes),
                ("read-only", read_only),
            )
            if on
        ]
        if len(set(chosen)) > 1:
            raise click.UsageError(
                "choose one approval mode: --approvals MODE, --approve, --yes or --read-only"
            )
        return fn(*args, approvals=chosen[0] if chosen else None, **kwargs)

    options = [
        click.option(
            "--approvals",
            type=click.Choice(MODES),
            default=None,
            help="Which tool calls need your word: read-only (none run), ask (each asks; the "
            "default), auto-edit (file edits run, the rest asks), full-auto (none asks).",
        ),
        click.option("--approve", is_flag=True, help="Ask before each call that writes or runs."),
        click.option(
            "--yes", "-y", is_flag=True, help="Approve every tool call (--approvals full-auto)."
        ),
        click.option(
            "--read-only", "read_only", is_flag=True, help="Refuse every call that writes or runs."
        ),
    ]
    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper  # type: ignore[return-value]


def agent_mode(flag: str | None) -> dict[str, Any]:
    """The Agent keyword for a mode flag: ``{"approvals": flag}``, or nothing (the Agent then
    takes the configured mode, and :func:`apply_default_mode` fills in ``ask``)."""
    return {"approvals": flag} if flag is not None else {}


def apply_default_mode(agent: Any) -> ApprovalMode:
    """After ``init()``: a person at the command line gets ``ask`` when neither a flag nor the
    config chose a mode (a library host's default stays its own choice)."""
    if agent.approvals is None:
        agent.approvals = DEFAULT_MODE
    return cast("ApprovalMode", agent.approvals)


def how_to_allow(name: str, mode: str) -> str:
    """One line: why ``name`` did not run and the flags that let it."""
    edit = " --approvals auto-edit lets file edits run;" if mode == "ask" else ""
    return (
        f"{clean(name, newlines=False)} needs approval (approval mode {mode!r}) and there is no "
        f"terminal to ask: run it at a terminal to answer, or allow it with --yes (every call);"
        f'{edit} set "approvals" in your user config to change the default'
    )


def edit_arguments(args: Any) -> Any | None:
    """The arguments as JSON in ``$VISUAL``/``$EDITOR``; the edited value, or None when the
    file was left as it was."""
    text = json.dumps(args, ensure_ascii=False, indent=2) + "\n"
    edited = click.edit(text, extension=".json", require_save=True)
    if edited is None or edited.strip() == text.strip():
        return None
    return json.loads(edited)


def answer_approval(
    agent: Any,
    paused: Any,
    ask: Callable[[str], str | None],
    say: Callable[[str], None],
    always: set[str],
) -> bool:
    """Ask the user about ``paused`` (an ``ApprovalPause``): y / n / a (always this tool, this
    session) / e (edit the arguments in $EDITOR).  False when input ended (nothing decided)."""
    if paused.name in always:
        agent.paused_turn.approve(tool_call_id=paused.tool_call_id)
        say(f"allowed {clean(paused.name)} (always, this session)")
        return True
    args = json.dumps(paused.args, ensure_ascii=False)
    reason = f" ({clean(paused.reason)})" if paused.reason else ""
    say(f"allow {clean(paused.name)} {clean(args)}{reason}")
    while True:
        reply = ask("[y]es / [n]o / [a]lways this session / [e]dit> ")
        if reply is None:
            return False
        reply = reply.strip().lower()
        if reply in ("y", "yes"):
            agent.paused_turn.approve(tool_call_id=paused.tool_call_id)
            return True
        if reply in ("n", "no"):
            agent.paused_turn.deny("declined by the user", tool_call_id=paused.tool_call_id)
            return True
        if reply in ("a", "always"):
            always.add(paused.name)
            agent.paused_turn.approve(tool_call_id=paused.tool_call_id)
            return True
        if reply in ("e", "edit"):
            from ..errors import MemoraError

            try:
                edited = edit_arguments(paused.args)
                if edited is None:
                    say("arguments unchanged; answer y, n, a or e")
                    continue
                agent.paused_turn.approve(edited, tool_call_id=paused.tool_call_id)
                return True
            except (ValueError, MemoraError, click.ClickException) as exc:
                say(f"not approved: {clean(str(exc))}")
        else:
            say("answer y, n, a or e")
