"""`memora role-pack validate | check | new`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from ..security.terminal import clean
from .base import emit_json
from .common import config_dir_option, project_option


def _pack_folders(path: Path) -> list[Path]:
    """PATH is one pack (has manifest.json) or a folder of packs."""
    if (path / "manifest.json").is_file():
        return [path]
    if path.is_dir():
        packs = [p for p in sorted(path.iterdir()) if p.is_dir() and not p.name.startswith(".")]
        inner = path / "role-packs"
        if not packs and inner.is_dir():
            return _pack_folders(inner)
        return packs
    return [path]


def _print_reports(reports: list[dict[str, object]], as_json: bool) -> int:
    failed = any(r["errors"] for r in reports)
    if as_json:
        emit_json({"packs": reports})
        return 1 if failed else 0
    for r in reports:
        errors = r["errors"]
        warnings = r["warnings"]
        assert isinstance(errors, list) and isinstance(warnings, list)
        status = click.style("FAIL", fg="red") if errors else click.style("ok", fg="green")
        click.echo(clean(f"{status}  {r['name'] or '?'}  ({r['path']})", newlines=False))
        for issue in errors:
            click.echo(clean(f"   error    {issue['path']}: {issue['message']}"))
        for issue in warnings:
            click.echo(clean(f"   warning  {issue['path']}: {issue['message']}"))
    return 1 if failed else 0


@click.group("role-pack")
def role_pack_group() -> None:
    """Validate, check and scaffold role packs."""


@role_pack_group.command("validate")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def validate_cmd(path: Path, as_json: bool) -> None:
    """Validate one pack folder or a folder of packs; exit 1 on any error."""
    from ..role_pack import validate

    reports = []
    services = _installed_services()
    sources = _tool_source_capabilities()
    for folder in _pack_folders(path):
        report = validate(folder)
        if not report.errors:
            _check_capabilities_installed(folder, report, services, sources)
        reports.append(report.to_dict())
    sys.exit(_print_reports(reports, as_json))


def _installed_services() -> dict[str, list[str]]:
    from ..capabilities import PRIVILEGED
    from .common import plugin_manager

    plugins = plugin_manager()
    return {
        p.service_kind: plugins.names(p.service_kind)  # type: ignore[arg-type]
        for p in PRIVILEGED.values()
    }


def _tool_source_capabilities() -> tuple[set[str], dict[str, str]]:
    """``(sources, served)``: the installed tool sources' names (``mcp``) and the capabilities
    they serve with the effective settings (``mcp:github`` for each configured server) — no
    server is started."""
    from .common import find_project_root, plugin_manager, settings_for

    plugins = plugin_manager()
    sources = set(plugins.names("tool_source"))
    served: dict[str, str] = {}
    if not sources:
        return sources, served
    settings = settings_for(find_project_root(Path.cwd()), None)
    for name in sources:
        try:
            source = plugins.create("tool_source", name, settings.plugin_options(name))
            for cap in source.capabilities():
                served[str(cap)] = name
        except Exception:  # a source that cannot be built serves nothing here
            continue
    return sources, served


def _check_capabilities_installed(
    folder: Path,
    report: Any,
    services: dict[str, list[str]],
    sources: tuple[set[str], dict[str, str]] = (set(), {}),
) -> None:
    """Warn about capabilities neither memora nor an installed plugin provides.  A tool-source
    capability (``mcp:NAME``) is known when that source is installed, and served when the
    settings configure NAME (e.g. ``plugins.mcp.servers.NAME`` in the user config)."""
    from ..capabilities import PRIVILEGED, compute_capability_map
    from ..plugins import INSTALL_HINTS

    data = json.loads((folder / "manifest.json").read_text(encoding="utf-8-sig"))
    declared = [e["capability"] for e in data.get("capabilities") or []]
    names, served = sources
    sourced: dict[str, str | None] = {}
    for cap in declared:
        source, _, server = cap.partition(":")
        if source in names:
            sourced[cap] = (
                None
                if cap in served
                else f"no {source} server {server!r} is configured (plugins.{source}.servers "
                "in your user config)"
            )
    cmap = compute_capability_map(report.name, declared, services, log=False, sourced=sourced)
    for i, cap in enumerate(declared):
        for warning in cmap.warnings:
            if repr(cap) in warning:
                spec = PRIVILEGED.get(cap)
                hint = INSTALL_HINTS.get(spec.service_kind) if spec else None
                report.warn(
                    f"capabilities[{i}].capability",
                    warning + (f" (to add one: {hint})" if hint else ""),
                )


@role_pack_group.command("check")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def check_cmd(path: Path, as_json: bool) -> None:
    """Check skill references both ways: every skill referenced, every reference real."""
    from ..role_pack import check_references

    reports = [check_references(p).to_dict() for p in _pack_folders(path)]
    sys.exit(_print_reports(reports, as_json))


@role_pack_group.command("new")
@click.argument("name")
@click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path),
    default=None,
    help="Folder to create the pack in (default: the project's .memora/role-packs, where "
    "the project looks for packs).",
)
@click.option(
    "--user",
    "for_user",
    is_flag=True,
    help="Create it in your user config folder's role-packs (every project sees it).",
)
def new_cmd(name: str, directory: Path | None, for_user: bool) -> None:
    """Scaffold a valid pack NAME (kebab-case) with persona, rules and one skill, where memora
    looks for packs: the project's .memora/role-packs (--user: your own role-packs)."""
    from ..role_pack.text import KEBAB_NAME
    from ..security.state import user_config_dir
    from .common import find_project_root

    if not KEBAB_NAME.match(name):
        raise click.BadParameter(f"{name!r} is not kebab-case (a-z, 0-9, -)", param_hint="NAME")
    if directory is not None and for_user:
        raise click.UsageError("give --dir or --user, not both")
    if directory is None:
        directory = (
            user_config_dir() / "role-packs"
            if for_user
            else find_project_root(Path.cwd()) / ".memora" / "role-packs"
        )
    target = directory / name
    if target.exists():
        raise click.ClickException(f"{target} already exists; choose another name or folder")
    (target / "skills").mkdir(parents=True)
    manifest = {
        "name": name,
        "displayName": name.replace("-", " ").title(),
        "description": f"The {name} role.",
        "version": "0.1.0",
        "formatVersion": "1.0.0",
        "interactionType": "tool_assistant",
        "strategy": {
            "act": {"toolMode": "allow", "temperature": 0.7},
            "reflect": {"summary": "on", "selfReview": 0},
            "global": {"contextLimit": 0, "stepBudget": 50},
        },
        "capabilities": [],
    }
    (target / "manifest.json").write_text(
        json.dumps(manifest, ensure_ascii=False, indent=2) + "\n", encoding="utf-8"
    )
    (target / "persona.md").write_text(
        f"You are the {name} role. Describe who you are and how you work here.\n\n"
        "When a task needs a checklist, use `first-steps`.\n",
        encoding="utf-8",
    )
    (target / "rules.md").write_text(
        "- Write one rule per list line.\n- Start every task with `first-steps`.\n",
        encoding="utf-8",
    )
    (target / "skills" / "first-steps.md").write_text(
        "---\nname: first-steps\ndescription: What to do first on any task. Use at the start of a task.\n"
        "---\n1. Restate the task.\n2. List what you need to know.\n3. Do the smallest useful step.\n",
        encoding="utf-8",
    )
    where = "your role packs" if for_user else "this project's role packs"
    click.echo(f"created {target} ({where}; `memora role-pack list` shows it)")


