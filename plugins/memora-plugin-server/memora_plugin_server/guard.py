"""Who is calling and whether they may: bearer tokens, loopback without them, the origin, the
rate limit.  Every route — the table's, A2A's — asks the one :class:`Guard`."""

from __future__ import annotations

import ipaddress
import logging
import math
import re
import stat
import time
from pathlib import Path
from typing import Literal, cast

from starlette.requests import Request
from starlette.responses import Response

from memora import check_scope
from memora.errors import InvalidConfigError, MemoraError

from .config import ServerSettings, TokenEntry, load_server_settings, settings_path
from .errors import ApiError, error_response
from .ratelimit import Buckets, RateFile, SharedBuckets

logger = logging.getLogger("memora.server")

__all__ = [
    "FAILED_AUTH_PER_MINUTE",
    "PROXY_HEADERS",
    "USER_HEADER",
    "Access",
    "Guard",
    "client_key",
    "host_name",
    "is_loopback",
    "scope_for",
]

Access = Literal["public", "read", "write"]
"""Who may call a route: anyone, a token that may read the project, one that may write."""


def client_key(host: str | None) -> str:
    """Whose allowance a request from ``host`` draws on: its address — its /64 for IPv6 (one
    subscriber's network: an address of it each request would start afresh), every loopback
    address as one (127.0.0.2 is this machine too)."""
    if not host:
        return "ip:?"
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return f"ip:{host}"
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback:
        return "ip:loopback"
    if isinstance(address, ipaddress.IPv6Address):
        return f"ip:{ipaddress.ip_network(f'{address}/64', strict=False)}"
    return f"ip:{address}"


FAILED_AUTH_PER_MINUTE = 30
"""Requests with a missing or unknown token an address may make a minute (in bursts of 10)
before they are refused as ``429`` without the token being looked at: guessing costs time."""


PROXY_HEADERS = (
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-real-ip",
    "x-client-ip",
    "true-client-ip",
    "cf-connecting-ip",
    "fastly-client-ip",
    "x-cluster-client-ip",
    "via",
)
"""A request a proxy passed on is not from this machine, whatever its address: any header a
proxy or CDN adds means "proxied"."""

_HOST = re.compile(r"^(?:\[([0-9A-Fa-f:.]+)\]|([A-Za-z0-9.-]+))(?::(\d{1,5}))?$")


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


def host_name(host_header: str) -> str:
    """The name in a ``Host`` header — ``name``, ``name:port``, ``[v6]`` or ``[v6]:port``
    exactly — or ``""`` for anything else (``127.0.0.1:80@evil.test`` is no loopback name)."""
    match = _HOST.match(host_header.strip())
    if match is None:
        return ""
    v6, name, _ = match.groups()
    return f"[{v6}]" if v6 is not None else name


FOLLOW_SECONDS = 1.0
"""How often a running server looks at ``server.json`` for changed tokens and limits."""


Stamp = tuple[int, int, int, int, bool]
"""What tells a changed ``server.json``: its times, size and inode (a rewrite is a new file,
whose times a coarse clock may give the old one's), and whether it is a regular file."""


def _stamp(folder: Path) -> Stamp | None:
    try:
        st = settings_path(folder).stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino, stat.S_ISREG(st.st_mode)


