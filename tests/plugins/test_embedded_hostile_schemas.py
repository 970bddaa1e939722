"""The embedded llama.cpp model never takes the process down over a schema: each grammar is
built and parsed by llama.cpp in a child process first (``memora_plugin_llamacpp.grammar``).
Before, llama-cpp-python used the sampler llama.cpp refused to build, and died (SIGSEGV) on
``pattern: "^\\d{3}$"`` (written as a literal ``\\d`` it cannot parse) and on a left-recursive
``$ref`` cycle; its converter looped for ever on ``^[[:alpha:]]+$``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memora.llm import LLMRequest, Message, ProviderError, ToolSpec

pytest.importorskip("llama_cpp")
pytestmark = pytest.mark.slow

from memora_plugin_llamacpp import LlamaCppProvider  # noqa: E402
from memora_plugin_llamacpp.grammar import Grammars  # noqa: E402

DIGITS = {
    "type": "object",
    "properties": {"code": {"type": "string", "pattern": "^\\d{3}$"}},
    "required": ["code"],
}


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORA_")}
    env["MEMORA_HOME"] = str(tmp_path / "home")
    return env


def test_a_pattern_llama_cpp_cannot_parse_gives_a_clean_turn(tmp_path: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    path = tmp_path / "digits.json"
    path.write_text(json.dumps(DIGITS), encoding="utf-8")
    r = subprocess.run(
        [sys.executable, "-m", "memora", "run", "A three-digit code", "--output-schema", str(path)],
        cwd=project,
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=300,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    # a result, or OUTPUT_INVALID after the retries: an ending either way, never a signal
    assert r.returncode in (0, 1), (r.returncode, r.stderr[-2000:])
    assert "held to schema without patterns" in r.stderr and "unknown escape" in r.stderr
    if r.returncode == 0:
        assert json.loads(r.stdout)["code"].isdigit()


# the provider alone, handed schemas no door checked (a host's own types come this way)
CHILD = textwrap.dedent(
    """
    import asyncio, json, logging, sys
    from memora.llm import LLMRequest, Message, TextDelta
    from memora.llm.types import OutputFormat
    from memora_plugin_llamacpp import LlamaCppProvider

    async def main():
        logging.basicConfig(level=logging.WARNING)  # the provider's warnings, on stderr
        provider = LlamaCppProvider(n_ctx=1024)
        try:
            for schema in json.loads(sys.argv[1]):
                request = LLMRequest(
                    [Message.user("Answer in JSON.")],
                    max_tokens=24,
                    output=OutputFormat("shape", schema),
                )
                out = [d async for d in provider.stream(request)]
                print(json.dumps("".join(d.text for d in out if isinstance(d, TextDelta))))
        finally:
            await provider.aclose()

    asyncio.run(main())
    """
)


def test_the_provider_survives_a_cycle_and_huge_lengths_it_is_handed(tmp_path: Path) -> None:
    schemas = [
        {  # left-recursive as a grammar
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/n"}},
            "required": ["a"],
            "$defs": {"n": {"$ref": "#/$defs/m"}, "m": {"$ref": "#/$defs/n"}},
        },
        {"type": "object", "properties": {"a": {"type": "string", "maxLength": 5000}}},
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "^[[:alpha:]]+$"}}},
    ]
    r = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(schemas)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    answers = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(answers) == 3
    assert "left recursion" in r.stderr and "exceeds sane defaults" in r.stderr
    assert "converter ran over" in r.stderr


async def test_grammars_are_parsed_out_of_process_and_kept() -> None:
    grammars = Grammars()
    plain = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    built = await grammars.build(plain)
    assert built.kept == "schema" and built.reasons == () and built.text is not None
    assert 'a-kv ::= "\\"a\\""' in built.text
    digits = await grammars.build(DIGITS)
    assert digits.kept == "schema without patterns"
    assert digits.reasons and "unknown escape" in digits.reasons[0]
    assert await grammars.build(plain) is built  # kept: no second child


async def test_a_tool_whose_parameters_make_no_grammar_is_refused_by_name() -> None:
    provider = LlamaCppProvider(tools=True)
    tool = ToolSpec("lookup", "Look a code up.", DIGITS)
    request = LLMRequest([Message.user("Look up 123")], tools=[tool], max_tokens=8)
    try:
        with pytest.raises(ProviderError) as info:
            [d async for d in provider.stream(request)]
    finally:
        await provider.aclose()
    assert "'lookup'" in info.value.message and "unknown escape" in info.value.message
