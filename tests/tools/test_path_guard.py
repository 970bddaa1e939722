"""The path guard as a user meets it through the file tools: what is allowed, what a failed write
reports, that nothing leaks, and the messages that say where to look instead."""

from __future__ import annotations

import errno
import os
import stat
import sys
from pathlib import Path

import pytest

from memora.errors import ToolError, ToolErrorCode
from memora.security.paths import PathGuard, read_regular
from memora.tools import ToolContext
from memora.tools.base import Tool, run_tool
from memora.tools.files import read_file, write_file
from memora.tools.knowledge import search_project


async def call(t: Tool, ctx: ToolContext, **args: object) -> tuple[bool, str, str | None]:
    result = await run_tool(t, ctx, args)
    return result.ok, result.content, result.error_code


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


needs_proc = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")


async def test_a_failed_write_is_reported_as_failed_and_leaves_the_file_as_it_was(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = ToolContext.for_project(project)
    (project / "notes.txt").write_text("before\n", encoding="utf-8")

    def disk_full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    ok, content, code = await call(write_file, ctx, path="notes.txt", content="after\n")
    assert not ok and "wrote" not in content.lower()
    assert code is not None
    monkeypatch.undo()
    assert (project / "notes.txt").read_text(encoding="utf-8") == "before\n"
    assert [p.name for p in project.iterdir() if p.name.endswith(".tmp")] == []

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError):  # the guard itself: the failure is raised, not swallowed
        PathGuard(project).write_atomic("notes.txt", b"x")
    monkeypatch.undo()
    assert (project / "notes.txt").read_text(encoding="utf-8") == "before\n"
    assert [p.name for p in project.iterdir() if p.name.endswith(".tmp")] == []


@needs_proc
async def test_searching_and_writing_many_files_leaks_no_descriptor(project: Path) -> None:
    ctx = ToolContext.for_project(project)
    for i in range(200):
        (project / f"f{i}.txt").write_text(f"needle {i}\n", encoding="utf-8")
    before = _open_fds()
    ok, content, _ = await call(search_project, ctx, pattern="needle", max_results=1000)
    assert ok and "needle" in content
    for i in range(40):  # each write makes two new folders above its file
        ok, _, _ = await call(write_file, ctx, path=f"deep{i}/a/b.txt", content="x")
        assert ok
    for i in range(40):
        ok, _, _ = await call(read_file, ctx, path=f"deep{i}/a/b.txt")
        assert ok
    assert read_regular(project / "f1.txt", 100) == b"needle 1\n"
    assert read_regular(project / "missing.txt", 100) is None
    assert _open_fds() == before


async def test_every_allowed_path_is_usable_and_only_those(tmp_path: Path) -> None:
    project, shared = tmp_path / "project", tmp_path / "shared"
    for root, text in ((project, "in the project"), (shared, "in the shared folder")):
        root.mkdir()
        (root / "a.txt").write_text(text, encoding="utf-8")
    (tmp_path / "secret.txt").write_text("no", encoding="utf-8")
    ctx = ToolContext.for_project(project, allowed_paths=[project, shared])
    ok, content, _ = await call(read_file, ctx, path="a.txt")
    assert ok and "in the project" in content
    ok, content, _ = await call(read_file, ctx, path=str(shared / "a.txt"))
    assert ok and "in the shared folder" in content
    ok, _, _ = await call(write_file, ctx, path=str(shared / "new.txt"), content="made")
    assert ok and (shared / "new.txt").read_text(encoding="utf-8") == "made"
    ok, content, code = await call(read_file, ctx, path=str(tmp_path / "secret.txt"))
    assert not ok and code == "PATH_NOT_ALLOWED"
    assert "the project" in content and "shared" in content  # where it may look instead


def test_bad_paths_are_refused_with_what_to_do(project: Path) -> None:
    guard = PathGuard(project)
    cases = {
        "~/x": (ToolErrorCode.PATH_NOT_ALLOWED, "home-relative"),
        "a\x00b": (ToolErrorCode.INVALID_ARGS, "NUL"),
        "  ": (ToolErrorCode.INVALID_ARGS, "use '.'"),
        "../outside.txt": (ToolErrorCode.PATH_NOT_ALLOWED, "outside the allowed paths"),
    }
    for path, (code, said) in cases.items():
        with pytest.raises(ToolError) as info:
            guard.resolve(path)
        assert info.value.code == code and said in str(info.value), path
    with pytest.raises(ToolError) as info:
        guard.resolve(5)  # type: ignore[arg-type]
    assert info.value.code == ToolErrorCode.INVALID_ARGS
    assert guard.resolve(".") == Path(os.path.realpath(project))
    assert guard.display(guard.resolve(".")) == "."
    assert guard.display(guard.resolve("src/app.py")) == "src/app.py"
    outside = str(project.parent / "outside.txt")
    assert guard.display(outside) == outside


