"""The reference checked against the code (datasette's tests/test_docs.py is the model): every
Agent option, MEMORA_* variable, config key, error code, chunk type and gate is named in the
docs.  A new one without a doc line fails here, naming what is missing."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md"]
_TEXT = "\n".join(p.read_text(encoding="utf-8") for p in DOCS)
_CODE_SPANS = set(re.findall(r"`([^`\n]+)`", _TEXT))
_WORDS = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", " ".join(_CODE_SPANS)))


def _documented(name: str) -> bool:
    """``name`` appears in the docs as code: alone in backticks, or as a word of a code span
    (``options.max_tokens``, ``agent.approve(id)``, a table's ``a`` / ``b``)."""
    return name in _CODE_SPANS or name in _WORDS


def _missing(names: typing.Iterable[str]) -> list[str]:
    return sorted(n for n in set(names) if not _documented(n))


def test_every_agent_option_is_documented() -> None:
    from memora.agent.options import AgentOptions

    assert _missing(AgentOptions.model_fields) == []


def test_every_config_key_and_config_option_is_documented() -> None:
    from memora.config import MemoraConfig, ProviderConfig
    from memora.settings import CONFIG_OPTIONS, PROJECT_KEYS, USER_SIDE_KEYS

    keys = [*MemoraConfig.model_fields, *ProviderConfig.model_fields]
    assert _missing([*keys, *CONFIG_OPTIONS, *PROJECT_KEYS, *USER_SIDE_KEYS]) == []


def test_every_environment_variable_is_documented() -> None:
    found: set[str] = set()
    for root in (REPO / "core" / "memora", REPO / "plugins"):
        for path in root.rglob("*.py"):
            found |= set(re.findall(r"\bMEMORA_[A-Z][A-Z0-9_]*\b", path.read_text("utf-8")))
    found.discard("MEMORA_TEST_PG_BIN")  # the suite's own knob, documented in tests/
    assert found, "no MEMORA_* variable found: the scan is broken"
    assert _missing(found) == []


def test_every_error_code_and_its_class_is_documented() -> None:
    from memora import errors

    codes = [c.value for c in errors.ErrorCode]
    classes = [
        n
        for n in errors.__all__
        if isinstance(getattr(errors, n), type) and issubclass(getattr(errors, n), Exception)
    ]
    assert len(codes) >= 15 and "BusyError" in classes
    assert _missing([*codes, *classes]) == []
    # each code has its own class, and MemoraError(code) builds it
    for code in errors.ErrorCode:
        error = errors.MemoraError(code, "x")
        assert type(error) is not errors.MemoraError, code
        assert error.code == code


def test_every_chunk_type_is_documented() -> None:
    from memora import chunks

    members = typing.get_args(typing.get_args(chunks.AgentChunk)[0])
    types = [m.model_fields["type"].default for m in members]
    assert len(types) >= 19
    assert _missing(types) == []


def test_every_gate_is_documented() -> None:
    from memora.agent.gates import GATES

    names = [g.__name__ for g in GATES]
    assert len(names) >= 11
    assert _missing(names) == []


@pytest.mark.parametrize(
    "name",
    [
        "ProjectRuntime",
        "PausedTurn",
        "build_cli",
        "register_commands",
        "TurnControl",
        "ToolExposure",
    ],
)
def test_the_split_agent_names_are_documented(name: str) -> None:
    assert _documented(name), name
