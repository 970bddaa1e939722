"""One address policy for every component that connects to a URL a model or a config supplies
(web fetch today; MCP HTTP servers and others reuse it).

A target is judged **after DNS resolution**, on every redirect, by the addresses it resolves
to: loopback, private, link-local (cloud metadata included), CGNAT, multicast, reserved,
unspecified and documentation ranges are refused unless allow-listed, and every IPv6 form that
embeds an IPv4 address — IPv4-mapped, IPv4-compatible, NAT64 ``64:ff9b::/96``, 6to4
``2002::/16``, Teredo ``2001::/32`` — is judged by the address it embeds.  The caller then
connects to exactly the address that was judged (:class:`Target` carries it), so a DNS answer
that changes between the check and the connection (rebinding) changes nothing.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..errors import ToolError, ToolErrorCode

__all__ = ["AddressPolicy", "Target", "embedded_ipv4", "refusal"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]

_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_6TO4 = ipaddress.ip_network("2002::/16")
_TEREDO = ipaddress.ip_network("2001::/32")


def embedded_ipv4(addr: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, compatible, NAT64, 6to4, Teredo)."""
    if isinstance(addr, ipaddress.IPv4Address):
        return None
    if addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    packed = addr.packed
    if addr in _NAT64 or addr in _NAT64_LOCAL:
        return ipaddress.IPv4Address(packed[-4:])
    if addr in _6TO4:
        return ipaddress.IPv4Address(packed[2:6])
    if addr.teredo is not None:
        return addr.teredo[1]  # the client's address (the server's is public by definition)
    if packed[:12] == bytes(12) and int(addr) > 1:  # IPv4-compatible ::a.b.c.d (deprecated)
        return ipaddress.IPv4Address(packed[-4:])
    return None


def refusal(addr: IPAddress) -> str | None:
    """Why ``addr`` may not be connected to by default, or None when it is a public address."""
    inner = embedded_ipv4(addr)
    if inner is not None:
        why = refusal(inner)
        return f"embeds {inner}, which {why}" if why else None
    if addr.is_loopback:
        return "is a loopback address"
    if addr.is_link_local:
        return "is a link-local address (cloud metadata services live there)"
    if isinstance(addr, ipaddress.IPv4Address) and addr in _CGNAT:
        return "is a carrier-grade NAT address"
    if addr.is_private:
        return "is a private address"
    if addr.is_multicast:
        return "is a multicast address"
    if addr.is_unspecified:
        return "is the unspecified address"
    if addr.is_reserved or not addr.is_global:
        return "is a reserved address"
    return None


@dataclass(frozen=True, slots=True)
class Target:
    """A judged URL: connect to ``address`` and present ``host`` (Host header, TLS SNI)."""

    url: str
    scheme: str
    host: str
    port: int
    address: str

    @property
    def connect_url(self) -> str:
        """The URL with the judged address in place of the host name."""
        parts = urlsplit(self.url)
        netloc = f"[{self.address}]" if ":" in self.address else self.address
        netloc += f":{self.port}"
        return parts._replace(netloc=netloc).geturl()

    @property
    def host_header(self) -> str:
        default = {"http": 80, "https": 443}[self.scheme]
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"


async def _system_resolver(host: str, port: int) -> Sequence[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


class AddressPolicy:
    """``await policy.judge(url)`` -> :class:`Target`, or a ``ToolError`` saying why not.

    ``allow`` lists networks (``"127.0.0.1/32"``, ``"10.0.0.0/8"``) that may be reached although
    the default rules refuse them — set it from the user's side only (the user config, an Agent
    option), never from a project's files.
    """

    def __init__(
        self,
        allow: Iterable[str] = (),
        resolver: Resolver | None = None,
        *,
        hint: str = "a user-side allow-list can permit it",
    ) -> None:
        self.hint = hint
        try:
            self.allow = [ipaddress.ip_network(a, strict=False) for a in allow]
        except ValueError as exc:
            raise ValueError(f"allow-list entry is not an address or network: {exc}") from exc
        self._resolve = resolver or _system_resolver

    def allowed(self, addr: IPAddress) -> bool:
        return any(addr in net for net in self.allow if net.version == addr.version)

    async def judge(self, url: str) -> Target:
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise ToolError(
                ToolErrorCode.INVALID_ARGS, f"{url!r} is not a valid URL: {exc}"
            ) from exc
        if parts.scheme not in ("http", "https"):
            raise ToolError(
                ToolErrorCode.INVALID_ARGS,
                f"only http and https URLs can be fetched, not {parts.scheme or 'a bare path'!r}",
            )
        host = parts.hostname
        if not host:
            raise ToolError(ToolErrorCode.INVALID_ARGS, f"URL {url!r} has no host")
        if parts.username or parts.password:
            raise ToolError(ToolErrorCode.INVALID_ARGS, "URLs with credentials are not fetched")
        port = port or (443 if parts.scheme == "https" else 80)
        try:
            literal: IPAddress | None = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        if literal is not None:
            candidates = [str(literal)]
        else:
            try:
                candidates = list(await self._resolve(host, port))
            except (OSError, UnicodeError) as exc:
                raise ToolError(
                    ToolErrorCode.NETWORK_ERROR, f"cannot resolve {host!r}: {exc}"
                ) from exc
        if not candidates:
            raise ToolError(ToolErrorCode.NETWORK_ERROR, f"{host!r} has no address")
        # every address must pass: a name that also points inside is refused as a whole
        for text in candidates:
            addr = ipaddress.ip_address(text.split("%", 1)[0])
            why = refusal(addr)
            if why and not self.allowed(addr):
                raise ToolError(
                    ToolErrorCode.PERMISSION_DENIED,
                    f"{host!r} resolves to {addr}, which {why}; memora does not connect there "
                    f"({self.hint})",
                )
        address = candidates[0].split("%", 1)[0]
        return Target(url, parts.scheme, host, port, address)
