from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import pytest
from pydantic import AfterValidator, Field

from memora.errors import MemoraError
from memora.memory import InMemoryStorage, MemoryManager
from memora.services import SearchHit
from memora.tools import ToolContext, ToolRegistry, tool
from memora.tools.base import run_tool
from memora.tools.commands import (
    background_task_output,
    kill_background_task,
    list_background_tasks,
    run_command,
)
from memora.tools.files import edit_file, list_dir, read_file, write_file
from memora.tools.knowledge import (
    memory_search,
    read_resource,
    read_skill,
    register_work,
    search_project,
)
from memora.tools.plan import AskUserSignal, ask_user, task_table_update
from memora.tools.privileged import run_code, web_fetch, web_search
from memora.tools.project_search import GitIgnore
from memora.tools.works import WorksRegistry


async def test_read_write_edit_list(ctx: ToolContext, project: Path) -> None:
    lines = "\n".join(f"第{i}行 line {i}" for i in range(1, 1201))
    r = await run_tool(write_file, ctx, {"path": "notes/long.txt", "content": lines})
    assert r.ok and (project / "notes" / "long.txt").exists()
    r = await run_tool(
        read_file, ctx, {"path": "notes/long.txt", "start_line": 600, "end_line": 602}
    )
    assert r.ok and r.content.splitlines()[1:] == [
        "第600行 line 600",
        "第601行 line 601",
        "第602行 line 602",
    ]
    assert "of 1200" in r.content and "continue with start_line=603" in r.content
    r = await run_tool(read_file, ctx, {"path": "notes/long.txt", "offset": 0, "length": 10})
    assert r.ok and "bytes 0–10" in r.content
    r = await run_tool(
        edit_file, ctx, {"path": "src/app.py", "old_text": "return 42", "new_text": "return 43"}
    )
    assert r.ok and "return 43" in (project / "src" / "app.py").read_text()
    r = await run_tool(
        edit_file, ctx, {"path": "notes/long.txt", "old_text": "line 1", "new_text": "x"}
    )
    assert not r.ok and r.error_code == "INVALID_ARGS" and "occurs" in r.content
    r = await run_tool(
        edit_file, ctx, {"path": "src/app.py", "old_text": "absent", "new_text": "x"}
    )
    assert not r.ok and r.error_code == "INVALID_ARGS" and "not found" in r.content
    r = await run_tool(
        edit_file, ctx, {"path": "README.md", "old_text": "o", "new_text": "0", "replace_all": True}
    )
    assert r.ok and (project / "README.md").read_text() == "# Dem0\nhell0 w0rld\n"
    r = await run_tool(list_dir, ctx, {"path": ".", "depth": 2})
    assert r.ok and "src/" in r.content and "  app.py" in r.content and "notes/" in r.content
    r = await run_tool(read_file, ctx, {"path": "missing.txt"})
    assert not r.ok and r.error_code == "FILE_NOT_FOUND" and "list_dir" in r.content
    r = await run_tool(read_file, ctx, {"path": "src", "bogus": 1})
    assert not r.ok and r.error_code == "INVALID_ARGS" and "bogus" in r.content
    r = await run_tool(read_file, ctx, '{"path": ')
    assert not r.ok and r.error_code == "INVALID_ARGS"


async def test_search_project_honours_gitignore(ctx: ToolContext, project: Path) -> None:
    (project / ".gitignore").write_text(
        "build/\n*.log\n!keep.log\n/rootonly.txt\n", encoding="utf-8"
    )
    for rel in (
        "build/out.py",
        "debug.log",
        "keep.log",
        "rootonly.txt",
        "sub/rootonly.txt",
        "src/needle.py",
    ):
        path = project / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("the NEEDLE is here\n", encoding="utf-8")
    (project / "src" / "bin.dat").write_bytes(b"\x00needle")
    r = await run_tool(search_project, ctx, {"pattern": "needle"})
    found = {line.split(":")[0] for line in r.content.splitlines()}
    assert found == {"keep.log", "sub/rootonly.txt", "src/needle.py"}
    r = await run_tool(search_project, ctx, {"pattern": r"NEED\w+", "regex": True, "glob": "*.py"})
    assert r.content.startswith("src/needle.py:1:")
    r = await run_tool(search_project, ctx, {"pattern": "(", "regex": True})
    assert not r.ok and r.error_code == "INVALID_ARGS"
    r = await run_tool(search_project, ctx, {"pattern": "needle", "path": "src"})
    assert r.content.startswith("src/needle.py")


def test_gitignore_matcher() -> None:
    g = GitIgnore()
    g.rules = []
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        Path(d, ".gitignore").write_text("**/tmp/**\ndocs/*.md\n", encoding="utf-8")
        g.load(Path(d), "")
    assert g.ignored("a/tmp/x", False) and g.ignored("docs/a.md", False)
    assert not g.ignored("docs/sub/a.md", False) and not g.ignored("a/b", False)


