"""One role pack as read from its folder: its manifest's metadata, persona, rules, skills and
strategy (read when first asked for), and the fingerprint that says it changed on disk.

:class:`~memora.role_pack.manager.RolePackManager` finds the packs and keeps the active one;
:func:`load_pack` reads one folder (validated first: a pack that does not validate is refused
with its issues).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path
from typing import Any

from ..errors import ErrorCode, MemoraError
from .skills import Skill, scan_skills
from .strategy import EffectiveStrategy, resolve_strategy
from .text import clamp_traits, inside, parse_front_matter, parse_rules
from .validator import LIMITS, Issue, Report, validate

__all__ = [
    "BUILTIN_DIR",
    "BUILTIN_FALLBACK",
    "RolePack",
    "RolePackMeta",
    "builtin_folders",
    "builtin_pack",
    "fingerprint",
    "load_pack",
    "pack_folders",
    "pack_meta",
    "read_manifest",
]

logger = logging.getLogger("memora.role_pack")

BUILTIN_DIR = Path(__file__).resolve().parent / "builtin"
BUILTIN_FALLBACK = "memora-default"


@dataclass(frozen=True, slots=True)
class RolePackMeta:
    """What a host UI needs to list packs (read from manifest.json only)."""

    name: str
    display_name: str
    description: str | None
    version: str | None
    interaction_type: str
    handoff_prompt: str | None
    capabilities: tuple[str, ...]
    path: str
    builtin: bool
    active: bool
    author: str | None = None
    strategy: Mapping[str, Any] = field(default_factory=dict)
    """The keys a role list shows as chips, effective values (defaults filled in):
    ``toolMode``, ``toolReadonly``, ``summaryFocus``, ``outputLimit``, ``temperature``,
    ``multiStepReasoning``, ``selfReview``, ``userFollowup``."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "displayName": self.display_name,
            "description": self.description,
            "version": self.version,
            "author": self.author,
            "interactionType": self.interaction_type,
            "handoffPrompt": self.handoff_prompt,
            "capabilities": list(self.capabilities),
            "strategy": dict(self.strategy),
            "path": self.path,
            "builtin": self.builtin,
            "active": self.active,
        }


