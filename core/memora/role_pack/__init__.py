"""Role packs: manifests, strategy keys, validation, rules, skills and the manager."""

from .manager import (
    BUILTIN_FALLBACK,
    RolePack,
    RolePackManager,
    RolePackMeta,
    build_system_prompt,
    load_pack,
)
from .skills import Skill, scan_skills
from .strategy import EffectiveStrategy, resolve_strategy
from .strategy_keys import NOT_SENT, STRATEGY_KEYS, KeySpec, markdown_table
from .text import extract_skill_references, parse_front_matter, parse_rules
from .validator import Issue, Report, check_references, validate

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
