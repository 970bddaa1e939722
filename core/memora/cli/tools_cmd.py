"""`memora tools list` and `memora tools call`: what the model would see, and one tool run through
the loop's gates — for plugin authors and for debugging."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import click

from ..checks import approval_for
from ..errors import ErrorCode, MemoraError
from ..security.terminal import clean
from .approvals import DEFAULT_MODE, apply_default_mode, approval_options, how_to_allow
from .common import (
    agent_arguments,
    data_dir_for,
    location_options,
    role_pack_options,
    safe,
    start_agent,
    storage_option,
)
from .trust_cmd import ask_trust

EXIT_OK, EXIT_FAILED, EXIT_NEEDS_APPROVAL = 0, 1, 3


def parse_call_args(args_json: str | None, pairs: Sequence[str] = ()) -> dict[str, Any]:
    """The arguments of ``memora tools call``: ``--args`` (a JSON object) and/or ``--arg KEY=VALUE``
    (repeatable; VALUE read as JSON when it is valid JSON, else as a string).  ``--arg`` wins
    over the same key in ``--args``."""
    args: dict[str, Any] = {}
    if args_json is not None and args_json.strip():
        try:
            data = json.loads(args_json)
        except ValueError as exc:
            raise MemoraError(ErrorCode.INVALID_INPUT, f"--args is not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise MemoraError(
                ErrorCode.INVALID_INPUT,
                f"--args must be a JSON object ({{...}}), not {type(data).__name__}",
            )
        args.update(data)
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise MemoraError(
                ErrorCode.INVALID_INPUT,
                f"--arg {pair!r}: expected KEY=VALUE (e.g. --arg path=a.txt)",
            )
        try:
            args[key.strip()] = json.loads(value)
        except ValueError:
            args[key.strip()] = value
    return args


class _NoModel:
    """The provider of these commands: they never call a model."""

    name = "none"
    context_window = 128_000

    async def stream(self, request: Any) -> AsyncIterator[Any]:
        from ..llm.provider import ProviderError

        raise ProviderError("memora tools does not call a model")
        yield  # pragma: no cover - makes this an async generator

    async def complete(self, request: Any) -> Any:
        from ..llm.provider import ProviderError

        raise ProviderError("memora tools does not call a model")


async def _agent(
    project: Path,
    data_dir: Path | None,
    config_dir: Path | None,
    storage: str | None,
    role_pack: str | None,
    role_pack_dirs: Sequence[Path],
) -> Any:
    from ..agent import Agent

    extra = agent_arguments(storage=storage, role_pack=role_pack)
    agent = Agent(
        project_path=project,
        data_dir=data_dir_for(project, data_dir),
        config_dir=config_dir,
        project_trust=ask_trust,
        role_pack_dirs=list(role_pack_dirs),
        provider=_NoModel(),
        session_store="memory",
        **extra,
    )
    await start_agent(agent, role_pack)
    await agent.load_capability_tools()  # tools of MCP servers and other tool sources
    return agent


def _service_of(agent: Any, privileged: Any) -> str | None:
    """The plugin providing a privileged tool's service (the tool itself is built in)."""
    if privileged is None:
        return None
    names = agent.plugins.names(privileged.service_kind)
    chosen = getattr(agent.options, privileged.service_kind, None)
    if isinstance(chosen, str):
        return chosen
    if chosen is not None:
        return "host"
    return names[0] if names else None


def _tool_row(agent: Any, name: str, tool: Any, mode: Any, exposed: set[str]) -> dict[str, Any]:
    """One tool as ``tools list``/``tools show`` report it (``--json`` prints it as is)."""
    return {
        "name": name,
        "plugin": agent.tools.owner(name),
        "capability": _capability_of(tool),
        "exposed": name in exposed,
        "writes": tool.writes,
        "runs_code": tool.runs_code,
        "idempotency": tool.idempotency,
        "approval": approval_for(mode, name, writes=tool.writes, runs_code=tool.runs_code),
        "description": tool.description,
        "parameters": tool.parameters,
    }


