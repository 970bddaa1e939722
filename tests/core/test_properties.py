"""Hypothesis properties over the parsers that see untrusted input: whatever arrives, only
memora's documented errors come out, nothing hangs, and nothing is written outside its folder.
(The role-pack validator's properties live in tests/role_pack/test_validator.py.)"""

from __future__ import annotations

import json
import os
import string
from pathlib import Path

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings, strategies as st

from memora.errors import MemoraError, ToolError
from memora.memory.keywords import index_tokens
from memora.security.paths import PathGuard
from memora.settings import resolve_settings
from memora_plugin_openai.sse import SSEDecoder, SSELineTooLong

FAST = settings(
    max_examples=150, deadline=2000, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)


@FAST
@given(chunks=st.lists(st.binary(max_size=300), max_size=12))
def test_sse_decoder_takes_any_bytes(chunks: list[bytes]) -> None:
    decoder = SSEDecoder(max_line=4096)
    events: list[str] = []
    try:
        for chunk in chunks:
            events += decoder.feed(chunk)
        events += decoder.flush()
    except SSELineTooLong:
        return
    assert all(isinstance(e, str) for e in events)


@FAST
@given(
    text=st.text(alphabet=string.printable + "你好\u2028", max_size=400), cut=st.integers(0, 400)
)
def test_sse_decoder_is_split_invariant(text: str, cut: int) -> None:
    raw = text.encode("utf-8")
    whole, parts = SSEDecoder(), SSEDecoder()
    a = whole.feed(raw) + whole.flush()
    b = parts.feed(raw[:cut]) + parts.feed(raw[cut:]) + parts.flush()
    assert a == b


def _decode_all(chunks: list[bytes], max_line: int) -> tuple[list[str], bool]:
    decoder, events = SSEDecoder(max_line=max_line), []
    try:
        for chunk in chunks:
            events += decoder.feed(chunk)
        return events + decoder.flush(), False
    except SSELineTooLong:
        return events, True


@FAST
@given(
    values=st.lists(st.text(alphabet=string.printable + "你好", max_size=40), max_size=8),
    space=st.booleans(),
    max_line=st.sampled_from([8, 32, 4096]),
)
def test_sse_decoder_reads_an_event_per_chunk_as_line_by_line(
    values: list[str], space: bool, max_line: int
) -> None:
    # one whole event per chunk (what LLM APIs send) takes the decoder's short way; it must
    # read what the line-by-line way reads from the same events (CRLF line ends take that
    # way), size limit included
    field = "data: " if space else "data:"
    short = [(field + v + "\n\n").encode("utf-8") for v in values]
    long = [(field + v + "\r\n\r\n").encode("utf-8") for v in values]
    assert _decode_all(short, max_line) == _decode_all(long, max_line)


@FAST
@given(doc=json_values)
def test_config_loader_only_raises_invalid_config(tmp_path: Path, doc: object) -> None:
    project = tmp_path / "p"
    (project / ".memora").mkdir(parents=True, exist_ok=True)
    (project / ".memora" / "config.json").write_text(json.dumps(doc), encoding="utf-8")
    try:
        resolve_settings(project, config_dir=tmp_path / "user")
    except MemoraError as exc:
        assert exc.code == "INVALID_CONFIG"


@FAST
@given(lines=st.lists(st.one_of(json_values.map(json.dumps), st.text(max_size=60)), max_size=6))
def test_memory_import_only_gives_clean_errors(tmp_path: Path, lines: list[str]) -> None:
    from memora.cli.main import cli

    src = tmp_path / "in.jsonl"
    src.write_bytes("\n".join(lines).encode("utf-8", "surrogatepass"))
    data = tmp_path / "data"
    r = CliRunner().invoke(cli, ["memory", "import", str(src), "--data-dir", str(data)])
    assert r.exit_code in (0, 1), r.output
    if r.exit_code == 1:
        assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
        assert "nothing was imported" in r.output or "Error:" in r.output


path_parts = st.sampled_from(["..", ".", "a", "b", "~", "/", "//", "\\", "%2e%2e", "\x00", " "])


@FAST
@given(parts=st.lists(path_parts | st.text(max_size=8), min_size=1, max_size=6))
def test_path_guard_never_resolves_outside(tmp_path: Path, parts: list[str]) -> None:
    project = tmp_path / "project"
    (project / "a").mkdir(parents=True, exist_ok=True)
    (tmp_path / "outside").mkdir(exist_ok=True)
    (project / "a" / "link").unlink(missing_ok=True)
    (project / "a" / "link").symlink_to(tmp_path / "outside")
    guard = PathGuard(project)
    raw = "/".join(parts)
    try:
        resolved = guard.resolve(raw)
    except ToolError:
        return
    real = os.path.realpath(project)
    assert str(resolved) == real or str(resolved).startswith(real + os.sep)


@FAST
@given(text=st.text(alphabet=st.characters(max_codepoint=127), max_size=80))
def test_ascii_text_is_indexed_as_the_full_reading_indexes_it(text: str) -> None:
    """Pure ASCII takes a short way (no NFKC, no CJK); a non-ASCII word after it sends the same
    text the full way, which must read it into the same words."""
    assert [*index_tokens(text), "é"] == index_tokens(text + " é")