async def test_background_commands(ctx: ToolContext) -> None:
    r = await run_tool(run_command, ctx, {"command": "echo begin; sleep 1000", "background": True})
    assert r.ok and r.data is not None
    task_id = r.data["task_id"]
    for _ in range(50):
        out = await run_tool(background_task_output, ctx, {"task_id": task_id})
        if "begin" in out.content:
            break
        await asyncio.sleep(0.05)
    assert "begin" in out.content and "running" in out.content
    listing = await run_tool(list_background_tasks, ctx, {})
    assert task_id in listing.content and "running" in listing.content
    assert (await run_tool(kill_background_task, ctx, {"task_id": task_id})).ok
    assert not ctx.background.get(task_id).running
    r = await run_tool(background_task_output, ctx, {"task_id": "bg-999"})
    assert not r.ok and r.error_code == "FILE_NOT_FOUND"
    second = await ctx.background.start("sleep 1000", cwd=ctx.project)
    await ctx.background.close()
    assert not second.running


async def test_run_command_progress_and_failure(ctx: ToolContext) -> None:
    seen: list[str] = []
    ctx.progress = seen.append
    r = await run_tool(run_command, ctx, {"command": "echo one; echo two"})
    assert r.ok and "one" in "".join(seen)
    r = await run_tool(run_command, ctx, {"command": "echo oops >&2; exit 3"})
    assert (
        not r.ok
        and r.error_code == "EXECUTION_FAILED"
        and "exit code 3" in r.content
        and "oops" in r.content
    )
    r = await run_tool(run_command, ctx, {"command": "pwd", "cwd": "src"})
    assert r.ok and r.content.strip().endswith("/src")


async def test_memory_search_and_works(ctx: ToolContext, project: Path, tmp_path: Path) -> None:
    ctx.memory = MemoryManager(InMemoryStorage())
    ctx.works = WorksRegistry(tmp_path / "data", ctx.guard, ctx.memory)
    novel = project / "novel.md"
    novel.write_text(
        "# 雨夜\n" + "正文很长。\n" * 5000 + "## 第二章 归来\n结尾。\n", encoding="utf-8"
    )
    r = await run_tool(register_work, ctx, {"path": "novel.md", "title": "雨夜"})
    assert r.ok and "雨夜" in r.content and "第二章 归来" in r.content
    r = await run_tool(memory_search, ctx, {"query": "第二章", "source": "work_projection"})
    assert r.ok and "work_projection" in r.content and "正文很长。正文很长" not in r.content
    # re-registering supersedes the old projection instead of duplicating it
    await run_tool(register_work, ctx, {"path": "novel.md"})
    assert len(await ctx.memory.search("雨夜")) == 1
    assert WorksRegistry(tmp_path / "data", ctx.guard).list()[0].title == "novel"
    r = await run_tool(memory_search, ctx, {"query": "nothing-here"})
    assert r.ok and "no memories" in r.content


async def test_skills_tools(tmp_path: Path, project: Path) -> None:
    from memora.role_pack import RolePackManager

    pack = tmp_path / "c" / "role-packs" / "p"
    (pack / "skills" / "kit").mkdir(parents=True)
    (pack / "manifest.json").write_text('{"name": "p"}', encoding="utf-8")
    (pack / "skills" / "kit" / "SKILL.md").write_text(
        "---\nname: kit\ndescription: A kit.\n---\nUse the template.", encoding="utf-8"
    )
    (pack / "skills" / "kit" / "template.md").write_text("# Template", encoding="utf-8")
    ctx = ToolContext.for_project(project, role_packs=RolePackManager(tmp_path / "c", active="p"))
    r = await run_tool(read_skill, ctx, {"name": "kit"})
    assert r.ok and "Use the template." in r.content and "template.md" in r.content
    r = await run_tool(read_resource, ctx, {"skill": "kit", "path": "template.md"})
    assert r.ok and r.content == "# Template"
    r = await run_tool(read_skill, ctx, {"name": "nope"})
    assert not r.ok and r.error_code == "FILE_NOT_FOUND"


async def test_task_table_and_ask_user(ctx: ToolContext) -> None:
    r = await run_tool(
        task_table_update,
        ctx,
        {
            "items": [
                {"id": "1", "description": "outline", "status": "active"},
                {"id": "2", "description": "draft", "order": 1},
            ]
        },
    )
    assert r.ok and "[>] 1. outline" in r.content
    assert ctx.task_table.advance().id == "1"  # type: ignore[union-attr]
    assert ctx.task_table.advance() is None
    await run_tool(
        task_table_update, ctx, {"items": [{"id": "1", "description": "outline", "status": "done"}]}
    )
    assert ctx.task_table.advance().id == "2"  # type: ignore[union-attr]
    with pytest.raises(AskUserSignal) as info:
        await run_tool(
            ask_user,
            ctx,
            {
                "questions": [
                    {"slot": "tone", "question": "Which tone?", "options": ["dark", "light"]}
                ]
            },
        )
    assert info.value.questions[0].options == ["dark", "light"]


