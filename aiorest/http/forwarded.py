"""Trusted proxies: who the client is, and how it asked, when a proxy stands in between.

Behind nginx every connection comes from nginx; the client's address, the
scheme it used and the host it asked for arrive in headers the proxy adds:
``X-Forwarded-For``, ``X-Forwarded-Proto`` and ``X-Forwarded-Host``, or the
standard ``Forwarded`` (RFC 7239). Anyone can send those headers, so they are
believed only from a peer listed in ``forwarded_allow_ips``; from any other
peer they change nothing.

The peer's trust is decided once per connection (``TrustedProxies.trusts_peer``);
the headers are read only when a handler asks for ``request.client``,
``request.scheme`` or ``request.host`` (``resolve_forwarded``): a request whose
handler never asks pays nothing.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from typing import Any, NamedTuple

from .datastructures import raw_header_values

__all__ = ["TrustedProxies", "Forwarded", "resolve_forwarded", "parse_forwarded", "valid_host"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

MAX_HOPS = 32  # hops examined from the right of a forwarding header; the rest is ignored
_MAX_PAIRS = 16  # parameters in one Forwarded element (RFC 7239 defines four): more is a syntax error
_MAX_HOST = 255

# A host as a Host header may carry it: a name or IPv4 address, or an IPv6 address
# in brackets, then an optional port (RFC 9110, 7.2; reg-name narrowed to DNS characters).
_HOST = re.compile(r"(?:([A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?)|\[([0-9A-Fa-f:.]+)\])(?::([0-9]{1,5}))?")

# RFC 7239, 4:
#   Forwarded         = 1#forwarded-element
#   forwarded-element = [ forwarded-pair ] *( ";" [ forwarded-pair ] )
#   forwarded-pair    = token "=" value
#   value             = token / quoted-string
_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_PAIR = re.compile(rf"[ \t]*({_TOKEN})=({_TOKEN}|\"(?:[^\"\\]|\\.)*\")[ \t]*")
_QUOTED_PAIR = re.compile(r"\\(.)")


class Forwarded(NamedTuple):
    """What the proxies in front said about the client: each part None when not said or not valid."""

    client: tuple[str, int] | None
    scheme: str | None
    host: str | None


_NOTHING = Forwarded(None, None, None)


class TrustedProxies:
    """The peers whose forwarding headers are believed: addresses, CIDR ranges, ``unix``, ``*``.

    ``unix`` trusts peers on a unix socket (the local proxy, when the socket's
    permissions let only it connect); ``*`` trusts every peer.
    """

    def __init__(self, entries: Iterable[str] | str) -> None:
        if isinstance(entries, str):
            entries = entries.split(",")
        self.networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        self.unix = False
        self.everyone = False
        for entry in entries:
            entry = entry.strip()
            if not entry:
                continue
            if entry == "*":
                self.everyone = True
            elif entry.lower() == "unix":
                self.unix = True
            else:
                try:
                    self.networks.append(ipaddress.ip_network(entry, strict=False))
                except ValueError:
                    raise ValueError(
                        f"forwarded_allow_ips: {entry!r} is not an IP address, a CIDR range, 'unix' or '*'"
                    ) from None

    def __bool__(self) -> bool:
        return bool(self.networks) or self.unix or self.everyone

    def __repr__(self) -> str:
        entries = [str(network) for network in self.networks]
        entries += ["unix"] * self.unix + ["*"] * self.everyone
        return f"TrustedProxies({','.join(entries)!r})"

    def trusts(self, address: IPAddress) -> bool:
        """Whether ``address`` is a trusted proxy's."""
        if self.everyone:
            return True
        return any(address in network for network in self.networks)

    def trusts_peer(self, peername: Any) -> bool:
        """Whether a connection from ``peername`` (the transport's) comes from a trusted proxy."""
        if not isinstance(peername, tuple):  # a unix socket's peer: '' or a path
            return self.unix or self.everyone
        address = _ip(peername[0].partition("%")[0])  # a link-local peer's zone: its interface here
        return address is not None and self.trusts(address)


def _ip(text: str) -> IPAddress | None:
    """``text`` as an IP address (an IPv4-mapped IPv6 address as IPv4), or None."""
    if "%" in text:
        # An IPv6 zone ("fe80::1%eth0") names an interface of the host that wrote it, not
        # a client, and Python takes any text after the "%": quotes, spaces, controls.
        return None
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def valid_host(value: str) -> str | None:
    """``value`` if it is a valid ``host[:port]`` (name, IPv4, or IPv6 in brackets), else None."""
    if len(value) > _MAX_HOST:
        return None
    found = _HOST.fullmatch(value)
    if found is None:
        return None
    name, ipv6, port = found.groups()
    if ipv6 is not None:
        try:
            ipaddress.IPv6Address(ipv6)
        except ValueError:
            return None
    if port is not None and int(port) > 65535:
        return None
    return value


def _scheme(value: str) -> str | None:
    value = value.strip().lower()
    return value if value in ("http", "https") else None


