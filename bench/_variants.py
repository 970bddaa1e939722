"""The provider's HTTP transport next to httpx2's own (issue #70 item 3), for the benches'
``--variants`` runs.

A variant names the transport a provider's client gets: ``net`` (memora's asyncio network
backend under its split pool: ``memora_plugin_openai.net``/``.pool``, what the provider uses),
``net1`` (the same backend, one pool), ``shards`` (the split pool on httpx2's own anyio
backend), ``httpx2`` (httpx2's own transport and pool, with the provider's limits).

``durable`` (issue #71 item 4, not in the default set: ``--only=net,durable``) is memora as it
is with durable turns: the server's user config says ``"turn_executor": "dbos"``, the journal in
the one-machine default, SQLite in the user's memora folder (:func:`config`).

The session log's fsync was a second axis (``kernel``: memora's Linux AIO through ctypes;
``thread``; ``caio``/``caio-aio``: through the caio library, io_uring or Linux AIO) until the
measurement (docs/benchmarks.md, "Hand-written infrastructure, measured") left only the thread.

:func:`apply` switches the current process to a variant by replacing the module-level name
``memora_plugin_openai.pool.transport_for``: for a benchmark's measuring only, never for a host.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import httpx2

from memora_plugin_openai import pool

VARIANTS = ("net", "net1", "shards", "httpx2")
CHOICES = (*VARIANTS, "durable")
"""What ``--only`` may name: the transports, and ``durable``."""
_CONFIG: dict[str, dict[str, Any]] = {"durable": {"turn_executor": "dbos"}}


def config(variant: str) -> dict[str, Any]:
    """What ``variant``'s server has in its user config besides the benches' own."""
    return dict(_CONFIG.get(variant, {}))


def _httpx2_transport(
    *, http2: bool, max_connections: int, max_keepalive_connections: int
) -> httpx2.AsyncBaseTransport:
    return httpx2.AsyncHTTPTransport(
        http2=http2,
        trust_env=False,
        limits=httpx2.Limits(
            max_connections=max_connections, max_keepalive_connections=max_keepalive_connections
        ),
    )


def _one_asyncio_pool(
    *, http2: bool, max_connections: int, max_keepalive_connections: int
) -> httpx2.AsyncBaseTransport:
    return pool.AsyncioTransport(
        http2=http2,
        verify=httpx2.create_ssl_context(trust_env=False),
        limits=httpx2.Limits(
            max_connections=max_connections, max_keepalive_connections=max_keepalive_connections
        ),
    )


def _sharded_anyio(
    *, http2: bool, max_connections: int, max_keepalive_connections: int
) -> httpx2.AsyncBaseTransport:
    count = max(
        1,
        min(
            pool.MAX_SHARDS,
            max_keepalive_connections // pool.SHARD_SIZE,
            max_connections // pool.SHARD_SIZE,
        ),
    )

    def share(total: int, i: int) -> int:
        return total // count + (1 if i < total % count else 0)

    transports = [
        _httpx2_transport(
            http2=http2,
            max_connections=share(max_connections, i),
            max_keepalive_connections=share(max_keepalive_connections, i),
        )
        for i in range(count)
    ]
    return transports[0] if count == 1 else pool.Shards(transports)


_ORIGINAL: dict[str, Any] = {}


def apply(variant: str) -> None:
    """Switch this process to ``variant``; ``net`` is memora as it is."""
    if variant not in CHOICES:
        raise SystemExit(f"unknown variant {variant!r}: one of {CHOICES}")
    _ORIGINAL.setdefault("transport_for", pool.transport_for)
    pool.transport_for = {  # type: ignore[assignment]
        "net": _ORIGINAL["transport_for"],
        "durable": _ORIGINAL["transport_for"],  # its difference is its config
        "net1": _one_asyncio_pool,
        "shards": _sharded_anyio,
        "httpx2": _httpx2_transport,
    }[variant]


def serve_args(variant: str, args: list[str]) -> list[str]:
    """``args`` (``python -m memora serve ...``) run as a server of ``variant``."""
    here = os.path.dirname(os.path.abspath(__file__))
    code = "import sys; sys.path.insert(0, sys.argv.pop(1)); import _variants; _variants.run()"
    return [args[0], "-c", code, here, variant, *args[3:]]


def run() -> None:
    """The process :func:`serve_args` starts: ``memora`` as a server of the variant named by
    its first argument.  With ``BENCH_PROFILE=FOLDER`` (a bench's switch, never a host's) it is
    profiled until it stops, into ``FOLDER/<variant>.pstat``: by yappi on the CPU clock, every
    thread (DBOS does its journal's work on worker threads), when yappi can be imported; else by
    cProfile, the event loop's thread only."""
    variant = sys.argv.pop(1)
    apply(variant)
    from memora.cli.main import main

    sys.argv[0] = "memora"
    folder = os.environ.get("BENCH_PROFILE")
    if not folder:
        main()
        return
    out = os.path.join(folder, f"{variant}.pstat")
    try:
        import yappi
    except ImportError:
        import cProfile

        profile = cProfile.Profile()
        try:
            profile.runcall(main)
        finally:
            profile.dump_stats(out)
        return
    yappi.set_clock_type("cpu")
    yappi.start()
    try:
        main()
    finally:
        yappi.stop()
        yappi.get_func_stats().save(out, type="pstat")
