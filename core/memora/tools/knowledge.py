"""Tools that read knowledge: project search, memory, works, skills."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from ..errors import ErrorCode, MemoraError, ToolError, ToolErrorCode
from .base import ToolOutput, builtin_tool
from .context import ToolContext
from .files import decode_text

__all__ = ["KNOWLEDGE_TOOLS"]


@builtin_tool(idempotency="read-only")
async def search_project(
    ctx: ToolContext,
    pattern: Annotated[
        str, Field(min_length=1, max_length=1000, description="Text (or regex) to find")
    ],
    regex: Annotated[bool, Field(description="Treat pattern as a regular expression")] = False,
    glob: Annotated[
        str | None, Field(description="Only files matching this glob, e.g. *.py")
    ] = None,
    path: Annotated[str, Field(description="Folder to search, relative to the project root")] = ".",
    max_results: Annotated[int, Field(ge=1, le=1000)] = 100,
) -> ToolOutput:
    """Search the project's text files (honours .gitignore). Literal search is case-insensitive."""
    root = ctx.guard.resolve(path, purpose="search")
    if not root.is_dir():
        raise ToolError(ToolErrorCode.FILE_NOT_FOUND, f"{path} is not a folder")
    if "project_search" in ctx.services:
        searcher = ctx.service("project_search", "search_project")
    else:
        from .project_search import BuiltinProjectSearch

        searcher = BuiltinProjectSearch()
    matches = await searcher.search(root, pattern, regex=regex, glob=glob, max_results=max_results)
    prefix = ctx.guard.display(root)
    prefix = "" if prefix == "." else prefix + "/"
    lines = [f"{prefix}{m.path}:{m.line}: {m.text}" for m in matches]
    capped = "\n[result cap reached; narrow the search]" if len(matches) >= max_results else ""
    body = "\n".join(lines) if lines else "no matches"
    return ToolOutput(body + capped, f"{len(matches)} matches for {pattern!r}")


@builtin_tool(idempotency="read-only")
async def memory_search(
    ctx: ToolContext,
    query: Annotated[
        str, Field(min_length=1, max_length=1000, description="Keywords (Chinese or English)")
    ],
    source: Annotated[
        str | None, Field(description="Only this source: round_summary, work_projection, ...")
    ] = None,
    limit: Annotated[int, Field(ge=1, le=50)] = 8,
    scope: Annotated[
        Literal["project", "branch"],
        Field(description="project: all sessions; branch: this session's rounds"),
    ] = "project",
) -> ToolOutput:
    """Recall memories (summaries of earlier rounds, registered works) by keywords."""
    if ctx.memory is None:
        raise ToolError(ToolErrorCode.NOT_AVAILABLE, "memory is not available in this agent")
    round_ids = ctx.branch_round_ids() if scope == "branch" and ctx.branch_round_ids else None
    hits = await ctx.memory.search(query, source=source, limit=limit, round_ids=round_ids)
    if not hits:
        return ToolOutput(f"no memories match {query!r}", "0 memories")
    lines = []
    for h in hits:
        r = h.record
        label = f"{r.source}/{r.summary_type}" if r.summary_type else r.source
        lines.append(f"- [{label}] {r.name}: {r.content}".strip())
    return ToolOutput("\n".join(lines), f"{len(hits)} memories")


@builtin_tool(writes=False, idempotency="idempotent-key")
async def register_work(
    ctx: ToolContext,
    path: Annotated[str, Field(description="The work's text file, relative to the project root")],
    title: Annotated[
        str | None, Field(max_length=200, description="Title (default: the file name)")
    ] = None,
) -> ToolOutput:
    """Register a long work (novel, document) so it can be read on demand: returns its outline
    and stores only distilled facts in memory, never the whole text."""
    if ctx.works is None:
        raise ToolError(ToolErrorCode.NOT_AVAILABLE, "works are not available in this agent")
    try:
        info = await ctx.works.register(
            path, title, session_id=ctx.session_id, round_id=ctx.round_id
        )
    except MemoraError as exc:
        code = {
            ErrorCode.NOT_FOUND: ToolErrorCode.FILE_NOT_FOUND,
            ErrorCode.INVALID_INPUT: ToolErrorCode.INVALID_ARGS,
        }.get(exc.code, ToolErrorCode.EXECUTION_FAILED)
        raise ToolError(code, exc.message) from exc
    return ToolOutput(info.projection(), f"registered {info.title} ({info.chars:,} chars)")


@builtin_tool(idempotency="read-only")
async def read_skill(
    ctx: ToolContext, name: Annotated[str, Field(description="Skill name from the skills list")]
) -> ToolOutput:
    """Load a skill's instructions (and the list of its resources)."""
    if ctx.role_packs is None:
        raise ToolError(ToolErrorCode.NOT_AVAILABLE, "no role packs are loaded")
    skill = ctx.role_packs.skill(name)
    body = skill.body()
    resources = skill.resources()
    extra = (
        ("\n\nResources (read_resource / run_skill_script): " + ", ".join(resources))
        if resources
        else ""
    )
    return ToolOutput(f"# {skill.name}\n{body}{extra}", f"skill {skill.name}")


@builtin_tool(idempotency="read-only")
async def read_resource(
    ctx: ToolContext,
    skill: Annotated[str, Field(description="Skill name")],
    path: Annotated[str, Field(description="File inside the skill folder, e.g. template.md")],
) -> ToolOutput:
    """Read a file shipped inside a skill folder."""
    if ctx.role_packs is None:
        raise ToolError(ToolErrorCode.NOT_AVAILABLE, "no role packs are loaded")
    target = ctx.role_packs.skill(skill).resource_path(path)
    data = target.read_bytes()
    if len(data) > 256 * 1024:
        raise ToolError(
            ToolErrorCode.OUTPUT_TOO_LARGE,
            f"{path} is {len(data)} bytes; resources are read up to 256 KB",
        )
    text, _ = decode_text(data)
    return ToolOutput(text, f"{skill}/{path} ({len(data)} bytes)")


KNOWLEDGE_TOOLS = (search_project, memory_search, register_work, read_skill, read_resource)
