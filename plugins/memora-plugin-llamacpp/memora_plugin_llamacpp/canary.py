"""A one-token completion in a child process before a llama.cpp build first runs here.

A plain ``pip install llama-cpp-python`` compiles llama.cpp for the machine it runs on, with
kernels (AMX, AVX-512…) that may crash inside a virtual machine that advertises them without
enabling them — the AMX check of :func:`~memora_plugin_llamacpp.provider.check_build` catches
one such case, and a build crashed anyway on a machine that passed it (SIGSEGV in llama.cpp's
``decode``).  A crash inside llama.cpp takes the whole process down: the user's first
``memora run`` would die with exit 139 and no word of why.

So before a build loads a model in memora's process, :func:`ensure_runs` loads it in a child
process and decodes a short prompt as a batch and one token after it, the paths that crashed.
A child that dies by a signal becomes a :class:`ProviderError` naming the signal and the
reinstall that gives a build safe for this machine.  The answer is remembered per build — the
llama-cpp-python version, its shared library's size and time, the model file, the machine — in
``llamacpp-canary.json`` in the user's cache folder (``$XDG_CACHE_HOME/memora``, else
``~/.cache/memora``: a fact of this machine and build, not of a memora config), so the check
costs one model load (a second or two for the bundled model) once per build, and a crash is
named at once after that.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from memora.llm import ProviderError
from memora.security.atomic import atomic_write_text

__all__ = ["CANARY_FILE", "SAFE_CMAKE_ARGS", "build_key", "cache_dir", "ensure_runs"]

logger = logging.getLogger("memora.plugins.llamacpp")

SAFE_CMAKE_ARGS = (
    "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON "
    "-DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
)
"""The llama.cpp build the project uses (``uv`` applies it; pip users set ``CMAKE_ARGS``): the
x86-64-v3 baseline (AVX2, FMA, F16C), no AVX-512 and no AMX, whose kernels crash where a
virtual machine advertises AMX without enabling its register state."""

CANARY_FILE = "llamacpp-canary.json"
CANARY_SECONDS = 300.0
"""The longest a canary may take (a large model's load); past it the build is not trusted."""

_CHILD = """
import sys
from llama_cpp import Llama
embedding = sys.argv[4] == "embed"
llm = Llama(model_path=sys.argv[1], n_ctx=512, n_batch=int(sys.argv[2]), verbose=False,
            n_threads=int(sys.argv[3]) or None, embedding=embedding)
text = "One, two, three, four, five, six, seven, eight, nine,"
if embedding:
    llm.embed(text, truncate=True)
else:
    llm.create_completion(text, max_tokens=2)
sys.stdout.write("ok\\n")
"""


def _library() -> Path | None:
    """The llama.cpp shared library llama-cpp-python loads (its build), if found."""
    try:
        import llama_cpp
    except ImportError:
        return None
    folder = Path(llama_cpp.__file__).parent / "lib"
    for name in ("libllama.so", "libllama.dylib", "llama.dll"):
        if (folder / name).is_file():
            return folder / name
    return None


def build_key(model: Path) -> str:
    """What a canary's answer holds for: this build of llama.cpp, this model file, this
    machine (a new build, a changed model or another CPU is asked again)."""
    parts: list[Any] = [platform.machine(), platform.node()]
    try:
        import llama_cpp

        parts.append(getattr(llama_cpp, "__version__", "?"))
    except ImportError:
        parts.append("none")
    for path in (_library(), model):
        if path is None:
            parts.append(None)
            continue
        st = path.stat()
        parts.append([str(path.resolve()), st.st_size, st.st_mtime_ns])
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


def _remembered(folder: Path) -> dict[str, Any]:
    try:
        data = json.loads((folder / CANARY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _remember(folder: Path, key: str, answer: dict[str, Any]) -> None:
    data = _remembered(folder)
    data[key] = answer
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write_text(folder / CANARY_FILE, json.dumps(data, indent=1) + "\n")
        os.chmod(folder / CANARY_FILE, 0o600)
    except OSError as exc:  # not remembered: asked again next time, no harm
        logger.debug("the canary's answer was not remembered: %s", exc)


def cache_dir() -> Path:
    """Where the canaries' answers are kept: ``$XDG_CACHE_HOME/memora``, else
    ``~/.cache/memora``."""
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base else Path.home() / ".cache") / "memora"


def _crashed(model: Path, how: str) -> ProviderError:
    return ProviderError(
        f"the installed llama-cpp-python crashes on this machine ({how} running a one-token "
        f"completion of {model.name} in a child process; memora did not load it in its own). "
        "Its build uses CPU kernels this machine does not run; reinstall it built for a "
        f'portable baseline: CMAKE_ARGS="{SAFE_CMAKE_ARGS}" pip install --force-reinstall '
        "--no-cache-dir llama-cpp-python",
        category="unknown",
    )


def ensure_runs(
    model: Path, *, n_batch: int, n_threads: int | None, embedding: bool = False
) -> None:
    """Raise :class:`ProviderError` when this llama.cpp build crashes running ``model`` here
    (``embedding``: embedding a text, as the embedder does, not completing one); the answer of
    a check is remembered per build (see the module docstring).  Blocking: call it off the
    event loop (the provider loads its model on a worker thread)."""
    folder = cache_dir()
    key = build_key(model) + ("-embed" if embedding else "")
    known = _remembered(folder).get(key)
    if isinstance(known, dict) and known.get("ok") is True:
        return
    if isinstance(known, dict) and known.get("ok") is False:
        raise _crashed(model, str(known.get("how", "a crash")))
    mode = "embed" if embedding else "complete"
    argv = [sys.executable, "-c", _CHILD, str(model), str(n_batch), str(n_threads or 0), mode]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=CANARY_SECONDS, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise ProviderError(
            f"llama.cpp took over {CANARY_SECONDS:g} s to answer one token of {model.name} in a "
            "child process; memora did not load it in its own",
            category="timeout",
        ) from exc
    if done.returncode < 0:
        try:
            how = f"{signal.Signals(-done.returncode).name}"
        except ValueError:
            how = f"signal {-done.returncode}"
        _remember(folder, key, {"ok": False, "how": how})
        raise _crashed(model, how)
    if done.returncode != 0 or done.stdout.strip() != "ok":
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ProviderError(
            f"llama.cpp could not run {model.name} in a child process (exit {done.returncode}): "
            f"{tail[0][:300]}",
            category="unknown",
        )
    _remember(folder, key, {"ok": True})