class FakeSearch:
    def __init__(self) -> None:
        self.calls = 0

    async def search(self, query: str, *, max_results: int = 5) -> list[SearchHit]:
        self.calls += 1
        return [SearchHit("Result", "https://example.org", f"about {query}")]


async def test_privileged_tools(ctx: ToolContext) -> None:
    r = await run_tool(web_fetch, ctx, {"url": "https://example.org"})
    assert not r.ok and r.error_code == "NOT_AVAILABLE"
    r = await run_tool(run_code, ctx, {"code": "print(1)"})
    assert not r.ok and r.error_code == "NOT_AVAILABLE"
    fake = FakeSearch()
    ctx.services = {"web_search": fake}
    ctx.web_search_limit = 2
    for _ in range(2):
        assert (await run_tool(web_search, ctx, {"query": "memora"})).ok
    r = await run_tool(web_search, ctx, {"query": "memora"})
    assert not r.ok and r.error_code == "PERMISSION_DENIED" and "limit" in r.content
    assert fake.calls == 2


async def test_tool_decorator_and_registry() -> None:
    @tool(idempotency="read-only")
    async def shout(
        ctx: ToolContext, text: Annotated[str, Field(description="What to shout")], times: int = 1
    ) -> str:
        """Shout a text."""
        return text.upper() * times

    assert shout.parameters["properties"]["text"]["description"] == "What to shout"
    assert shout.parameters["required"] == ["text"]
    r = await run_tool(shout, None, {"text": "hi", "times": 2})
    assert r.ok and r.content == "HIHI"
    r = await run_tool(shout, None, {"times": "many"})
    assert (
        not r.ok and r.error_code == "INVALID_ARGS" and "text" in r.content and "times" in r.content
    )
    reg = ToolRegistry()
    reg.register(shout, owner="a")
    with pytest.raises(MemoraError, match="'a' and 'b'"):
        reg.register(shout, owner="b")

    @tool
    async def broken(ctx: ToolContext) -> str:
        """Always fails."""
        raise RuntimeError("bug in tool")

    r = await run_tool(broken, None, {})
    assert not r.ok and r.error_code == "EXECUTION_FAILED" and "bug in tool" in r.content
    with pytest.raises(TypeError):
        tool(lambda: None)  # type: ignore[arg-type]


async def test_file_consistency_check(project: Path) -> None:
    ctx = ToolContext.for_project(project, consistency_check=True)
    r = await run_tool(write_file, ctx, {"path": "README.md", "content": "blind overwrite"})
    assert not r.ok and r.error_code == "INVALID_ARGS" and "not been read" in r.content
    assert (await run_tool(read_file, ctx, {"path": "README.md"})).ok
    (project / "README.md").write_text(
        "changed behind the model's back, longer\n", encoding="utf-8"
    )
    r = await run_tool(
        edit_file, ctx, {"path": "README.md", "old_text": "changed", "new_text": "x"}
    )
    assert not r.ok and "changed on disk" in r.content
    assert (await run_tool(read_file, ctx, {"path": "README.md"})).ok
    r = await run_tool(
        edit_file, ctx, {"path": "README.md", "old_text": "changed", "new_text": "edited"}
    )
    assert r.ok
    r = await run_tool(write_file, ctx, {"path": "README.md", "content": "after my own edit"})
    assert r.ok  # the model's own writes keep the stamp fresh
    assert (
        await run_tool(write_file, ctx, {"path": "brand-new.txt", "content": "new files are fine"})
    ).ok


async def test_edit_keeps_the_file_encoding(ctx: ToolContext, project: Path) -> None:
    (project / "gbk.txt").write_bytes("旧的内容".encode("gb18030"))
    r = await run_tool(edit_file, ctx, {"path": "gbk.txt", "old_text": "旧的", "new_text": "新的"})
    assert r.ok and (project / "gbk.txt").read_bytes().decode("gb18030") == "新的内容"