class Guard:
    """Who is calling and whether they may: bearer tokens, loopback without them, the origin,
    the rate limit."""

    def __init__(
        self,
        settings: ServerSettings,
        *,
        follow: Path | None = None,
        rate_file: Path | None = None,
        secured: bool = False,
    ) -> None:
        self.settings = settings
        self._rates = RateFile(rate_file) if rate_file is not None else None
        """With several workers: the file their rate-limit buckets share (see
        :mod:`.ratelimit`); None: buckets in this process."""
        self.buckets = self._buckets("requests", settings.rate_limit_per_minute)
        self.failures = self._buckets("failed-auth", FAILED_AUTH_PER_MINUTE)
        """Requests whose token was missing or wrong, per address (see :func:`client_key`)."""
        self.secured = secured or bool(settings.tokens)
        """The server asks for tokens.  Set at start when tokens are configured (or ``secured``:
        a worker of a server that was started with tokens, restarted after the last one was
        revoked), or when one is added while it runs, and never unset while it runs: revoking
        the last token (or losing ``server.json``) closes the server to every caller instead of
        opening it to this machine as its owner — running open is a choice made at start,
        never a state reached by removing credentials."""
        self._follow = follow
        """The folder of ``server.json`` to follow: tokens added, changed or revoked there apply
        within a second, in every worker (each reads the file), with no restart."""
        self._seen: Stamp | None = _stamp(follow) if follow is not None else None
        self._checked = time.monotonic()

    def _buckets(self, kind: str, per_minute: int) -> Buckets | SharedBuckets:
        if self._rates is not None:
            return SharedBuckets(self._rates, kind, per_minute)
        return Buckets(per_minute)

    def close(self) -> None:
        """Let go of the shared rate file (the process's exit does too)."""
        if self._rates is not None:
            self._rates.close()

    def _refresh(self) -> None:
        """Read ``server.json`` again when it changed (looked at once a second at most)."""
        if self._follow is None:
            return
        now = time.monotonic()
        if now - self._checked < FOLLOW_SECONDS:
            return
        self._checked = now
        stamp = _stamp(self._follow)
        if stamp == self._seen:
            return
        try:
            if stamp is not None and not stamp[-1]:
                # a directory or a pipe: reading one here would stall every request
                raise InvalidConfigError(f"{settings_path(self._follow)} is not a regular file")
            fresh = load_server_settings(self._follow)
        except (MemoraError, OSError) as exc:  # a broken edit keeps the settings in force
            said = exc.message if isinstance(exc, MemoraError) else str(exc)
            logger.warning("%s; the server keeps its previous settings", said)
            self._seen = stamp
            return
        self._seen = stamp
        if fresh.rate_limit_per_minute != self.settings.rate_limit_per_minute:
            self.buckets = self._buckets("requests", fresh.rate_limit_per_minute)
        self.settings = fresh
        if fresh.tokens:
            self.secured = True
        elif self.secured:
            logger.warning(
                "server.json names no token any more: every request is refused until one is "
                "added (memora serve-tokens add NAME); a server started with tokens never opens"
            )
        logger.info("server settings read again: %d token(s)", len(fresh.tokens))

    def known(self, request: Request) -> bool:
        """Whether a caller of a public route is one who may see what the server serves (the
        project names): a valid token when tokens are configured, this machine otherwise.
        Nothing is refused or counted against the rate limit here."""
        self._refresh()
        if self.secured:
            scheme, _, value = request.headers.get("authorization", "").partition(" ")
            return scheme.lower() == "bearer" and self.settings.token_for(value.strip()) is not None
        client = request.client.host if request.client else None
        return (
            not any(h in request.headers for h in PROXY_HEADERS)
            and is_loopback(client)
            and is_loopback(host_name(request.headers.get("host", "")))
        )

    def check(self, request: Request, access: Access) -> TokenEntry | None:
        """The caller's token (None: loopback without tokens, or a public route), or the
        refusal as :class:`ApiError`."""
        project = request.path_params.get("project")
        return self.check_access(request, access, str(project) if project else None)

    async def refusal(self, request: Request, access: str, project: str) -> Response | None:
        """For routes outside the table (A2A): the refusal as a response, or None (the caller's
        token then in ``request.state.memora_token``)."""
        try:
            request.state.memora_token = self.check_access(request, cast("Access", access), project)
        except ApiError as exc:
            return error_response(exc.status, exc.code, exc.message, exc.headers)
        return None

    def check_access(
        self, request: Request, access: Access, project: str | None
    ) -> TokenEntry | None:
        self._refresh()
        client = request.client.host if request.client else None
        self._check_origin(request)
        if access == "public":
            # anyone may call, not without end: a flood of probes is refused per address
            self._limit(self.buckets, "pub:" + client_key(client))
            return None
        token: TokenEntry | None = None
        if self.secured:
            try:
                token = self._token(request)
            except ApiError:
                # a wrong or missing token: counted per address, and past the allowance not
                # even looked at — guessing tokens is as slow as FAILED_AUTH_PER_MINUTE allows
                self._limit(self.failures, client_key(client), "requests without a valid token")
                raise
        else:
            # no token configured: this machine only, by address and by Host (a web page
            # elsewhere must not reach a loopback service through a rebound DNS name)
            proxied = any(h in request.headers for h in PROXY_HEADERS)
            if (
                proxied
                or not is_loopback(client)
                or not is_loopback(host_name(request.headers.get("host", "")))
            ):
                raise ApiError(
                    403,
                    "LOOPBACK_ONLY",
                    "no token is configured, so only this machine may call (add one with "
                    "`memora serve-tokens add NAME`)",
                )
        self._limit(self.buckets, token.name if token else client_key(client))
        if token is not None:
            if access == "write" and token.access != "full":
                raise ApiError(403, "FORBIDDEN", f"token {token.name!r} is read-only")
            if project is not None and not token.allows(str(project), write=False):
                raise ApiError(
                    403, "FORBIDDEN", f"token {token.name!r} may not use project {project!r}"
                )
        return token

    def _limit(self, buckets: Buckets | SharedBuckets, who: str, what: str = "requests") -> None:
        wait = buckets.take(who)
        if wait:
            raise ApiError(
                429,
                "RATE_LIMITED",
                f"more than {round(buckets.rate * 60)} {what} a minute",
                {"Retry-After": str(math.ceil(wait))},
            )

    def _token(self, request: Request) -> TokenEntry:
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise ApiError(
                401,
                "UNAUTHORIZED",
                "a bearer token is required (Authorization: Bearer TOKEN)",
                {"WWW-Authenticate": 'Bearer realm="memora"'},
            )
        entry = self.settings.token_for(value.strip())
        if entry is None:
            raise ApiError(
                401,
                "UNAUTHORIZED",
                "unknown token"
                if self.settings.tokens
                else "no token is configured any more: this server was started with tokens and "
                "refuses every request until one is added (memora serve-tokens add NAME)",
                {"WWW-Authenticate": 'Bearer realm="memora", error="invalid_token"'},
            )
        return entry

    def _check_origin(self, request: Request) -> None:
        origin = request.headers.get("origin")
        if origin is None:
            return
        own = f"{request.url.scheme}://{request.headers.get('host', '')}"
        allowed = self.settings.cors_origins
        if origin.rstrip("/") != own and origin.rstrip("/") not in allowed and "*" not in allowed:
            raise ApiError(
                403, "ORIGIN_REFUSED", f"requests from {origin} are not allowed (cors_origins)"
            )


