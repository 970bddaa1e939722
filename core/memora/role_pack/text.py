"""Plain-text parsing for role packs: front matter, ``rules.md`` and skill references.

One extractor (:func:`extract_skill_references`) serves both directions of the reference check.
"""

from __future__ import annotations

import logging
import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..security.paths import stays_within
from ..security.state import warn_once

_log = logging.getLogger("memora.role_pack")


def inside(root: Path, path: Path) -> bool:
    """True when ``path`` is a regular file that stays inside ``root`` once links are followed.

    A role pack is text a project (a cloned repository) may bring: a ``persona.md`` or a skill
    that is a link to ``~/.ssh/id_rsa`` would put that file in the prompt sent to the model.
    Links inside the pack are fine; one that leaves it is not read (one warning names it)."""
    if not stays_within(path, root):
        warn_once(
            _log,
            path,
            "%s leads outside %s: not read (a role pack reads its own files)",
            path,
            root,
        )
        return False
    return os.path.isfile(path)


__all__ = [
    "KEBAB_NAME",
    "FrontMatter",
    "clamp_traits",
    "extract_skill_references",
    "parse_front_matter",
    "parse_rules",
]

KEBAB_NAME = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_REFERENCE = re.compile(r"(?<!`)`([a-z0-9]+(?:-[a-z0-9]+)*)`(?!`)")
_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^\s{0,3}#{1,6}(\s|$)")
_HRULE = re.compile(r"^\s{0,3}([-*_])(\s*\1){2,}\s*$")
_LIST_ITEM = re.compile(r"^\s*(?:(?:[-*+]|\d{1,9}[.)])\s+|\d{1,9}、\s*)(.*)$")
_TABLE = re.compile(r"^\s*\|")
_QUOTE = re.compile(r"^\s{0,3}>\s?")


@dataclass(frozen=True, slots=True)
class FrontMatter:
    """A Markdown file split into its YAML front matter and its body."""

    data: dict[str, Any]
    body: str
    error: str | None = None
    """Why the front matter could not be parsed (the body is then the whole text)."""


MAX_FRONT_MATTER = 64 * 1024


def _load_yaml(raw: str) -> Any:
    """``yaml.safe_load`` without anchors and aliases: a few lines of aliases expand into
    billions of nodes (a "billion laughs"), and front matter never needs them."""
    import yaml

    class NoAliases(yaml.SafeLoader):  # type: ignore[misc]
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                mark = self.peek_event().start_mark
                raise yaml.composer.ComposerError(
                    None, None, "aliases (*name) are not allowed in front matter", mark
                )
            return super().compose_node(parent, index)

    return yaml.load(raw, Loader=NoAliases)


def parse_front_matter(text: str) -> FrontMatter:
    """Split ``---``-delimited YAML front matter from the body.  Never raises."""
    text = text.lstrip("\ufeff")
    if not text.startswith("---"):
        return FrontMatter({}, text)
    lines = text.split("\n")
    if lines[0].strip() != "---":
        return FrontMatter({}, text)
    for i in range(1, len(lines)):
        if lines[i].strip() in ("---", "..."):
            raw = "\n".join(lines[1:i])
            body = "\n".join(lines[i + 1 :])
            if len(raw) > MAX_FRONT_MATTER:
                return FrontMatter(
                    {}, body, f"front matter is longer than {MAX_FRONT_MATTER} characters"
                )
            try:
                data = _load_yaml(raw) if raw.strip() else {}
            except Exception as exc:
                return FrontMatter({}, body, f"front matter is not valid YAML: {exc}")
            if data is None:
                data = {}
            if not isinstance(data, dict):
                return FrontMatter({}, body, "front matter must be a mapping of keys to values")
            return FrontMatter({str(k): v for k, v in data.items()}, body)
    return FrontMatter({}, text, "front matter starts with --- but is never closed")


