"""Works projection (``agent.works``): long work texts (novels, documents) are registered and
read on demand; only distilled facts — title, size, chapter headings — go to memory."""

from __future__ import annotations

import asyncio
import builtins
import json
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import ErrorCode, MemoraError, ToolError, ToolErrorCode
from ..llm.types import clean_text
from ..memory.manager import MemoryManager
from ..memory.types import NewMemory
from ..security.atomic import atomic_write_text
from ..security.paths import PathGuard
from ..security.state import check_state_path
from .files import decode_text

__all__ = ["WorkInfo", "WorksRegistry"]

_HEADING = re.compile(
    r"^(?:#{1,3}\s+.+|第[0-9零一二三四五六七八九十百千]+[章节回卷部].*|Chapter\s+\w+.*|CHAPTER\s+\w+.*)$"
)
MAX_WORK_BYTES = 64 * 1024 * 1024


@dataclass
class WorkInfo:
    """A registered work (a long document): where it is, its size and headings."""

    id: str
    title: str
    path: str
    chars: int
    lines: int
    headings: builtins.list[str] = field(default_factory=list)
    registered_at: float = 0.0
    memory_id: str | None = None

    def projection(self) -> str:
        heads = "\n".join(f"- {h}" for h in self.headings[:60]) or "- (no headings found)"
        more = f"\n- … {len(self.headings) - 60} more" if len(self.headings) > 60 else ""
        return (
            f"Work {self.title!r} at {self.path}: {self.chars:,} characters, {self.lines:,} lines.\n"
            f"Sections:\n{heads}{more}\nRead passages on demand with read_file (line ranges)."
        )


class WorksRegistry:
    def __init__(
        self, data_dir: Path, guard: PathGuard, memory: MemoryManager | None = None
    ) -> None:
        self._file = Path(data_dir) / "works.json"
        self._guard = guard
        self._memory = memory
        self._works: dict[str, WorkInfo] = {}
        if os.path.lexists(self._file):
            # a link or a FIFO planted there (a cloned project) is refused, not read
            check_state_path(self._file, self._file.parent)
            try:
                for item in json.loads(self._file.read_text(encoding="utf-8")):
                    self._works[item["id"]] = WorkInfo(**item)
            except (OSError, ValueError, TypeError, KeyError) as exc:
                raise MemoraError(
                    ErrorCode.STORAGE_ERROR, f"{self._file} is corrupt: {exc}"
                ) from exc

    def list(self) -> builtins.list[WorkInfo]:
        return sorted(self._works.values(), key=lambda w: w.registered_at)

    def get(self, work_id: str) -> WorkInfo:
        if work_id not in self._works:
            raise MemoraError(
                ErrorCode.NOT_FOUND,
                f"no work {work_id!r}; registered: {', '.join(self._works) or 'none'}",
            )
        return self._works[work_id]

    async def register(
        self,
        path: str,
        title: str | None = None,
        *,
        session_id: str | None = None,
        round_id: str | None = None,
    ) -> WorkInfo:
        try:
            fd, resolved = await asyncio.to_thread(self._guard.open_read, path)
        except ToolError as exc:  # the registry speaks MemoraError to hosts
            code = (
                ErrorCode.NOT_FOUND
                if exc.code == ToolErrorCode.FILE_NOT_FOUND
                else ErrorCode.INVALID_INPUT
            )
            raise MemoraError(code, exc.message) from exc

        def scan() -> tuple[int, int, list[str]]:
            # open_read refused FIFOs, sockets and devices, so this read cannot block
            with os.fdopen(fd, "rb") as fh:
                data = fh.read(MAX_WORK_BYTES)
            text, _ = decode_text(data)
            lines = text.splitlines()
            heads = [ln.strip().lstrip("#").strip() for ln in lines if _HEADING.match(ln.strip())]
            return len(text), len(lines), heads

        try:
            chars, nlines, heads = await asyncio.to_thread(scan)
        except FileNotFoundError:
            raise MemoraError(ErrorCode.NOT_FOUND, f"{path} does not exist") from None
        # a file name that is not UTF-8 arrives with lone surrogates: shown with U+FFFD, so the
        # registry file and the memory stay writable
        shown = clean_text(self._guard.display(resolved))
        work_id = re.sub(r"[^A-Za-z0-9_.-]+", "-", shown).strip("-") or "work"
        info = WorkInfo(
            work_id,
            clean_text(title or resolved.stem),
            shown,
            chars,
            nlines,
            [clean_text(h) for h in heads],
            time.time(),
        )
        if self._memory is not None:
            old = self._works.get(work_id)
            item = NewMemory(
                info.projection(),
                source="work_projection",
                name=info.title,
                summary_type="fact",
                session_id=session_id,
                round_id=round_id,
            )
            record = (
                await self._memory.supersede(old.memory_id, item)
                if old is not None and old.memory_id
                else await self._memory.write(item)
            )
            info.memory_id = record.id
        works = {**self._works, work_id: info}
        payload = json.dumps([asdict(w) for w in works.values()], ensure_ascii=False, indent=1)
        await asyncio.to_thread(atomic_write_text, self._file, payload)
        self._works = works  # only once it is on disk: a failed write changes nothing
        return info
