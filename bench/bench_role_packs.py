"""Role packs: listing 100 packs x 20 skills must stay lazy.

Prints list_meta() time (fresh manager each run: a cold scan + manifest reads), the time to
activate one pack and build its system prompt, and the ratio against an eager load that reads
every persona, rules and skill file of every pack (what a non-lazy manager would do).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

from memora.role_pack import RolePackManager, validate

PACKS, SKILLS = 100, 20


def build(root: Path) -> Path:
    packs = root / "role-packs"
    for p in range(PACKS):
        folder = packs / f"pack-{p:03d}"
        (folder / "skills").mkdir(parents=True)
        (folder / "manifest.json").write_text(
            json.dumps(
                {
                    "name": f"pack-{p:03d}",
                    "formatVersion": "1.0.0",
                    "description": f"Pack {p}",
                    "handoffPrompt": "你好 " * 50,
                    "capabilities": [{"capability": "web:search"}],
                    "strategy": {"act": {"temperature": 0.5}, "global": {"stepBudget": 60}},
                }
            ),
            encoding="utf-8",
        )
        refs = " ".join(f"`skill-{s:02d}`" for s in range(SKILLS))
        (folder / "persona.md").write_text(
            f"Persona {p}. Skills: {refs}\n" + "text " * 400, encoding="utf-8"
        )
        (folder / "rules.md").write_text(
            "\n".join(f"- rule {r}" for r in range(30)), encoding="utf-8"
        )
        for s in range(SKILLS):
            (folder / "skills" / f"skill-{s:02d}.md").write_text(
                f"---\nname: skill-{s:02d}\ndescription: Skill {s} of pack {p}.\n---\n"
                + "body line\n" * 300,
                encoding="utf-8",
            )
    return root


def timed(fn, repeat: int = 7) -> float:  # type: ignore[no-untyped-def]
    samples = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def eager(config: Path) -> None:
    for folder in sorted((config / "role-packs").iterdir()):
        validate(folder)
        for f in folder.rglob("*.md"):
            f.read_text(encoding="utf-8")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config = build(Path(tmp))
        t_list = timed(lambda: RolePackManager(config).list_meta())

        def activate() -> None:
            m = RolePackManager(config, active="pack-050")
            m.resolve_initial()
            m.system_prompt()

        t_act = timed(activate)
        t_eager = timed(lambda: eager(config), repeat=3)
        print(f"role packs: {PACKS} packs x {SKILLS} skills")
        print(f"  list_meta()                 {t_list * 1e3:8.2f} ms")
        print(f"  activate one + prompt        {t_act * 1e3:8.2f} ms")
        print(f"  eager read of everything     {t_eager * 1e3:8.2f} ms")
        print(f"  ratio list_meta / eager      {t_list / t_eager:8.3f}")


if __name__ == "__main__":
    main()