def clamp_traits(raw: Any) -> tuple[dict[str, float], list[str]]:
    """``traits.*`` numbers clamped to [0, 1]; returns (traits, warnings)."""
    traits: dict[str, float] = {}
    warnings: list[str] = []
    if raw is None:
        return traits, warnings
    if not isinstance(raw, dict):
        return traits, ["traits must be a mapping of names to numbers between 0 and 1"]
    for key, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            warnings.append(f"traits.{key} = {value!r} is not a number; ignored")
            continue
        clamped = min(1.0, max(0.0, float(value)))
        if clamped != value:
            warnings.append(f"traits.{key} = {value} clamped to {clamped} (legal: 0–1)")
        traits[str(key)] = clamped
    return traits, warnings


def _is_cjk(ch: str) -> bool:
    return unicodedata.east_asian_width(ch) in ("W", "F")


def _join(parts: list[str]) -> str:
    out = ""
    for part in parts:
        part = " ".join(part.split())
        if not part:
            continue
        if out and not (_is_cjk(out[-1]) and _is_cjk(part[0])):
            out += " "
        out += part
    return out


class _Rule:
    """The rule being read: its pieces of text and the (first, last) line they came from."""

    __slots__ = ("first", "last", "parts")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.first = self.last = -1

    def add(self, part: str, index: int) -> None:
        if self.first < 0:
            self.first = index
        self.last = index
        self.parts.append(part)


def rule_spans(text: str) -> list[tuple[int, int, str]]:  # noqa: C901 - one branch per construct of rules.md, read line by line; split, its state (fence, comment, list item) would travel between functions
    """Parse ``rules.md`` into rules, each with the (first, last) line index it came from.

    * each list line (``-``, ``*``, ``+``, ``1.``, ``1)``, ``1、``) is one rule; indented lines
      under it continue it;
    * consecutive paragraph lines merge into one rule;
    * blockquotes (``>``) are unwrapped and treated as paragraph lines;
    * headings, fenced code, HTML comments, tables and horizontal rules are not rules; they (and
      blank lines) end the current rule.
    """
    rules: list[tuple[int, int, str]] = []
    current = _Rule()
    in_list_item = False
    fence: str | None = None
    in_comment = False

    def flush() -> None:
        nonlocal current, in_list_item
        joined = _join(current.parts)
        if joined:
            rules.append((current.first, current.last, joined))
        current = _Rule()
        in_list_item = False

    for index, raw_line in enumerate(text.lstrip("\ufeff").splitlines()):
        line = raw_line.rstrip()
        if fence is not None:
            m = _FENCE.match(line)
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            continue
        if in_comment:
            if "-->" in line:
                in_comment = False
                rest = line.split("-->", 1)[1]
                if rest.strip():
                    flush()
                    current.add(rest, index)
            continue
        m = _FENCE.match(line)
        if m:
            flush()
            fence = m.group(1)
            continue
        if "<!--" in line:
            before, after = line.split("<!--", 1)
            if "-->" in after:
                line = before + after.split("-->", 1)[1]
                if not line.strip():
                    flush()
                    continue
            else:
                if before.strip():
                    current.add(before, index)
                flush()
                in_comment = True
                continue
        if not line.strip() or _HEADING.match(line) or _HRULE.match(line) or _TABLE.match(line):
            flush()
            continue
        quoted = False
        while _QUOTE.match(line):
            line = _QUOTE.sub("", line, count=1)
            quoted = True
        if quoted:
            if not line.strip():
                flush()
                continue
            if in_list_item:
                flush()
            current.add(line, index)
            continue
        item = _LIST_ITEM.match(line)
        if item:
            flush()
            current.add(item.group(1), index)
            in_list_item = True
            continue
        if in_list_item and not raw_line[:1].isspace():
            flush()
        current.add(line, index)
    flush()
    return rules


def parse_rules(text: str) -> list[str]:
    """Parse ``rules.md`` into rules (see :func:`rule_spans` for the grammar)."""
    return [rule for _, _, rule in rule_spans(text)]


def extract_skill_references(text: str) -> list[str]:
    """Back-quoted kebab-case words in persona/rules text, in order, without fenced code."""
    refs: list[str] = []
    fence: str | None = None
    for line in text.splitlines():
        m = _FENCE.match(line)
        if fence is not None:
            if m and m.group(1)[0] == fence[0]:
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        refs.extend(_REFERENCE.findall(line))
    return refs
