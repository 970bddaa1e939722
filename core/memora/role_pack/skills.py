"""Skills in the Agent Skills format, with three-level progressive disclosure.

* L1 — name and description, read from the front matter only, listed in the system prompt;
* L2 — the body, read on demand (``read_skill``);
* L3 — resources and scripts inside a skill folder (``read_resource`` / ``run_skill_script``).

A skill is ``skills/<name>.md`` or ``skills/<name>/SKILL.md``; its front-matter ``name`` is
kebab-case and equals the file or folder name.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ..errors import ToolError, ToolErrorCode
from .text import KEBAB_NAME, FrontMatter, inside, parse_front_matter

__all__ = ["Skill", "SkillSource", "merge_skills", "read_front_matter_head", "scan_skills"]

logger = logging.getLogger("memora.role_pack")

SkillSource = Literal["pack", "global", "project"]
_HEAD_LIMIT = 16_384


def read_front_matter_head(path: Path) -> str:
    """Read just enough of a file to hold its front matter (the L1 data)."""
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        first = fh.readline()
        if first.strip() != "---":
            return first
        parts = [first]
        size = len(first)
        for line in fh:
            parts.append(line)
            size += len(line)
            if line.strip() in ("---", "...") or size > _HEAD_LIMIT:
                break
        return "".join(parts)


@dataclass
class Skill:
    """A skill from a role pack, the global skills folder or the project; its body is read on
    first use."""

    name: str
    description: str
    path: Path
    """``SKILL.md`` of a folder skill, or the single ``<name>.md`` file."""
    source: SkillSource
    _body: str | None = field(default=None, repr=False)

    @property
    def folder(self) -> Path | None:
        return self.path.parent if self.path.name == "SKILL.md" else None

    def body(self) -> str:
        """L2: the instructions, without front matter (read once, then cached)."""
        if self._body is None:
            self._body = parse_front_matter(self.path.read_text(encoding="utf-8")).body.strip()
        return self._body

    def resources(self) -> list[str]:
        """L3: files inside a folder skill (relative, forward slashes), except SKILL.md."""
        folder = self.folder
        if folder is None:
            return []
        out = []
        for p in sorted(folder.rglob("*")):
            if (
                p.is_file()
                and p != self.path
                and not any(s.startswith(".") for s in p.relative_to(folder).parts)
            ):
                out.append(p.relative_to(folder).as_posix())
        return out

    def resource_path(self, relative: str) -> Path:
        """Resolve a resource inside the skill folder; refuses anything that escapes it."""
        folder = self.folder
        if folder is None:
            raise ToolError(
                ToolErrorCode.FILE_NOT_FOUND,
                f"skill {self.name!r} is a single file and has no resources",
            )
        if "\x00" in relative:
            raise ToolError(ToolErrorCode.INVALID_ARGS, "resource path contains a NUL byte")
        root = folder.resolve()
        target = (root / relative).resolve()
        if target != root and root not in target.parents:
            raise ToolError(
                ToolErrorCode.PATH_NOT_ALLOWED,
                f"{relative!r} is outside skill {self.name!r}; resources: {', '.join(self.resources()) or 'none'}",
            )
        if not target.is_file():
            raise ToolError(
                ToolErrorCode.FILE_NOT_FOUND,
                f"skill {self.name!r} has no resource {relative!r}; resources: {', '.join(self.resources()) or 'none'}",
            )
        return target


_FRONT_MATTER: dict[tuple[str, int, int], FrontMatter] = {}
_FRONT_MATTER_SIZE = 1024


def _front_matter(path: Path) -> FrontMatter:
    """A skill file's parsed front matter, parsed once per version of the file (path, size,
    mtime): every new Agent scans the skills, and parsing YAML is most of that."""
    st = path.stat()
    key = (str(path), st.st_mtime_ns, st.st_size)
    found = _FRONT_MATTER.get(key)
    if found is None:
        found = parse_front_matter(read_front_matter_head(path))
        if len(_FRONT_MATTER) >= _FRONT_MATTER_SIZE:
            _FRONT_MATTER.clear()
        _FRONT_MATTER[key] = found
    return found


def scan_skills(
    directory: Path,
    source: SkillSource,
    whitelist: Iterable[str] | None = None,
    root: Path | None = None,
) -> dict[str, Skill]:
    """Skills under ``directory`` (L1 only).  Invalid skills are skipped with a warning, and so
    is a skill file whose links lead outside ``root`` (default: ``directory``; a pack's own
    folder for a pack's skills)."""
    skills: dict[str, Skill] = {}
    if not directory.is_dir():
        return skills
    allowed = None
    if whitelist is not None:
        allowed = {
            w.strip().removeprefix("skills/").rstrip("/").removesuffix(".md") for w in whitelist
        }
    for entry in sorted(directory.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            path, expected = entry / "SKILL.md", entry.name
        elif entry.suffix == ".md":
            path, expected = entry, entry.stem
        else:
            continue
        if not inside(root or directory, path):  # missing, or a link out of its folder
            continue
        if allowed is not None and expected not in allowed:
            continue
        try:
            fm = _front_matter(path)
        except OSError as exc:
            logger.warning("skill %s cannot be read: %s", path, exc)
            continue
        name, desc = fm.data.get("name"), fm.data.get("description")
        if (
            fm.error
            or name != expected
            or not KEBAB_NAME.match(expected)
            or not isinstance(desc, str)
            or not desc.strip()
        ):
            logger.warning(
                "skill %s skipped: needs front matter with name: %s (kebab-case) and a description",
                path,
                expected,
            )
            continue
        skills[expected] = Skill(expected, " ".join(desc.split()), path, source)
    return skills


def merge_skills(*layers: dict[str, Skill], disabled: Iterable[str] = ()) -> dict[str, Skill]:
    """Later layers override earlier ones by name; ``disabled`` names are dropped."""
    merged: dict[str, Skill] = {}
    for layer in layers:
        merged.update(layer)
    for name in disabled:
        merged.pop(name, None)
    return dict(sorted(merged.items()))