def test_a_write_keeps_the_files_mode_and_refuses_folders(project: Path) -> None:
    guard = PathGuard(project)
    private = project / "private.txt"
    private.write_text("x", encoding="utf-8")
    private.chmod(0o600)
    guard.write_atomic("private.txt", b"y")
    assert stat.S_IMODE(private.stat().st_mode) == 0o600 and private.read_bytes() == b"y"
    made = guard.write_atomic("fresh.txt", b"z")
    assert stat.S_IMODE(made.stat().st_mode) == 0o644 & ~_umask()
    with pytest.raises(ToolError) as info:
        guard.write_atomic("src", b"z")
    assert info.value.code == ToolErrorCode.INVALID_ARGS and "directory" in str(info.value)
    with pytest.raises(ToolError) as info:
        guard.write_atomic("nowhere/x.txt", b"z", create_dirs=False)
    assert info.value.code == ToolErrorCode.FILE_NOT_FOUND and "nowhere" in str(info.value)
    assert not (project / "nowhere").exists()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_write_replaces_a_link_instead_of_writing_through_it(project: Path) -> None:
    target = project / "target.txt"
    target.write_text("kept", encoding="utf-8")
    (project / "link.txt").symlink_to(target)
    guard = PathGuard(project)
    guard.write_atomic(str(project / "link.txt"), b"new")  # resolved: the target itself
    assert target.read_text(encoding="utf-8") == "new"


def test_reading_special_files_never_blocks_and_large_files_can_be_skipped(
    project: Path,
) -> None:
    big = project / "big.bin"
    big.write_bytes(b"a" * 5000)
    assert read_regular(big, 100) == b"a" * 100
    assert read_regular(big, 100, skip_larger=True) is None
    assert read_regular(big, 5000, skip_larger=True) == b"a" * 5000
    fifo = project / "pipe"
    os.mkfifo(fifo)
    assert read_regular(fifo, 100) is None  # no writer: a blocking open would hang here
    (project / "dir").mkdir()
    assert read_regular(project / "dir", 100) is None
    (project / "ln").symlink_to(big)
    assert read_regular(project / "ln", 100) is None  # a link is not followed
    guard = PathGuard(project)
    with pytest.raises(ToolError) as info:
        guard.open_read("pipe")
    assert info.value.code in (ToolErrorCode.PERMISSION_DENIED, ToolErrorCode.INVALID_ARGS)
    with pytest.raises(ToolError) as info:
        guard.open_read("dir")
    assert info.value.code == ToolErrorCode.INVALID_ARGS and "list_dir" in str(info.value)
    with pytest.raises(ToolError) as info:
        guard.open_read("missing.txt")
    assert info.value.code == ToolErrorCode.FILE_NOT_FOUND and "list_dir" in str(info.value)
    (project / "loop").symlink_to(project / "loop")
    with pytest.raises(ToolError) as info:
        guard.open_read("loop")
    assert info.value.code == ToolErrorCode.INVALID_ARGS and "loops back" in str(info.value)