USER_HEADER = "x-memora-user"
"""The request header naming the user a request acts for (``X-Memora-User``)."""


def scope_for(token: TokenEntry | None, user: object = None) -> str | None:
    """The memory scope a request acts in: the user it names (``user``: the ``X-Memora-User``
    header, a body's ``user``, A2A metadata, AG-UI forwarded props) when its token may act for
    users (``act_for_users``), or the token's own scope.  Another user named by a token that
    may not: ``403 FORBIDDEN``; a malformed name: ``400``.  A server without tokens serves one
    person: every process on this machine is its owner — a user's tool command as much as the
    owner's browser — so it cannot keep users apart, and a request naming one is ``403``."""
    if user is None or user == "":
        return token.scope if token is not None else None
    try:
        named = check_scope(user, "user")
    except MemoraError as exc:
        raise ApiError(400, "INVALID_INPUT", exc.message) from None
    if token is None:
        raise ApiError(
            403,
            "FORBIDDEN",
            f"this server has no tokens, so it cannot act for user {named!r}: without tokens "
            "every process on this machine is its owner (a user's tool command too) and users "
            "cannot be kept apart; add a token per person (memora serve-tokens add NAME) or "
            "one for your backend (memora serve-tokens add NAME --act-for-users)",
        )
    if token.act_for_users or named == token.scope:
        return named
    raise ApiError(
        403,
        "FORBIDDEN",
        f"token {token.name!r} may not act for other users (it acts as "
        f"{token.scope or 'the project'}; a token added with --act-for-users may)",
    )
