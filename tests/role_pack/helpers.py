from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_pack(
    root: Path,
    name: str = "demo",
    manifest: dict[str, Any] | None = None,
    *,
    persona: str | None = None,
    rules: str | None = None,
    skills: dict[str, str] | None = None,
    raw_manifest: str | None = None,
) -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    if raw_manifest is not None:
        (folder / "manifest.json").write_text(raw_manifest, encoding="utf-8")
    else:
        data = {"name": name, "formatVersion": "1.0.0"} if manifest is None else manifest
        (folder / "manifest.json").write_text(
            json.dumps(data, ensure_ascii=False), encoding="utf-8"
        )
    if persona is not None:
        (folder / "persona.md").write_text(persona, encoding="utf-8")
    if rules is not None:
        (folder / "rules.md").write_text(rules, encoding="utf-8")
    for rel, text in (skills or {}).items():
        path = folder / "skills" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return folder


def skill_md(
    name: str, description: str = "Does a thing. Use when needed.", body: str = "Body."
) -> str:
    return f"---\nname: {name}\ndescription: {description}\n---\n{body}\n"
