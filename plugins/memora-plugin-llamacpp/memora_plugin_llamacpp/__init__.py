"""memora plugin: an embedded GGUF model through llama-cpp-python (provider ``llamacpp``), and
embedded GGUF embedding models (embedder ``llamacpp``, see :mod:`.embeddings`)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from memora import hookimpl
from memora.plugins import probed
from memora.security.trust import ANY, AtMost, project_settable

if TYPE_CHECKING:
    from .provider import (
        DEFAULT_MODEL_FILE,
        SAFE_CMAKE_ARGS,
        LlamaCppProvider,
        amx_supported,
        build_features,
        check_build,
        default_model_path,
    )

__all__ = [
    "DEFAULT_MODEL_FILE",
    "SAFE_CMAKE_ARGS",
    "LlamaCppProvider",
    "amx_supported",
    "build_features",
    "check_build",
    "default_model_path",
    "register_embedders",
    "register_providers",
]

_LAZY = frozenset(__all__) - {"register_embedders", "register_providers"}


def __getattr__(name: str) -> Any:
    # the provider (asyncio, llama_cpp) is imported when one is created, not at discovery
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(".provider", __name__), name)


_OPTIONS = {
    "model_path",
    "n_ctx",
    "n_threads",
    "n_batch",
    "chat_format",
    "seed",
    "cache_bytes",
    "tools",
    "compact_prompt",
    "repeat_penalty",
}

PROJECT = {
    "n_ctx": AtMost(4096),
    "n_batch": AtMost(256),
    "seed": ANY,
    "chat_format": ANY,
    "tools": ANY,
}
"""What a project's config may set.  ``model``/``model_path`` make llama.cpp parse a file of the
project's choosing, and ``n_threads``/``cache_bytes`` size memora's own use of the machine:
requests the user must allow."""


def _load_llama() -> Any:
    """What the provider needs at its first request (``memora plugins`` imports it to check)."""
    from llama_cpp import Llama

    return Llama


def _factory(options: Mapping[str, Any]) -> LlamaCppProvider:
    from .provider import LlamaCppProvider

    opts = {k: v for k, v in options.items() if k != "model"}
    unknown = set(opts) - _OPTIONS
    if unknown:
        raise ValueError(
            f"unknown llamacpp option(s) {', '.join(sorted(unknown))}; legal: {', '.join(sorted(_OPTIONS))}"
        )
    if opts.get("tools") is not None and not isinstance(opts["tools"], bool):
        raise ValueError(f"llamacpp option tools must be true or false, not {opts['tools']!r}")
    if options.get("model") and not opts.get("model_path"):
        opts["model_path"] = options["model"]
    return LlamaCppProvider(**opts)


@hookimpl
def register_providers(register: Any) -> None:
    register("llamacpp", probed(project_settable(_factory, PROJECT), _load_llama))


def _embedder(options: Mapping[str, Any]) -> Any:
    from .embeddings import embedder_factory

    return embedder_factory(options)


@hookimpl
def register_embedders(register: Any) -> None:
    register("llamacpp", probed(_embedder, _load_llama))