def test_a_descriptor_that_is_not_the_checked_file_is_refused_everywhere(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The re-check after opening: through /proc on Linux, by device and inode elsewhere."""
    guard = PathGuard(project)
    outside = project.parent / "outside.txt"
    fd = os.open(outside, os.O_RDONLY)
    try:
        with pytest.raises(ToolError) as info:
            guard.check_fd(fd, project / "README.md")
        assert info.value.code == ToolErrorCode.PATH_NOT_ALLOWED
        monkeypatch.setattr(sys, "platform", "darwin")  # the portable branch
        with pytest.raises(ToolError) as info:
            guard.check_fd(fd, project / "README.md")
        assert info.value.code == ToolErrorCode.PATH_NOT_ALLOWED
        with pytest.raises(ToolError) as info:
            guard.check_fd(fd, project / "gone.txt")
        assert info.value.code == ToolErrorCode.FILE_NOT_FOUND
        own = os.open(project / "README.md", os.O_RDONLY)
        try:
            guard.check_fd(own, project / "README.md")  # the same file: accepted
        finally:
            os.close(own)
    finally:
        os.close(fd)


def test_a_socket_a_swapped_link_and_a_file_in_the_way_are_refused_by_name(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    guard = PathGuard(project)
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(project / "app.sock"))
        with pytest.raises(ToolError) as info:
            guard.open_read("app.sock")
        assert info.value.code == ToolErrorCode.INVALID_ARGS and "socket" in str(info.value)
    finally:
        sock.close()
    real = project / "real.txt"
    real.write_text("x", encoding="utf-8")
    (project / "swapped").symlink_to(real)
    # the path was checked as a plain file; a link appears before it is opened
    monkeypatch.setattr(guard, "resolve", lambda path, purpose="": project / "swapped")
    with pytest.raises(ToolError) as info:
        guard.open_read("swapped")
    assert info.value.code == ToolErrorCode.PATH_NOT_ALLOWED
    assert "became a symbolic link" in str(info.value)
    monkeypatch.undo()
    (project / "notes.txt").write_text("a file, not a folder", encoding="utf-8")
    with pytest.raises(ToolError) as info:
        guard.write_atomic("notes.txt/child.txt", b"x")
    assert info.value.code in (ToolErrorCode.PATH_NOT_ALLOWED, ToolErrorCode.FILE_NOT_FOUND)
    assert (project / "notes.txt").read_text(encoding="utf-8") == "a file, not a folder"
    made = guard.write_atomic("new/deeper/still/x.txt", b"made")
    assert made.read_bytes() == b"made" and stat.S_IMODE(made.parent.stat().st_mode) & 0o700


def test_a_read_of_more_than_one_chunk_returns_exactly_the_limit(project: Path) -> None:
    big = project / "big.bin"
    big.write_bytes(b"b" * ((1 << 20) * 2 + 10))
    limit = (1 << 20) * 2 + 1
    assert len(read_regular(big, limit) or b"") == limit


def _swap_parent_for_a_link(
    project: Path, monkeypatch: pytest.MonkeyPatch, guard: PathGuard
) -> Path:
    """The folder the guard resolved is swapped for a link to outside before it is used: the
    re-check through the open descriptor must catch it."""
    outside = project.parent / "elsewhere"
    outside.mkdir()
    (outside / "secret.txt").write_text("outside", encoding="utf-8")
    (project / "sub").symlink_to(outside)
    resolved = project / "sub" / "secret.txt"
    monkeypatch.setattr(guard, "resolve", lambda path, purpose="": resolved)
    return outside


def test_a_folder_swapped_for_a_link_after_the_check_is_refused(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    guard = PathGuard(project)
    outside = _swap_parent_for_a_link(project, monkeypatch, guard)
    with pytest.raises(ToolError) as info:
        guard.open_read("sub/secret.txt")
    assert info.value.code == ToolErrorCode.PATH_NOT_ALLOWED
    with pytest.raises(ToolError) as info:
        guard.write_atomic("sub/secret.txt", b"overwritten", create_dirs=False)
    assert info.value.code == ToolErrorCode.PATH_NOT_ALLOWED
    assert (outside / "secret.txt").read_text(encoding="utf-8") == "outside"
    # a missing folder under a swapped one is not made outside either
    monkeypatch.setattr(guard, "resolve", lambda path, purpose="": project / "sub" / "new" / "x")
    with pytest.raises(ToolError) as info:
        guard.write_atomic("sub/new/x", b"x")
    assert info.value.code == ToolErrorCode.PATH_NOT_ALLOWED
    assert not (outside / "new").exists()


def test_the_portable_recheck_does_not_follow_a_link_to_the_same_file(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = project / "real.txt"
    real.write_text("x", encoding="utf-8")
    (project / "alias.txt").symlink_to(real)
    guard = PathGuard(project)
    monkeypatch.setattr(sys, "platform", "darwin")
    fd = os.open(real, os.O_RDONLY)
    try:
        with pytest.raises(ToolError) as info:  # the name is a link now, not the file opened
            guard.check_fd(fd, project / "alias.txt")
        assert info.value.code == ToolErrorCode.PATH_NOT_ALLOWED
    finally:
        os.close(fd)


@needs_proc
def test_refused_opens_leak_no_descriptor(project: Path) -> None:
    guard = PathGuard(project)
    os.mkfifo(project / "pipe")
    before = _open_fds()
    for _ in range(50):
        for name in ("src", "pipe"):
            with pytest.raises(ToolError):
                guard.open_read(name)
    assert _open_fds() == before


def test_unusable_names_and_parents_are_refused_by_name(project: Path) -> None:
    guard = PathGuard(project)
    with pytest.raises(ToolError) as info:
        guard.open_read("n" * 300)
    assert info.value.code == ToolErrorCode.PERMISSION_DENIED and "cannot open" in str(info.value)
    (project / "notes.txt").write_text("a file", encoding="utf-8")
    with pytest.raises(ToolError) as info:
        guard.write_atomic("notes.txt/sub/child.txt", b"x")
    assert info.value.code == ToolErrorCode.PATH_NOT_ALLOWED and "cannot use folder" in str(
        info.value
    )


def test_new_folders_get_the_usual_mode(project: Path) -> None:
    made = PathGuard(project).write_atomic("a/b/c.txt", b"x")
    expected = 0o755 & ~_umask()
    assert stat.S_IMODE(made.parent.stat().st_mode) == expected
    assert stat.S_IMODE(made.parent.parent.stat().st_mode) == expected


def test_a_folder_that_turns_into_a_link_while_being_made_is_refused(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = project.parent / "away"
    outside.mkdir()
    real_mkdir = os.mkdir

    def planted(name: str, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        os.symlink(outside, name, dir_fd=dir_fd)  # someone put a link there first

    monkeypatch.setattr(os, "mkdir", planted)
    with pytest.raises(ToolError) as info:
        PathGuard(project).write_atomic("made/x.txt", b"x")
    monkeypatch.setattr(os, "mkdir", real_mkdir)
    assert info.value.code == ToolErrorCode.PATH_NOT_ALLOWED and "changed" in str(info.value)
    assert list(outside.iterdir()) == []


def test_a_write_is_on_disk_before_it_replaces_the_file(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Durability: the new content is flushed and synced before the rename, the folder after."""
    synced: list[tuple[bool, int]] = []
    real_fsync = os.fsync

    def recording(fd: int) -> None:
        st = os.fstat(fd)
        synced.append((stat.S_ISDIR(st.st_mode), st.st_size))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording)
    PathGuard(project).write_atomic("durable.txt", b"12345")
    assert synced[0] == (False, 5)  # the temp file, whole
    assert any(is_dir for is_dir, _ in synced[1:])  # then its folder


