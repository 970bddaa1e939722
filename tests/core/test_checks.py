"""How the answers of several pre-execution checks combine, whatever order the plugins load in,
and what each approval mode does with each kind of call."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from memora.checks import (
    APPROVAL_MODES,
    Allow,
    Ask,
    CheckDecision,
    Deny,
    Rewrite,
    Skip,
    ToolCallInfo,
    approval_for,
    combine_decisions,
    stricter,
)

BY_STRENGTH: list[CheckDecision] = [
    Deny("no"),
    Ask("sure?"),
    Skip("cached"),
    Rewrite({"path": "safe.txt"}),
    Allow(),
]


@pytest.mark.parametrize(
    ("strong", "weak"), list(itertools.combinations(range(len(BY_STRENGTH)), 2))
)
def test_the_stronger_answer_wins_in_either_plugin_order(strong: int, weak: int) -> None:
    """A caching plugin's Skip never bypasses a guard's Ask (or Deny) because it loaded first."""
    a, b = BY_STRENGTH[strong], BY_STRENGTH[weak]
    first = combine_decisions([("guard", a), ("other", b)])
    second = combine_decisions([("other", b), ("guard", a)])
    for outcome in (first, second):
        assert outcome.decision == a
    if not isinstance(a, Allow):
        assert first.plugin == second.plugin == "guard"


def test_no_opinion_at_all_allows_and_names_nobody() -> None:
    outcome = combine_decisions([("a", None), ("b", None)])
    assert outcome.decision == Allow() and outcome.plugin is None
    assert combine_decisions([]).decision == Allow()
    assert combine_decisions([("a", None), ("b", Allow())]).decision == Allow()


def test_two_equal_answers_keep_the_first_plugins() -> None:
    outcome = combine_decisions([("first", Ask("one")), ("second", Ask("two"))])
    assert outcome.decision == Ask("one") and outcome.plugin == "first"


def test_rewrites_agree_or_the_call_is_denied_naming_both_plugins() -> None:
    same = combine_decisions(
        [("a", Rewrite({"path": "x"})), ("b", Rewrite({"path": "x"}, reason="also"))]
    )
    assert isinstance(same.decision, Rewrite) and same.plugin == "a"
    clash = combine_decisions([("a", Rewrite({"path": "x"})), ("b", Rewrite({"path": "y"}))])
    assert isinstance(clash.decision, Deny) and clash.plugin == "b"
    assert "'a'" in clash.decision.reason and "'b'" in clash.decision.reason
    # a conflict is a denial even when an Ask came first
    asked = combine_decisions([("g", Ask("?")), ("a", Rewrite({"p": 1})), ("b", Rewrite({"p": 2}))])
    assert isinstance(asked.decision, Deny)


def test_a_file_edit_that_also_runs_code_is_not_a_plain_edit() -> None:
    """auto-edit lets the kernel's file edits run; anything that runs code asks (the mode table
    itself is tests/core/test_approvals.py::test_what_each_mode_does)."""
    assert approval_for("auto-edit", "edit_file", writes=True, runs_code=False) == "runs"
    assert approval_for("auto-edit", "write_file", writes=True, runs_code=True) == "asks"
    assert approval_for("auto-edit", "run_code", writes=False, runs_code=True) == "asks"
    assert approval_for("read-only", "read_file", writes=False, runs_code=False) == "runs"
    assert approval_for(None, "run_command", writes=True, runs_code=True) == "runs"


def test_the_stricter_mode_of_two() -> None:
    for a, b in itertools.product(APPROVAL_MODES, repeat=2):
        got = stricter(a, b)
        assert got == max(a, b, key=APPROVAL_MODES.index)
        assert stricter(b, a) == got
    assert stricter(None, "ask") == "ask" and stricter("auto-edit", None) == "auto-edit"
    assert stricter(None, None) is None


def test_a_call_changes_things_when_it_writes_or_runs() -> None:
    assert not ToolCallInfo("1", "read_file", {}).changes_things
    assert ToolCallInfo("1", "write_file", {}, writes=True).changes_things
    assert ToolCallInfo("1", "run_code", {}, runs_code=True).changes_things


def test_a_check_cannot_change_the_call_or_a_decision_others_see(tmp_path: Path) -> None:
    """Every check gets the same call and context: they are values a plugin cannot modify."""
    import dataclasses

    from memora.checks import CheckContext

    call = ToolCallInfo("1", "write_file", {"path": "a"}, writes=True)
    context = CheckContext(project_path=tmp_path)
    values = [call, context, Allow(), Deny("no"), Ask("?"), Skip("r"), Rewrite({"p": 1})]
    for value in values:
        field = dataclasses.fields(value)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, field, None)
    outcome = combine_decisions([("a", Deny("no"))])
    with pytest.raises(dataclasses.FrozenInstanceError):
        outcome.plugin = "someone else"  # type: ignore[misc]
    # a context nobody configured asks for nothing
    assert (context.confirm_writes, context.confirm_scripts, context.approvals) == (
        False,
        False,
        None,
    )
    assert context.permission == "owner" and context.previous_result is None
