"""Project configuration (``.memora/config.json``): kept for the names hosts import from here.

The reader and its models live in :mod:`memora.settings` (:mod:`memora.settings.files`);
``from memora.config import load_config, MemoraConfig`` keeps working.
"""

from __future__ import annotations

from .settings import (
    EmbedderConfig,
    MemoraConfig,
    ProviderConfig,
    check_secrets,
    create_provider_from_config,
    format_config_error,
    load_config,
    read_config_file,
    strip_json_comments,
)

__all__ = [
    "EmbedderConfig",
    "MemoraConfig",
    "ProviderConfig",
    "check_secrets",
    "create_provider_from_config",
    "format_config_error",
    "load_config",
    "read_config_file",
    "strip_json_comments",
]
