"""`memora trust`: what a project's config asks for beyond what a project may set, and the
user's answer (remembered per project and per content, see :mod:`memora.security.trust`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from ..security.terminal import clean
from .base import emit_json
from .common import config_dir_option, project_option


def _describe(request: Any) -> str:
    lines = "\n".join(f"  {clean(line, newlines=False)}" for line in request.describe())
    return (
        f"{clean(str(request.path))} asks for settings a project cannot set on its own "
        f"(they can run programs, widen access or choose where data goes):\n{lines}"
    )


def ask_trust(request: Any) -> bool | None:
    """The ``project_trust`` callback of the interactive commands: asks once on a terminal
    (the answer is remembered for this content); without one, answers "not now" and says how
    to allow it."""
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return None  # settings.py logs what was left off and the command that allows it
    click.echo(_describe(request), err=True)
    return click.confirm(
        "Allow them for this project? (remembered until the file changes)", default=False, err=True
    )


def _request(project: Path, config_dir: Path | None) -> Any:
    from ..settings import resolve_settings

    settings = resolve_settings(project, config_dir=config_dir, trust=False, warn=False)
    return settings, settings.trust


@click.group("trust")
def trust_group() -> None:
    """Review and answer what a project's config asks for (MCP servers to start, a sandbox
    that runs as your user, options no plugin declared safe for a project)."""


@trust_group.command("show")
@project_option
@config_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def trust_show(project: Path, config_dir: Path | None, as_json: bool) -> None:
    """What the project's config asks for, and whether it is allowed."""
    from ..security.state import user_config_dir
    from ..security.trust import TrustStore

    project = project.resolve()
    _, request = _request(project, config_dir)
    decision = (
        TrustStore(user_config_dir(config_dir)).decision(project, request.digest)
        if request
        else None
    )
    state = {True: "allowed", False: "refused", None: "not answered"}[decision]
    if as_json:
        emit_json(
            {
                "project": str(project),
                "requests": request.requests if request else {},
                "digest": request.digest if request else None,
                "decision": state if request else None,
            }
        )
        return
    if request is None:
        click.echo(f"{project}: its config asks for nothing beyond what a project may set")
        return
    click.echo(_describe(request))
    click.echo(f"status: {state}")


def _answer(project: Path, config_dir: Path | None, allow: bool) -> None:
    from ..security.state import user_config_dir
    from ..security.trust import TrustStore

    project = project.resolve()
    _, request = _request(project, config_dir)
    if request is None:
        click.echo(f"{project}: its config asks for nothing beyond what a project may set")
        return
    TrustStore(user_config_dir(config_dir)).record(project, request.digest, allow)
    click.echo(_describe(request), err=True)
    verb = "allowed" if allow else "refused"
    click.echo(f"{verb} for {project} (until its config changes)")


@trust_group.command("allow")
@project_option
@config_dir_option
def trust_allow(project: Path, config_dir: Path | None) -> None:
    """Allow exactly what the project's config asks for now."""
    _answer(project, config_dir, True)


@trust_group.command("deny")
@project_option
@config_dir_option
def trust_deny(project: Path, config_dir: Path | None) -> None:
    """Refuse it, and stop being asked until the file changes."""
    _answer(project, config_dir, False)


@trust_group.command("forget")
@project_option
@config_dir_option
def trust_forget(project: Path, config_dir: Path | None) -> None:
    """Drop the remembered answer for the project (it is asked again)."""
    from ..security.state import user_config_dir
    from ..security.trust import TrustStore

    project = project.resolve()
    gone = TrustStore(user_config_dir(config_dir)).forget(project)
    click.echo(f"{project}: " + ("answer forgotten" if gone else "no answer was remembered"))


@trust_group.command("list")
@config_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def trust_list(config_dir: Path | None, as_json: bool) -> None:
    """Every project with a remembered answer."""
    from ..security.state import user_config_dir
    from ..security.trust import TrustStore

    entries = TrustStore(user_config_dir(config_dir)).entries()
    if as_json:
        emit_json({"projects": entries})
        return
    for project, entry in sorted(entries.items()):
        state = "allowed" if entry.get("allow") else "refused"
        click.echo(f"{clean(project, newlines=False)}  {state}  {entry.get('at', '')}")