def test_a_leftover_temp_file_never_corrupts_a_write(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import secrets

    monkeypatch.setattr(secrets, "token_hex", lambda n: "fixed")
    (project / ".target.txt.fixed.tmp").write_bytes(b"a much longer leftover from a crash")
    try:
        PathGuard(project).write_atomic("target.txt", b"short")
    except OSError:
        assert not (project / "target.txt").exists()  # refused: nothing half-written
    else:
        assert (project / "target.txt").read_bytes() == b"short"


def test_a_folder_above_swapped_for_a_link_is_caught_by_the_recheck(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A link two levels up is followed by the open (only the last name is not followed): the
    check of the open folder's real path is what refuses it."""
    outside = project.parent / "far"
    (outside / "dir").mkdir(parents=True)
    (project / "up").symlink_to(outside)
    guard = PathGuard(project)
    monkeypatch.setattr(guard, "resolve", lambda path, purpose="": project / "up" / "dir" / "f")
    with pytest.raises(ToolError) as info:
        guard.write_atomic("up/dir/f", b"x", create_dirs=False)
    assert info.value.code == ToolErrorCode.PATH_NOT_ALLOWED
    monkeypatch.setattr(
        guard, "resolve", lambda path, purpose="": project / "up" / "dir" / "new" / "f"
    )
    with pytest.raises(ToolError) as info:
        guard.write_atomic("up/dir/new/f", b"x")
    assert info.value.code == ToolErrorCode.PATH_NOT_ALLOWED
    assert sorted(p.name for p in (outside / "dir").iterdir()) == []