def read_manifest(folder: Path) -> dict[str, Any]:
    if not inside(folder, folder / "manifest.json"):
        return {}
    try:
        data = json.loads((folder / "manifest.json").read_bytes().decode("utf-8-sig"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _str(value: Any, limit: int | None = None) -> str | None:
    if not isinstance(value, str):
        return None
    return value[:limit] if limit else value


def _capabilities(manifest: Mapping[str, Any]) -> tuple[str, ...]:
    caps = manifest.get("capabilities")
    if not isinstance(caps, list):
        return ()
    return tuple(
        c["capability"]
        for c in caps[: LIMITS.capabilities]
        if isinstance(c, dict) and isinstance(c.get("capability"), str)
    )


@dataclass
class RolePack:
    """A loaded role pack.  Content files are read lazily and cached."""

    name: str
    folder: Path
    manifest: dict[str, Any]
    report: Report
    builtin: bool = False
    stamp: tuple[tuple[str, int, int], ...] = ()
    """What the pack's files looked like when loaded (path, mtime_ns, size): a change on disk
    makes the manager read the pack again."""
    _skills: dict[str, Skill] | None = field(default=None, repr=False)
    _strategies: dict[Hashable, tuple[EffectiveStrategy, list[Issue]]] = field(
        default_factory=dict, repr=False
    )

    @property
    def display_name(self) -> str:
        return _str(self.manifest.get("displayName")) or self.name

    @property
    def description(self) -> str | None:
        return _str(self.manifest.get("description"))

    @property
    def handoff_prompt(self) -> str | None:
        return _str(self.manifest.get("handoffPrompt"), LIMITS.handoff_prompt)

    @property
    def capabilities(self) -> tuple[str, ...]:
        return _capabilities(self.manifest)

    @property
    def strategy_raw(self) -> Mapping[str, Any]:
        s = self.manifest.get("strategy")
        return s if isinstance(s, dict) else {}

    @cached_property
    def persona(self) -> str:
        path = self.folder / "persona.md"
        if not inside(self.folder, path):
            return ""
        return parse_front_matter(path.read_text(encoding="utf-8")).body.strip()

    @cached_property
    def traits(self) -> dict[str, float]:
        path = self.folder / "persona.md"
        if not inside(self.folder, path):
            return {}
        fm = parse_front_matter(path.read_text(encoding="utf-8"))
        return clamp_traits(fm.data.get("traits"))[0]

    @cached_property
    def rules(self) -> list[str]:
        path = self.folder / "rules.md"
        if not inside(self.folder, path):
            return []
        return parse_rules(path.read_text(encoding="utf-8"))

    def skills(self) -> dict[str, Skill]:
        """The pack's own skills (whitelisted by the manifest when it lists any)."""
        if self._skills is None:
            whitelist = None
            entries = self.manifest.get("skills")
            if isinstance(entries, list):
                whitelist = [
                    e["file"]
                    for e in entries
                    if isinstance(e, dict) and isinstance(e.get("file"), str)
                ]
            self._skills = scan_skills(self.folder / "skills", "pack", whitelist, self.folder)
        return self._skills

    def meta(self, active: bool) -> RolePackMeta:
        return pack_meta(self.name, self.folder, self.manifest, self.builtin, active)

    def strategy_with(
        self, override: Mapping[str, Any] | None
    ) -> tuple[EffectiveStrategy, list[Issue]]:
        """The pack's strategy under a host's ``override`` (:func:`resolve_strategy`), kept
        per override: a pack shared by many sessions resolves it once."""
        try:
            key = _frozen(override)
        except TypeError:  # not plain data (a host's own objects): resolved each time
            return resolve_strategy(self.strategy_raw, override)
        found = self._strategies.get(key)
        if found is None:
            if len(self._strategies) >= 16:
                self._strategies.clear()
            found = self._strategies[key] = resolve_strategy(self.strategy_raw, override)
        return found[0], list(found[1])


def _frozen(value: Any) -> Hashable:
    """``value`` (plain data: mappings with string keys, lists, tuples, scalars) as a hashable
    key that keeps every type apart (a list is not a tuple, ``True`` is not ``1``); anything
    else is a ``TypeError``."""
    if value is None or type(value) in (str, int, float, bool):
        return (type(value).__name__, value)
    if isinstance(value, Mapping):
        if not all(isinstance(k, str) for k in value):
            raise TypeError("mapping keys must be strings")
        return ("map", tuple(sorted((k, _frozen(v)) for k, v in value.items())))
    if type(value) in (list, tuple):
        return (type(value).__name__, tuple(_frozen(v) for v in value))
    raise TypeError(f"not plain data: {type(value).__name__}")


def _author(manifest: Mapping[str, Any]) -> str | None:
    author = manifest.get("author")
    if isinstance(author, dict):  # {"name": ..., "email": ...}
        author = author.get("name")
    return _str(author)


def _chips(manifest: Mapping[str, Any]) -> dict[str, Any]:
    raw = manifest.get("strategy")
    strategy, _ = resolve_strategy(raw if isinstance(raw, dict) else {}, None)
    return {
        "toolMode": strategy.tool_mode,
        "toolReadonly": "readonly" if strategy.tool_readonly else "full",
        "summaryFocus": strategy.summary_focus,
        "outputLimit": strategy.output_limit,
        "temperature": strategy.temperature,
        "multiStepReasoning": strategy.multi_step_reasoning,
        "selfReview": 1 if strategy.self_review else 0,
        "userFollowup": strategy.user_followup,
    }


def pack_meta(
    name: str, folder: Path, manifest: Mapping[str, Any], builtin: bool, active: bool
) -> RolePackMeta:
    return RolePackMeta(
        name=name,
        display_name=_str(manifest.get("displayName")) or name,
        description=_str(manifest.get("description")),
        version=_str(manifest.get("version")),
        interaction_type=_str(manifest.get("interactionType")) or "tool_assistant",
        handoff_prompt=_str(manifest.get("handoffPrompt"), LIMITS.handoff_prompt),
        capabilities=_capabilities(manifest),
        path=str(folder),
        builtin=builtin,
        active=active,
        author=_author(manifest),
        strategy=_chips(manifest),
    )


def fingerprint(folder: Path) -> tuple[tuple[str, int, int], ...]:
    """(relative path, mtime_ns, size) of every file that makes up a pack (a few stats)."""
    entries: list[tuple[str, int, int]] = []
    candidates = [folder / "manifest.json", folder / "persona.md", folder / "rules.md"]
    skills = folder / "skills"
    if skills.is_dir():
        for entry in sorted(skills.iterdir()):
            candidates.append(entry / "SKILL.md" if entry.is_dir() else entry)
    for path in candidates:
        try:
            st = path.stat()
        except OSError:
            continue
        entries.append((str(path.relative_to(folder)), st.st_mtime_ns, st.st_size))
    return tuple(entries)


_REPORTS: dict[tuple[str, tuple[tuple[str, int, int], ...]], Report] = {}
"""A pack's validation report per version of its files: every new Agent loads its pack, and
validating is most of that."""


def _validated(folder: Path, stamp: tuple[tuple[str, int, int], ...]) -> Report:
    key = (str(folder), stamp)
    report = _REPORTS.get(key)
    if report is None:
        report = validate(folder)
        if len(_REPORTS) >= 256:
            _REPORTS.clear()
        _REPORTS[key] = report
    return report


def load_pack(folder: Path, *, builtin: bool = False) -> RolePack:
    """Load one pack: validate, log problems, refuse red-line companion packs."""
    stamp = fingerprint(folder)
    report = _validated(folder, stamp)
    if report.refused:
        raise MemoraError(
            ErrorCode.INVALID_CONFIG,
            f"role pack at {folder} is refused: "
            + "; ".join(f"{i.path}: {i.message}" for i in report.errors),
            context={"path": str(folder), "errors": [i.to_dict() for i in report.errors]},
        )
    for issue in report.errors:
        logger.warning(
            "role pack %s: %s: %s (loaded with runtime fallbacks)",
            folder.name,
            issue.path,
            issue.message,
        )
    manifest = read_manifest(folder)
    declared = manifest.get("name")
    name = declared if isinstance(declared, str) and declared.strip() else folder.name
    return RolePack(
        name=name,
        folder=folder,
        manifest=manifest,
        report=report,
        builtin=builtin,
        stamp=stamp,
    )


def pack_folders(root: Path) -> list[tuple[str, Path]]:
    """``(name, folder)`` of every pack under ``root``, in folder order (its manifest's
    ``name``, else the folder's)."""
    if not root.is_dir():
        return []
    out = []
    for folder in sorted(root.iterdir()):
        if not inside(folder, folder / "manifest.json"):
            continue
        name = read_manifest(folder).get("name")
        out.append((name if isinstance(name, str) and name.strip() else folder.name, folder))
    return out


# What ships with memora is part of the installed package, like its code: read once per
# process, where the packs of the user and the project are read again by every session (a
# session opened after an edit sees it).  A server opens an Agent per session: the built-in
# pack's files were most of that.
@cache
def builtin_folders() -> tuple[tuple[str, Path], ...]:
    return tuple(pack_folders(BUILTIN_DIR))


@cache
def builtin_pack(folder: Path) -> RolePack:
    return load_pack(folder, builtin=True)
