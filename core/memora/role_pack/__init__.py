"""Role packs: manifests, strategy keys, validation, rules, skills and the manager."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

_LAZY: dict[str, str] = {
    "BUILTIN_FALLBACK": "memora.role_pack.pack",
    "EffectiveStrategy": "memora.role_pack.strategy",
    "Issue": "memora.role_pack.validator",
    "KeySpec": "memora.role_pack.strategy_keys",
    "NOT_SENT": "memora.role_pack.strategy_keys",
    "Report": "memora.role_pack.validator",
    "RolePack": "memora.role_pack.pack",
    "RolePackManager": "memora.role_pack.manager",
    "RolePackMeta": "memora.role_pack.pack",
    "STRATEGY_KEYS": "memora.role_pack.strategy_keys",
    "Skill": "memora.role_pack.skills",
    "build_system_prompt": "memora.role_pack.manager",
    "check_references": "memora.role_pack.validator",
    "extract_skill_references": "memora.role_pack.text",
    "load_pack": "memora.role_pack.pack",
    "markdown_table": "memora.role_pack.strategy_keys",
    "parse_front_matter": "memora.role_pack.text",
    "parse_rules": "memora.role_pack.text",
    "resolve_strategy": "memora.role_pack.strategy",
    "scan_skills": "memora.role_pack.skills",
    "validate": "memora.role_pack.validator",
}

__all__ = [
    "BUILTIN_FALLBACK",
    "NOT_SENT",
    "STRATEGY_KEYS",
    "EffectiveStrategy",
    "Issue",
    "KeySpec",
    "Report",
    "RolePack",
    "RolePackManager",
    "RolePackMeta",
    "Skill",
    "build_system_prompt",
    "check_references",
    "extract_skill_references",
    "load_pack",
    "markdown_table",
    "parse_front_matter",
    "parse_rules",
    "resolve_strategy",
    "scan_skills",
    "validate",
]

if TYPE_CHECKING:  # "X as X": explicit re-exports for type checkers
    from .manager import (
        RolePackManager as RolePackManager,
        build_system_prompt as build_system_prompt,
    )
    from .pack import (
        BUILTIN_FALLBACK as BUILTIN_FALLBACK,
        RolePack as RolePack,
        RolePackMeta as RolePackMeta,
        load_pack as load_pack,
    )
    from .skills import (
        Skill as Skill,
        scan_skills as scan_skills,
    )
    from .strategy import (
        EffectiveStrategy as EffectiveStrategy,
        resolve_strategy as resolve_strategy,
    )
    from .strategy_keys import (
        NOT_SENT as NOT_SENT,
        STRATEGY_KEYS as STRATEGY_KEYS,
        KeySpec as KeySpec,
        markdown_table as markdown_table,
    )
    from .text import (
        extract_skill_references as extract_skill_references,
        parse_front_matter as parse_front_matter,
        parse_rules as parse_rules,
    )
    from .validator import (
        Issue as Issue,
        Report as Report,
        check_references as check_references,
        validate as validate,
    )

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
