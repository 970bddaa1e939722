"""What ``memora serve`` sets in the process it owns: the garbage collector, settled once the
app has started.  A host that embeds :func:`~memora_plugin_server.app.create_app` in its own
process keeps its own settings (it may do the same with :func:`owning_process`).

Why: a server keeps many objects alive for long (the projects' runtimes and plugins, the open
sessions' Agents, the turn logs), and CPython's cyclic collector walks them again and again — at
the default thresholds about 2 ms of CPU a turn under 100 concurrent conversations, with full
collections of 65–180 ms every few hundred turns (``bench/bench_serve.py``).  Settled, the
start-up objects are frozen (never walked again), the young collections run per 10,000 new
objects instead of 700, and the full collection — which frees what only it can: a closed
session's Agent is a web of references — runs on the clock, every
:data:`FULL_COLLECTION_SECONDS`, so the memory it holds back is bounded by time, not by how
much the server allocates."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # no Starlette import for the CLI that only names this
    from starlette.applications import Starlette

__all__ = ["FULL_COLLECTION_SECONDS", "GC_THRESHOLDS", "owning_process", "settle_gc"]

GC_THRESHOLDS = (10_000, 10, 10)
"""The collector's thresholds while serving (CPython's defaults: 700, 10, 10): a young
collection per 10,000 net new container objects."""

FULL_COLLECTION_SECONDS = 10.0
"""How often the served process runs a full collection (besides those its thresholds start)."""


def settle_gc() -> None:
    """Collect what start-up left behind, freeze what stays (the collector never walks it
    again), and set :data:`GC_THRESHOLDS`."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


async def collect_every(seconds: float) -> None:
    """A full collection every ``seconds``, until cancelled."""
    while True:
        await asyncio.sleep(seconds)
        gc.collect()


def owning_process(app: Starlette, *, full_every: float = FULL_COLLECTION_SECONDS) -> Starlette:
    """``app``, made to :func:`settle_gc` once its start-up (the runtimes opened, the plugins
    loaded) is complete and to run a full collection every ``full_every`` seconds while it
    serves — for a process that serves nothing else."""
    started = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[Any]:
        async with started(app) as state:
            settle_gc()
            collector = asyncio.create_task(collect_every(full_every), name="memora-gc")
            try:
                yield state
            finally:
                collector.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await collector

    app.router.lifespan_context = lifespan
    return app
