"""HTTP servers on 127.0.0.1 for tests, quiet when a client goes away.

``socketserver`` prints a traceback to ``sys.stderr`` when a handler thread meets a closed
connection (a client that timed out on purpose, a test that ended first).  That thread can
outlive its test, and its print then lands in whatever captures ``sys.stderr`` at that moment:
Click's ``CliRunner`` in an unrelated test read it as part of a command's ``--json`` output
(a CI failure).  A client that hangs up is what these servers are for, so it is not an error.
"""

from __future__ import annotations

import logging
import sys
from http.server import ThreadingHTTPServer
from typing import Any

log = logging.getLogger("tests.loopback")


class QuietHTTPServer(ThreadingHTTPServer):
    """A :class:`ThreadingHTTPServer` with daemon handler threads that logs a broken
    connection instead of printing it; any other handler error is still printed."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)):
            log.debug("client %s went away: %r", client_address, error)
            return
        super().handle_error(request, client_address)
