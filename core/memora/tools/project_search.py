"""The built-in project search: literal or regex, honouring ``.gitignore``, with caps.

Replaceable through the ``register_project_search`` hook (e.g. a ripgrep-backed plugin).
"""

from __future__ import annotations

import asyncio
import fnmatch
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ToolError, ToolErrorCode
from ..security.paths import read_regular
from ..services import ProjectMatch

__all__ = ["BuiltinProjectSearch", "GitIgnore"]

MAX_FILE_BYTES = 2 * 1024 * 1024
MAX_LINE_CHARS = 2000
ALWAYS_SKIP = {
    ".git",
    ".hg",
    ".svn",
    "node_modules",
    "__pycache__",
    ".venv",
    ".memora",
    ".mypy_cache",
    ".ruff_cache",
}


@dataclass(frozen=True, slots=True)
class _Rule:
    base: str  # folder (relative, posix) the .gitignore lives in; "" for the root
    pattern: str
    negate: bool
    dir_only: bool
    anchored: bool


class GitIgnore:
    """A ``.gitignore`` matcher covering the common syntax: globs, ``**``, ``!`` negation,
    trailing ``/`` for folders, leading ``/`` or inner ``/`` anchoring, nested files."""

    def __init__(self) -> None:
        self.rules: list[_Rule] = []

    def load(self, folder: Path, rel: str, *, dir_fd: int | None = None) -> None:
        data = read_regular(".gitignore", 1 << 20, dir_fd=dir_fd) if dir_fd is not None else None
        if dir_fd is None:
            try:
                data = (folder / ".gitignore").read_bytes()
            except OSError:
                return
        if data is None:
            return
        text = data.decode("utf-8", errors="replace")
        for raw in text.splitlines():
            line = raw.rstrip()
            if not line or line.startswith("#"):
                continue
            negate = line.startswith("!")
            if negate:
                line = line[1:]
            if line.startswith("\\"):
                line = line[1:]
            dir_only = line.endswith("/")
            line = line.rstrip("/")
            anchored = line.startswith("/") or "/" in line
            line = line.lstrip("/")
            if line:
                self.rules.append(_Rule(rel, line, negate, dir_only, anchored))

    def ignored(self, rel: str, is_dir: bool) -> bool:
        result = False
        name = rel.rsplit("/", 1)[-1]
        for rule in self.rules:
            if rule.dir_only and not is_dir:
                continue
            if rule.base and not (rel == rule.base or rel.startswith(rule.base + "/")):
                continue
            sub = rel[len(rule.base) + 1 :] if rule.base else rel
            if rule.anchored:
                hit = _glob(sub, rule.pattern)
            else:
                hit = fnmatch.fnmatchcase(name, rule.pattern)
            if hit:
                result = not rule.negate
        return result


def _glob(path: str, pattern: str) -> bool:
    regex = ""
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            regex += "(?:.*/)?"
            i += 3
        elif pattern.startswith("/**", i) and i + 3 == len(pattern):
            regex += "/.*"
            i += 3
        elif c == "*":
            regex += "[^/]*"
            i += 1
        elif c == "?":
            regex += "[^/]"
            i += 1
        else:
            regex += re.escape(c)
            i += 1
    return re.fullmatch(regex, path) is not None


class BuiltinProjectSearch:
    """Search text files under a root; capped in results, file size, line length and time."""

    def __init__(self, *, time_budget: float = 20.0) -> None:
        self.time_budget = time_budget

    async def search(
        self,
        root: Path,
        pattern: str,
        *,
        regex: bool = False,
        glob: str | None = None,
        max_results: int = 200,
    ) -> list[ProjectMatch]:
        if not pattern:
            raise ToolError(ToolErrorCode.INVALID_ARGS, "pattern is empty")
        # The model's patterns run on the `regex` engine: every match is bounded by the search's
        # time budget (a catastrophic pattern ends as TIMEOUT) and runs without holding the GIL,
        # so one bad pattern cannot freeze the event loop and every other Agent in the process.
        import regex as regex_engine

        try:
            compiled = regex_engine.compile(
                pattern if regex else regex_engine.escape(pattern),
                0 if regex else regex_engine.IGNORECASE,
            )
        except (regex_engine.error, ValueError, OverflowError, RecursionError) as exc:
            raise ToolError(
                ToolErrorCode.INVALID_ARGS, f"invalid regular expression: {exc}"
            ) from exc
        return await asyncio.to_thread(
            self._search, root, compiled, glob, max(1, min(max_results, 1000))
        )

    def _search(
        self, root: Path, compiled: Any, glob: str | None, limit: int
    ) -> list[ProjectMatch]:
        deadline = time.monotonic() + self.time_budget
        ignore = GitIgnore()
        out: list[ProjectMatch] = []
        # fwalk: every folder is opened relative to its parent's descriptor without following
        # links, and files are opened by name inside it — a folder swapped for a symlink while
        # the search runs is never entered (os.walk re-resolved paths and could be led outside)
        for folder, dirs, files, dir_fd in os.fwalk(root, follow_symlinks=False):
            here = Path(folder)
            rel_dir = here.relative_to(root).as_posix()
            rel_dir = "" if rel_dir == "." else rel_dir
            ignore.load(here, rel_dir, dir_fd=dir_fd)
            keep = []
            for d in sorted(dirs):
                rel = f"{rel_dir}/{d}" if rel_dir else d
                if d in ALWAYS_SKIP or ignore.ignored(rel, True):
                    continue
                keep.append(d)
            dirs[:] = keep
            for name in sorted(files):
                rel = f"{rel_dir}/{name}" if rel_dir else name
                if ignore.ignored(rel, False):
                    continue
                if glob and not (fnmatch.fnmatchcase(name, glob) or fnmatch.fnmatchcase(rel, glob)):
                    continue
                # links are not followed, FIFOs and sockets skipped without blocking
                data = read_regular(name, MAX_FILE_BYTES, dir_fd=dir_fd, skip_larger=True)
                if data is None:
                    continue
                if b"\x00" in data[:4096]:
                    continue
                text = data.decode("utf-8", errors="replace")
                for n, line in enumerate(text.splitlines(), 1):
                    left = deadline - time.monotonic()
                    try:
                        if left <= 0:
                            raise TimeoutError
                        hit = compiled.search(line[:MAX_LINE_CHARS], timeout=left, concurrent=True)
                    except TimeoutError:
                        raise ToolError(
                            ToolErrorCode.TIMEOUT,
                            f"search stopped after {self.time_budget:g}s with {len(out)} matches "
                            f"(at {rel}:{n}); narrow it with glob or a subfolder, or simplify "
                            "the pattern (nested repetition backtracks without end)",
                        ) from None
                    if hit:
                        out.append(ProjectMatch(rel, n, line.strip()[:300]))
                        if len(out) >= limit:
                            return out
        return out
