from __future__ import annotations

import json
from pathlib import Path

import pytest

from memora.errors import MemoraError
from memora.events import EventEmitter, RolePackSwitched
from memora.role_pack import BUILTIN_FALLBACK, RolePackManager, check_references, validate
from memora.role_pack.manager import builtin_skills
from tests.conftest import REPO

from .helpers import skill_md, write_pack

EXAMPLES = sorted(p for p in (REPO / "role_packs").iterdir() if p.is_dir())


def test_there_are_the_promised_example_packs() -> None:
    names = {p.name for p in EXAMPLES}
    assert {"plain-designer", "novelist", "code-reviewer"} <= names
    novelist = REPO / "role_packs" / "novelist"
    assert len(list((novelist / "skills").glob("*.md"))) >= 5
    caps = {
        c["capability"]
        for c in json.loads((REPO / "role_packs" / "code-reviewer" / "manifest.json").read_text())[
            "capabilities"
        ]
    }
    assert {"web:search", "web:fetch", "code:execute"} <= caps


@pytest.mark.parametrize(
    "pack", [*EXAMPLES, REPO / "core/memora/role_pack/builtin/memora-default"], ids=lambda p: p.name
)
def test_example_packs_are_clean(pack: Path) -> None:
    report = validate(pack)
    assert report.errors == [] and report.warnings == []
    refs = check_references(pack)
    assert refs.errors == [], refs.errors


def test_reference_check_both_directions(tmp_path: Path) -> None:
    folder = write_pack(
        tmp_path,
        "p",
        persona="Use `alpha` often. Also `ghost-skill`.",
        rules="- nothing",
        skills={"alpha.md": skill_md("alpha"), "beta/SKILL.md": skill_md("beta")},
    )
    report = check_references(folder)
    messages = " ".join(i.message for i in report.errors)
    assert "'beta' is never referenced" in messages
    assert "no skill 'ghost-skill' exists" in messages
    assert len(report.errors) == 2


def _packs(tmp_path: Path) -> Path:
    root = tmp_path / "config" / "role-packs"
    write_pack(
        root,
        "writer",
        {
            "name": "writer",
            "handoffPrompt": "h" * 2500,
            "strategy": {"act": {"temperature": 0.2}},
            "capabilities": [{"capability": "web:fetch"}],
        },
        persona="I write.",
        rules="- Rule A\n- Use `polish`",
        skills={"polish.md": skill_md("polish", "Polish prose.")},
    )
    write_pack(
        root,
        "coder",
        {"name": "coder", "skills": [{"file": "lint"}]},
        skills={"lint/SKILL.md": skill_md("lint"), "unlisted.md": skill_md("unlisted")},
    )
    return tmp_path / "config"


def test_list_meta_reads_manifests_and_truncates_handoff(tmp_path: Path) -> None:
    m = RolePackManager(_packs(tmp_path))
    metas = {meta.name: meta for meta in m.list_meta()}
    assert set(metas) == {"writer", "coder", BUILTIN_FALLBACK}
    assert len(metas["writer"].handoff_prompt or "") == 2000
    assert metas["writer"].capabilities == ("web:fetch",)
    assert metas[BUILTIN_FALLBACK].builtin


def test_resolution_chain(tmp_path: Path) -> None:
    config = _packs(tmp_path)
    assert RolePackManager(config, active="writer").resolve_initial().name == "writer"
    assert (
        RolePackManager(config, active="nope", fallback_role="coder").resolve_initial().name
        == "coder"
    )
    assert (
        RolePackManager(config, active="nope", fallback_role="nope2").resolve_initial().name
        == BUILTIN_FALLBACK
    )
    assert RolePackManager(None).resolve_initial().name == BUILTIN_FALLBACK


def test_activate_emits_event_and_recomputes(tmp_path: Path) -> None:
    events = EventEmitter()
    seen: list[RolePackSwitched] = []
    events.on(RolePackSwitched, seen.append)
    m = RolePackManager(_packs(tmp_path), active="writer", events=events)
    m.resolve_initial()
    prompt = m.system_prompt()
    assert "I write." in prompt and "1. Rule A" in prompt and "- polish: Polish prose." in prompt
    assert m.strategy.temperature == 0.2
    m.activate("coder")
    assert seen == [RolePackSwitched("writer", "coder")]
    assert m.strategy.temperature == 0.7
    assert set(m.skills()) - set(builtin_skills()) == {"lint"}  # whitelist honoured
    assert "I write." not in m.system_prompt()
    with pytest.raises(MemoraError, match="no role pack named 'ghost'"):
        m.activate("ghost")


