"""memora plugin: an OpenAI-compatible Chat Completions provider named ``openai``, and an
embedder of the same name (``/v1/embeddings``; ``"embedder": {"type": "openai", ...}``).

Options (``config["providers"][name]`` or ``memora run --provider openai --base-url ...``):
``model`` (required), ``base_url`` (default ``MEMORA_BASE_URL`` or OpenAI), ``api_key_env``,
``api_key_name`` (a key stored with ``memora keys set``; user config only), ``headers``,
``connect_timeout``, ``stall_timeout`` (seconds without a byte), ``context_window``, ``http2``,
``extra_body``, ``total_timeout`` (seconds for a whole answer from connect to the last byte,
default 900), ``max_response_bytes`` (default 32 MiB), ``max_connections`` (requests in flight at once,
default 1000), ``max_keepalive_connections`` (idle connections kept, default 100).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from memora import hookimpl
from memora.plugins import probed
from memora.security.trust import ANY, AtMost, project_settable

if TYPE_CHECKING:
    from .embeddings import OpenAIEmbedder
    from .provider import Completion, OpenAIProvider, encode_message
    from .sse import SSEDecoder

__all__ = [
    "Completion",
    "OpenAIEmbedder",
    "OpenAIProvider",
    "SSEDecoder",
    "encode_message",
    "register_embedders",
    "register_providers",
]

_OPTIONS = {
    "model",
    "base_url",
    "api_key_env",
    "api_key_name",
    "headers",
    "connect_timeout",
    "stall_timeout",
    "context_window",
    "http2",
    "extra_body",
    "total_timeout",
    "max_response_bytes",
    "max_connections",
    "max_keepalive_connections",
}

PROJECT = {
    "model": ANY,
    "context_window": ANY,
    "http2": ANY,
    "connect_timeout": AtMost(10.0),
    "stall_timeout": AtMost(60.0),
    "total_timeout": AtMost(900.0),
    "max_response_bytes": AtMost(32 * 1024 * 1024),
    "max_connections": AtMost(1000),
    "max_keepalive_connections": AtMost(100),
}
"""What a project's config may set (``base_url``, ``api_key_env``, ``api_key_name`` and
``headers`` choose where requests and keys go: user side only; ``extra_body`` is sent to the provider: a request)."""

_LAZY = {
    "Completion": ".provider",
    "OpenAIProvider": ".provider",
    "encode_message": ".provider",
    "SSEDecoder": ".sse",
    "OpenAIEmbedder": ".embeddings",
}


def __getattr__(name: str) -> Any:
    # httpx2 is imported when a provider is created, not when plugins are discovered
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module, __name__), name)


def _load() -> Any:
    from .provider import OpenAIProvider

    return OpenAIProvider


def _check(options: Mapping[str, Any], legal: set[str], what: str) -> None:
    if "api_key" in options:
        raise ValueError(
            "API keys are read from the environment only (MEMORA_API_KEY or OPENAI_API_KEY, "
            "or the variable named by api_key_env)"
        )
    unknown = set(options) - legal
    if unknown:
        raise ValueError(
            f"unknown {what} option(s) {', '.join(sorted(unknown))}; legal: "
            f"{', '.join(sorted(legal))}"
        )


def _factory(options: Mapping[str, Any]) -> OpenAIProvider:
    _check(options, _OPTIONS, "openai")
    opts = dict(options)
    if not opts.get("model"):
        import os

        opts["model"] = os.environ.get("MEMORA_MODEL", "gpt-4o-mini")
    from .provider import OpenAIProvider

    return OpenAIProvider(**opts)


@hookimpl
def register_providers(register: Any) -> None:
    register("openai", probed(project_settable(_factory, PROJECT), _load))


_EMBEDDER_OPTIONS = {
    "model",
    "base_url",
    "api_key_env",
    "api_key_name",
    "headers",
    "dimensions",
    "query_prefix",
    "document_prefix",
    "input_type",
    "batch_size",
    "connect_timeout",
    "timeout",
    "total_timeout",
    "max_response_bytes",
}
"""The embedder's options; ``timeout`` is the longest silence, ``total_timeout`` (default 120)
one request from connect to the last byte.  None is project-settable: a project's ``embedder``
entry is a request the user allows or not (it chooses where memory text goes)."""


def _load_embedder() -> Any:
    from .embeddings import OpenAIEmbedder

    return OpenAIEmbedder


def _embedder_factory(options: Mapping[str, Any]) -> OpenAIEmbedder:
    _check(options, _EMBEDDER_OPTIONS, "openai embedder")
    from .embeddings import OpenAIEmbedder

    return OpenAIEmbedder(**options)


@hookimpl
def register_embedders(register: Any) -> None:
    register("openai", probed(_embedder_factory, _load_embedder))