async def test_catastrophic_regex_is_bounded_and_does_not_freeze_the_loop(tmp_path: Path) -> None:
    """A pattern that backtracks without end stops at the time budget as TIMEOUT, and the event
    loop keeps running meanwhile (the match does not hold the GIL)."""
    import asyncio
    import time

    from memora.errors import ToolError
    from memora.tools.project_search import BuiltinProjectSearch

    (tmp_path / "big.txt").write_text(("a" * 60 + "b\n") * 3, encoding="utf-8")
    search = BuiltinProjectSearch(time_budget=1.0)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.05)
            ticks += 1

    task = asyncio.create_task(ticker())
    started = time.monotonic()
    try:
        with pytest.raises(ToolError) as info:
            await search.search(tmp_path, r"(a|aa)+$", regex=True)
    finally:
        task.cancel()
    elapsed = time.monotonic() - started
    assert info.value.code == "TIMEOUT" and "big.txt:1" in str(info.value)
    assert elapsed < 5
    assert ticks >= elapsed / 0.05 * 0.5  # the loop ran at least half the time


async def test_a_non_utf8_file_name_does_not_break_register_work(
    ctx: ToolContext, project: Path, tmp_path: Path
) -> None:
    import os

    from memora.tools.works import WorksRegistry

    ctx.memory = MemoryManager(InMemoryStorage())
    ctx.works = WorksRegistry(tmp_path / "data", ctx.guard, ctx.memory)
    raw_name = os.path.join(os.fsencode(project), b"caf\xe9.md")  # Latin-1, not UTF-8
    with open(raw_name, "wb") as fh:
        fh.write(b"# Chapter\ntext\n")
    name = os.fsdecode(b"caf\xe9.md")  # what os.listdir gives: a lone surrogate inside
    r = await run_tool(register_work, ctx, {"path": name})
    assert r.ok, r.content
    assert "caf\ufffd" in r.content
    (project / "next.md").write_text("# Next\n", encoding="utf-8")
    r = await run_tool(register_work, ctx, {"path": "next.md"})  # the registry still works
    assert r.ok and {w.title for w in ctx.works.list()} == {"caf\ufffd", "next"}
    assert len(WorksRegistry(tmp_path / "data", ctx.guard).list()) == 2


_validated: list[int] = []


def _count_validation(n: int) -> int:
    _validated.append(n)
    return n


@tool(idempotency="read-only")
async def counted_tool(
    ctx: ToolContext, n: Annotated[int, AfterValidator(_count_validation)], where: Path
) -> str:
    """Counts how often its arguments are validated."""
    return f"{n} {type(where).__name__}"


async def test_run_tool_validates_once_and_passes_typed_values(ctx: ToolContext) -> None:
    _validated.clear()
    r = await run_tool(counted_tool, ctx, '{"n": 7, "where": "a/b"}')
    assert r.ok and r.content == f"7 {type(Path('a')).__name__}"
    assert _validated == [7]
    bad = await run_tool(counted_tool, ctx, '{"n": "x", "where": "a"}')
    assert not bad.ok and bad.error_code == "INVALID_ARGS" and _validated == [7]


def test_a_hosts_tool_has_its_annotations_checked_when_decorated() -> None:
    """Only the kernel's own tools evaluate their annotations late (start-up, issue #29): a
    host's mistake is still an error at the decorator, not at the first turn."""
    source = (
        "from __future__ import annotations\n"
        "async def lookup(ctx, key: NoSuchType) -> str:\n"
        '    """Look a key up."""\n'
        "    return key\n"
    )
    namespace: dict[str, object] = {}
    exec(source, namespace)
    with pytest.raises(NameError, match="NoSuchType"):
        tool(namespace["lookup"])  # type: ignore[arg-type]


def test_every_builtin_tool_builds_its_argument_model() -> None:
    from memora.tools import resident_tools
    from memora.tools.privileged import PRIVILEGED_TOOLS

    for t in [*resident_tools(), *PRIVILEGED_TOOLS]:
        assert t.takes_context, t.name
        assert t.parameters["type"] == "object", t.name


def test_the_builtin_plugin_registers_every_builtin_tool_by_name_in_order() -> None:
    """The built-in plugin registers the kernel's tools by name (so listing plugins imports no
    tool module); the manager hands out the modules' own Tool objects, in the order the model
    saw them before: resident, then privileged."""
    from memora.plugins import create_plugin_manager
    from memora.tools import builtin_tools, resident_tools
    from memora.tools.privileged import PRIVILEGED_TOOLS

    real = [*resident_tools(), *PRIVILEGED_TOOLS]
    assert [d.name for d in builtin_tools()] == [t.name for t in real]
    assert [d.load() for d in builtin_tools()] == real  # each loads its module's own object
    plugins = create_plugin_manager(load_entrypoints=False)
    table = plugins.registered("tool")
    assert list(table) == [t.name for t in real]
    assert all(reg.value is t for reg, t in zip(table.values(), real, strict=True))
    assert plugins.get("tool", "run_code") is PRIVILEGED_TOOLS[-1]
    fresh = create_plugin_manager(load_entrypoints=False)
    assert fresh.get("tool", "read_file") is real[0]  # get() before registered() loads too
