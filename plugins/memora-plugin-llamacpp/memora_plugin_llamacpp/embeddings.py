"""An embedded GGUF embedding model through llama-cpp-python (embedder ``llamacpp``).

``"embedder": {"type": "llamacpp", "model_path": "/models/multilingual-e5-small-q8_0.gguf",
"query_prefix": "query: ", "document_prefix": "passage: "}`` — any GGUF llama.cpp can embed
with; an embedding model (e5, bge, nomic-embed) is what makes recall better.  The model is
loaded on first use, and runs on a worker thread, one batch at a time.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from memora.llm import ProviderError

from .canary import ensure_runs

__all__ = ["LlamaCppEmbedder", "embedder_factory"]

_OPTIONS = {"model_path", "n_ctx", "n_threads", "n_batch", "query_prefix", "document_prefix"}


class LlamaCppEmbedder:
    def __init__(
        self,
        *,
        model_path: str | Path,
        n_ctx: int = 512,
        n_threads: int | None = None,
        n_batch: int = 512,
        query_prefix: str = "",
        document_prefix: str = "",
    ) -> None:
        self.model_path = Path(model_path).expanduser()
        if not self.model_path.is_file():
            raise ProviderError(f"embedding model file {self.model_path} does not exist")
        self.n_ctx = int(n_ctx)
        self.n_threads = n_threads
        self.n_batch = int(n_batch)
        self.prefixes = {"query": str(query_prefix), "document": str(document_prefix)}
        self._llm: Any = None
        self._lock = asyncio.Lock()

    @property
    def name(self) -> str:
        return f"llamacpp:{self.model_path.stem}"

    def _load(self) -> Any:
        from llama_cpp import Llama

        from .provider import amx_supported, build_features, check_build

        check_build(build_features(), amx_supported())
        # a crash in llama.cpp takes the process down: asked in a child first, once a build
        ensure_runs(self.model_path, n_batch=self.n_batch, n_threads=self.n_threads, embedding=True)
        return Llama(
            model_path=str(self.model_path),
            embedding=True,
            n_ctx=self.n_ctx,
            n_threads=self.n_threads,
            n_batch=self.n_batch,
            verbose=False,
        )

    def _embed(self, texts: list[str]) -> list[list[float]]:
        if self._llm is None:
            self._llm = self._load()
        out: list[list[float]] = []
        for text in texts:  # one at a time: a batch longer than n_batch is refused
            result = self._llm.embed(text, truncate=True)
            if result and isinstance(result[0], list):
                # a model without pooling answers one vector per token: their mean
                rows = [r for r in result if r]
                result = [math.fsum(col) / len(rows) for col in zip(*rows, strict=True)]
            out.append([float(x) for x in result])
        return out

    async def embed(
        self, texts: Sequence[str], *, kind: Literal["query", "document"]
    ) -> list[list[float]]:
        prefix = self.prefixes.get(kind, "")
        async with self._lock:
            return await asyncio.to_thread(self._embed, [prefix + t for t in texts])

    async def aclose(self) -> None:
        async with self._lock:
            llm, self._llm = self._llm, None
        if llm is not None:
            close = getattr(llm, "close", None)
            if callable(close):
                await asyncio.to_thread(close)


def embedder_factory(options: Mapping[str, Any]) -> LlamaCppEmbedder:
    opts = dict(options)
    if opts.get("model") and not opts.get("model_path"):
        opts["model_path"] = opts.pop("model")
    opts.pop("model", None)
    unknown = set(opts) - _OPTIONS
    if unknown:
        raise ValueError(
            f"unknown llamacpp embedder option(s) {', '.join(sorted(unknown))}; legal: "
            f"{', '.join(sorted(_OPTIONS))}"
        )
    if not opts.get("model_path"):
        raise ValueError(
            "the llamacpp embedder needs model_path: a GGUF embedding model (e5, bge, "
            "nomic-embed); the bundled chat model is no embedding model"
        )
    return LlamaCppEmbedder(**opts)
