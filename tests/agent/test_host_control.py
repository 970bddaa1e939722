"""What a host porting from the TypeScript package calls: role-pack editing and reloading,
list metadata, the effective output limit, messages added to the live conversation."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from memora.errors import ErrorCode, MemoraError
from memora.events import RolePackSwitched
from memora.testing import ScriptedProvider, text

from .conftest import collect

RULES = """# House rules

<!-- edited by hand: keep this comment -->
- Answer in English.
- Cite the file you read,
  with its line numbers.

## Style
1. Be brief.
"""


def pack_folder(tmp_path: Path) -> Path:
    return tmp_path / "config" / "role-packs" / "test"


def touch_later(path: Path) -> None:
    """Make sure a rewrite gets a new mtime even on coarse clocks."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


async def test_rules_are_edited_in_place_and_the_prompt_follows(
    make_agent: Any, tmp_path: Path
) -> None:
    provider = ScriptedProvider(default=text("ok"))
    agent = await make_agent(provider)
    folder = pack_folder(tmp_path)
    (folder / "rules.md").write_text(RULES, encoding="utf-8")
    agent.reload_config()
    switched: list[RolePackSwitched] = []
    agent.events.on(RolePackSwitched, switched.append)
    rp = agent.role_pack
    assert rp.rules() == [
        "Answer in English.",
        "Cite the file you read, with its line numbers.",
        "Be brief.",
    ]
    rp.update_rule(2, "引用你读过的文件和行号。")
    rp.delete_rule(1)
    assert rp.add_rule("Never guess a path.") == 3
    assert rp.rules() == ["引用你读过的文件和行号。", "Be brief.", "Never guess a path."]
    saved = (folder / "rules.md").read_text(encoding="utf-8")
    assert "<!-- edited by hand: keep this comment -->" in saved and "## Style" in saved
    assert switched and all(e.reloaded and e.to_pack == "test" for e in switched)
    await collect(agent.chat("hi"))
    prompt = provider.requests[-1].messages[0].content
    assert "引用你读过的文件和行号。" in prompt and "Answer in English." not in prompt
    with pytest.raises(MemoraError) as info:
        rp.update_rule(9, "x")
    assert info.value.code == ErrorCode.NOT_FOUND and "3 rule(s)" in info.value.message
    with pytest.raises(MemoraError):
        rp.add_rule("   ")


async def test_a_refused_edit_changes_nothing(make_agent: Any, tmp_path: Path) -> None:
    seen: list[tuple[str, str]] = []

    def check(item: str, expected: str) -> bool:
        seen.append((item, expected))
        return item != "rule:1"

    agent = await make_agent(ScriptedProvider(default=text("ok")), role_pack_edit_check=check)
    folder = pack_folder(tmp_path)
    (folder / "rules.md").write_text(RULES, encoding="utf-8")
    before = (folder / "rules.md").read_bytes()
    with pytest.raises(MemoraError) as info:
        agent.role_pack.update_rule(1, "Answer in French.")
    assert info.value.code == ErrorCode.CONFLICT
    assert (folder / "rules.md").read_bytes() == before
    agent.role_pack.update_skill("write-tests", "How to write tests", "Write a failing test first.")
    with pytest.raises(MemoraError):
        agent.role_pack.update_rule(1, "x")
    assert seen[-2:] == [("skill:write-tests", "exists"), ("rule:1", "exists")]


async def test_skills_are_created_and_deleted(make_agent: Any, tmp_path: Path) -> None:
    agent = await make_agent(ScriptedProvider(default=text("ok")))
    rp = agent.role_pack
    path = rp.update_skill("review-code", "Review a change for bugs", "Read the diff twice.")
    assert path == pack_folder(tmp_path) / "skills" / "review-code.md"
    assert "review-code" in agent.skills
    assert agent.skills["review-code"].body() == "Read the diff twice."
    with pytest.raises(MemoraError, match="kebab-case"):
        rp.update_skill("Bad Name", "x", "y")
    rp.delete_skill("review-code")
    assert "review-code" not in agent.skills and not path.exists()
    with pytest.raises(MemoraError) as info:
        rp.delete_skill("review-code")
    assert info.value.code == ErrorCode.NOT_FOUND


async def test_built_in_packs_cannot_be_edited(make_agent: Any) -> None:
    agent = await make_agent(ScriptedProvider(default=text("ok")))
    with pytest.raises(MemoraError, match="built in"):
        agent.role_pack.add_rule("x", "memora-default")


async def test_a_pack_edited_on_disk_is_read_again(make_agent: Any, tmp_path: Path) -> None:
    provider = ScriptedProvider(default=text("ok"))
    agent = await make_agent(provider)
    folder = pack_folder(tmp_path)
    persona = folder / "persona.md"
    persona.write_text("You are Alpha.", encoding="utf-8")
    agent.reload_config()
    await collect(agent.chat("who?"))
    assert "You are Alpha." in provider.requests[-1].messages[0].content
    switched: list[RolePackSwitched] = []
    agent.events.on(RolePackSwitched, switched.append)
    persona.write_text("You are Beta.", encoding="utf-8")
    touch_later(persona)
    # the seed's path: rescan() + activate() serves the new text
    agent.role_pack.rescan()
    agent.switch_role_pack("test")
    await collect(agent.chat("who now?"))
    assert "You are Beta." in provider.requests[-1].messages[0].content
    persona.write_text("You are Gamma.", encoding="utf-8")
    touch_later(persona)
    assert agent.reload_config() == ["test"]
    assert switched[-1] == RolePackSwitched("test", "test", reloaded=True)
    await collect(agent.chat("and now?"))
    assert "You are Gamma." in provider.requests[-1].messages[0].content


async def test_list_meta_carries_author_and_strategy_chips(make_agent: Any, tmp_path: Path) -> None:
    folder = pack_folder(tmp_path)
    agent = await make_agent(
        ScriptedProvider(default=text("ok")),
        strategy={"act": {"toolReadonly": "readonly", "temperature": 0.2}},
    )
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["author"] = "Ada"
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    meta = {m.name: m for m in agent.role_pack.list_meta()}["test"]
    assert meta.author == "Ada"
    assert meta.strategy["toolReadonly"] == "readonly" and meta.strategy["temperature"] == 0.2
    assert meta.strategy["toolMode"] == "allow"
    assert meta.to_dict()["strategy"]["multiStepReasoning"] == "auto"


async def test_effective_max_tokens(make_agent: Any) -> None:
    agent = await make_agent(
        ScriptedProvider(default=text("ok")),
        max_tokens=900,
        strategy={"act": {"outputLimit": 500}},
    )
    assert agent.effective_max_tokens() == 500
    await collect(agent.chat("q"))


async def test_a_message_added_between_turns_reaches_the_model_and_the_store(
    make_agent: Any,
) -> None:
    provider = ScriptedProvider(default=text("ok"))
    agent = await make_agent(provider, session_id="s1")
    await collect(agent.chat("first"))
    await agent.append_message("system", "The user switched to the billing project.")
    await collect(agent.chat("second"))
    sent = [m.content for m in provider.requests[-1].messages]
    assert "The user switched to the billing project." in sent
    await agent.close()
    again = await make_agent(ScriptedProvider(default=text("ok")), session_id="s1")
    assert "The user switched to the billing project." in [m.content for m in again.history]
    with pytest.raises(MemoraError):
        await again.append_message("tool", "x")


def test_rule_spans_keep_line_positions() -> None:
    from memora.role_pack.text import rule_spans

    spans = rule_spans(RULES)
    assert [(a, b) for a, b, _ in spans] == [(3, 3), (4, 5), (8, 8)]
