from __future__ import annotations

from pathlib import Path

import pytest

from memora.role_pack import (
    NOT_SENT,
    STRATEGY_KEYS,
    extract_skill_references,
    markdown_table,
    parse_rules,
    resolve_strategy,
)
from memora.role_pack.text import clamp_traits, parse_front_matter
from tests.conftest import REPO


def test_list_items_are_one_rule_each() -> None:
    text = "- one\n* two\n+ three\n1. four\n2) five\n3、六\n"
    assert parse_rules(text) == ["one", "two", "three", "four", "five", "六"]


def test_paragraph_lines_merge() -> None:
    assert parse_rules("first line\nsecond line\n\nnext para") == [
        "first line second line",
        "next para",
    ]
    assert parse_rules("修改已完成的章节之前，\n先说明要改什么。") == [
        "修改已完成的章节之前，先说明要改什么。"
    ]


def test_indented_continuation_joins_list_item() -> None:
    assert parse_rules("- item one\n  continues here\n- item two") == [
        "item one continues here",
        "item two",
    ]


def test_blockquotes_unwrapped_as_paragraphs() -> None:
    assert parse_rules("> quoted rule\n> still quoted\n\n- listed") == [
        "quoted rule still quoted",
        "listed",
    ]
    assert parse_rules("- item\n> quote after item") == ["item", "quote after item"]


def test_non_rules_are_boundaries() -> None:
    text = (
        "# Heading\npara a\n## Sub\npara b\n```\n- not a rule\n```\n"
        "<!-- comment\n- hidden\n-->\n| a | b |\n|---|---|\n---\n***\n- real\n~~~python\nx\n~~~\ntail"
    )
    assert parse_rules(text) == ["para a", "para b", "real", "tail"]


def test_inline_comment_removed() -> None:
    assert parse_rules("- keep <!-- drop --> this") == ["keep this"]


def test_skill_reference_extractor() -> None:
    text = "Use `foreshadow` and `dialogue-craft`; not ``double``, not `Upper`, not `a b`.\n```\n`in-fence`\n```"
    assert extract_skill_references(text) == ["foreshadow", "dialogue-craft"]


def test_front_matter() -> None:
    fm = parse_front_matter("---\nname: x\ndescription: y\n---\nbody")
    assert fm.data == {"name": "x", "description": "y"} and fm.body == "body"
    assert parse_front_matter("no front matter").data == {}
    assert parse_front_matter("---\nname: x\n").error
    assert parse_front_matter("---\n- a list\n---\n").error


def test_traits_clamped() -> None:
    traits, warnings = clamp_traits({"a": 1.5, "b": -2, "c": 0.4, "d": "x", "e": True})
    assert traits == {"a": 1.0, "b": 0.0, "c": 0.4}
    assert len(warnings) == 4


def test_defaults_when_nothing_declared() -> None:
    s, issues = resolve_strategy(None)
    assert issues == []
    assert (s.temperature, s.tool_step_limit, s.step_budget, s.ask_limit) == (0.7, 20, 50, 10)
    assert s.output_limit is None and s.context_limit == 0 and s.summary and not s.self_review


def test_runtime_fallbacks() -> None:
    declared = {
        "prepare": {"summaryFocus": ""},
        "act": {"temperature": 3, "outputLimit": -1, "toolStepLimit": 500, "toolMode": "x"},
        "reflect": {"selfReview": 11},
        "global": {"askLimit": 0, "contextLimit": 50000, "stepBudget": 5, "askOn": []},
    }
    s, issues = resolve_strategy(declared)
    assert len(issues) == 10
    assert s.summary_focus is None
    assert s.temperature is None  # not sent
    assert s.output_limit is None  # not sent
    assert s.tool_step_limit == 20 and s.tool_mode == "allow"
    assert s.self_review is False and s.ask_limit == 10
    assert s.context_limit == 0 and s.step_budget == 50
    assert s.ask_on == ("ambiguity", "decision", "missing_info")


def test_self_review_any_positive_means_once_and_window_min() -> None:
    s, _ = resolve_strategy({"reflect": {"selfReview": 7}, "global": {"contextLimit": 300000}})
    assert s.self_review is True
    assert s.effective_window(1_000_000) == 300000
    assert s.effective_window(128_000) == 128_000
    s, _ = resolve_strategy({"global": {"stepBudget": 0}, "act": {"outputLimit": 8192}})
    assert s.max_iterations(200) == 200
    assert s.max_tokens(4096) == 4096 and s.max_tokens(None) == 8192 and s.max_tokens(0) == 8192


def test_override_beats_pack_and_invalid_override_is_ignored() -> None:
    declared = {"act": {"temperature": 0.3, "toolReadonly": "full"}}
    s, issues = resolve_strategy(
        declared, {"act": {"temperature": 1.1, "toolReadonly": "readonly"}}
    )
    assert s.temperature == 1.1 and s.tool_readonly is True and issues == []
    s, issues = resolve_strategy(declared, {"act": {"temperature": 9}})
    assert s.temperature == 0.3
    assert issues[0].path == "strategy_override.act.temperature"


def test_single_source_has_seventeen_keys() -> None:
    assert len(STRATEGY_KEYS) == 17
    assert len({(k.stage, k.name) for k in STRATEGY_KEYS}) == 17
    assert [k.name for k in STRATEGY_KEYS if k.fallback is NOT_SENT] == [
        "temperature",
        "outputLimit",
    ]


def test_docs_table_matches_strategy_keys() -> None:
    doc = (REPO / "docs" / "role_packs.md").read_text(encoding="utf-8")
    start = doc.index("<!-- strategy-table:start -->") + len("<!-- strategy-table:start -->")
    end = doc.index("<!-- strategy-table:end -->")
    assert doc[start:end].strip() == markdown_table().strip(), (
        "docs/role_packs.md is out of date: regenerate the table from strategy_keys.markdown_table()"
    )


@pytest.mark.parametrize("path", sorted(p for p in (REPO / "role_packs").iterdir() if p.is_dir()))
def test_example_pack_rules_parse(path: Path) -> None:
    rules = (path / "rules.md").read_text(encoding="utf-8")
    assert parse_rules(rules)


def test_yaml_alias_bomb_in_front_matter_is_refused_fast() -> None:
    import time

    from memora.role_pack.text import parse_front_matter

    lines = ["---", 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i, name in enumerate("bcdefghi"):
        prev = "abcdefghi"[i]
        lines.append(f"{name}: &{name} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]")
    lines += ["---", "body"]
    started = time.monotonic()
    fm = parse_front_matter("\n".join(lines))
    assert time.monotonic() - started < 2
    assert fm.error and "aliases" in fm.error and fm.data == {}
    assert parse_front_matter("---\nname: ok\nlist: [1, 2]\n---\nbody").data == {
        "name": "ok",
        "list": [1, 2],
    }
