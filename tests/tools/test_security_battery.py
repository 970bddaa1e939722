"""The adversarial battery: every case is refused or capped with the right code, and the host
process stays healthy."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memora.tools import ToolContext
from memora.tools.base import Tool, run_tool
from memora.tools.commands import run_command, run_skill_script
from memora.tools.files import edit_file, list_dir, read_file, write_file


async def call(t: Tool, ctx: ToolContext, **args: object) -> tuple[bool, str, str | None]:
    result = await run_tool(t, ctx, args)
    return result.ok, result.content, result.error_code


TRAVERSAL = [
    ("../outside.txt", "PATH_NOT_ALLOWED"),
    ("../../../../../../etc/passwd", "PATH_NOT_ALLOWED"),
    ("src/../../outside.txt", "PATH_NOT_ALLOWED"),
    ("/etc/passwd", "PATH_NOT_ALLOWED"),
    ("~/.bashrc", "PATH_NOT_ALLOWED"),
    ("~root/.profile", "PATH_NOT_ALLOWED"),
    ("%2e%2e/outside.txt", "FILE_NOT_FOUND"),  # no URL decoding: a literal name inside
    ("..%2Foutside.txt", "FILE_NOT_FOUND"),
    ("\uff0e\uff0e/outside.txt", "FILE_NOT_FOUND"),  # fullwidth dots are just a name
    ("\u2025/outside.txt", "FILE_NOT_FOUND"),  # two-dot leader
    ("src/app.py\x00.txt", "INVALID_ARGS"),
    ("/proc/self/environ", "PATH_NOT_ALLOWED"),
    ("/proc/self/root/etc/passwd", "PATH_NOT_ALLOWED"),
    ("/proc/self/cwd/../outside.txt", "PATH_NOT_ALLOWED"),
    ("", "INVALID_ARGS"),
]


@pytest.mark.parametrize(("path", "code"), TRAVERSAL, ids=[repr(p) for p, _ in TRAVERSAL])
async def test_read_traversal(ctx: ToolContext, path: str, code: str) -> None:
    ok, content, err = await call(read_file, ctx, path=path)
    assert not ok and err == code, content
    assert "SECRET" not in content


@pytest.mark.parametrize(("path", "code"), TRAVERSAL[:6], ids=[repr(p) for p, _ in TRAVERSAL[:6]])
async def test_write_traversal(ctx: ToolContext, project: Path, path: str, code: str) -> None:
    ok, _, err = await call(write_file, ctx, path=path, content="pwned")
    assert not ok and err == code
    assert (project.parent / "outside.txt").read_text() == "SECRET outside the project\n"


async def test_absolute_path_inside_project_is_allowed(ctx: ToolContext, project: Path) -> None:
    ok, content, _ = await call(read_file, ctx, path=str(project / "src" / "app.py"))
    assert ok and "return 42" in content


async def test_symlink_pointing_outside(ctx: ToolContext, project: Path) -> None:
    (project / "link.txt").symlink_to(project.parent / "outside.txt")
    (project / "linkdir").symlink_to(project.parent)
    for path in ("link.txt", "linkdir/outside.txt"):
        ok, content, err = await call(read_file, ctx, path=path)
        assert not ok and err == "PATH_NOT_ALLOWED" and "SECRET" not in content
    ok, _, err = await call(write_file, ctx, path="link.txt", content="pwned")
    assert not ok and err == "PATH_NOT_ALLOWED"
    ok, _, err = await call(list_dir, ctx, path="linkdir")
    assert not ok and err == "PATH_NOT_ALLOWED"
    assert (project.parent / "outside.txt").read_text().startswith("SECRET")


async def test_symlink_swapped_between_check_and_use(
    ctx: ToolContext, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = project / "notes.txt"
    target.write_text("inside", encoding="utf-8")
    real_resolve = ctx.guard.resolve

    def swapping_resolve(user_path: str, *, purpose: str = "access") -> Path:
        resolved = real_resolve(user_path, purpose=purpose)
        target.unlink()
        target.symlink_to(project.parent / "outside.txt")  # the race an attacker would win
        return resolved

    monkeypatch.setattr(ctx.guard, "resolve", swapping_resolve)
    ok, content, err = await call(read_file, ctx, path="notes.txt")
    assert not ok and err == "PATH_NOT_ALLOWED" and "SECRET" not in content


async def test_parent_folder_swapped_before_write(
    ctx: ToolContext, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = project / "docs"
    folder.mkdir()
    real_resolve = ctx.guard.resolve

    def swapping_resolve(user_path: str, *, purpose: str = "access") -> Path:
        resolved = real_resolve(user_path, purpose=purpose)
        folder.rmdir()
        folder.symlink_to(project.parent)
        return resolved

    monkeypatch.setattr(ctx.guard, "resolve", swapping_resolve)
    ok, _, err = await call(write_file, ctx, path="docs/outside.txt", content="pwned")
    assert not ok and err == "PATH_NOT_ALLOWED"
    assert (project.parent / "outside.txt").read_text().startswith("SECRET")


async def test_sparse_2gb_file_is_paged_not_loaded(ctx: ToolContext, project: Path) -> None:
    big = project / "huge.log"
    with big.open("wb") as fh:
        fh.write(b"".join(f"line {i}\n".encode() for i in range(1, 2001)))
        fh.truncate(2 * 1024**3)  # sparse: 2 GB of which 20 KB are written
    t = time.monotonic()
    ok, content, _ = await call(read_file, ctx, path="huge.log")
    assert ok and content.count("\n") <= 501 and "line 500" in content and "line 501" not in content
    assert "continue with start_line=501" in content
    ok, content, err = await call(read_file, ctx, path="huge.log", start_line=10_000_000)
    assert ok and err is None and "no lines from 10000000" in content  # said, not a failure
    ok, content, err = await call(
        read_file, ctx, path="huge.log", offset=2 * 1024**3 - 1000, length=500
    )
    assert not ok and err == "NOT_AVAILABLE"  # the sparse tail is NUL bytes: binary
    assert time.monotonic() - t < 30


async def test_binary_and_non_utf8(ctx: ToolContext, project: Path) -> None:
    (project / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 10)
    ok, content, err = await call(read_file, ctx, path="image.png")
    assert not ok and err == "NOT_AVAILABLE" and "binary" in content
    (project / "gbk.txt").write_bytes("记忆系统只保存摘要".encode("gbk"))
    ok, content, _ = await call(read_file, ctx, path="gbk.txt")
    assert ok and "记忆系统只保存摘要" in content and "gb18030" in content


async def test_fifo_and_devices_do_not_hang(ctx: ToolContext, project: Path) -> None:
    os.mkfifo(project / "pipe")
    ok, _, err = await call(read_file, ctx, path="pipe")
    assert not ok and err == "PERMISSION_DENIED"


async def test_command_printing_100mb_is_capped(ctx: ToolContext) -> None:
    cmd = f"{sys.executable} -c \"import sys; [sys.stdout.write('x' * 1023 + chr(10)) for _ in range(102400)]\""
    t = time.monotonic()
    ok, content, _ = await call(run_command, ctx, command=cmd, timeout=120)
    assert ok
    assert (
        len(content) < 70_000
        and "bytes omitted" in content
        and "104,857,600 bytes in all" in content
    )
    assert time.monotonic() - t < 120


async def test_command_that_never_ends_times_out(ctx: ToolContext) -> None:
    t = time.monotonic()
    ok, content, err = await call(run_command, ctx, command="echo started; sleep 1000", timeout=1)
    assert not ok and err == "TIMEOUT" and "started" in content
    assert time.monotonic() - t < 15


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # zombies are dead for our purposes
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


async def test_child_tree_killed_on_timeout(ctx: ToolContext, project: Path) -> None:
    script = (
        "for i in 1 2 3 4 5 6 7 8 9 10; do (sleep 1000 & echo $! >> pids.txt; wait) & done; "
        "sleep 1000 & echo $! >> pids.txt; wait"
    )
    ok, _, err = await call(run_command, ctx, command=script, timeout=2)
    assert not ok and err == "TIMEOUT"
    pids = [int(p) for p in (project / "pids.txt").read_text().split()]
    assert len(pids) >= 5
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids)


async def test_shell_metacharacters_in_script_args_are_literal(
    tmp_path: Path, project: Path
) -> None:
    from memora.role_pack import RolePackManager

    pack = tmp_path / "cfg" / "role-packs" / "p"
    (pack / "skills" / "echoer" / "scripts").mkdir(parents=True)
    (pack / "manifest.json").write_text('{"name": "p"}', encoding="utf-8")
    (pack / "persona.md").write_text("`echoer`", encoding="utf-8")
    (pack / "skills" / "echoer" / "SKILL.md").write_text(
        "---\nname: echoer\ndescription: Echo arguments.\n---\nbody", encoding="utf-8"
    )
    (pack / "skills" / "echoer" / "scripts" / "argv.py").write_text(
        "import sys, json; print(json.dumps(sys.argv[1:]))", encoding="utf-8"
    )
    rp = RolePackManager(tmp_path / "cfg", active="p")
    ctx = ToolContext.for_project(project, role_packs=rp)
    hostile = [
        "; touch pwned",
        "$(touch pwned2)",
        "`touch pwned3`",
        "a && b",
        "| cat /etc/passwd",
        "'\"",
        "*",
    ]
    ok, content, _ = await call(
        run_skill_script, ctx, skill="echoer", script="scripts/argv.py", args=hostile
    )
    assert ok
    import json

    assert json.loads(content.split("\n", 1)[1]) == hostile
    assert not list(project.glob("pwned*"))
    ok, _, err = await call(run_skill_script, ctx, skill="echoer", script="../../manifest.json")
    assert not ok and err == "PATH_NOT_ALLOWED"


async def test_metacharacters_in_paths_are_names(ctx: ToolContext, project: Path) -> None:
    ok, _, err = await call(read_file, ctx, path="a; touch pwned")
    assert not ok and err == "FILE_NOT_FOUND"
    ok, _, _ = await call(write_file, ctx, path="$(touch pwned).txt", content="x")
    assert ok and (project / "$(touch pwned).txt").exists() and not (project / "pwned").exists()


async def test_guest_and_readonly(project: Path) -> None:
    guest = ToolContext.for_project(project, permission="guest")
    for t, args in (
        (write_file, {"path": "x.txt", "content": "x"}),
        (run_command, {"command": "true"}),
        (edit_file, {"path": "README.md", "old_text": "hello", "new_text": "bye"}),
    ):
        ok, content, err = await call(t, guest, **args)
        assert not ok and err == "PERMISSION_DENIED" and "guest" in content
    ok, _, _ = await call(read_file, guest, path="README.md")
    assert ok
    readonly = ToolContext.for_project(project, readonly=True)
    ok, content, err = await call(write_file, readonly, path="x.txt", content="x")
    assert not ok and err == "PERMISSION_DENIED" and "read-only" in content
    assert not (project / "x.txt").exists()


async def test_write_size_cap(ctx: ToolContext) -> None:
    ok, _, err = await call(write_file, ctx, path="big.txt", content="x" * (10 * 1024 * 1024 + 1))
    assert not ok and err == "OUTPUT_TOO_LARGE"


async def test_host_stays_healthy(ctx: ToolContext, project: Path) -> None:
    """After hostile calls — a flood of output, a command that never ends, a FIFO, a huge
    write — the process still runs commands and reads files, with no descriptor or child
    process left behind."""
    fds = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    children = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children")
    before = set(children.read_text().split()) if children.exists() else set()
    os.mkfifo(project / "pipe")
    ok, _, _ = await call(run_command, ctx, command="yes | head -c 5000000", timeout=30)
    assert ok
    ok, _, err = await call(run_command, ctx, command="sleep 60", timeout=1)
    assert not ok and err == "TIMEOUT"
    ok, _, err = await call(read_file, ctx, path="pipe")
    assert not ok and err is not None
    ok, _, err = await call(write_file, ctx, path="big.txt", content="x" * (10 * 1024 * 1024 + 1))
    assert not ok and err == "OUTPUT_TOO_LARGE"
    ok, content, _ = await call(run_command, ctx, command="echo alive")
    assert ok and "alive" in content
    ok, content, _ = await call(read_file, ctx, path="README.md")
    assert ok and "hello world" in content
    if fds is not None:
        assert len(os.listdir("/proc/self/fd")) <= fds
    if children.exists():  # no command outlived its call (other tests' servers may run)
        assert set(children.read_text().split()) <= before


async def test_special_files_never_block_a_walker_or_reader(tmp_path: Path) -> None:
    """FIFOs, unix sockets and symlink loops inside the project: search_project skips them,
    register_work and read_file refuse them clearly — within seconds, never hanging."""
    import asyncio
    import os
    import socket

    from memora.memory import InMemoryStorage, MemoryManager
    from memora.tools import ToolContext
    from memora.tools.base import run_tool
    from memora.tools.files import read_file
    from memora.tools.knowledge import register_work, search_project
    from memora.tools.works import WorksRegistry

    project = tmp_path / "p"
    project.mkdir()
    (project / "notes.md").write_text("needle here\n", encoding="utf-8")
    os.mkfifo(project / "pipe.md")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(project / "sock.md"))
    (project / "loop.md").symlink_to(project / "loop2.md")
    (project / "loop2.md").symlink_to(project / "loop.md")
    ctx = ToolContext.for_project(project)
    ctx.memory = MemoryManager(InMemoryStorage())
    ctx.works = WorksRegistry(tmp_path / "data", ctx.guard, ctx.memory)
    try:
        found = await asyncio.wait_for(
            run_tool(search_project, ctx, {"pattern": "needle"}), timeout=10
        )
        assert found.ok and "notes.md:1" in found.content
        for name in ("pipe.md", "sock.md"):
            for tool, args in ((register_work, {"path": name}), (read_file, {"path": name})):
                r = await asyncio.wait_for(run_tool(tool, ctx, args), timeout=10)
                assert not r.ok and "not a regular file" in r.content, (tool.name, name, r)
                assert "OSError" not in r.content and r.error_code != "EXECUTION_FAILED"
        r = await asyncio.wait_for(run_tool(read_file, ctx, {"path": "loop.md"}), timeout=10)
        assert not r.ok and "loops back on itself" in r.content
    finally:
        sock.close()
        await ctx.background.close()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def _wait_gone(pid: int, seconds: float = 5.0) -> bool:
    import asyncio
    import time

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        await asyncio.sleep(0.05)
    return not _alive(pid)


@pytest.mark.parametrize("how", ["setsid", "double-fork"])
async def test_descendants_that_leave_the_group_die_with_the_command(
    tmp_path: Path, how: str
) -> None:
    """A daemonised grandchild (setsid, or a double fork) outlives neither a finished command,
    nor a timeout, nor a killed background task."""
    from memora.tools import ToolContext
    from memora.tools.base import run_tool
    from memora.tools.commands import run_command

    project = tmp_path / "p"
    project.mkdir()
    spawn = {
        "setsid": "setsid sleep 300 & echo $! > {f}",
        "double-fork": "(sleep 300 & echo $! > {f}) &",
    }[how]
    ctx = ToolContext.for_project(project)
    try:
        # 1. the command finishes, its daemon must not survive
        r = await run_tool(run_command, ctx, {"command": spawn.format(f="a.pid") + "\nsleep 0.3"})
        assert r.ok, r.content
        pid = int((project / "a.pid").read_text())
        assert await _wait_gone(pid), f"daemon {pid} outlived its command"
        # 2. the command times out
        r = await run_tool(
            run_command, ctx, {"command": spawn.format(f="b.pid") + "\nsleep 30", "timeout": 1}
        )
        pid = int((project / "b.pid").read_text())
        assert await _wait_gone(pid), f"daemon {pid} outlived the timeout"
        # 3. a background task is killed
        r = await run_tool(
            run_command,
            ctx,
            {"command": spawn.format(f="c.pid") + "\nsleep 30", "background": True},
        )
        import asyncio

        for _ in range(100):
            if (project / "c.pid").exists() and (project / "c.pid").read_text().strip():
                break
            await asyncio.sleep(0.05)
        pid = int((project / "c.pid").read_text())
        assert _alive(pid)
        await ctx.background.close()
        assert await _wait_gone(pid), f"daemon {pid} outlived its killed background task"
    finally:
        await ctx.background.close()


async def test_commands_do_not_see_secret_environment_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memora.tools import ToolContext
    from memora.tools.base import run_tool
    from memora.tools.commands import background_task_output, run_command
    from memora.tools.process import child_environment

    for name in ("OPENAI_API_KEY", "GITHUB_TOKEN", "MEMORA_POSTGRES_DSN", "DB_PASSWORD"):
        monkeypatch.setenv(name, "s3cr3t-" + name)
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    project = tmp_path / "p"
    project.mkdir()
    ctx = ToolContext.for_project(project)
    try:
        r = await run_tool(run_command, ctx, {"command": "env"})
        assert r.ok
        assert "s3cr3t" not in r.content
        assert "PATH=" in r.content and "LC_ALL=C.UTF-8" in r.content
        r = await run_tool(run_command, ctx, {"command": "env", "background": True})
        task_id = r.data["task_id"] if r.data else None  # type: ignore[index]
        assert task_id
        task = ctx.background.get(task_id)
        for _ in range(200):  # the background command's own environment, once it has run
            if not task.running:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.05)  # the reader drains what the command printed
        out = await run_tool(background_task_output, ctx, {"task_id": task_id})
        assert out.ok and "PATH=" in out.content and "LC_ALL=C.UTF-8" in out.content
        assert "s3cr3t" not in out.content
    finally:
        await ctx.background.close()
    env = child_environment(allow=["GITHUB_TOKEN", "CUSTOM_*"], values={"EXTRA": "1"})
    assert env["GITHUB_TOKEN"] == "s3cr3t-GITHUB_TOKEN" and env["EXTRA"] == "1"
    assert "OPENAI_API_KEY" not in env


@contextlib.contextmanager
def _swapping(folder: Path, target: Path) -> Iterator[None]:
    """While inside, a thread keeps swapping ``folder`` for a symlink to ``target`` (every
    2 ms: long enough for a walker to be inside the swapped folder)."""
    import threading
    import time

    stop = threading.Event()

    def swapper() -> None:
        parked = folder.with_name(folder.name + "-parked")
        while not stop.is_set():
            try:
                folder.rename(parked)
                folder.symlink_to(target)
                time.sleep(0.002)
                folder.unlink()
                parked.rename(folder)
                time.sleep(0.002)
            except OSError:
                pass

    thread = threading.Thread(target=swapper, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)


async def test_search_project_never_reads_outside_under_symlink_swaps(tmp_path: Path) -> None:
    """While a thread keeps swapping a project folder for a symlink to a folder outside,
    search_project never returns a line from outside (os.walk did, in hundreds of 2,000 calls)."""
    from memora.tools.project_search import BuiltinProjectSearch

    project, outside = tmp_path / "p", tmp_path / "outside"
    (project / "sub").mkdir(parents=True)
    outside.mkdir()
    for i in range(20):
        (project / "sub" / f"in{i}.txt").write_text("needle inside\n", encoding="utf-8")
        # the same names outside: a walker that re-resolves "sub" reads these instead
        (outside / f"in{i}.txt").write_text("needle SECRET\n", encoding="utf-8")
    search = BuiltinProjectSearch()
    leaked = 0
    with _swapping(project / "sub", outside):
        for _ in range(300):
            hits = await search.search(project, "needle")
            leaked += sum("SECRET" in h.text for h in hits)
    assert leaked == 0


async def test_list_dir_never_lists_outside_under_symlink_swaps(tmp_path: Path) -> None:
    from memora.tools import ToolContext
    from memora.tools.base import run_tool
    from memora.tools.files import list_dir

    project, outside = tmp_path / "p", tmp_path / "outside"
    (project / "sub").mkdir(parents=True)
    outside.mkdir()
    (project / "sub" / "inside.txt").write_text("x")
    (outside / "SECRET_NAME.txt").write_text("x")
    for i in range(2000):  # a large root: time passes between listing it and entering "sub"
        (project / f"f{i:04}.txt").write_text("")
    ctx = ToolContext.for_project(project)
    leaked = 0
    try:
        with _swapping(project / "sub", outside):
            for _ in range(150):
                r = await run_tool(list_dir, ctx, {"path": ".", "depth": 3, "include_hidden": True})
                leaked += "SECRET_NAME" in r.content
    finally:
        await ctx.background.close()
    assert leaked == 0


async def test_write_file_never_creates_folders_outside_under_symlink_swaps(tmp_path: Path) -> None:
    from memora.tools import ToolContext
    from memora.tools.base import run_tool
    from memora.tools.files import write_file

    project, outside = tmp_path / "p", tmp_path / "outside"
    (project / "sub").mkdir(parents=True)
    outside.mkdir()
    ctx = ToolContext.for_project(project)
    try:
        with _swapping(project / "sub", outside):
            for i in range(200):
                await run_tool(write_file, ctx, {"path": f"sub/d{i}/e/f/note.txt", "content": "x"})
    finally:
        await ctx.background.close()
    assert list(outside.iterdir()) == []
