"""What ``memora serve`` sets in the process it owns: the garbage collector, settled once the
app has started.  A host that embeds :func:`~memora_plugin_server.app.create_app` in its own
process keeps its own settings (it may call :func:`settle_gc` itself).

Why: a server keeps many objects alive for long (the projects' runtimes and plugins, the open
sessions' Agents, the turn logs), and CPython's cyclic collector walks the older ones again and
again — at the default thresholds about 2–3 ms of CPU per turn under 100 concurrent
conversations, in full collections of 80–180 ms that stall every stream at once
(``bench/bench_serve.py``).  Frozen start-up objects are never walked again, and a larger
youngest generation makes the older collections rare; reference counting still frees nearly
everything at once, and cycles are still collected."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # no Starlette import for the CLI that only names this
    from starlette.applications import Starlette

__all__ = ["GC_THRESHOLDS", "owning_process", "settle_gc"]

GC_THRESHOLDS = (10_000, 20, 20)
"""The collector's thresholds while serving (CPython's defaults: 700, 10, 10): a young
collection per 10,000 net new container objects, an older one per 20 of those."""


def settle_gc() -> None:
    """Collect what start-up left behind, freeze what stays (the collector never walks it
    again), and set :data:`GC_THRESHOLDS`."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def owning_process(app: Starlette) -> Starlette:
    """``app``, made to :func:`settle_gc` once its start-up (the runtimes opened, the plugins
    loaded) is complete — for a process that serves nothing else."""
    started = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[Any]:
        async with started(app) as state:
            settle_gc()
            yield state

    app.router.lifespan_context = lifespan
    return app
