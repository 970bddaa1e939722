"""Role-pack manager: scan packs, list metadata, activate one, assemble the system prompt.

Packs live in ``<config_dir>/role-packs/<name>/`` (plus any extra roots a host passes).  Scanning
reads nothing but folder names; :meth:`RolePackManager.list_meta` reads only manifests; persona,
rules and skills are read when a pack is activated, and skill bodies only when a skill is used.
Switching is manual (:meth:`RolePackManager.activate`); there is no automatic matching.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from ..errors import ErrorCode, MemoraError
from ..events import EventEmitter, RolePackSwitched
from ..messages import Messages
from .pack import (
    BUILTIN_DIR,
    BUILTIN_FALLBACK,
    RolePack,
    RolePackMeta,
    builtin_folders,
    builtin_pack,
    fingerprint,
    load_pack,
    pack_folders,
    pack_meta,
    read_manifest,
)
from .skills import Skill, merge_skills, scan_skills
from .strategy import EffectiveStrategy, resolve_strategy
from .text import parse_rules
from .validator import LIMITS, validate

__all__ = ["BUILTIN_FALLBACK", "RolePack", "RolePackManager", "RolePackMeta"]

logger = logging.getLogger("memora.role_pack")


def _rule_text(text: str) -> str:
    rule = " ".join(text.split())
    if not rule:
        raise MemoraError(ErrorCode.INVALID_INPUT, "a rule cannot be empty")
    if len(rule) > LIMITS.rule:
        raise MemoraError(
            ErrorCode.INVALID_INPUT, f"a rule is at most {LIMITS.rule} characters (got {len(rule)})"
        )
    return rule


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
        if project_path is not None:  # the project's own packs (memora init writes one)
            roots.append(Path(project_path) / ".memora" / "role-packs")
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
        self._prompt_for_tools: tuple[frozenset[str], str] | None = None
        self._skills: dict[str, Skill] | None = None
        self.edit_check: Callable[[str, str], bool] | None = None
        """The host's check after each edit (``id`` is ``rule:N`` or ``skill:NAME``,
        ``expected`` is ``exists`` or ``absent``); ``False`` rolls the edit back."""

    # -- discovery ----------------------------------------------------------------------------

    def _scan(self) -> dict[str, tuple[Path, bool]]:
        if self._folders is None:
            found: dict[str, tuple[Path, bool]] = {}
            for root in [*self._roots, BUILTIN_DIR]:
                builtin = root == BUILTIN_DIR
                folders = builtin_folders() if builtin else pack_folders(root)
                for key, folder in folders:
                    if key in found:
                        logger.warning(
                            "role pack %r at %s shadowed by %s", key, folder, found[key][0]
                        )
                        continue
                    found[key] = (folder, builtin)
            self._folders = found
        return self._folders

    def rescan(self) -> None:
        """Forget what was scanned (packs added or removed on disk); changed packs are read
        again the next time they are used."""
        self._folders = None

    def _forget(self, name: str) -> None:
        self._loaded.pop(name, None)
        prompts = self.__dict__.get("_member_prompts", {})
        for key in [k for k in prompts if k[0] == name]:  # one per tool set
            del prompts[key]

    def refresh(self) -> list[str]:
        """Re-read what changed on disk: the list of packs, every loaded pack whose files
        changed, and the active pack (its prompt, strategy and skills are rebuilt and
        ``RolePackSwitched(from_pack=name, to_pack=name, reloaded=True)`` is emitted).  Returns
        the names of the packs that were read again."""
        self.rescan()
        changed = [
            name
            for name, pack in list(self._loaded.items())
            if not pack.builtin and fingerprint(pack.folder) != pack.stamp
        ]
        for name in changed:
            self._forget(name)
        self.__dict__.pop("_member_prompts", None)  # project rules may have changed too
        active = self._active
        if active is not None:
            if active.name not in self._scan():
                logger.warning(
                    "the active role pack %r disappeared; keeping it loaded", active.name
                )
            elif active.name in changed:
                self._set_active(self.get(active.name))
                self.events.emit(RolePackSwitched(active.name, active.name, reloaded=True))
            else:
                self._prompt = None
                self._prompt_for_tools = None
                self._skills = None
        return changed

    # -- editing -------------------------------------------------------------------------------

    def _editable(self, pack_name: str | None) -> RolePack:
        pack = self.get(pack_name) if pack_name else self.active
        if pack.builtin:
            raise MemoraError(
                ErrorCode.INVALID_INPUT,
                f"role pack {pack.name!r} is built in and cannot be edited; copy it into "
                f"{self._roots[0] if self._roots else '<config_dir>/role-packs'} first",
            )
        return pack

    def rules(self, pack_name: str | None = None) -> list[str]:
        """The rules of a pack (the active one by default), numbered from 1 in the API."""
        return list(self.get(pack_name).rules if pack_name else self.active.rules)

    def add_rule(self, text: str, pack_name: str | None = None) -> int:
        """Append a rule to ``rules.md``; returns its number (1-based)."""
        pack = self._editable(pack_name)
        rule = _rule_text(text)
        path = pack.folder / "rules.md"
        current = path.read_text(encoding="utf-8") if path.is_file() else ""
        sep = "" if not current or current.endswith("\n") else "\n"
        self._write_pack_file(
            pack, path, f"{current}{sep}- {rule}\n", f"rule:{len(pack.rules) + 1}", "exists"
        )
        return len(self.get(pack.name).rules)

    def update_rule(self, number: int, text: str, pack_name: str | None = None) -> None:
        """Replace rule ``number`` (1-based) in ``rules.md``; the rest of the file (headings,
        comments, other rules) is kept as it is."""
        pack = self._editable(pack_name)
        rule = _rule_text(text)
        path, lines, (first, last) = self._rule_lines(pack, number)
        indent = lines[first][: len(lines[first]) - len(lines[first].lstrip())]
        lines[first : last + 1] = [f"{indent}- {rule}"]
        self._write_pack_file(pack, path, "\n".join(lines) + "\n", f"rule:{number}", "exists")

    def delete_rule(self, number: int, pack_name: str | None = None) -> None:
        """Remove rule ``number`` (1-based) from ``rules.md``."""
        pack = self._editable(pack_name)
        path, lines, (first, last) = self._rule_lines(pack, number)
        del lines[first : last + 1]
        self._write_pack_file(pack, path, "\n".join(lines) + "\n", f"rule:{number}", "absent")

    def update_skill(
        self, name: str, description: str, body: str, pack_name: str | None = None
    ) -> Path:
        """Create or replace the pack's skill ``name`` (kebab-case) as ``skills/<name>.md`` (or
        its existing ``skills/<name>/SKILL.md``)."""
        from .text import KEBAB_NAME

        pack = self._editable(pack_name)
        if not KEBAB_NAME.match(name):
            raise MemoraError(
                ErrorCode.INVALID_INPUT,
                f"skill name {name!r} must be kebab-case (a-z, 0-9, '-'), e.g. write-tests",
            )
        desc = " ".join(description.split())
        if not desc or len(desc) > LIMITS.skill_description:
            raise MemoraError(
                ErrorCode.INVALID_INPUT,
                f"skill description must be 1–{LIMITS.skill_description} characters on one line",
            )
        folder_skill = pack.folder / "skills" / name / "SKILL.md"
        path = folder_skill if folder_skill.is_file() else pack.folder / "skills" / f"{name}.md"
        text = f"---\nname: {name}\ndescription: {json.dumps(desc, ensure_ascii=False)}\n---\n\n{body.strip()}\n"
        self._write_pack_file(pack, path, text, f"skill:{name}", "exists")
        return path

    def delete_skill(self, name: str, pack_name: str | None = None) -> None:
        """Delete the pack's skill ``name`` (its file, or its folder)."""
        import shutil

        pack = self._editable(pack_name)
        single = pack.folder / "skills" / f"{name}.md"
        folder = pack.folder / "skills" / name
        if single.is_file():
            target: Path = single
        elif (folder / "SKILL.md").is_file():
            target = folder
        else:
            raise MemoraError(
                ErrorCode.NOT_FOUND,
                f"role pack {pack.name!r} has no skill {name!r}; skills: "
                f"{', '.join(sorted(pack.skills())) or 'none'}",
            )
        backup = target.with_name(f".{target.name}.memora-deleted")
        target.rename(backup)  # atomic on one file system; restored if the host says no
        try:
            self._confirm(f"skill:{name}", "absent")
        except BaseException:
            backup.rename(target)
            raise
        if backup.is_dir():
            shutil.rmtree(backup)
        else:
            backup.unlink()
        self._after_edit(pack)

    def _rule_lines(self, pack: RolePack, number: int) -> tuple[Path, list[str], tuple[int, int]]:
        from .text import rule_spans

        path = pack.folder / "rules.md"
        text = path.read_text(encoding="utf-8") if path.is_file() else ""
        spans = rule_spans(text)
        if not 1 <= number <= len(spans):
            raise MemoraError(
                ErrorCode.NOT_FOUND,
                f"role pack {pack.name!r} has {len(spans)} rule(s); there is no rule {number}",
            )
        first, last, _ = spans[number - 1]
        return path, text.lstrip("\ufeff").splitlines(), (first, last)

    def _write_pack_file(
        self, pack: RolePack, path: Path, text: str, item: str, expected: str
    ) -> None:
        """Write atomically, validate the pack, ask the host's check; roll back on refusal."""
        from ..security.atomic import atomic_write_text

        before = path.read_bytes() if path.is_file() else None
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)
        try:
            report = validate(pack.folder)
            if report.refused or report.errors:
                problems = "; ".join(f"{i.path}: {i.message}" for i in report.errors)
                raise MemoraError(
                    ErrorCode.INVALID_CONFIG,
                    f"the edit would make role pack {pack.name!r} invalid ({problems}); nothing was changed",
                    context={"errors": [i.to_dict() for i in report.errors]},
                )
            self._confirm(item, expected)
        except BaseException:
            from ..security.atomic import atomic_write_bytes

            if before is None:
                path.unlink(missing_ok=True)
            else:
                atomic_write_bytes(path, before)
            raise
        self._after_edit(pack)

    def _confirm(self, item: str, expected: str) -> None:
        check = self.edit_check
        if check is not None and not check(item, expected):
            raise MemoraError(
                ErrorCode.CONFLICT,
                f"the host's edit check refused {item} ({expected}); nothing was changed",
                context={"id": item, "expected": expected},
            )

    def _after_edit(self, pack: RolePack) -> None:
        self._forget(pack.name)
        if self._active is not None and self._active.name == pack.name:
            self._set_active(self.get(pack.name))
            self.events.emit(RolePackSwitched(pack.name, pack.name, reloaded=True))

    def names(self) -> list[str]:
        return sorted(self._scan())

    def list_meta(self) -> list[RolePackMeta]:
        """Every pack's metadata, read from manifest.json only (incl. ``handoffPrompt``)."""
        active = self._active.name if self._active else None
        out = []
        for name, (folder, builtin) in sorted(self._scan().items()):
            out.append(pack_meta(name, folder, read_manifest(folder), builtin, name == active))
        return out

    def get(self, name: str) -> RolePack:
        """A loaded pack; read again when its files changed on disk since it was loaded."""
        pack = self._loaded.get(name)
        if pack is not None and not pack.builtin and fingerprint(pack.folder) != pack.stamp:
            self._forget(name)
            pack = None
        if pack is None:
            entry = self._scan().get(name)
            if entry is None:
                raise MemoraError(
                    ErrorCode.NOT_FOUND,
                    f"no role pack named {name!r}; available: {', '.join(self.names()) or 'none'}",
                    context={"name": name, "available": self.names()},
                )
            pack = builtin_pack(entry[0]) if entry[1] else load_pack(entry[0])
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

    @property
    def strategy_override(self) -> Mapping[str, Any] | None:
        """The host's strategy override (the ``strategy_override`` Agent option): it beats every
        pack's own strategy.  Setting it applies from the next :meth:`activate` on (activate the
        current pack again to apply it at once)."""
        return self._override

    @strategy_override.setter
    def strategy_override(self, value: Mapping[str, Any] | None) -> None:
        self._override = value

    def activate(self, name: str) -> RolePack:
        """Switch the active pack (emits ``RolePackSwitched``)."""
        previous = self._active.name if self._active else None
        pack = self._set_active(self.get(name))
        self.events.emit(RolePackSwitched(previous, pack.name))
        return pack

    def _set_active(self, pack: RolePack) -> RolePack:
        strategy, issues = pack.strategy_with(self._override)
        for issue in issues:
            if issue.path.startswith("strategy_override"):
                logger.warning("%s: %s (ignored)", issue.path, issue.message)
        self._active = pack
        self._strategy = strategy
        self._prompt = None
        self._prompt_for_tools = None
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

    def global_skills(self) -> dict[str, Skill]:
        """The global pool: memora's built-in skills (``code-review``, ``summarize``,
        ``web-search``, ``role-pack-creator``) under the user's own ``<config>/skills`` (a user
        skill of the same name wins)."""
        user = scan_skills(self._config_dir / "skills", "global") if self._config_dir else {}
        return merge_skills(builtin_skills(), user)

    def skills(self) -> dict[str, Skill]:
        """Global pool < active pack < project skills, minus ``disabled_skills``."""
        if self._skills is None:
            global_skills = self.global_skills()
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

    def system_prompt_for(self, name: str, *, tools: frozenset[str] | None = None) -> str:
        """The system prompt of another pack (a team member assembling a plan item, or speaking
        in a meeting), with this manager's project rules and the member's own skills; the
        active pack is unchanged.  ``tools``: as for :meth:`system_prompt` — the names of the
        tools the request carries (an empty set for a meeting, which sends none)."""
        cache: dict[tuple[str, frozenset[str] | None], str] = self.__dict__.setdefault(
            "_member_prompts", {}
        )
        key = (name, tools)
        if key not in cache:
            pack = self.get(name)
            strategy, _ = resolve_strategy(pack.strategy_raw, self._override)
            skills = merge_skills(self.global_skills(), pack.skills(), disabled=self._disabled)
            cache[key] = build_system_prompt(
                pack, strategy, skills, self.project_rules(), self.messages, tools=tools
            )
        return cache[key]

    def system_prompt(self, *, tools: frozenset[str] | None = None) -> str:
        """Persona, rules, project rules, L1 skills and strategy instructions (cached).
        ``tools``: the names of the tools sent with the request, when the host knows them —
        the prompt then names only those (none: ``toolMode: block``'s instruction)."""
        if tools is None:
            if self._prompt is None:
                self._prompt = build_system_prompt(
                    self.active, self.strategy, self.skills(), self.project_rules(), self.messages
                )
            return self._prompt
        cached = self._prompt_for_tools
        if cached is None or (cached[0] is not tools and cached[0] != tools):
            prompt = build_system_prompt(
                self.active,
                self.strategy,
                self.skills(),
                self.project_rules(),
                self.messages,
                tools=tools,
            )
            cached = self._prompt_for_tools = (tools, prompt)
        return cached[1]


