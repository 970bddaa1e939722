"""Reading the built-in plugins' options (``config["plugins"][name]``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def flag(options: Mapping[str, Any], name: str, *, default: bool, off_means: str) -> bool:
    """The true-or-false option ``name`` (``default`` when absent); any other value is refused,
    naming the option and what ``false`` does (``off_means``)."""
    value = options.get(name, default)
    if not isinstance(value, bool):
        raise ValueError(
            f"option {name!r} must be true or false, not {value!r} (false: {off_means})"
        )
    return value
