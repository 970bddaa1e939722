"""A llama.cpp build that crashes is named, never the user's first experience (#69 item 4).

After a plain `pip install`, llama.cpp compiled for the machine crashed inside `decode`
(SIGSEGV, exit 139) on `memora run`, README's example and docs/agent.md's typed example.  The
provider now runs a one-token completion in a child process before its build first loads a
model here: a crash there is a ProviderError naming the signal and the reinstall line, and the
answer is remembered per build.  A crashing build is stood in for by a `llama_cpp` package on
the child's PYTHONPATH whose `Llama` dies of SIGSEGV, as the real one did."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memora.llm import ProviderError
from memora.llm.types import LLMRequest, Message

pytest.importorskip("llama_cpp")
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="signals")

from memora_plugin_llamacpp import LlamaCppProvider  # noqa: E402
from memora_plugin_llamacpp.canary import CANARY_FILE, SAFE_CMAKE_ARGS  # noqa: E402

CRASHING = """
# llama_cpp as installed, but in a canary child (a `python -c` process) its Llama dies of
# SIGSEGV on load, as the crashing build did in decode; memora's own process gets the real one
import importlib.util, os, signal, sys
from pathlib import Path

_real = os.environ["REAL_LLAMA_CPP"]
_spec = importlib.util.spec_from_file_location(
    "llama_cpp", os.path.join(_real, "__init__.py"), submodule_search_locations=[_real]
)
_module = importlib.util.module_from_spec(_spec)
sys.modules["llama_cpp"] = _module
_spec.loader.exec_module(_module)

if sys.argv[0] == "-c":
    class Llama:
        def __init__(self, *args, **kwargs):
            with Path(os.environ["CANARY_MARK"]).open("a") as fh:
                fh.write("ran\\n")
            os.kill(os.getpid(), signal.SIGSEGV)

    _module.Llama = Llama
"""


@pytest.fixture
def crashing_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    fake = tmp_path / "fake" / "llama_cpp"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(CRASHING)
    mark = tmp_path / "runs"
    import llama_cpp

    monkeypatch.setenv("REAL_LLAMA_CPP", str(Path(llama_cpp.__file__).parent))
    monkeypatch.setenv("PYTHONPATH", str(fake.parent))  # the children's, not this process's
    monkeypatch.setenv("CANARY_MARK", str(mark))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return mark


async def _answer(provider: LlamaCppProvider) -> str:
    request = LLMRequest([Message.user("Say hi.")], max_tokens=4)
    return "".join([getattr(d, "text", "") async for d in provider.stream(request)])


async def test_a_crashing_build_is_a_provider_error_naming_the_reinstall(
    crashing_build: Path,
) -> None:
    with pytest.raises(ProviderError) as first:
        await _answer(LlamaCppProvider())
    said = first.value.message
    assert "SIGSEGV" in said and "crashes on this machine" in said
    assert SAFE_CMAKE_ARGS in said and "--force-reinstall" in said
    assert crashing_build.read_text().count("ran") == 1
    # remembered for this build: the next start says it at once, without a child
    with pytest.raises(ProviderError, match="SIGSEGV"):
        await _answer(LlamaCppProvider())
    assert crashing_build.read_text().count("ran") == 1
    remembered = json.loads((crashing_build.parent / "cache" / "memora" / CANARY_FILE).read_text())
    assert list(remembered.values()) == [{"ok": False, "how": "SIGSEGV"}]


def test_memora_run_on_a_crashing_build_exits_1_with_the_reason(
    crashing_build: Path, tmp_path: Path
) -> None:
    project = tmp_path / "p"
    project.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORA_")}
    env["MEMORA_HOME"] = str(tmp_path / "home")
    done = subprocess.run(
        [sys.executable, "-m", "memora", "run", "Say hi."],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1, (done.returncode, done.stderr)  # never 139
    assert "SIGSEGV" in done.stderr and "CMAKE_ARGS" in done.stderr


async def test_a_sound_build_passes_once_and_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    answer = await _answer(LlamaCppProvider())
    assert answer.strip()
    remembered = json.loads((tmp_path / "cache" / "memora" / CANARY_FILE).read_text())
    assert list(remembered.values()) == [{"ok": True}]
