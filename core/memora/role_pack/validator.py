"""Validate a role pack folder: errors and warnings, each naming the JSON path and what is legal.

:func:`validate` never raises, whatever the manifest or the files contain; a pack with errors
may still be loaded (with runtime fallbacks), except when a companion pack contains red-line
wording, which the loader refuses.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..capabilities import CAPABILITY_PATTERN
from ..security.paths import stays_within
from .strategy_keys import STAGES, keys_by_stage
from .text import KEBAB_NAME, clamp_traits, extract_skill_references, parse_front_matter

__all__ = [
    "LIMITS",
    "RED_LINE_TERMS",
    "Issue",
    "Report",
    "check_references",
    "find_red_lines",
    "validate",
    "validate_manifest",
]

SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)


@dataclass(frozen=True)
class _Limits:
    """Size limits of a role pack's parts (counts and characters)."""

    skills: int = 50
    capabilities: int = 50
    handoff_prompt: int = 2000
    meta_string: int = 200
    rule: int = 2000
    skill_description: int = 1024


LIMITS = _Limits()

TOP_LEVEL_KEYS = (
    "name",
    "displayName",
    "description",
    "version",
    "formatVersion",
    "author",
    "interactionType",
    "aiIdentityDisclosure",
    "minorProtection",
    "handoffPrompt",
    "skills",
    "capabilities",
    "strategy",
)
META_STRINGS = ("name", "displayName", "description", "author")

RED_LINE_TERMS: tuple[str, ...] = (
    # Chinese: virtual relatives and partners
    "虚拟女友",
    "虚拟男友",
    "虚拟恋人",
    "虚拟伴侣",
    "虚拟老婆",
    "虚拟老公",
    "虚拟妻子",
    "虚拟丈夫",
    "虚拟爱人",
    "虚拟对象",
    "虚拟亲人",
    "虚拟家人",
    "虚拟妈妈",
    "虚拟爸爸",
    "虚拟母亲",
    "虚拟父亲",
    "虚拟儿子",
    "虚拟女儿",
    "虚拟奶奶",
    "虚拟爷爷",
    "ai女友",
    "ai男友",
    "ai恋人",
    "ai伴侣",
    # English
    "virtual girlfriend",
    "virtual boyfriend",
    "virtual partner",
    "virtual lover",
    "virtual wife",
    "virtual husband",
    "virtual spouse",
    "virtual mother",
    "virtual father",
    "virtual mom",
    "virtual dad",
    "virtual son",
    "virtual daughter",
    "virtual family member",
    "virtual relative",
    "ai girlfriend",
    "ai boyfriend",
    "ai wife",
    "ai husband",
)
"""Wording a companion pack may not contain: it must not pose as a relative or partner."""


@dataclass(frozen=True, slots=True)
class Issue:
    """One problem found in a role pack: where (``path``) and what."""

    path: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message}


@dataclass
class Report:
    """What validating one role pack found: errors, warnings, and whether it must be refused."""

    path: str
    name: str | None = None
    errors: list[Issue] = field(default_factory=list)
    warnings: list[Issue] = field(default_factory=list)
    refused: bool = False
    """The loader must refuse this pack (companion red-line wording)."""

    @property
    def ok(self) -> bool:
        return not self.errors

    def error(self, path: str, message: str) -> None:
        self.errors.append(Issue(path, message))

    def warn(self, path: str, message: str) -> None:
        self.warnings.append(Issue(path, message))

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "name": self.name,
            "errors": [i.to_dict() for i in self.errors],
            "warnings": [i.to_dict() for i in self.warnings],
        }


