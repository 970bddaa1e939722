"""The pieces of project trust (memora.security.trust) one by one: the rules a plugin declares,
the canonical digest an answer is remembered by, and the store of answers (#43 item 6: the
mutation runner found these behaviours unpinned)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import stat
from pathlib import Path

import pytest

from memora.security.trust import ANY, AtMost, OneOf, TrustRequest, TrustStore, request_digest


def test_rules_are_values() -> None:
    # a rule is a shared constant: hashable and equal by value, so two plugins' tables compare
    assert {AtMost(60), AtMost(60.0), OneOf(True), OneOf(True), ANY} == {
        AtMost(60),
        OneOf(True),
        ANY,
    }
    assert OneOf("a") != OneOf("b") and AtMost(1) != AtMost(2)
    assert repr(ANY) == "ANY"
    assert ANY.allows(object(), None)


def test_one_of_allows_any_of_its_values_of_the_same_type() -> None:
    rule = OneOf("on", "moderate")
    assert rule.allows("on", None) and rule.allows("moderate", "on")
    assert not rule.allows("off", None)
    assert not OneOf(True).allows(1, None)  # 1 == True, but not the switch's type
    assert not OneOf(1).allows(True, None)


def test_at_most_is_the_users_value_or_the_limit() -> None:
    assert AtMost(60).allows(60, None) and not AtMost(60).allows(61, None)
    assert AtMost(60).allows(20, 20) and not AtMost(60).allows(21, 20)
    assert not AtMost(60).allows(True, None)  # a bool is no number here
    assert not AtMost(60).allows("5", None)


def test_the_digest_is_of_a_canonical_form() -> None:
    """A remembered answer is keyed by this digest: it must not change with the order of keys
    in the file, nor between versions of memora (sorted keys, no spaces, UTF-8 as written)."""
    one = {"plugins.mcp.servers": {"b": "记忆", "a": [1, 2]}, "options.x": 1}
    two = {"options.x": 1, "plugins.mcp.servers": {"a": [1, 2], "b": "记忆"}}
    assert request_digest(one) == request_digest(two)
    canonical = '{"options.x":1,"plugins.mcp.servers":{"a":[1,2],"b":"记忆"}}'
    assert request_digest(one) == hashlib.sha256(canonical.encode()).hexdigest()


def test_a_request_describes_itself_in_sorted_compact_lines() -> None:
    request = TrustRequest(
        project=Path("/p"),
        path=Path("/p/.memora/config.json"),
        requests={"z.key": {"b": 2, "a": "记忆"}, "a.key": True},
    )
    assert request.describe() == ["a.key = true", 'z.key = {"a": "记忆", "b": 2}']
    # handed to a host's callback, it cannot be changed on the way back
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.digest = "x"  # type: ignore[misc]


def test_the_store_remembers_forgets_and_lists(tmp_path: Path) -> None:
    user = tmp_path / "new" / "config"  # not there yet: made private
    store = TrustStore(user)
    assert store.forget(tmp_path / "p") is False
    assert not store.path.exists()  # nothing to forget writes nothing
    store.record(tmp_path / "p", "d1", True)
    assert stat.S_IMODE(user.stat().st_mode) == 0o700
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert store.decision(tmp_path / "p", "d1") is True
    assert store.decision(tmp_path / "p", "d2") is None  # other content: ask again
    entries = store.entries()
    assert list(entries) == [str((tmp_path / "p").absolute())]
    assert entries[str((tmp_path / "p").absolute())]["digest"] == "d1"
    assert store.forget(tmp_path / "p") is True
    assert store.entries() == {}


def test_a_damaged_entry_is_left_out_and_an_older_file_is_narrowed(tmp_path: Path) -> None:
    store = TrustStore(tmp_path)
    store.path.write_text(
        json.dumps({"projects": {"/a": "not an answer", "/b": {"digest": "d", "allow": "yes"}}})
    )
    store.path.chmod(0o644)
    assert list(store.entries()) == ["/b"]
    assert store.decision(Path("/b"), "d") is None  # "yes" is no answer
    store.record(Path("/c"), "d", False)
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert store.decision(Path("/c"), "d") is False
