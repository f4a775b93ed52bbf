"""Reading forwarding headers: an address from a hop or peer, the ``for=`` hops of ``Forwarded``.

``ClientIP`` (``_identity``) walks these hops right to left past its trusted
proxies; this module only parses, trusting nothing.
"""

from __future__ import annotations

import ipaddress
import re

from ratewarden.headers import split_outside_quotes

__all__ = ["IPAddress", "forwarded_for", "parse_ip"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse_ip(text: str) -> IPAddress | None:
    """An address from a header hop or peer: ``1.2.3.4``, ``1.2.3.4:80``, ``[::1]:80``, ``::1``."""
    text = text.strip().strip('"')
    if text.startswith("["):
        text = text[1 : text.find("]")] if "]" in text else ""
    elif text.count(":") == 1:
        text = text.split(":", 1)[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


# RFC 7239's grammar, read leniently where a proxy's spelling does not matter (spaces
# around ``=`` and ``;``, an address with a port or brackets left unquoted) and strictly
# where it does: a quoted string is a whole value, closed before the element ends.
_PAIR = r'([-!#$%&\'*+.^_`|~0-9A-Za-z]+)[ \t]*=[ \t]*("(?:[^"\\]|\\.)*"|[^\s",;]+)'
_PAIRS = re.compile(_PAIR)
_ELEMENT = re.compile(rf"[ \t]*{_PAIR}(?:[ \t]*;[ \t]*{_PAIR})*[ \t]*")


def forwarded_for(value: str) -> list[str]:
    """The ``for=`` values of a ``Forwarded`` header (RFC 7239), in order.

    A hop is "" when its element has no ``for=`` or does not parse (a parameter
    without ``=`` or given twice, a quote inside a value). A quote never closed makes
    the rest of the header one element that does not parse: a client that opens a
    quote cannot hide the element its proxy appends inside a string of its own.
    """
    hops = []
    for element in split_outside_quotes(value, ","):
        found = ""
        if _ELEMENT.fullmatch(element):
            pairs = [(name.lower(), raw) for name, raw in _PAIRS.findall(element)]
            if len({name for name, _ in pairs}) == len(pairs):
                found = next((raw for name, raw in pairs if name == "for"), "")
        hops.append(found)
    return hops
