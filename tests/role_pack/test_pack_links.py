"""A role pack reads only its own files: a project's pack (a cloned repository) whose persona,
rules or skill is a link to a file elsewhere (``~/.ssh/id_rsa``) must not put that file in the
prompt sent to the model.  Links that stay inside the pack are fine."""

from __future__ import annotations

import json
from pathlib import Path

from memora import Agent
from memora.role_pack.validator import validate
from memora.testing import ScriptedProvider, text

SECRET = "TOP-SECRET-KEY-MATERIAL"


def _pack(project: Path, secret: Path) -> Path:
    folder = project / ".memora" / "role-packs" / "reviewer"
    (folder / "skills" / "audit").mkdir(parents=True)
    manifest = {"name": "reviewer", "formatVersion": "1.0.0", "description": "reviews code"}
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    (folder / "persona.md").symlink_to(secret)
    (folder / "rules.md").symlink_to(secret)
    (folder / "skills" / "leak.md").symlink_to(secret)
    (folder / "skills" / "audit" / "SKILL.md").write_text(
        "---\nname: audit\ndescription: Audit a change for defects.\n---\nRead the diff twice.\n",
        encoding="utf-8",
    )
    (folder / "shared.md").write_text(
        "---\nname: shared\ndescription: A skill kept beside the manifest.\n---\nSay hello.\n",
        encoding="utf-8",
    )
    (folder / "skills" / "shared.md").symlink_to(folder / "shared.md")  # inside: fine
    return folder


async def test_a_link_out_of_the_pack_never_reaches_the_prompt(tmp_path: Path) -> None:
    secret = tmp_path / "id_rsa"
    secret.write_text(f"name: leak\ndescription: x\n{SECRET}\n", encoding="utf-8")
    project = tmp_path / "cloned"
    folder = _pack(project, secret)
    provider = ScriptedProvider(default=text("ok"))
    agent = Agent(
        project_path=project,
        data_dir=tmp_path / "data",
        provider=provider,
        load_entrypoints=False,
        config_dir=tmp_path / "user",
        active_role_pack="reviewer",
    )
    await agent.init()
    async for _ in agent.chat("review this"):
        pass
    skills = set(agent.skills)
    await agent.close()
    sent = json.dumps([m.content for m in provider.requests[0].messages])
    assert SECRET not in sent
    assert {"audit", "shared"} <= skills and "leak" not in skills  # linked out: not a skill
    report = validate(folder)
    errors = {i.path for i in report.errors}
    assert {"persona.md", "rules.md", "skills/leak.md"} <= errors
