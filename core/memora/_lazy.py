"""Lazy re-exports for packages: ``import memora.memory`` stays cheap, each name is imported
the first time it is used (PEP 562).  A package lists ``name -> module`` and keeps ``X as X``
imports under ``TYPE_CHECKING`` for type checkers."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType
from typing import Any


def lazy_exports(
    package: str, names: Mapping[str, str], public: Iterable[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: a name of ``names`` is imported from its
    module on first access and kept in the package's namespace, so it is looked up once."""
    listed = sorted(public)

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return listed

    return __getattr__, __dir__


def lazy_module(name: str) -> Callable[[], ModuleType]:
    """A function returning module ``name``, imported by its first call: for a module a hot
    path needs but start-up should not load (a function-level ``from x import y`` goes through
    the import system on every call, 1-2 µs each)."""
    loaded: list[ModuleType] = []

    def load() -> ModuleType:
        if not loaded:
            loaded.append(importlib.import_module(name))
        return loaded[0]

    return load
