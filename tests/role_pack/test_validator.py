"""Every row of the validation table of SPEC §6, plus fuzzing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from memora.role_pack import validate
from memora.role_pack.validator import Report

from .helpers import skill_md, write_pack


def _v(tmp_path: Path, manifest: dict[str, Any], **kw: Any) -> Report:
    return validate(write_pack(tmp_path, "p", manifest, **kw))


def _paths(issues: list[Any]) -> list[str]:
    return [i.path for i in issues]


def test_minimal_pack_is_clean(tmp_path: Path) -> None:
    r = _v(tmp_path, {"name": "p"})
    assert r.ok and r.warnings == [] and r.name == "p"


def test_missing_name_is_error_and_name_falls_back(tmp_path: Path) -> None:
    r = _v(tmp_path, {"description": "x"})
    assert "name" in _paths(r.errors) and r.name == "p"
    assert "required" in r.errors[0].message


@pytest.mark.parametrize("fv", ["1", "v1.0.0", "1.0", 1, None])
def test_bad_format_version(tmp_path: Path, fv: Any) -> None:
    r = _v(tmp_path, {"name": "p", "formatVersion": fv})
    assert _paths(r.errors) == ["formatVersion"]


def test_non_semver_version_warns(tmp_path: Path) -> None:
    r = _v(tmp_path, {"name": "p", "version": "first"})
    assert r.ok and _paths(r.warnings) == ["version"]


@pytest.mark.parametrize(
    ("stage", "key", "value"),
    [
        ("act", "toolMode", "sometimes"),
        ("act", "providerRouting", "random"),
        ("act", "multiStepReasoning", 1),
        ("act", "toolReadonly", "write"),
        ("reflect", "summary", True),
        ("reflect", "userFollowup", "loud"),
        ("global", "errorHandling", "panic"),
    ],
)
def test_enum_out_of_set(tmp_path: Path, stage: str, key: str, value: Any) -> None:
    r = _v(tmp_path, {"name": "p", "strategy": {stage: {key: value}}})
    assert _paths(r.errors) == [f"strategy.{stage}.{key}"]
    assert "is not one of" in r.errors[0].message


@pytest.mark.parametrize(
    ("stage", "key", "value", "legal"),
    [
        ("act", "temperature", 2.5, "[0, 2]"),
        ("act", "temperature", -0.1, "[0, 2]"),
        ("act", "outputLimit", 999999, "0 or [1, 65536]"),
        ("act", "toolStepLimit", 101, "[0, 100]"),
        ("reflect", "selfReview", 999, "[0, 10]"),
        ("global", "askLimit", 0, "[1, 10]"),
        ("global", "contextLimit", 50000, "0 or [120000, 2000000]"),
        ("global", "contextLimit", -100, "0 or [120000, 2000000]"),
        ("global", "stepBudget", 5, "0 or [10, 500]"),
        ("global", "webSearchLimit", 51, "[1, 50]"),
    ],
)
def test_number_out_of_range_names_legal_range(
    tmp_path: Path, stage: str, key: str, value: Any, legal: str
) -> None:
    r = _v(tmp_path, {"name": "p", "strategy": {stage: {key: value}}})
    assert _paths(r.errors) == [f"strategy.{stage}.{key}"]
    assert (
        r.errors[0].message
        == f"strategy.{stage}.{key} = {value} is outside the legal range {legal}"
    )


def test_exact_context_limit_message(tmp_path: Path) -> None:
    r = _v(tmp_path, {"name": "p", "strategy": {"global": {"contextLimit": 50000}}})
    assert r.errors[0].message == (
        "strategy.global.contextLimit = 50000 is outside the legal range 0 or [120000, 2000000]"
    )


@pytest.mark.parametrize("value", ["7", True, None, [1], 3.5])
def test_number_of_wrong_type(tmp_path: Path, value: Any) -> None:
    r = _v(tmp_path, {"name": "p", "strategy": {"act": {"toolStepLimit": value}}})
    assert _paths(r.errors) == ["strategy.act.toolStepLimit"]
    assert "[0, 100]" in r.errors[0].message


def test_summary_focus_and_ask_on(tmp_path: Path) -> None:
    r = _v(
        tmp_path,
        {
            "name": "p",
            "strategy": {"prepare": {"summaryFocus": "x" * 501}, "global": {"askOn": []}},
        },
    )
    assert sorted(_paths(r.errors)) == ["strategy.global.askOn", "strategy.prepare.summaryFocus"]
    r = _v(tmp_path, {"name": "p", "strategy": {"global": {"askOn": ["ambiguity", "whim"]}}})
    assert "whim" in r.errors[0].message


def test_unknown_keys_are_warnings(tmp_path: Path) -> None:
    r = _v(
        tmp_path,
        {"name": "p", "colour": "blue", "strategy": {"prepare": {"unknownKey": True}, "dream": {}}},
    )
    assert r.ok
    assert sorted(_paths(r.warnings)) == ["colour", "strategy.dream", "strategy.prepare.unknownKey"]


@pytest.mark.parametrize("cap", ["WriteFile", "web", "Web:Search", "web:", ":x", 3])
def test_bad_capability_format(tmp_path: Path, cap: Any) -> None:
    r = _v(tmp_path, {"name": "p", "capabilities": [{"capability": cap}]})
    assert _paths(r.errors) == ["capabilities[0].capability"]


def test_good_capabilities(tmp_path: Path) -> None:
    caps = [{"capability": c} for c in ("web:search", "file:*", "code:execute", "my-domain:do_it")]
    assert _v(tmp_path, {"name": "p", "capabilities": caps}).ok


def test_limits(tmp_path: Path) -> None:
    r = _v(
        tmp_path,
        {
            "name": "p",
            "capabilities": [{"capability": "web:search"}] * 51,
            "handoffPrompt": "h" * 2001,
            "description": "d" * 201,
            "displayName": "n" * 201,
            "author": "a" * 201,
        },
    )
    assert set(_paths(r.errors)) == {
        "capabilities",
        "handoffPrompt",
        "description",
        "displayName",
        "author",
    }
    r = _v(tmp_path, {"name": "p", "skills": [{"file": f"s{i}.md"} for i in range(51)]})
    assert "skills" in _paths(r.errors)


def test_skill_whitelist_must_exist(tmp_path: Path) -> None:
    r = _v(
        tmp_path,
        {"name": "p", "skills": [{"file": "ghost.md"}, {"file": "real"}]},
        skills={"real/SKILL.md": skill_md("real")},
    )
    assert _paths(r.errors) == ["skills[0].file"]


def test_companion_needs_explicit_disclosure_and_protection(tmp_path: Path) -> None:
    r = _v(tmp_path, {"name": "p", "interactionType": "companion"})
    assert sorted(_paths(r.errors)) == ["aiIdentityDisclosure", "minorProtection"]
    r = _v(
        tmp_path,
        {
            "name": "p",
            "interactionType": "companion",
            "aiIdentityDisclosure": False,
            "minorProtection": "required",
        },
    )
    assert _paths(r.errors) == ["aiIdentityDisclosure"]
    r = _v(
        tmp_path,
        {
            "name": "p",
            "interactionType": "companion",
            "aiIdentityDisclosure": True,
            "minorProtection": "required",
        },
    )
    assert r.ok and not r.refused


def test_tool_assistant_needs_no_explicit_disclosure(tmp_path: Path) -> None:
    assert _v(tmp_path, {"name": "p", "interactionType": "tool_assistant"}).ok
    r = _v(tmp_path, {"name": "p", "minorProtection": "optional"})
    assert _paths(r.errors) == ["minorProtection"]


@pytest.mark.parametrize(
    ("where", "text"),
    [
        ("persona", "我是你的虚拟女友。"),
        ("rules", "- Act as the user's virtual boyfriend."),
        ("handoffPrompt", "你好，我是你的虚拟妈妈"),
    ],
)
def test_companion_red_lines_refused(tmp_path: Path, where: str, text: str) -> None:
    manifest: dict[str, Any] = {
        "name": "p",
        "interactionType": "companion",
        "aiIdentityDisclosure": True,
        "minorProtection": "required",
    }
    kw: dict[str, Any] = {}
    if where == "handoffPrompt":
        manifest["handoffPrompt"] = text
    else:
        kw[where] = text
    r = _v(tmp_path, manifest, **kw)
    assert r.refused and any("refused" in e.message for e in r.errors)


def test_red_line_words_allowed_in_tool_assistant(tmp_path: Path) -> None:
    r = _v(tmp_path, {"name": "p"}, persona="小说里的角色有一个虚拟女友。")
    assert r.ok and not r.refused


def test_manifest_problems(tmp_path: Path) -> None:
    assert _paths(validate(tmp_path / "nothing").errors) == ["manifest.json"]
    r = validate(write_pack(tmp_path, "bad", raw_manifest="{not json"))
    assert "not valid JSON" in r.errors[0].message
    r = validate(write_pack(tmp_path, "arr", raw_manifest="[1, 2]"))
    assert "JSON object" in r.errors[0].message
    folder = write_pack(tmp_path, "latin")
    (folder / "manifest.json").write_bytes(b'{"name": "\xff"}')
    assert "UTF-8" in validate(folder).errors[0].message


def test_skill_files_checked(tmp_path: Path) -> None:
    r = _v(
        tmp_path,
        {"name": "p"},
        skills={
            "good.md": skill_md("good"),
            "Bad_Name.md": skill_md("Bad_Name"),
            "mismatch.md": skill_md("other"),
            "nodesc.md": "---\nname: nodesc\n---\nbody",
            "folder/SKILL.md": skill_md("folder"),
            "broken.md": "---\nname: [unclosed\n---\n",
        },
    )
    assert sorted(_paths(r.errors)) == [
        "skills/Bad_Name.md",
        "skills/broken.md",
        "skills/mismatch.md:name",
        "skills/nodesc.md:description",
    ]


def test_persona_traits_warn_when_clamped(tmp_path: Path) -> None:
    r = _v(tmp_path, {"name": "p"}, persona="---\ntraits:\n  warmth: 1.7\n  mood: happy\n---\nHi")
    assert r.ok and len(r.warnings) == 2


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=6)
    ),
    max_leaves=30,
)
KEYS = st.sampled_from(
    [
        "name",
        "formatVersion",
        "strategy",
        "skills",
        "capabilities",
        "interactionType",
        "handoffPrompt",
        "aiIdentityDisclosure",
        "x",
    ]
)
MANIFESTS = st.dictionaries(KEYS, JSON, max_size=8) | st.fixed_dictionaries(
    {
        "name": st.text(),
        "strategy": st.dictionaries(
            st.sampled_from(["prepare", "act", "reflect", "global", "zz"]),
            st.dictionaries(
                st.sampled_from(
                    [
                        "temperature",
                        "askOn",
                        "contextLimit",
                        "summaryFocus",
                        "toolMode",
                        "stepBudget",
                        "q",
                    ]
                ),
                JSON,
                max_size=4,
            ),
            max_size=4,
        ),
    }
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(manifest=JSON | MANIFESTS)
def test_validator_never_raises_on_any_json(tmp_path: Path, manifest: Any) -> None:
    folder = tmp_path / "fuzz"
    folder.mkdir(exist_ok=True)
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    report = validate(folder)
    assert isinstance(report, Report)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    persona=st.binary(max_size=300) | st.text(max_size=300).map(str.encode),
    rules=st.text(max_size=300),
    skill=st.text(max_size=300),
)
def test_validator_never_raises_on_any_file_content(
    tmp_path: Path, persona: bytes, rules: str, skill: str
) -> None:
    folder = tmp_path / "fuzzfiles"
    (folder / "skills").mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").write_text(
        json.dumps({"name": "f", "interactionType": "companion"}), encoding="utf-8"
    )
    (folder / "persona.md").write_bytes(b"---\n" + persona)
    (folder / "rules.md").write_text(rules, encoding="utf-8")
    (folder / "skills" / "s.md").write_text("---\n" + skill, encoding="utf-8")
    assert isinstance(validate(folder), Report)


def test_a_fifo_skill_is_reported_without_hanging(tmp_path: Path) -> None:
    import os
    import threading

    from memora.role_pack.validator import validate

    pack = tmp_path / "pack"
    (pack / "skills").mkdir(parents=True)
    (pack / "manifest.json").write_text('{"name": "pack", "formatVersion": "1.0.0"}')
    os.mkfifo(pack / "skills" / "stuck.md")
    result: list[object] = []
    worker = threading.Thread(target=lambda: result.append(validate(pack)), daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert result, "validate() hung on a FIFO"
    report = result[0]
    assert not report.ok  # type: ignore[attr-defined]
    assert any(  # type: ignore[attr-defined]
        "not a regular file" in i.message for i in report.errors
    )


@pytest.mark.parametrize(
    ("manifest", "skill", "where"),
    [
        (
            '{"name": "pack", "formatVersion": "1.0.0", "description": "d\\ud800"}',
            None,
            "description",
        ),
        (
            '{"name": "pack", "formatVersion": "1.0.0"}',
            '---\nname: "s\\udc00"\ndescription: x\n---\nbody',
            "skills/s.md",
        ),
    ],
)
def test_a_lone_surrogate_is_an_error_not_a_crash(
    tmp_path: Path, manifest: str, skill: str | None, where: str
) -> None:
    from click.testing import CliRunner

    from memora.cli.main import cli
    from memora.role_pack.validator import validate

    pack = tmp_path / "pack"
    (pack / "skills").mkdir(parents=True)
    (pack / "manifest.json").write_text(manifest, encoding="utf-8")
    if skill is not None:
        (pack / "skills" / "s.md").write_text(skill, encoding="utf-8")
    report = validate(pack)
    assert not report.ok
    assert any(where in i.path and "lone surrogate" in i.message for i in report.errors)
    for args in (
        ["role-pack", "validate", str(pack)],
        ["role-pack", "validate", str(pack), "--json"],
    ):
        r = CliRunner().invoke(cli, args)
        assert r.exit_code == 1 and not isinstance(r.exception, UnicodeError), r.output


def test_a_non_string_handoff_prompt_is_a_warning_not_an_error(tmp_path: Path) -> None:
    """J3: the seed passes handoffPrompt through; a wrong type is a warning and the pack loads."""
    r = _v(tmp_path, {"name": "p", "handoffPrompt": ["not", "a", "string"]})
    assert r.ok and "handoffPrompt" in _paths(r.warnings)