BUILTIN_SKILLS = Path(__file__).parent / "builtin" / "skills"


def builtin_skills() -> dict[str, Skill]:
    """The global pool's built-in skills, shipped with memora (read once per process: they are
    part of the installed package, like its code)."""
    return dict(_builtin_skills())


@cache
def _builtin_skills() -> dict[str, Skill]:
    return scan_skills(BUILTIN_SKILLS, "global") if BUILTIN_SKILLS.is_dir() else {}


def build_system_prompt(
    pack: RolePack,
    strategy: EffectiveStrategy,
    skills: Mapping[str, Skill],
    project_rules: Sequence[str],
    messages: Messages,
    *,
    tools: Collection[str] | None = None,
) -> str:
    """The system prompt.  ``tools``: the names of the tools the request carries (``None``:
    whatever the strategy exposes); instructions about a tool not sent are left out."""
    parts: list[str] = []

    def sent(name: str) -> bool:
        return tools is None or name in tools

    blocked = strategy.tool_mode == "block" or (tools is not None and not tools)
    if pack.persona:
        parts.append(pack.persona)
    if pack.traits:
        parts.append(
            messages.traits_intro
            + ", ".join(f"{name} {value:g}" for name, value in sorted(pack.traits.items()))
        )
    if pack.rules:
        parts.append("# Rules\n" + "\n".join(f"{i}. {r}" for i, r in enumerate(pack.rules, 1)))
    if project_rules:
        parts.append(
            "# Project rules\n" + "\n".join(f"{i}. {r}" for i, r in enumerate(project_rules, 1))
        )
    if skills and not blocked and sent("read_skill"):
        lines = [messages.skills_intro] + [f"- {s.name}: {s.description}" for s in skills.values()]
        parts.append("# Skills\n" + "\n".join(lines))
    guidance: list[str] = []
    if blocked:
        guidance.append(messages.no_tools_instruction)
    else:
        if strategy.tool_readonly:
            guidance.append(messages.readonly_instruction)
        if strategy.multi_step_reasoning == "manual":
            guidance.append(messages.manual_plan_instruction)
        elif sent("task_table_update"):
            guidance.append(messages.auto_plan_instruction)
        if strategy.asks_user and sent("ask_user"):
            situations = ", ".join(s.replace("_", " ") for s in strategy.ask_on)
            guidance.append(
                messages.render(
                    "ask_user_instruction", situations=situations, limit=strategy.ask_limit
                )
            )
    parts.append("# Working strategy\n" + "\n".join(f"- {g}" for g in guidance))
    return "\n\n".join(parts)