def _type_name(value: Any) -> str:
    return {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def find_red_lines(text: str) -> list[str]:
    lowered = text.lower()
    return [term for term in RED_LINE_TERMS if term in lowered]


_MAX_TEXT_BYTES = 4 * 1024 * 1024


def _read_text(path: Path, report: Report, rel: str, root: Path) -> str | None:
    """A pack's text file, or None with an error in ``report``.  Opened without blocking and
    read only when it is a regular file: a FIFO planted as a skill would hang the reader.  A
    link that leads outside the pack (``root``) is an error, as the loader does not read it."""
    if not stays_within(path, root):
        report.error(
            rel, "is a link that leads outside the role pack; a pack reads only its own files"
        )
        return None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        report.error(rel, f"cannot be read: {exc.strerror or exc}")
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            report.error(rel, "is not a regular file (a FIFO, a device or a socket); remove it")
            return None
        if st.st_size > _MAX_TEXT_BYTES:
            report.error(rel, f"has {st.st_size:,} bytes; the limit is {_MAX_TEXT_BYTES:,}")
            return None
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(_MAX_TEXT_BYTES + 1)
    except OSError as exc:
        report.error(rel, f"cannot be read: {exc.strerror or exc}")
        return None
    finally:
        os.close(fd)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        report.error(rel, "is not UTF-8 text; save it as UTF-8")
        return None
    return text


def _surrogate_at(value: Any, path: str) -> str | None:
    """The dotted path of the first string in ``value`` holding a lone surrogate (a JSON or YAML
    escape such as ``\\ud800``: not a character, it cannot be sent to a model or printed)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path or "(root)"
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            found = _surrogate_at(k, path) or _surrogate_at(v, f"{path}.{k}" if path else str(k))
            if found:
                return found
    if isinstance(value, list):
        for i, v in enumerate(value):
            found = _surrogate_at(v, f"{path}[{i}]")
            if found:
                return found
    return None


def _check_unicode(value: Any, rel: str, report: Report) -> bool:
    where = _surrogate_at(value, "")
    if where is None:
        return True
    report.error(
        rel if where == "(root)" else f"{rel}:{where}",
        "holds a lone surrogate (an escape like \\ud800 that is not a character): remove it",
    )
    return False


def validate_manifest(data: Any, report: Report, *, folder: Path | None = None) -> None:
    """Check a parsed manifest (any JSON value) and add issues to ``report``."""
    if not isinstance(data, dict):
        report.error("manifest.json", f"must be a JSON object, not {_type_name(data)}")
        return
    for key in data:
        if key not in TOP_LEVEL_KEYS:
            report.warn(
                str(key),
                f"unknown top-level key {str(key)!r} is ignored; legal keys: "
                + ", ".join(TOP_LEVEL_KEYS),
            )
    _check_name_and_meta(data, report)
    _check_versions(data, report)
    interaction = data.get("interactionType", "tool_assistant")
    _check_interaction(data, interaction, report)
    _check_handoff(data, report)
    _check_skills_list(data.get("skills"), "skills" in data, report, folder)
    _check_capabilities(data.get("capabilities"), "capabilities" in data, report)
    if "strategy" in data:
        _check_strategy(data["strategy"], report)
    if interaction == "companion":
        _check_companion(data, report)


def _check_name_and_meta(data: dict[str, Any], report: Report) -> None:
    name = data.get("name")
    if "name" not in data:
        report.error("name", "is missing; it is required (the pack's unique id, ≤200 characters)")
    elif not isinstance(name, str) or not name.strip():
        report.error("name", f"must be a non-empty string, not {_type_name(name)}")
    else:
        report.name = name
    for key in META_STRINGS:
        value = data.get(key)
        if key in data and key != "name" and not isinstance(value, str):
            report.error(key, f"must be a string, not {_type_name(value)}")
        elif isinstance(value, str) and len(value) > LIMITS.meta_string:
            report.error(key, f"has {len(value)} characters; the limit is {LIMITS.meta_string}")


def _check_versions(data: dict[str, Any], report: Report) -> None:
    if "version" in data:
        v = data["version"]
        if not isinstance(v, str):
            report.error("version", f"must be a string, not {_type_name(v)}")
        elif not SEMVER.match(v):
            report.warn("version", f"{v!r} is not semver (MAJOR.MINOR.PATCH, e.g. 1.0.0)")
    if "formatVersion" in data:
        fv = data["formatVersion"]
        if not isinstance(fv, str) or not SEMVER.match(fv):
            report.error("formatVersion", f"{fv!r} is not a semver string such as 1.0.0")


def _check_interaction(data: dict[str, Any], interaction: Any, report: Report) -> None:
    if interaction not in ("tool_assistant", "companion"):
        report.error("interactionType", f"{interaction!r} is not one of tool_assistant / companion")
    if "aiIdentityDisclosure" in data and not isinstance(data["aiIdentityDisclosure"], bool):
        report.error("aiIdentityDisclosure", "must be true or false")
    if "minorProtection" in data and data["minorProtection"] != "required":
        report.error(
            "minorProtection",
            f"{data['minorProtection']!r} is not legal; the only value is 'required'",
        )


def _check_handoff(data: dict[str, Any], report: Report) -> None:
    if "handoffPrompt" not in data:
        return
    handoff = data["handoffPrompt"]
    if not isinstance(handoff, str):
        # the seed: the kernel passes it through; a wrong type does not block loading
        report.warn(
            "handoffPrompt", f"should be a string, not {_type_name(handoff)}; it is ignored"
        )
    elif len(handoff) > LIMITS.handoff_prompt:
        report.error(
            "handoffPrompt",
            f"has {len(handoff)} characters; the limit is {LIMITS.handoff_prompt} "
            "(it is truncated at runtime)",
        )


def _check_companion(data: dict[str, Any], report: Report) -> None:
    if data.get("aiIdentityDisclosure") is not True:
        report.error(
            "aiIdentityDisclosure",
            "a companion pack must declare aiIdentityDisclosure: true explicitly",
        )
    if data.get("minorProtection") != "required":
        report.error(
            "minorProtection",
            "a companion pack must declare minorProtection: 'required' explicitly",
        )
    for key in ("displayName", "description", "handoffPrompt"):
        value = data.get(key)
        if isinstance(value, str):
            _red_lines(value, key, report)


def _red_lines(text: str, path: str, report: Report) -> None:
    hits = find_red_lines(text)
    if hits:
        report.refused = True
        report.error(
            path,
            "companion content must not present the AI as a virtual relative or partner "
            f"(found: {', '.join(hits)}); the pack is refused",
        )


def _check_skills_list(value: Any, present: bool, report: Report, folder: Path | None) -> None:
    if not present:
        return
    if not isinstance(value, list):
        report.error(
            "skills", f"must be a list of {{file, name?, description?}}, not {_type_name(value)}"
        )
        return
    if len(value) > LIMITS.skills:
        report.error("skills", f"has {len(value)} entries; the limit is {LIMITS.skills}")
    for i, entry in enumerate(value[: LIMITS.skills + 1]):
        path = f"skills[{i}]"
        if not isinstance(entry, dict):
            report.error(
                path, f"must be an object {{file, name?, description?}}, not {_type_name(entry)}"
            )
            continue
        for key in entry:
            if key not in ("file", "name", "description"):
                report.warn(
                    f"{path}.{key}", "unknown key is ignored; legal: file, name, description"
                )
        file = entry.get("file")
        if not isinstance(file, str) or not file.strip():
            report.error(f"{path}.file", "is required: the skill's file or folder under skills/")
            continue
        for key in ("name", "description"):
            if key in entry and not isinstance(entry[key], str):
                report.error(f"{path}.{key}", f"must be a string, not {_type_name(entry[key])}")
        if folder is not None:
            rel = file.strip().removeprefix("skills/").rstrip("/")
            target = folder / "skills" / rel
            exists = False
            try:
                exists = (
                    target.is_file()
                    or (target / "SKILL.md").is_file()
                    or (folder / "skills" / f"{rel}.md").is_file()
                )
            except (OSError, ValueError):
                exists = False
            if not exists or ".." in Path(rel).parts:
                report.error(
                    f"{path}.file",
                    f"{file!r} is not a skill in skills/ (expected skills/<name>.md or "
                    "skills/<name>/SKILL.md)",
                )


def _check_capabilities(value: Any, present: bool, report: Report) -> None:
    if not present:
        return
    if not isinstance(value, list):
        report.error(
            "capabilities",
            f"must be a list of {{capability, description?}}, not {_type_name(value)}",
        )
        return
    if len(value) > LIMITS.capabilities:
        report.error(
            "capabilities", f"has {len(value)} entries; the limit is {LIMITS.capabilities}"
        )
    for i, entry in enumerate(value[: LIMITS.capabilities + 1]):
        path = f"capabilities[{i}]"
        if not isinstance(entry, dict):
            report.error(
                path, f"must be an object {{capability, description?}}, not {_type_name(entry)}"
            )
            continue
        for key in entry:
            if key not in ("capability", "description"):
                report.warn(
                    f"{path}.{key}", "unknown key is ignored; legal: capability, description"
                )
        cap = entry.get("capability")
        if not isinstance(cap, str) or not CAPABILITY_PATTERN.match(cap):
            report.error(
                f"{path}.capability",
                f"{cap!r} is not a capability; use lowercase domain:action, e.g. web:search",
            )
        if "description" in entry and not isinstance(entry["description"], str):
            report.error(f"{path}.description", "must be a string")


def _check_strategy(strategy: Any, report: Report) -> None:
    if not isinstance(strategy, dict):
        report.error(
            "strategy",
            f"must be an object with stages {', '.join(STAGES)}, not {_type_name(strategy)}",
        )
        return
    table = keys_by_stage()
    for stage, keys in strategy.items():
        if stage not in table:
            report.warn(
                f"strategy.{stage}",
                f"unknown stage {stage!r} is ignored; legal: {', '.join(STAGES)}",
            )
            continue
        if not isinstance(keys, dict):
            report.error(f"strategy.{stage}", f"must be an object, not {_type_name(keys)}")
            continue
        for key, value in keys.items():
            spec = table[stage].get(key)
            if spec is None:
                report.warn(
                    f"strategy.{stage}.{key}",
                    f"unknown strategy key {key!r} is ignored; legal in {stage}: "
                    + ", ".join(table[stage]),
                )
                continue
            problem = spec.check(value)
            if problem:
                report.error(spec.path, problem)


def _check_content(folder: Path, report: Report, companion: bool) -> None:
    for fname in ("persona.md", "rules.md"):
        path = folder / fname
        if not path.is_file():
            continue
        text = _read_text(path, report, fname, folder)
        if text is None:
            continue
        if fname == "persona.md":
            fm = parse_front_matter(text)
            if fm.error:
                report.warn(fname, fm.error)
            _traits, warnings = clamp_traits(fm.data.get("traits"))
            for w in warnings:
                report.warn(f"{fname}:{w.split(' ', 1)[0]}", w)
        if companion:
            _red_lines(text, fname, report)
    skills_dir = folder / "skills"
    if skills_dir.is_dir():
        try:
            entries = sorted(skills_dir.iterdir())
        except OSError as exc:
            report.error("skills/", f"cannot be listed: {exc}")
            return
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if entry.is_dir():
                skill_file, expected = entry / "SKILL.md", entry.name
                rel = f"skills/{entry.name}/SKILL.md"
                if not skill_file.is_file():
                    report.warn(f"skills/{entry.name}", "folder has no SKILL.md; it is not a skill")
                    continue
            elif entry.suffix == ".md":
                skill_file, expected, rel = entry, entry.stem, f"skills/{entry.name}"
            else:
                continue
            text = _read_text(skill_file, report, rel, folder)
            if text is None:
                continue
            check_skill_text(text, expected, rel, report)
            if companion:
                _red_lines(text, rel, report)


def check_skill_text(text: str, expected_name: str, rel: str, report: Report) -> None:
    """Agent Skills format: kebab-case ``name`` equal to the file/folder name, a description."""
    fm = parse_front_matter(text)
    if fm.error:
        report.error(rel, fm.error)
        return
    if not _check_unicode(fm.data, rel, report):
        return
    name, desc = fm.data.get("name"), fm.data.get("description")
    if not KEBAB_NAME.match(expected_name):
        report.error(
            rel, f"skill file/folder name {expected_name!r} is not kebab-case (a-z, 0-9, -)"
        )
    if name is None:
        report.error(f"{rel}:name", f"front matter needs name: {expected_name}")
    elif name != expected_name:
        report.error(
            f"{rel}:name", f"name {name!r} must equal the file/folder name {expected_name!r}"
        )
    if not isinstance(desc, str) or not desc.strip():
        report.error(
            f"{rel}:description",
            "front matter needs a non-empty description (what the skill is for and when to use it)",
        )
    elif len(desc) > 1024:
        report.error(f"{rel}:description", f"has {len(desc)} characters; the limit is 1024")


def validate(path: str | Path, data: Mapping[str, Any] | None = None) -> Report:
    """Validate the role pack folder at ``path``.  Never raises."""
    folder = Path(path)
    report = Report(str(folder))
    try:
        if data is None:
            manifest = folder / "manifest.json"
            if not manifest.is_file():
                report.error("manifest.json", "is missing; every role pack needs one")
                return report
            try:
                raw = manifest.read_bytes().decode("utf-8-sig")
                parsed = json.loads(raw)
            except UnicodeDecodeError:
                report.error("manifest.json", "is not UTF-8 text")
                return report
            except json.JSONDecodeError as exc:
                report.error(
                    "manifest.json",
                    f"is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
                )
                return report
        else:
            parsed = dict(data)
        if not _check_unicode(parsed, "manifest.json", report):
            report.name = report.name or folder.name
            return report
        validate_manifest(parsed, report, folder=folder)
        companion = isinstance(parsed, dict) and parsed.get("interactionType") == "companion"
        _check_content(folder, report, companion)
        if report.name is None and isinstance(parsed, dict):
            report.name = folder.name
    except RecursionError:
        report.error("manifest.json", "is nested too deeply")
    except Exception as exc:  # the validator must never raise
        report.error("manifest.json", f"could not be validated: {type(exc).__name__}: {exc}")
    return report


def check_references(folder: str | Path, extra_skills: set[str] | None = None) -> Report:
    """Both directions of the skill-reference check for one pack.

    Every skill in ``skills/`` must be referenced at least once from ``persona.md`` /
    ``rules.md`` (as a back-quoted name), and every reference must name a real skill.
    """
    folder = Path(folder)
    report = Report(str(folder), folder.name)
    try:
        skills = set(_pack_skill_names(folder))
        refs: dict[str, list[str]] = {}
        for fname in ("persona.md", "rules.md"):
            path = folder / fname
            if path.is_file():
                text = _read_text(path, report, fname, folder)
                if text is not None:
                    for ref in extract_skill_references(text):
                        refs.setdefault(ref, []).append(fname)
        known = skills | (extra_skills or set())
        for skill in sorted(skills):
            if skill not in refs:
                report.error(
                    f"skills/{skill}",
                    f"skill {skill!r} is never referenced; name it as `{skill}` in persona.md "
                    "or rules.md where it should be used",
                )
        for ref, where in sorted(refs.items()):
            if ref not in known:
                report.error(
                    where[0],
                    f"`{ref}` is written as a skill reference but no skill {ref!r} exists "
                    "(back-quoted kebab words are skill references)",
                )
    except Exception as exc:
        report.error("skills/", f"could not be checked: {type(exc).__name__}: {exc}")
    return report


def _pack_skill_names(folder: Path) -> list[str]:
    skills_dir = folder / "skills"
    names: list[str] = []
    if not skills_dir.is_dir():
        return names
    for entry in sorted(skills_dir.iterdir()):
        if entry.is_dir() and (entry / "SKILL.md").is_file():
            names.append(entry.name)
        elif entry.is_file() and entry.suffix == ".md":
            names.append(entry.stem)
    return names
