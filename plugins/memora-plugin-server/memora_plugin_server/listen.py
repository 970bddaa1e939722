"""One listening socket per worker of ``memora serve --workers N``, so the kernel spreads the
connections over the workers.

uvicorn's supervisor binds one socket and every worker accepts from it.  Each worker's event
loop then takes every connection waiting when it wakes (asyncio accepts up to the backlog in one
go), so a burst of connections lands on whichever worker woke first and stays there: with
keep-alive clients (browsers, SDKs) measured at 100 conversations, one of two workers ran 92% of
the turns while the machine sat 38% idle (``bench/bench_serve.py``).  On Linux each worker here
listens on a socket of its own in one ``SO_REUSEPORT`` group, and the kernel hands each new
connection to one of them by a hash of its addresses — as nginx's ``reuseport`` and gunicorn's
``reuse_port`` do.

The supervisor keeps a socket bound to the address and not listening (it reserves the port; a
socket that does not listen is given no connections), after checking that nothing listens there
yet — another ``memora serve --workers`` of the same user would otherwise be let into the
group.  What it passes to each worker it starts — and to each it restarts — is
:class:`ReusePortSocket`, which pickles as "listen on this address": the worker opens its own
socket there.  Where ``SO_REUSEPORT`` does not spread connections (macOS, the BSDs: they give
them all to one socket) memora keeps uvicorn's shared socket.

What a deployment should know: a worker that dies drops the connections that were waiting in
its own queue, not yet accepted (their clients see a reset and retry), where a shared queue would
have handed them to another worker; connections already accepted are the same in both.
"""

from __future__ import annotations

import logging
import socket
import sys
from typing import Any

__all__ = ["ReusePortSocket", "balances_connections", "listen_reuseport", "reserve"]

logger = logging.getLogger("memora.server")


def balances_connections() -> bool:
    """Whether this system spreads connections over the sockets of a ``SO_REUSEPORT`` group
    (Linux does; macOS and the BSDs give them all to one)."""
    return sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _reuseport_socket(host: str, cls: type[socket.socket] = socket.socket) -> socket.socket:
    sock = cls(_family(host), socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    except BaseException:
        sock.close()
        raise
    return sock


def listen_reuseport(host: str, port: int, backlog: int) -> socket.socket:
    """A socket listening on ``host:port`` in its ``SO_REUSEPORT`` group (run in a worker)."""
    sock = _reuseport_socket(host)
    try:
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        # uvicorn's supervisor stops, instead of restarting the worker, on this exit code
        from uvicorn.config import STARTUP_FAILURE

        logger.error("a worker could not listen on %s:%s: %s", host, port, exc)
        raise SystemExit(STARTUP_FAILURE) from exc
    return sock


class ReusePortSocket(socket.socket):
    """The supervisor's socket: bound to the address, not listening.  Sent to a worker it
    becomes that worker's own listening socket at the same address (:func:`listen_reuseport`)."""

    backlog: int = 2048

    def __reduce__(self) -> tuple[Any, ...]:
        host, port = self.getsockname()[:2]
        return (listen_reuseport, (host, port, self.backlog))


def reserve(host: str, port: int, backlog: int) -> ReusePortSocket:
    """Bind (not listen) the supervisor's socket; ``OSError`` when the address cannot be had.

    Any socket listening there refuses it — another ``memora serve --workers`` too: first a
    socket that does not ask to share the port is bound and let go (``SO_REUSEADDR`` alone fails
    while anything listens on the address, and passes over connections of an earlier run waiting
    out their close), and only then the sharing one; without that step a second server of the
    same user would join the first's group and the kernel would split the connections between
    two servers."""
    with socket.socket(_family(host), socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))
        port = probe.getsockname()[1]  # port 0: the one the system chose
    sock = _reuseport_socket(host, ReusePortSocket)
    assert isinstance(sock, ReusePortSocket)
    try:
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    sock.backlog = backlog
    return sock