def test_member_prompts_follow_the_tool_set_and_edits(tmp_path: Path) -> None:
    config = _packs(tmp_path)
    write_pack(
        config / "role-packs",
        "poet",
        {"name": "poet"},
        rules="- Rule A",
        skills={"rhyme.md": skill_md("rhyme", "Rhyme help.")},
    )
    m = RolePackManager(config, active="coder")
    m.resolve_initial()
    full = m.system_prompt_for("poet")
    assert "1. Rule A" in full and "- rhyme: Rhyme help." in full
    assert "- rhyme:" not in m.system_prompt_for("poet", tools=frozenset({"read_file"}))
    assert "No tools are available" in m.system_prompt_for("poet", tools=frozenset())
    m.update_rule(1, "Rule B", pack_name="poet")  # every cached prompt of the pack is dropped
    for tools in (None, frozenset({"read_file"}), frozenset()):
        prompt = m.system_prompt_for("poet", tools=tools)
        assert "1. Rule B" in prompt and "Rule A" not in prompt


def test_skill_layers_and_disabled(tmp_path: Path) -> None:
    config = _packs(tmp_path)
    (config / "skills").mkdir()
    (config / "skills" / "global-one.md").write_text(skill_md("global-one"), encoding="utf-8")
    (config / "skills" / "polish.md").write_text(
        skill_md("polish", "GLOBAL version"), encoding="utf-8"
    )
    project = tmp_path / "project"
    (project / ".memora" / "skills").mkdir(parents=True)
    (project / ".memora" / "skills" / "proj.md").write_text(skill_md("proj"), encoding="utf-8")
    (project / ".memora" / "rules").mkdir()
    (project / ".memora" / "rules" / "house.md").write_text("- Project rule Z", encoding="utf-8")
    m = RolePackManager(
        config, active="writer", project_path=project, disabled_skills=["global-one"]
    )
    skills = m.skills()
    assert set(skills) - set(builtin_skills()) == {"polish", "proj"}
    assert skills["polish"].description == "Polish prose."  # pack beats global
    assert skills["proj"].source == "project"
    assert "Project rule Z" in m.system_prompt()


def test_skill_levels(tmp_path: Path) -> None:
    root = tmp_path / "c" / "role-packs"
    write_pack(
        root,
        "p",
        {"name": "p"},
        persona="`tool-kit`",
        skills={
            "tool-kit/SKILL.md": skill_md("tool-kit", body="Run scripts/hello.py"),
            "tool-kit/scripts/hello.py": "print('hi')\n",
            "tool-kit/ref/notes.md": "notes",
        },
    )
    m = RolePackManager(tmp_path / "c", active="p")
    skill = m.skill("tool-kit")
    assert skill.body() == "Run scripts/hello.py"
    assert skill.resources() == ["ref/notes.md", "scripts/hello.py"]
    assert skill.resource_path("ref/notes.md").read_text() == "notes"
    from memora.errors import ToolError

    with pytest.raises(ToolError) as info:
        skill.resource_path("../../manifest.json")
    assert info.value.code == "PATH_NOT_ALLOWED"
    with pytest.raises(ToolError) as info:
        m.skill("nope")
    assert info.value.code == "FILE_NOT_FOUND"


def test_refused_companion_pack(tmp_path: Path) -> None:
    root = tmp_path / "c" / "role-packs"
    write_pack(
        root,
        "bad",
        {
            "name": "bad",
            "interactionType": "companion",
            "aiIdentityDisclosure": True,
            "minorProtection": "required",
        },
        persona="我是你的虚拟男友",
    )
    m = RolePackManager(tmp_path / "c")
    with pytest.raises(MemoraError, match="refused"):
        m.activate("bad")


def test_pack_with_errors_still_loads_with_fallbacks(tmp_path: Path) -> None:
    root = tmp_path / "c" / "role-packs"
    write_pack(root, "sloppy", {"strategy": {"global": {"contextLimit": 50000}}})
    m = RolePackManager(tmp_path / "c", active="sloppy")
    assert m.resolve_initial().name == "sloppy"
    assert m.strategy.context_limit == 0


def test_strategy_prompt_instructions(tmp_path: Path) -> None:
    root = tmp_path / "c" / "role-packs"
    write_pack(
        root,
        "asker",
        {
            "name": "asker",
            "strategy": {
                "reflect": {"userFollowup": "ask"},
                "global": {"askOn": ["confirm"], "askLimit": 2},
                "act": {"toolReadonly": "readonly", "multiStepReasoning": "manual"},
            },
        },
    )
    write_pack(root, "mute", {"name": "mute", "strategy": {"act": {"toolMode": "block"}}})
    m = RolePackManager(tmp_path / "c", active="asker")
    prompt = m.system_prompt()
    assert "ask_user" in prompt and "confirm" in prompt and "at most 2" in prompt
    assert "read-only" in prompt and "unless the user explicitly asks for a plan" in prompt
    m.activate("mute")
    assert "No tools are available" in m.system_prompt()


