"""Project trust: what the user said about a project's requests, remembered per project and per
content hash (VS Code's workspace trust, direnv's ``allow``).

A project's ``.memora/config.json`` is a cloned repository's content.  What it may set on its own
is on the allow-list in :mod:`memora.settings`; anything else it names (a program to run, such as
an MCP server's ``command``, a wider sandbox, a plugin option nobody declared safe) is a *request*.
A request takes effect only when the user allowed exactly that content for exactly that project:
change one byte of it and memora asks again.

The answers live in ``<user config dir>/trust.json`` (0600, written atomically)::

    {"projects": {"/abs/project": {"digest": "sha256…", "allow": true, "at": "2026-…Z"}}}
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from .atomic import atomic_write_text

__all__ = [
    "ANY",
    "AtMost",
    "OneOf",
    "ProjectRule",
    "TrustRequest",
    "TrustStore",
    "factory_rules",
    "project_settable",
    "request_digest",
]

_FILE = "trust.json"


class ProjectRule(Protocol):
    """What a project's config may give one option: ``allows(value, current)`` where
    ``current`` is the value from the user's side (None when it sets none)."""

    def allows(self, value: Any, current: Any) -> bool: ...


@dataclass(frozen=True)
class _Any:
    """Any value: the option neither runs anything, widens access nor picks a destination."""

    def allows(self, value: Any, current: Any) -> bool:
        return True

    def __repr__(self) -> str:
        return "ANY"


ANY: ProjectRule = _Any()
"""The rule for an option a project may set to any value."""


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True)
class AtMost:
    """A number no larger than the user's value, or ``limit`` when the user sets none (a
    project may make a limit tighter, never looser)."""

    limit: float

    def allows(self, value: Any, current: Any) -> bool:
        ceiling = current if _number(current) else self.limit
        return _number(value) and value <= ceiling


@dataclass(frozen=True)
class OneOf:
    """One of ``values`` (``OneOf(True)`` for a switch a project may only turn on)."""

    values: tuple[Any, ...]

    def __init__(self, *values: Any) -> None:
        object.__setattr__(self, "values", values)

    def allows(self, value: Any, current: Any) -> bool:
        return any(value == v and type(value) is type(v) for v in self.values)


Rules = Mapping[str, ProjectRule]

_F = TypeVar("_F")


def project_settable(
    factory: _F, rules: Mapping[str, ProjectRule] | None = None, /, **named: ProjectRule
) -> _F:
    """Declare which of a factory's options a project's config may set, and how:
    ``register("fetch", project_settable(factory, timeout=AtMost(60), user_agent=ANY))``.
    Options not declared come from the user's side only (or a project the user trusts).
    Returns ``factory`` (the rules ride on its ``project_options`` attribute)."""
    setattr(factory, "project_options", {**(rules or {}), **named})  # noqa: B010
    return factory


def factory_rules(factory: Any) -> Rules:
    """The project rules a factory declared (none: an empty mapping)."""
    rules = getattr(factory, "project_options", None)
    return dict(rules) if isinstance(rules, Mapping) else {}


def request_digest(requests: Mapping[str, Any]) -> str:
    """The SHA-256 of the requests in a canonical form (sorted keys, no spaces): the same content
    gives the same digest wherever the keys stand in the file."""
    canonical = json.dumps(
        dict(requests), sort_keys=True, ensure_ascii=False, separators=(",", ":")
    )
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class TrustRequest:
    """What a project's config asks for beyond its allow-list, handed to a host's
    ``project_trust`` callback: it returns True (allow), False (refuse) — both remembered for
    this content — or None (not now: nothing remembered, the requests stay off)."""

    project: Path
    """The project folder (absolute)."""
    path: Path
    """The project config file that holds the requests."""
    requests: dict[str, Any] = field(default_factory=dict)
    """Dotted key (``plugins.mcp.servers``) -> the value the project wants."""
    digest: str = ""
    """:func:`request_digest` of :attr:`requests`; an answer is remembered for this value."""

    def describe(self) -> list[str]:
        """One line per request, ``key = value`` (values as compact JSON)."""
        return [
            f"{key} = {json.dumps(value, ensure_ascii=False, sort_keys=True)}"
            for key, value in sorted(self.requests.items())
        ]


class TrustStore:
    """The user's answers, one per project folder (the newest replaces the older)."""

    def __init__(self, user_dir: Path) -> None:
        self.path = Path(user_dir) / _FILE

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):
            # a damaged file trusts nothing (stricter), and is replaced on the next answer
            return {}
        projects = data.get("projects") if isinstance(data, dict) else None
        return dict(projects) if isinstance(projects, dict) else {}

    def decision(self, project: Path, digest: str) -> bool | None:
        """True / False when the user answered for this project and this content, else None."""
        entry = self._read().get(str(Path(project).absolute()))
        if not isinstance(entry, dict) or entry.get("digest") != digest:
            return None
        allow = entry.get("allow")
        return allow if isinstance(allow, bool) else None

    def record(self, project: Path, digest: str, allow: bool) -> None:
        """Remember ``allow`` for ``project`` with this content (private file, atomic write)."""
        projects = self._read()
        projects[str(Path(project).absolute())] = {
            "digest": digest,
            "allow": bool(allow),
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        self._write(projects)

    def forget(self, project: Path) -> bool:
        """Drop the answer for ``project``; True when there was one."""
        projects = self._read()
        if projects.pop(str(Path(project).absolute()), None) is None:
            return False
        self._write(projects)
        return True

    def entries(self) -> dict[str, dict[str, Any]]:
        """Every remembered answer, by project folder."""
        return {k: dict(v) for k, v in self._read().items() if isinstance(v, dict)}

    def _write(self, projects: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write_text(self.path, json.dumps({"projects": projects}, indent=2, sort_keys=True))
        with contextlib.suppress(OSError):  # mkstemp made it 0600; an older file is narrowed
            os.chmod(self.path, 0o600)