@role_pack_group.command("list")
@project_option
@config_dir_option
@click.option(
    "--role-pack-dir",
    "role_pack_dirs",
    multiple=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="Extra folder of role packs (repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def list_cmd(
    project: Path, config_dir: Path | None, role_pack_dirs: tuple[Path, ...], as_json: bool
) -> None:
    """The role packs an Agent here would find (user config, extra folders, the project's
    .memora/role-packs, built-in), with author and strategy chips."""
    from ..role_pack.manager import RolePackManager
    from ..settings import user_config_dir

    manager = RolePackManager(
        user_config_dir(config_dir), pack_roots=list(role_pack_dirs), project_path=project.resolve()
    )
    metas = manager.list_meta()
    from ..role_pack.manager import BUILTIN_SKILLS

    pool: list[dict[str, Any]] = [
        {
            "name": skill.name,
            "description": skill.description,
            "builtin": skill.path.is_relative_to(BUILTIN_SKILLS),
            "path": str(skill.path),
        }
        for skill in manager.global_skills().values()
    ]
    if as_json:
        emit_json({"role_packs": [m.to_dict() for m in metas], "global_skills": pool})
        return
    for m in metas:
        chips = ", ".join(f"{k}={v}" for k, v in m.strategy.items() if v is not None)
        origin = "built-in" if m.builtin else m.path
        click.echo(clean(f"{m.name}  {m.description or ''}", newlines=False))
        click.echo(clean(f"    {origin}\n    {chips}"))
    click.echo("\nskills every role pack sees (the global pool):")
    for entry in pool:
        where = "built-in" if entry["builtin"] else entry["path"]
        click.echo(f"  {entry['name']}  ({where})  {clean(str(entry['description']))}")
