"""Role-pack manager: scan packs, list metadata, activate one, assemble the system prompt.

Packs live in ``<config_dir>/role-packs/<name>/`` (plus any extra roots a host passes).  Scanning
reads nothing but folder names; :meth:`RolePackManager.list_meta` reads only manifests; persona,
rules and skills are read when a pack is activated, and skill bodies only when a skill is used.
Switching is manual (:meth:`RolePackManager.activate`); there is no automatic matching.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from ..errors import ErrorCode, MemoraError
from ..events import EventEmitter, RolePackSwitched
from ..messages import Messages
from .skills import Skill, merge_skills, scan_skills
from .strategy import EffectiveStrategy, resolve_strategy
from .text import clamp_traits, parse_front_matter, parse_rules
from .validator import LIMITS, Report, validate

__all__ = ["BUILTIN_FALLBACK", "RolePack", "RolePackManager", "RolePackMeta"]

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

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "displayName": self.display_name,
            "description": self.description,
            "version": self.version,
            "interactionType": self.interaction_type,
            "handoffPrompt": self.handoff_prompt,
            "capabilities": list(self.capabilities),
            "path": self.path,
            "builtin": self.builtin,
            "active": self.active,
        }


def _read_manifest(folder: Path) -> dict[str, Any]:
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
    _skills: dict[str, Skill] | None = field(default=None, repr=False)

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
        if not path.is_file():
            return ""
        return parse_front_matter(path.read_text(encoding="utf-8")).body.strip()

    @cached_property
    def traits(self) -> dict[str, float]:
        path = self.folder / "persona.md"
        if not path.is_file():
            return {}
        fm = parse_front_matter(path.read_text(encoding="utf-8"))
        return clamp_traits(fm.data.get("traits"))[0]

    @cached_property
    def rules(self) -> list[str]:
        path = self.folder / "rules.md"
        if not path.is_file():
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
            self._skills = scan_skills(self.folder / "skills", "pack", whitelist)
        return self._skills

    def meta(self, active: bool) -> RolePackMeta:
        return _meta(self.name, self.folder, self.manifest, self.builtin, active)


def _meta(
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
    )


def load_pack(folder: Path, *, builtin: bool = False) -> RolePack:
    """Load one pack: validate, log problems, refuse red-line companion packs."""
    report = validate(folder)
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
    manifest = _read_manifest(folder)
    declared = manifest.get("name")
    name = declared if isinstance(declared, str) and declared.strip() else folder.name
    return RolePack(name=name, folder=folder, manifest=manifest, report=report, builtin=builtin)


class RolePackManager:
    """Owns the role packs of one Agent."""

    def __init__(
        self,
        config_dir: Path | None = None,
        *,
        pack_roots: Sequence[Path] = (),
        active: str | None = None,
        fallback_role: str | None = None,
        disabled_skills: Iterable[str] = (),
        project_path: Path | None = None,
        strategy_override: Mapping[str, Any] | None = None,
        events: EventEmitter | None = None,
        messages: Messages | None = None,
    ) -> None:
        roots = [Path(config_dir) / "role-packs"] if config_dir is not None else []
        roots.extend(Path(p) for p in pack_roots)
        self._roots = roots
        self._config_dir = Path(config_dir) if config_dir is not None else None
        self._requested = active
        self._fallback_role = fallback_role
        self._disabled = frozenset(disabled_skills)
        self._project = Path(project_path) if project_path is not None else None
        self._override = strategy_override
        self.events = events or EventEmitter()
        self.messages = messages or Messages()
        self._folders: dict[str, tuple[Path, bool]] | None = None
        self._loaded: dict[str, RolePack] = {}
        self._active: RolePack | None = None
        self._strategy: EffectiveStrategy | None = None
        self._prompt: str | None = None
        self._skills: dict[str, Skill] | None = None

    # -- discovery ----------------------------------------------------------------------------

    def _scan(self) -> dict[str, tuple[Path, bool]]:
        if self._folders is None:
            found: dict[str, tuple[Path, bool]] = {}
            for root in [*self._roots, BUILTIN_DIR]:
                builtin = root == BUILTIN_DIR
                if not root.is_dir():
                    continue
                for folder in sorted(root.iterdir()):
                    if not (folder / "manifest.json").is_file():
                        continue
                    name = _read_manifest(folder).get("name")
                    key = name if isinstance(name, str) and name.strip() else folder.name
                    if key in found:
                        logger.warning(
                            "role pack %r at %s shadowed by %s", key, folder, found[key][0]
                        )
                        continue
                    found[key] = (folder, builtin)
            self._folders = found
        return self._folders

    def rescan(self) -> None:
        """Forget what was scanned (packs added or removed on disk)."""
        self._folders = None

    def names(self) -> list[str]:
        return sorted(self._scan())

    def list_meta(self) -> list[RolePackMeta]:
        """Every pack's metadata, read from manifest.json only (incl. ``handoffPrompt``)."""
        active = self._active.name if self._active else None
        out = []
        for name, (folder, builtin) in sorted(self._scan().items()):
            out.append(_meta(name, folder, _read_manifest(folder), builtin, name == active))
        return out

    def get(self, name: str) -> RolePack:
        pack = self._loaded.get(name)
        if pack is None:
            entry = self._scan().get(name)
            if entry is None:
                raise MemoraError(
                    ErrorCode.NOT_FOUND,
                    f"no role pack named {name!r}; available: {', '.join(self.names()) or 'none'}",
                    context={"name": name, "available": self.names()},
                )
            pack = load_pack(entry[0], builtin=entry[1])
            self._loaded[name] = pack
        return pack

    # -- activation ------------------------------------------------------------------------------

    def resolve_initial(self) -> RolePack:
        """active_role_pack if it exists, else builtin_fallback_role, else the built-in pack."""
        names = self._scan()
        for candidate, label in (
            (self._requested, "active_role_pack"),
            (self._fallback_role, "builtin_fallback_role"),
        ):
            if candidate:
                if candidate in names:
                    return self._set_active(self.get(candidate))
                logger.warning("%s %r does not exist; trying the next fallback", label, candidate)
        return self._set_active(self.get(BUILTIN_FALLBACK))

    def activate(self, name: str) -> RolePack:
        """Switch the active pack (emits ``RolePackSwitched``)."""
        previous = self._active.name if self._active else None
        pack = self._set_active(self.get(name))
        self.events.emit(RolePackSwitched(previous, pack.name))
        return pack

    def _set_active(self, pack: RolePack) -> RolePack:
        strategy, issues = resolve_strategy(pack.strategy_raw, self._override)
        for issue in issues:
            if issue.path.startswith("strategy_override"):
                logger.warning("%s: %s (ignored)", issue.path, issue.message)
        self._active = pack
        self._strategy = strategy
        self._prompt = None
        self._skills = None
        return pack

    @property
    def active(self) -> RolePack:
        if self._active is None:
            return self.resolve_initial()
        return self._active

    @property
    def strategy(self) -> EffectiveStrategy:
        if self._strategy is None:
            self.resolve_initial()
        assert self._strategy is not None
        return self._strategy

    # -- skills and prompt -----------------------------------------------------------------------

    def skills(self) -> dict[str, Skill]:
        """Global pool < active pack < project skills, minus ``disabled_skills``."""
        if self._skills is None:
            global_skills = (
                scan_skills(self._config_dir / "skills", "global") if self._config_dir else {}
            )
            project_skills = (
                scan_skills(self._project / ".memora" / "skills", "project")
                if self._project
                else {}
            )
            self._skills = merge_skills(
                global_skills, self.active.skills(), project_skills, disabled=self._disabled
            )
        return self._skills

    def skill(self, name: str) -> Skill:
        skills = self.skills()
        if name not in skills:
            from ..errors import ToolError, ToolErrorCode

            raise ToolError(
                ToolErrorCode.FILE_NOT_FOUND,
                f"no skill named {name!r}; available: {', '.join(skills) or 'none'}",
            )
        return skills[name]

    def project_rules(self) -> list[str]:
        if self._project is None:
            return []
        folder = self._project / ".memora" / "rules"
        rules: list[str] = []
        if folder.is_dir():
            for path in sorted(folder.glob("*.md")):
                try:
                    rules.extend(parse_rules(path.read_text(encoding="utf-8")))
                except (OSError, UnicodeDecodeError) as exc:
                    logger.warning("project rules %s cannot be read: %s", path, exc)
        return rules

    def system_prompt_for(self, name: str) -> str:
        """The system prompt of another pack (a team member assembling a plan item), with this
        manager's project rules and the member's own skills; the active pack is unchanged."""
        cache = self.__dict__.setdefault("_member_prompts", {})
        if name not in cache:
            pack = self.get(name)
            strategy, _ = resolve_strategy(pack.strategy_raw, self._override)
            global_skills = (
                scan_skills(self._config_dir / "skills", "global") if self._config_dir else {}
            )
            skills = merge_skills(global_skills, pack.skills(), disabled=self._disabled)
            cache[name] = build_system_prompt(
                pack, strategy, skills, self.project_rules(), self.messages
            )
        return str(cache[name])

    def system_prompt(self) -> str:
        """Persona, rules, project rules, L1 skills and strategy instructions (cached)."""
        if self._prompt is None:
            self._prompt = build_system_prompt(
                self.active, self.strategy, self.skills(), self.project_rules(), self.messages
            )
        return self._prompt