def test_the_four_built_in_global_skills_ship_and_a_user_skill_wins(tmp_path: Path) -> None:
    """J12: code-review, summarize, web-search and role-pack-creator are in the global pool,
    valid Agent Skills, seen by every pack; a user's global skill of the same name replaces one."""
    from memora.role_pack.validator import Report, check_skill_text

    shipped = builtin_skills()
    assert set(shipped) == {"code-review", "summarize", "web-search", "role-pack-creator"}
    for name, skill in shipped.items():
        report = Report(name)
        check_skill_text(skill.path.read_text(encoding="utf-8"), name, name, report)
        assert report.ok, report.errors
        assert len(skill.body()) > 200  # real instructions, not a stub
    assert "memora role-pack new" in shipped["role-pack-creator"].body()
    assert "memora role-pack validate" in shipped["role-pack-creator"].body()
    config = _packs(tmp_path)
    m = RolePackManager(config, active="writer")
    assert set(shipped) <= set(m.skills())
    assert "- code-review: Review a change" in m.system_prompt()
    (config / "skills").mkdir(exist_ok=True)
    (config / "skills" / "summarize.md").write_text(
        skill_md("summarize", "The team's own summary rules."), encoding="utf-8"
    )
    m = RolePackManager(config, active="writer")
    assert m.skills()["summarize"].description == "The team's own summary rules."


def test_each_new_manager_reads_the_users_packs_as_they_are_on_disk(tmp_path: Path) -> None:
    """What ships with memora is read once per process; the user's packs, skills and the
    project's rules are read again by every new manager (a session opened after an edit sees
    it), while an open one keeps what it read until ``refresh()``."""
    config = _packs(tmp_path)
    first = RolePackManager(config, active="writer", project_path=tmp_path / "proj")
    assert "1. Rule A" in first.system_prompt()
    assert "- polish: Polish prose." in first.system_prompt()
    folder = config / "role-packs" / "writer"
    (folder / "rules.md").write_text("- Rule B, a longer one\n", encoding="utf-8")
    (folder / "skills" / "shine.md").write_text(skill_md("shine", "Shine it."), encoding="utf-8")
    (config / "skills" / "tidy").mkdir(parents=True)
    (config / "skills" / "tidy" / "SKILL.md").write_text(skill_md("tidy"), encoding="utf-8")
    rules = tmp_path / "proj" / ".memora" / "rules"
    rules.mkdir(parents=True)
    (rules / "house.md").write_text("- Answer in English\n", encoding="utf-8")
    write_pack(config / "role-packs", "later", {"name": "later"}, persona="I came later.")

    second = RolePackManager(config, active="writer", project_path=tmp_path / "proj")
    prompt = second.system_prompt()
    assert "1. Rule B, a longer one" in prompt and "Rule A" not in prompt
    assert "- shine: Shine it." in prompt and "- tidy:" in prompt
    assert "1. Answer in English" in prompt
    assert "later" in second.names()
    assert "1. Rule A" in first.system_prompt()  # the open one: as it read them
    assert "later" not in first.names()
    first.refresh()
    assert "1. Rule B, a longer one" in first.system_prompt() and "later" in first.names()


def test_the_built_in_pack_shared_by_managers_keeps_each_ones_strategy(tmp_path: Path) -> None:
    """Managers share the built-in pack and what it resolves to; each host's override is its
    own (a list is not a tuple: the override ``("confirm",)`` is refused, ``["confirm"]`` not)."""
    plain = RolePackManager(None)
    blocked = RolePackManager(None, strategy_override={"act": {"toolMode": "block"}})
    listed = RolePackManager(None, strategy_override={"global": {"askOn": ["confirm"]}})
    tupled = RolePackManager(None, strategy_override={"global": {"askOn": ("confirm",)}})
    assert plain.active is blocked.active  # one pack, read once
    assert plain.strategy.tool_mode == "allow" and blocked.strategy.tool_mode == "block"
    assert "No tools are available" in blocked.system_prompt()
    assert "No tools are available" not in plain.system_prompt()
    assert listed.strategy.ask_on == ("confirm",)
    assert tupled.strategy.ask_on == plain.strategy.ask_on
    again = RolePackManager(None, strategy_override={"act": {"toolMode": "block"}})
    assert again.strategy == blocked.strategy and plain.strategy != blocked.strategy
    assert RolePackManager(None).strategy == plain.strategy
