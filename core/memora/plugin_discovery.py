"""Installed plugins: the entry points of the group ``memora``, loaded through stevedore.

A plugin that fails to load costs only itself: it is recorded as a :class:`PluginFailure` with
its distribution and the error (``MEMORA_STRICT_PLUGINS=1``: a :class:`PluginError`).  The
distributions are read from the metadata folders on ``sys.path``, not importlib.metadata's
full scan (see :func:`entry_point_owners`).
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from typing import Any

from .errors import ErrorCode, PluginError

__all__ = ["ENTRY_POINT_GROUP", "PluginFailure", "discover_entry_points", "entry_point_owners"]

logger = logging.getLogger("memora.plugins")

ENTRY_POINT_GROUP = "memora"


@dataclass(frozen=True, slots=True)
class PluginFailure:
    """A plugin that was left out, and why."""

    name: str
    distribution: str | None
    error: str
    stage: str = "import"
    """``import`` (the module failed to import), ``register`` (an invalid or unknown hook
    implementation), ``hook`` (it raised inside a register hook) or ``probe`` (what it
    registered could not import its own implementation: :meth:`Plugins.probe`)."""


def _dist_of(entry_point: Any) -> tuple[str | None, str | None]:
    dist = getattr(entry_point, "dist", None)
    if dist is None:
        return None, None
    try:
        return dist.metadata["Name"], dist.version
    except Exception:  # pragma: no cover - broken metadata
        return getattr(dist, "name", None), None


def entry_point_owners(group: str) -> dict[str, tuple[str | None, str | None]]:
    """Entry point name of ``group`` -> (distribution, version).  Read from the metadata
    folders on ``sys.path`` (the first folder of a distribution wins, as importlib.metadata
    has it): each ``entry_points.txt``, then the ``Name``/``Version`` lines at the head of
    ``METADATA`` for the few with ``group`` — importlib.metadata's full scan and its e-mail
    parser cost ~10 ms of every start-up.  A name not found that way (an installation of
    another shape) is looked up through importlib.metadata."""
    owners: dict[str, tuple[str | None, str | None]] = {}
    seen: set[str] = set()
    header = f"[{group}]"
    for entry in sys.path:
        try:
            with os.scandir(entry or ".") as it:
                folders = sorted(e.name for e in it if e.name.endswith((".dist-info", ".egg-info")))
        except OSError:
            continue
        for folder in folders:
            key = folder.rsplit(".", 1)[0].split("-")[0].lower().replace("-", "_").replace(".", "_")
            if key in seen:
                continue
            seen.add(key)
            path = os.path.join(entry or ".", folder)
            try:
                with open(os.path.join(path, "entry_points.txt"), encoding="utf-8") as fh:
                    text = fh.read()
            except (OSError, ValueError):
                continue
            if header not in text:
                continue
            names = _section_names(text, header)
            if names:
                dist = _name_and_version(path, folder)
                for name in names:
                    owners.setdefault(name, dist)
    return owners


def _section_names(text: str, header: str) -> list[str]:
    names: list[str] = []
    inside = False
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("["):
            inside = line == header
        elif inside and "=" in line and not line.startswith(("#", ";")):
            names.append(line.split("=", 1)[0].strip())
    return names


def _name_and_version(path: str, folder: str) -> tuple[str | None, str | None]:
    """``Name`` and ``Version`` from the header of a metadata folder's METADATA (PKG-INFO)."""
    fields: dict[str, str] = {}
    for file in ("METADATA", "PKG-INFO"):
        try:
            with open(os.path.join(path, file), encoding="utf-8") as fh:
                for line in fh:
                    if not line.strip():
                        break  # the end of the header
                    key, sep, value = line.partition(":")
                    if sep and key in ("Name", "Version"):
                        fields.setdefault(key, value.strip())
            break
        except (OSError, ValueError):
            continue
    return fields.get("Name"), fields.get("Version")


def discover_entry_points(
    only: list[str] | None, strict: bool, failures: list[PluginFailure]
) -> list[tuple[str, object, str | None, str | None]]:
    """Load entry points of the ``memora`` group through stevedore; failures are recorded."""
    if only is not None and not only:
        return []
    from stevedore import ExtensionManager, NamedExtensionManager

    # stevedore memoises scans per namespace for the life of the process; a host that installs
    # a plugin and creates a new manager must see it, so drop that memo (its on-disk cache,
    # keyed by sys.path and file mtimes, still makes the scan cheap).
    ExtensionManager.ENTRY_POINT_CACHE.pop(ENTRY_POINT_GROUP, None)

    # stevedore may hand back entry points rebuilt from its cache, without ``dist``: look the
    # distributions up once
    owners = entry_point_owners(ENTRY_POINT_GROUP)

    def on_failure(_manager: Any, entry_point: Any, exc: BaseException) -> None:
        name = getattr(entry_point, "name", str(entry_point))
        dist = _dist_of(entry_point)[0] or owners.get(name, (None, None))[0]
        failure = PluginFailure(name=name, distribution=dist, error=f"{type(exc).__name__}: {exc}")
        logger.warning("plugin %r (%s) failed to load: %s", name, dist, failure.error)
        if strict:
            raise PluginError(
                ErrorCode.PLUGIN_LOAD_FAILED,
                f"plugin {name!r} from {dist or 'an unknown distribution'} failed to load: "
                f"{failure.error}",
                context={"plugin": name, "distribution": dist},
            ) from exc
        failures.append(failure)

    if only is None:
        mgr: Any = ExtensionManager(
            ENTRY_POINT_GROUP, invoke_on_load=False, on_load_failure_callback=on_failure
        )
    else:
        mgr = NamedExtensionManager(
            ENTRY_POINT_GROUP,
            names=only,
            invoke_on_load=False,
            on_load_failure_callback=on_failure,
            name_order=True,
        )
    loaded = []
    for ext in mgr.extensions:
        dist, version = _dist_of(ext.entry_point)
        if dist is None:
            if owners.get(ext.name, (None, None))[0] is None:
                from importlib.metadata import entry_points

                for ep in entry_points(group=ENTRY_POINT_GROUP):
                    if owners.get(ep.name, (None, None))[0] is None:
                        owners[ep.name] = _dist_of(ep)
            dist, version = owners.get(ext.name, (None, None))
        loaded.append((ext.name, ext.plugin, dist, version))
    if only is None:
        loaded.sort(key=lambda item: item[0])  # the documented clash rule needs a stable order
    return loaded
