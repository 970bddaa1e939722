"""run_command (foreground / background), background task tools, and script runners."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

from pydantic import Field

from ..errors import ToolError, ToolErrorCode
from ..security.permissions import check_permission
from .base import ToolOutput, builtin_tool
from .context import ToolContext

__all__ = ["COMMAND_TOOLS", "script_argv"]


def _cwd(ctx: ToolContext, cwd: str) -> Path:
    folder = ctx.guard.resolve(cwd, purpose="run commands")
    if not folder.is_dir():
        raise ToolError(ToolErrorCode.FILE_NOT_FOUND, f"working folder {cwd!r} does not exist")
    return folder


def _result_text(
    command: str, exit_code: int | None, output: str, timed_out: bool, timeout: float, total: int
) -> ToolOutput:
    if timed_out:
        raise ToolError(
            ToolErrorCode.TIMEOUT,
            f"`{command[:200]}` did not finish within {timeout:g}s and was killed (with its children). "
            f"Output so far ({total} bytes):\n{output}\nRun long jobs with background: true.",
        )
    status = "ok" if exit_code == 0 else f"exit code {exit_code}"
    text = f"[{status}]\n{output}" if output else f"[{status}] (no output)"
    if exit_code != 0:
        raise ToolError(ToolErrorCode.EXECUTION_FAILED, text)
    return ToolOutput(text, f"{status}, {total} bytes of output")


@builtin_tool(writes=True, runs_code=True, idempotency="non-idempotent")
async def run_command(
    ctx: ToolContext,
    command: Annotated[
        str, Field(min_length=1, max_length=20_000, description="A shell command (run by /bin/sh)")
    ],
    cwd: Annotated[str, Field(description="Working folder, relative to the project root")] = ".",
    timeout: Annotated[
        float, Field(gt=0, le=600, description="Seconds before the command is killed")
    ] = 60,
    background: Annotated[
        bool, Field(description="Start it in the background and return a task id")
    ] = False,
) -> ToolOutput:
    """Run a shell command in the project. Foreground commands are killed (with their children)
    at the timeout and their output is capped; background commands return a task id to check with
    background_task_output and stop with kill_background_task."""
    from .process import run_process

    check_permission(
        "run_command", writes=True, runs_code=True, permission=ctx.permission, readonly=ctx.readonly
    )
    folder = _cwd(ctx, cwd)
    if "\x00" in command:
        raise ToolError(ToolErrorCode.INVALID_ARGS, "command contains a NUL byte")
    if background:
        task = await ctx.background.start(command, cwd=folder, env=ctx.env, hide=ctx.hiding())
        text = f"started background task {task.id}: {command[:200]}"
        return ToolOutput(text, text, {"task_id": task.id})
    result = await run_process(
        command,
        cwd=folder,
        timeout=min(timeout, ctx.command_timeout_max),
        env=ctx.env,
        progress=ctx.progress,
        hide=ctx.hiding(),
    )
    return _result_text(
        command, result.exit_code, result.output, result.timed_out, timeout, result.total_bytes
    )


@builtin_tool(idempotency="read-only")
async def list_background_tasks(ctx: ToolContext) -> ToolOutput:
    """List background commands with their state."""
    tasks = ctx.background.list()
    if not tasks:
        return ToolOutput("no background tasks", "no background tasks")
    lines = [
        f"{t['id']}: {'running' if t['running'] else 'exited ' + str(t['exit_code'])} — {t['command']}"
        for t in tasks
    ]
    return ToolOutput("\n".join(lines), f"{len(tasks)} background tasks")


@builtin_tool(idempotency="read-only")
async def background_task_output(
    ctx: ToolContext,
    task_id: Annotated[str, Field(description="Task id from run_command(background=true)")],
    max_chars: Annotated[int, Field(ge=100, le=50_000)] = 4000,
) -> ToolOutput:
    """The latest output of a background command."""
    task = ctx.background.get(task_id)
    state = "running" if task.running else f"exited with code {task.proc.returncode}"
    return ToolOutput(f"[{task.id} {state}]\n{task.tail(max_chars)}", f"{task.id} {state}")


@builtin_tool(runs_code=True, idempotency="idempotent")
async def kill_background_task(
    ctx: ToolContext, task_id: Annotated[str, Field(description="Task id to stop")]
) -> ToolOutput:
    """Stop a background command and everything it started."""
    was_running = await ctx.background.kill(task_id)
    text = f"{task_id} {'killed' if was_running else 'had already exited'}"
    return ToolOutput(text, text)


def script_argv(script: Path, args: list[str], node_path: str) -> list[str]:
    """The interpreter for a script, chosen by extension."""
    suffix = script.suffix.lower()
    if suffix == ".py":
        return [sys.executable, str(script), *args]
    if suffix == ".sh":
        return ["/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh", str(script), *args]
    if suffix in (".js", ".mjs", ".cjs"):
        return [node_path, str(script), *args]
    raise ToolError(
        ToolErrorCode.INVALID_ARGS,
        f"{script.name}: unsupported script type {suffix or '(none)'}; use .py, .sh, .js or .mjs",
    )


async def _run_script(
    ctx: ToolContext, script: Path, args: list[str], timeout: float, cwd: Path
) -> ToolOutput:
    from .process import run_process

    if any("\x00" in a for a in args):
        raise ToolError(ToolErrorCode.INVALID_ARGS, "an argument contains a NUL byte")
    argv = script_argv(script, args, ctx.node_path)
    result = await run_process(
        argv, cwd=cwd, timeout=timeout, env=ctx.env, progress=ctx.progress, hide=ctx.hiding()
    )
    return _result_text(
        " ".join(argv[1:2] + args),
        result.exit_code,
        result.output,
        result.timed_out,
        timeout,
        result.total_bytes,
    )


@builtin_tool(runs_code=True, idempotency="non-idempotent")
async def run_skill_script(
    ctx: ToolContext,
    skill: Annotated[str, Field(description="Skill name")],
    script: Annotated[
        str, Field(description="Script path inside the skill folder, e.g. scripts/check.py")
    ],
    args: Annotated[
        list[str], Field(max_length=100, description="Arguments, passed as-is (no shell)")
    ] = [],  # noqa: B006
    timeout: Annotated[float, Field(gt=0, le=600)] = 60,
) -> ToolOutput:
    """Run a script shipped inside a skill folder (.py, .sh, .js/.mjs). Arguments are passed
    directly, never through a shell."""
    check_permission(
        "run_skill_script", writes=False, runs_code=True, permission=ctx.permission, readonly=False
    )
    if ctx.role_packs is None:
        raise ToolError(ToolErrorCode.NOT_AVAILABLE, "no role packs are loaded")
    path = ctx.role_packs.skill(skill).resource_path(script)
    return await _run_script(ctx, path, list(args), timeout, ctx.project)


@builtin_tool(writes=True, runs_code=True, idempotency="non-idempotent")
async def run_project_script(
    ctx: ToolContext,
    path: Annotated[str, Field(description="Script path inside the project (.py, .sh, .js/.mjs)")],
    args: Annotated[
        list[str], Field(max_length=100, description="Arguments, passed as-is (no shell)")
    ] = [],  # noqa: B006
    timeout: Annotated[float, Field(gt=0, le=600)] = 60,
) -> ToolOutput:
    """Run a script of the project with the interpreter its extension names. Arguments are
    passed directly, never through a shell."""
    check_permission(
        "run_project_script",
        writes=True,
        runs_code=True,
        permission=ctx.permission,
        readonly=ctx.readonly,
    )
    script = ctx.guard.resolve(path, purpose="run scripts")
    if not script.is_file():
        raise ToolError(ToolErrorCode.FILE_NOT_FOUND, f"{path} does not exist")
    return await _run_script(ctx, script, list(args), timeout, script.parent)


COMMAND_TOOLS = (
    run_command,
    list_background_tasks,
    background_task_output,
    kill_background_task,
    run_skill_script,
    run_project_script,
)