def _first_sentence(text: str) -> str:
    """A description's first line, whole (``memora tools show`` prints all of it)."""
    return text.strip().splitlines()[0] if text.strip() else ""


def _capability_of(tool: Any) -> str:
    return str(tool.capability) if tool.capability else "resident"


@click.group("tools")
def tools_group() -> None:
    """List the tools the model would see, or run one through the loop's gates."""


@tools_group.command("list")
@location_options
@storage_option
@role_pack_options
@click.option("--all", "show_all", is_flag=True, help="Also list tools the role pack hides.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (with each tool's schema).")
@approval_options
def list_cmd(
    project: Path,
    data_dir: Path | None,
    config_dir: Path | None,
    storage: str | None,
    role_pack: str | None,
    role_pack_dirs: tuple[Path, ...],
    show_all: bool,
    as_json: bool,
    approvals: str | None,
) -> None:
    """The tools the model would see for the active (or given) role pack, with each tool's
    plugin, capability and what the approval mode does with its calls."""
    import asyncio

    project = project.resolve()

    async def run() -> dict[str, Any]:
        agent = await _agent(project, data_dir, config_dir, storage, role_pack, role_pack_dirs)
        mode = approvals or agent.approvals or DEFAULT_MODE  # a flag, the config, else ask
        try:
            from ..capabilities import PRIVILEGED

            exposed = {t.name for t in agent.exposed_tools()}
            rows = []
            for name in agent.tools.names():
                tool = agent.tools.get(name)
                if tool is None or (name not in exposed and not show_all):
                    continue
                row = _tool_row(agent, name, tool, mode, exposed)
                row["service"] = _service_of(agent, PRIVILEGED.get(tool.capability or ""))
                rows.append(row)
            unavailable = dict(agent.capability_map().unavailable)
            return {
                "role_pack": agent.role_pack.active.name,
                "approvals": mode,
                "tools": rows,
                "unavailable": unavailable,
            }
        finally:
            await agent.close()

    report = asyncio.run(run())
    if as_json:
        click.echo(json.dumps(report, ensure_ascii=False, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"tools for role pack {safe(report['role_pack'])!r} · approvals {report['approvals']}"
    )
    for column in (
        "tool",
        "plugin",
        "capability",
        *(["exposed"] if show_all else []),
        "approval",
        "what it does",
    ):
        # the description takes what the other columns leave: the table fits 80 columns
        table.add_column(column, overflow="fold", ratio=3 if column == "what it does" else None)
    for row in report["tools"]:
        plugin = row["plugin"] or ""
        if plugin.startswith("memora.default_plugins."):
            plugin = "built-in"  # the kernel's own (the JSON keeps the module's name)
        if row["service"]:
            plugin = f"service: {row['service']}"
        # names and descriptions may come from an MCP server or a plugin: cleaned, no markup
        cells = [safe(row["name"], newlines=False), safe(plugin), safe(row["capability"])]
        if show_all:
            cells.append("yes" if row["exposed"] else "no")
        cells.append(row["approval"])
        cells.append(safe(_first_sentence(row["description"])))
        table.add_row(*cells)
    console = Console()
    console.print(table)
    for capability, why in report["unavailable"].items():
        console.print(f"[yellow]{safe(capability)}[/yellow]: {safe(why)}")


@tools_group.command("show")
@click.argument("name")
@location_options
@storage_option
@role_pack_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@approval_options
def show_cmd(
    name: str,
    project: Path,
    data_dir: Path | None,
    config_dir: Path | None,
    storage: str | None,
    role_pack: str | None,
    role_pack_dirs: tuple[Path, ...],
    as_json: bool,
    approvals: str | None,
) -> None:
    """One tool whole: its description, parameters (JSON schema), capability, plugin, and what
    the approval mode does with its calls."""
    import asyncio

    project = project.resolve()

    async def run() -> dict[str, Any]:
        agent = await _agent(project, data_dir, config_dir, storage, role_pack, role_pack_dirs)
        mode = approvals or agent.approvals or DEFAULT_MODE
        try:
            tool = agent.tools.get(name)
            if tool is None:
                raise MemoraError(
                    ErrorCode.NOT_FOUND,
                    f"no tool named {name!r}; `memora tools list --all` lists them",
                    context={"tool": name},
                )
            row = _tool_row(agent, name, tool, mode, {t.name for t in agent.exposed_tools()})
            return {**row, "approvals": mode}
        finally:
            await agent.close()

    info = asyncio.run(run())
    if as_json:
        click.echo(json.dumps(info, ensure_ascii=False, indent=2))
        return
    what = {"runs": "runs without asking", "asks": "asks first", "refused": "is refused"}
    click.echo(f"{clean(name)}  ({clean(str(info['plugin']))}; capability {info['capability']})")
    click.echo("")
    click.echo(clean(info["description"].strip()))
    click.echo("")
    click.echo(
        f"writes: {'yes' if info['writes'] else 'no'} · runs code: "
        f"{'yes' if info['runs_code'] else 'no'} · {info['idempotency']} · "
        f"approval ({info['approvals']}): {what[info['approval']]}"
        + ("" if info["exposed"] else " · not shown to the active role pack")
    )
    params = info["parameters"].get("properties") or {}
    required = set(info["parameters"].get("required") or [])
    click.echo("parameters:" if params else "parameters: none")
    for key, spec in params.items():
        kind = spec.get("type") or "/".join(
            str(x.get("type")) for x in spec.get("anyOf", []) if isinstance(x, dict)
        )
        need = "required" if key in required else f"default {json.dumps(spec.get('default'))}"
        doc = f" — {clean(spec['description'], newlines=False)}" if spec.get("description") else ""
        click.echo(f"  {clean(key)}: {kind or 'any'} ({need}){doc}")


@tools_group.command("call")
@click.argument("name")
@click.option(
    "--args", "args_json", default=None, help='Arguments as a JSON object: \'{"path": "a.txt"}\'.'
)
@click.option("--arg", "pairs", multiple=True, help="One argument as KEY=VALUE (repeatable).")
@click.option("--yes", is_flag=True, help="Approve the call when a check asks for approval.")
@location_options
@storage_option
@role_pack_options
def call_cmd(
    name: str,
    args_json: str | None,
    pairs: tuple[str, ...],
    yes: bool,
    project: Path,
    data_dir: Path | None,
    config_dir: Path | None,
    storage: str | None,
    role_pack: str | None,
    role_pack_dirs: tuple[Path, ...],
) -> None:
    """Run one tool through the same gates as the loop and print its result as JSON.

    Exit 0 when the tool succeeded, 1 when it failed or was refused, 3 when a check asks for
    approval (run again with --yes)."""
    import asyncio

    args = parse_call_args(args_json, pairs)
    project = project.resolve()

    async def run() -> tuple[Any, str]:
        agent = await _agent(project, data_dir, config_dir, storage, role_pack, role_pack_dirs)
        try:
            # the approval mode applies as in a turn: the config's, else `ask` for a person
            mode = apply_default_mode(agent)
            return await agent.call_tool(name, args, approve=yes), mode
        finally:
            await agent.close()

    result, mode = asyncio.run(run())
    click.echo(json.dumps(result.to_dict(), ensure_ascii=False, indent=2))
    if result.needs_approval is not None:
        click.echo(how_to_allow(name, mode).replace("--yes (every call)", "--yes"), err=True)
        sys.exit(EXIT_NEEDS_APPROVAL)
    sys.exit(EXIT_OK if result.ok else EXIT_FAILED)