def _node(value: str) -> tuple[IPAddress, int] | None:
    """An RFC 7239 node (``192.0.2.1``, ``"[2001:db8::1]:4711"``) as (address, port); None if
    it is ``unknown``, obfuscated (``_hidden``) or not valid. IPv6 only in brackets (RFC 7239, 6)."""
    if value.startswith("["):
        address, bracket, rest = value[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return None
        port_text = rest[1:]
        version = 6
    else:
        address, _, port_text = value.partition(":")
        version = 4
    if "%" in address:  # a zone: see _ip
        return None
    port = 0
    if port_text:
        if port_text.isdigit() and len(port_text) <= 5 and int(port_text) <= 65535:
            port = int(port_text)
        elif not port_text.startswith("_"):  # an obfuscated port says nothing: 0
            return None
    try:
        ip = ipaddress.IPv6Address(address) if version == 6 else ipaddress.IPv4Address(address)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped, port
    return ip, port


def parse_forwarded(headers: list[str]) -> list[dict[str, str]]:
    """The elements of ``Forwarded`` header lines, the last ``MAX_HOPS`` of them, each a dict
    of its parameters (names lower-cased, quoted strings unquoted).

    An element with a syntax error is kept empty (it still counts as a hop), so
    that a hop cannot be hidden by breaking its syntax. Only the end of the headers
    that can hold the last ``MAX_HOPS`` elements is parsed: lines further left are
    skipped, and a line with more elements is parsed from its ``MAX_HOPS``-th comma
    from the right, what precedes standing as one empty element (the rest, unexamined).
    """
    elements: list[dict[str, str]] = []
    for line in reversed(headers):
        if len(elements) >= MAX_HOPS:
            break
        elements[:0] = _parse_forwarded_line(line)
    del elements[:-MAX_HOPS]
    return elements


def _parse_forwarded_line(line: str) -> list[dict[str, str]]:
    elements: list[dict[str, str]] = []
    position, end = 0, len(line)
    if line.count(",") >= MAX_HOPS:
        # A comma inside a quoted string may be taken for a separator here: that can only
        # spoil elements written left of the last MAX_HOPS, which are not examined.
        cut = end
        for _ in range(MAX_HOPS):
            cut = line.rfind(",", 0, cut)
        elements.append({})
        position = cut + 1
    element: dict[str, str] = {}
    pairs = 0
    while position <= end:
        pair = _PAIR.match(line, position)
        pairs += 1
        if pair is not None and pairs <= _MAX_PAIRS:
            name, value = pair.group(1).lower(), pair.group(2)
            if value.startswith('"'):
                value = _QUOTED_PAIR.sub(r"\1", value[1:-1])
            element.setdefault(name, value)
            position = pair.end()
            separator = line[position : position + 1]
            if separator == ";":
                position += 1
                continue
            if separator in (",", ""):
                elements.append(element)
                element = {}
                pairs = 0
                position += 1
                continue
        # A syntax error (or too many pairs): this element is empty; go on after the next comma.
        elements.append({})
        element = {}
        pairs = 0
        comma = line.find(",", position)
        if comma < 0:
            break
        position = comma + 1
    return elements


def _header_values(raw_headers: list[tuple[bytes, bytes]], name: bytes) -> list[str]:
    return [value.decode("latin-1") for value in raw_header_values(raw_headers, name)]


def resolve_forwarded(raw_headers: list[tuple[bytes, bytes]], proxies: TrustedProxies) -> Forwarded:
    """What the forwarding headers of a request from a trusted peer say.

    If any ``X-Forwarded-*`` header is present they are used and ``Forwarded``
    is ignored; otherwise ``Forwarded``. The client is the rightmost hop that
    is not itself a trusted proxy (the leftmost if all are); one that is not a
    valid IP address (``unknown``, obfuscated, garbage) makes the client unknown.
    """
    forwarded_for = _header_values(raw_headers, b"x-forwarded-for")
    proto = _header_values(raw_headers, b"x-forwarded-proto")
    host = _header_values(raw_headers, b"x-forwarded-host")
    if forwarded_for or proto or host:
        client = None
        if forwarded_for:
            hops = ",".join(forwarded_for).rsplit(",", MAX_HOPS)
            complete = len(hops) <= MAX_HOPS
            if not complete:
                del hops[0]  # the unexamined rest
            index = _client_index([_ip(hop.strip()) for hop in hops], proxies, complete=complete)
            if index is not None:
                client = (str(_ip(hops[index].strip())), 0)
        # A list: the value the nearest proxy set is the last one.
        return Forwarded(
            client,
            _scheme(proto[-1].rpartition(",")[2]) if proto else None,
            valid_host(host[-1].rpartition(",")[2].strip()) if host else None,
        )
    lines = _header_values(raw_headers, b"forwarded")
    if not lines:
        return _NOTHING
    elements = parse_forwarded(lines)
    nodes = [_node(element.get("for", "")) for element in elements]
    addresses = [None if node is None else node[0] for node in nodes]
    index = _client_index(addresses, proxies, complete=len(nodes) < MAX_HOPS)
    if index is None:
        # The client is hidden; the element of the hop that hid it still says how it was reached.
        index = next((i for i in range(len(nodes) - 1, -1, -1) if nodes[i] is None), None)
        if index is None:
            return _NOTHING
    element, node = elements[index], nodes[index]
    return Forwarded(
        None if node is None else (str(node[0]), node[1]),
        _scheme(element["proto"]) if "proto" in element else None,
        valid_host(element["host"]) if "host" in element else None,
    )


def _client_index(hops: list[IPAddress | None], proxies: TrustedProxies, *, complete: bool) -> int | None:
    """The index of the client among ``hops`` (the rightmost untrusted one; the leftmost if all are
    trusted and the list is ``complete``), or None if that hop is not a valid address."""
    for index in range(len(hops) - 1, -1, -1):
        address = hops[index]
        if address is None:
            return None
        if not proxies.trusts(address):
            return index
    return 0 if hops and complete else None
