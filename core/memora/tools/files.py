"""File tools: read_file, write_file, edit_file, list_dir — all through the path guard."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from pydantic import Field

from ..errors import ToolError, ToolErrorCode
from ..security.permissions import check_permission
from .base import ToolOutput, builtin_tool
from .context import ToolContext

__all__ = ["FILE_TOOLS", "decode_text"]

MAX_READ_BYTES = 256 * 1024
DEFAULT_LINES = 500
MAX_SCAN_BYTES = 64 * 1024 * 1024
"""Line-based reads scan at most this much; beyond it use byte ranges."""
MAX_WRITE_BYTES = 10 * 1024 * 1024
MAX_LIST = 500

_T = TypeVar("_T")


async def _in_thread(fn: Callable[..., _T], *args: Any) -> _T:
    """``asyncio.to_thread``; asyncio is imported by the running loop, not by listing the tools
    (``memora plugins``)."""
    import asyncio

    return await asyncio.to_thread(fn, *args)


def decode_text(data: bytes) -> tuple[str, str]:
    """Decode bytes as UTF-8, else GB18030 (common for Chinese), else Latin-1; returns
    ``(text, encoding)``.  Raises when the bytes look binary."""
    if b"\x00" in data[:8192]:
        raise ToolError(
            ToolErrorCode.NOT_AVAILABLE,
            "this is a binary file (it contains NUL bytes); read_file only reads text",
        )
    for enc in ("utf-8", "gb18030"):
        try:
            return data.decode(enc), enc
        except UnicodeDecodeError as exc:
            # a multi-byte character cut at the end of a range is not an encoding problem
            if enc == "utf-8" and exc.start >= len(data) - 3:
                return data.decode(enc, errors="replace"), enc
    return data.decode("latin-1"), "latin-1"


def _stamp(ctx: ToolContext, fd: int, resolved: object) -> None:
    st = os.fstat(fd)
    ctx.file_stamps[str(resolved)] = (st.st_mtime_ns, st.st_size)


def _check_fresh(ctx: ToolContext, path: str) -> None:
    """With ``file_consistency_check``: an existing file must have been read, unchanged since."""
    if not ctx.consistency_check:
        return
    resolved = ctx.guard.resolve(path, purpose="write")
    try:
        st = os.stat(resolved)
    except FileNotFoundError:
        return
    seen = ctx.file_stamps.get(str(resolved))
    shown = ctx.guard.display(resolved)
    if seen is None:
        raise ToolError(
            ToolErrorCode.INVALID_ARGS,
            f"{shown} exists and has not been read yet; read it before changing it",
        )
    if seen != (st.st_mtime_ns, st.st_size):
        raise ToolError(
            ToolErrorCode.INVALID_ARGS,
            f"{shown} changed on disk since you last read it; read it again before changing it",
        )


def _read_range(fd: int, offset: int, length: int) -> bytes:
    return os.pread(fd, length, offset)


def _read_lines(fd: int, size: int, start: int, end: int) -> tuple[list[bytes], int | None, bool]:
    """Lines ``start..end`` (1-based, inclusive).

    Returns ``(lines, total_lines, scan_capped)``; ``total_lines`` is ``None`` when the file was
    not scanned to the end (huge file, or the byte cap of one read was reached).  A single line
    longer than :data:`MAX_READ_BYTES` is cut.
    """
    lines: list[bytes] = []
    line_no = 0
    pos = 0
    carry = b""
    collected = 0
    while pos < size:
        if pos >= MAX_SCAN_BYTES:
            return lines, None, True
        chunk = os.pread(fd, 1 << 20, pos)
        if not chunk:
            break
        pos += len(chunk)
        parts = (carry + chunk).split(b"\n")
        carry = parts.pop()[: MAX_READ_BYTES + 1]
        for part in parts:
            line_no += 1
            if start <= line_no <= end:
                part = part[:MAX_READ_BYTES]
                if collected + len(part) > MAX_READ_BYTES:
                    return lines, None, False
                lines.append(part)
                collected += len(part) + 1
        if line_no > end and size > MAX_SCAN_BYTES:
            return lines, None, False
    if carry:
        line_no += 1
        if start <= line_no <= end and collected + len(carry) <= MAX_READ_BYTES:
            lines.append(carry[:MAX_READ_BYTES])
    return lines, line_no, False


@builtin_tool(idempotency="read-only")
async def read_file(
    ctx: ToolContext,
    path: Annotated[str, Field(description="File path, relative to the project root")],
    start_line: Annotated[int, Field(ge=1, description="First line to read (1-based)")] = 1,
    end_line: Annotated[
        int | None,
        Field(ge=1, description="Last line to read (inclusive); default: start_line + 499"),
    ] = None,
    offset: Annotated[
        int | None, Field(ge=0, description="Byte offset for a byte-range read (instead of lines)")
    ] = None,
    length: Annotated[
        int, Field(ge=1, le=MAX_READ_BYTES, description="Bytes to read with offset")
    ] = 65536,
) -> ToolOutput:
    """Read a text file of the project. Large files are read in pages: by line range (default 500
    lines) or by byte range (offset/length). Binary files are refused; non-UTF-8 text is decoded
    and the encoding reported."""
    fd, resolved = ctx.guard.open_read(path)
    try:
        _stamp(ctx, fd, resolved)
        size = os.fstat(fd).st_size
        shown = ctx.guard.display(resolved)
        if offset is not None:
            data = await _in_thread(_read_range, fd, offset, length)
            text, enc = decode_text(data)
            end = offset + len(data)
            more = f"; continue with offset={end}" if end < size else ""
            header = f"{shown} bytes {offset}–{end} of {size}{' (' + enc + ')' if enc != 'utf-8' else ''}{more}"
            return ToolOutput(f"[{header}]\n{text}", header)
        last = end_line if end_line is not None else start_line + DEFAULT_LINES - 1
        if last < start_line:
            raise ToolError(
                ToolErrorCode.INVALID_ARGS, f"end_line {last} is before start_line {start_line}"
            )
        probe = await _in_thread(_read_range, fd, 0, 8192)
        decode_text(probe)  # binary check up front
        raw_lines, total, capped = await _in_thread(_read_lines, fd, size, start_line, last)
        text, enc = decode_text(b"\n".join(raw_lines))
        got_last = start_line + len(raw_lines) - 1
        if not raw_lines:
            header = f"{shown}: no lines from {start_line} (the file has {total if total is not None else 'more than the scanned'} lines, {size} bytes)"
            return ToolOutput(f"[{header}]", header)
        total_txt = str(total) if total is not None else "?"
        notes = []
        if enc != "utf-8":
            notes.append(f"decoded as {enc}")
        if total is None or got_last < total:
            notes.append(f"continue with start_line={got_last + 1}")
        if capped:
            notes.append("file too large to scan by lines here; use offset/length byte ranges")
        header = f"{shown} lines {start_line}–{got_last} of {total_txt} ({size} bytes)" + (
            "; " + "; ".join(notes) if notes else ""
        )
        return ToolOutput(f"[{header}]\n{text}", header)
    finally:
        os.close(fd)


@builtin_tool(writes=True, idempotency="idempotent-key")
async def write_file(
    ctx: ToolContext,
    path: Annotated[str, Field(description="File path, relative to the project root")],
    content: Annotated[str, Field(description="The complete new content of the file")],
) -> ToolOutput:
    """Create or overwrite a text file (atomically; missing folders are created)."""
    check_permission(
        "write_file", writes=True, runs_code=False, permission=ctx.permission, readonly=ctx.readonly
    )
    _check_fresh(ctx, path)
    data = content.encode("utf-8")
    if len(data) > MAX_WRITE_BYTES:
        raise ToolError(
            ToolErrorCode.OUTPUT_TOO_LARGE,
            f"content is {len(data)} bytes; the limit is {MAX_WRITE_BYTES}",
        )
    resolved = await _in_thread(ctx.guard.write_atomic, path, data)
    st = os.stat(resolved)
    ctx.file_stamps[str(resolved)] = (st.st_mtime_ns, st.st_size)
    summary = f"wrote {ctx.guard.display(resolved)} ({len(data)} bytes)"
    return ToolOutput(summary, summary)


@builtin_tool(writes=True, idempotency="non-idempotent")
async def edit_file(
    ctx: ToolContext,
    path: Annotated[str, Field(description="File path, relative to the project root")],
    old_text: Annotated[
        str,
        Field(
            min_length=1, description="Exact text to replace (include enough context to be unique)"
        ),
    ],
    new_text: Annotated[str, Field(description="Replacement text")],
    replace_all: Annotated[
        bool, Field(description="Replace every occurrence instead of exactly one")
    ] = False,
) -> ToolOutput:
    """Replace an exact piece of text in a file. Fails when the text is missing, or found several
    times without replace_all."""
    check_permission(
        "edit_file", writes=True, runs_code=False, permission=ctx.permission, readonly=ctx.readonly
    )
    _check_fresh(ctx, path)
    fd, resolved = ctx.guard.open_read(path)
    try:
        size = os.fstat(fd).st_size
        if size > MAX_WRITE_BYTES:
            raise ToolError(
                ToolErrorCode.OUTPUT_TOO_LARGE,
                f"{ctx.guard.display(resolved)} is too large to edit ({size} bytes)",
            )
        data = await _in_thread(_read_range, fd, 0, size)
    finally:
        os.close(fd)
    text, enc = decode_text(data)
    count = text.count(old_text)
    shown = ctx.guard.display(resolved)
    if count == 0:
        raise ToolError(
            ToolErrorCode.INVALID_ARGS,
            f"old_text was not found in {shown}; read the file and copy the exact text (whitespace included)",
        )
    if count > 1 and not replace_all:
        raise ToolError(
            ToolErrorCode.INVALID_ARGS,
            f"old_text occurs {count} times in {shown}; add surrounding lines to make it unique or set replace_all",
        )
    updated = (
        text.replace(old_text, new_text) if replace_all else text.replace(old_text, new_text, 1)
    )
    try:
        encoded = updated.encode(enc)  # keep the file's own encoding
    except UnicodeEncodeError as exc:
        raise ToolError(
            ToolErrorCode.INVALID_ARGS,
            f"{shown} is {enc}-encoded and new_text has characters {enc} cannot hold",
        ) from exc
    await _in_thread(ctx.guard.write_atomic, str(resolved), encoded)
    st = os.stat(resolved)
    ctx.file_stamps[str(resolved)] = (st.st_mtime_ns, st.st_size)
    summary = f"edited {shown}: {count if replace_all else 1} replacement(s)"
    return ToolOutput(summary, summary)


@builtin_tool(idempotency="read-only")
async def list_dir(
    ctx: ToolContext,
    path: Annotated[str, Field(description="Folder, relative to the project root")] = ".",
    depth: Annotated[int, Field(ge=1, le=5, description="How many levels to descend")] = 1,
    include_hidden: Annotated[bool, Field(description="Include names starting with '.'")] = False,
) -> ToolOutput:
    """List a folder of the project (names, '/' for folders, sizes)."""
    root = ctx.guard.resolve(path, purpose="list")
    if not root.is_dir():
        if root.exists():
            raise ToolError(
                ToolErrorCode.INVALID_ARGS, f"{ctx.guard.display(root)} is a file; use read_file"
            )
        raise ToolError(ToolErrorCode.FILE_NOT_FOUND, f"{ctx.guard.display(root)} does not exist")

    def walk() -> tuple[list[str], bool]:
        lines: list[str] = []
        # folders are opened by descriptor, each relative to its parent and without following a
        # link: a folder swapped for a symlink while listing is never listed through
        flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)

        def visit(folder: int, level: int) -> bool:
            try:
                with os.scandir(folder) as it:
                    entries = sorted(
                        it, key=lambda e: (not e.is_dir(follow_symlinks=False), e.name)
                    )
            except OSError as exc:
                lines.append("  " * level + f"(cannot list: {exc.strerror})")
                return False
            for entry in entries:
                if entry.name == ".git" or (not include_hidden and entry.name.startswith(".")):
                    continue
                if len(lines) >= MAX_LIST:
                    return True
                indent = "  " * level
                if entry.is_symlink():
                    lines.append(f"{indent}{entry.name} -> (link)")
                elif entry.is_dir(follow_symlinks=False):
                    lines.append(f"{indent}{entry.name}/")
                    if level + 1 < depth:
                        try:
                            sub = os.open(entry.name, flags, dir_fd=folder)
                        except OSError as exc:
                            lines.append("  " * (level + 1) + f"(cannot list: {exc.strerror})")
                            continue
                        try:
                            if visit(sub, level + 1):
                                return True
                        finally:
                            os.close(sub)
                else:
                    try:
                        size = entry.stat(follow_symlinks=False).st_size
                    except OSError:
                        size = -1
                    lines.append(f"{indent}{entry.name}  ({size} bytes)")
            return False

        try:
            top = os.open(root, flags)
        except OSError as exc:
            raise ToolError(
                ToolErrorCode.PATH_NOT_ALLOWED,
                f"{ctx.guard.display(root)} changed while being opened: {exc.strerror}",
            ) from exc
        try:
            ctx.guard.check_fd(top, root)
            return lines, visit(top, 0)
        finally:
            os.close(top)

    lines, capped = await _in_thread(walk)
    shown = ctx.guard.display(root)
    body = "\n".join(lines) if lines else "(empty)"
    if capped:
        body += f"\n[listing capped at {MAX_LIST} entries; list a subfolder]"
    return ToolOutput(f"[{shown}]\n{body}", f"{shown}: {len(lines)} entries")


FILE_TOOLS = (read_file, write_file, edit_file, list_dir)