def build_system_prompt(
    pack: RolePack,
    strategy: EffectiveStrategy,
    skills: Mapping[str, Skill],
    project_rules: Sequence[str],
    messages: Messages,
) -> str:
    parts: list[str] = []
    if pack.persona:
        parts.append(pack.persona)
    if pack.rules:
        parts.append("# Rules\n" + "\n".join(f"{i}. {r}" for i, r in enumerate(pack.rules, 1)))
    if project_rules:
        parts.append(
            "# Project rules\n" + "\n".join(f"{i}. {r}" for i, r in enumerate(project_rules, 1))
        )
    if skills and strategy.tool_mode != "block":
        lines = [messages.skills_intro] + [f"- {s.name}: {s.description}" for s in skills.values()]
        parts.append("# Skills\n" + "\n".join(lines))
    guidance: list[str] = []
    if strategy.tool_mode == "block":
        guidance.append(messages.no_tools_instruction)
    else:
        if strategy.tool_readonly:
            guidance.append(messages.readonly_instruction)
        guidance.append(
            messages.manual_plan_instruction
            if strategy.multi_step_reasoning == "manual"
            else messages.auto_plan_instruction
        )
        if strategy.asks_user:
            situations = ", ".join(s.replace("_", " ") for s in strategy.ask_on)
            guidance.append(
                messages.render(
                    "ask_user_instruction", situations=situations, limit=strategy.ask_limit
                )
            )
    parts.append("# Working strategy\n" + "\n".join(f"- {g}" for g in guidance))
    return "\n\n".join(parts)
