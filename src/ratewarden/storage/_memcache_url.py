"""Where a memcache store's servers are: the URL read, without I/O.

::

    memcache://HOST[:PORT][,HOST[:PORT]...]          the servers (memcached:// too)
    memcache:///PATH/TO.SOCK                         a server on a Unix socket
    memcache://HOST[:PORT],/PATH/TO.SOCK,...         both kinds in one list
    memcaches://HOST[:PORT],...?OPTIONS              the same, over TLS (no Unix socket)
    memcache+srv://_SERVICE._PROTO.NAME?OPTIONS      the servers a DNS SRV record lists
    memcaches+srv://_SERVICE._PROTO.NAME?OPTIONS     both

The port is 11211 when left out; an IPv6 address goes in brackets. A server that begins with
``/`` is a Unix socket's absolute path (as upstream's client takes any server with a ``/``
in it for one), percent-decoded (``%2C`` for a comma, ``%25`` for ``%``); the path as
written is the server's name. TLS options, named as
redis-py names them for ``rediss://``: ``ssl_ca_certs`` (the CA file to trust instead of
the system's), ``ssl_certfile`` and ``ssl_keyfile`` (a client certificate, for servers that
ask for one), ``ssl_check_hostname=false`` (the certificate's chain is still checked, not
the name in it). SRV options: ``refresh`` (seconds between lookups, 0 for once at the
start, as envoyproxy/ratelimit's ``MEMCACHE_SRV_REFRESH``) and ``nameserver`` (``IP[:PORT]``,
comma-separated, instead of the system's resolver). Anything else is refused.
"""

from __future__ import annotations

import ipaddress
import os
import re
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, unquote

from ratewarden import checks
from ratewarden.errors import ConfigurationError
from ratewarden.storage._tls import client_context

__all__ = [
    "DEFAULT_PORT",
    "MAX_SOCKET_PATH_BYTES",
    "Address",
    "HostPort",
    "Tls",
    "Where",
    "check_addresses",
    "parse_url",
    "shown",
    "written",
]

HostPort = tuple[str, int]
#: A server: ``(host, port)`` over TCP, or the absolute path of a Unix socket.
Address = HostPort | str

DEFAULT_PORT = 11211
DNS_PORT = 53
#: The longest Unix socket path memcached listens on (Linux's ``sun_path`` less its NUL).
MAX_SOCKET_PATH_BYTES = 107
#: scheme -> (over TLS, servers from an SRV record)
_SCHEMES = {
    "memcache": (False, False),
    "memcached": (False, False),
    "memcaches": (True, False),
    "memcache+srv": (False, True),
    "memcaches+srv": (True, True),
}
_TLS_OPTIONS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_check_hostname")
_SRV_OPTIONS = ("refresh", "nameserver")
#: Where a store's other settings go, for a URL given one it does not take (``?timeout=``):
#: the library's ``from_url`` and ``ratewarden serve`` (whose user has no keywords) alike.
_ELSEWHERE = (
    "the store's settings are not written in the URL: in Python, keyword arguments of "
    "from_url (timeout=, prefix=, cache_items=, max_item_bytes=, tls=); under ratewarden "
    "serve, --store-timeout and --key-prefix"
)
#: ``_service._proto.name``, as envoyproxy/ratelimit reads MEMCACHE_SRV.
_SRV_NAME = re.compile(r"^_[^.]+\._[^.]+\.[^.].*$")


@dataclass(frozen=True)
class Tls:
    """TLS to the servers: the files of the URL's options (None: the system's CAs)."""

    ca_certs: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    check_hostname: bool = True

    def context(self) -> ssl.SSLContext:
        """The client context these options describe; a file that cannot be read is a
        ``ConfigurationError`` naming the option and the file."""
        context = client_context("memcache TLS", self.ca_certs, self.certfile, self.keyfile)
        context.check_hostname = self.check_hostname
        return context


@dataclass(frozen=True)
class Where:
    """The servers (``addresses``), or the SRV name that lists them (``srv``), and TLS."""

    addresses: tuple[Address, ...] = ()
    srv: str = ""
    refresh: float = 0.0
    nameservers: tuple[HostPort, ...] = ()
    tls: Tls | None = None


def parse_url(url: str) -> Where:
    """What a ``memcache://``, ``memcaches://`` or ``memcache(s)+srv://`` URL says (module doc)."""
    scheme, sep, rest = url.partition("://") if isinstance(url, str) else ("", "", "")
    if not sep or scheme.lower() not in _SCHEMES:
        raise ConfigurationError(
            f"memcache URL {url!r} must start with memcache:// (memcaches:// for TLS, "
            "memcache+srv:// for a DNS SRV name) and list HOST:PORT or /SOCKET/PATH, "
            "comma-separated"
        )
    over_tls, by_srv = _SCHEMES[scheme.lower()]
    rest, _, query = rest.partition("?")
    if rest.endswith("/"):
        rest = rest[:-1]
    if "#" in rest:
        raise ConfigurationError(f"memcache URL {url!r}: no fragment ('#'; %23 in a path)")
    options = _options(url, query, over_tls, by_srv)
    tls = _tls(url, options) if over_tls else None
    if not by_srv:
        addresses = check_addresses([_server(url, part.strip()) for part in rest.split(",")], url)
        if tls is not None and any(isinstance(address, str) for address in addresses):
            raise ConfigurationError(
                f"memcache URL {url!r}: TLS to a Unix socket is not offered (the socket never "
                "leaves the host); list socket servers in a memcache:// URL"
            )
        return Where(addresses=addresses, tls=tls)
    name = rest.strip().rstrip(".")
    if "/" in name:
        raise ConfigurationError(
            f"memcache URL {url!r}: an SRV record lists TCP servers only; a Unix socket is "
            "memcache:///PATH"
        )
    if not _SRV_NAME.match(name) or any(c.isspace() or c in ",:[]@" for c in name):
        raise ConfigurationError(
            f"memcache URL {url!r}: {rest!r} is not an SRV name: _SERVICE._PROTO.NAME, as "
            "_memcache._tcp.cache.example.internal"
        )
    return Where(
        srv=name,
        refresh=_refresh(url, options.get("refresh", "0")),
        nameservers=_nameservers(url, options.get("nameserver", "")),
        tls=tls,
    )


def _options(url: str, query: str, over_tls: bool, by_srv: bool) -> dict[str, str]:
    allowed = (_TLS_OPTIONS if over_tls else ()) + (_SRV_OPTIONS if by_srv else ())
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ConfigurationError(f"memcache URL {url!r}: options are NAME=VALUE&...") from None
    found: dict[str, str] = {}
    for name, value in pairs:
        if name not in allowed:
            known = ", ".join(allowed) if allowed else "none"
            why, then = "", ""
            if name in _TLS_OPTIONS:
                why = " (TLS options need memcaches://)"
            elif name in _SRV_OPTIONS:
                why = " (SRV options need memcache+srv://)"
            else:
                then = f"; {_ELSEWHERE}"
            raise ConfigurationError(
                f"memcache URL {url!r}: unknown option {name!r}{why}; this URL takes: {known}{then}"
            )
        if name in found:
            raise ConfigurationError(f"memcache URL {url!r}: option {name!r} given twice")
        found[name] = value
    return found


def _tls(url: str, options: dict[str, str]) -> Tls:
    files = {}
    for name in ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile"):
        if name in options:
            if not options[name]:
                raise ConfigurationError(f"memcache URL {url!r}: {name} is empty")
            files[name] = options[name]  # parse_qsl has decoded it
    if "ssl_keyfile" in files and "ssl_certfile" not in files:
        raise ConfigurationError(
            f"memcache URL {url!r}: ssl_keyfile without ssl_certfile (the key is the "
            "client certificate's)"
        )
    check = options.get("ssl_check_hostname", "true").lower()
    if check not in ("true", "false"):
        raise ConfigurationError(
            f"memcache URL {url!r}: ssl_check_hostname={check!r} must be true or false"
        )
    return Tls(
        ca_certs=files.get("ssl_ca_certs"),
        certfile=files.get("ssl_certfile"),
        keyfile=files.get("ssl_keyfile"),
        check_hostname=check == "true",
    )


def _refresh(url: str, text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not checks.is_number(seconds):
        raise ConfigurationError(
            f"memcache URL {url!r}: refresh={text!r} must be seconds >= 0 between SRV "
            "lookups (0: once, at the start)"
        )
    return seconds


def _nameservers(url: str, text: str) -> tuple[HostPort, ...]:
    if not text:
        return ()
    found: list[HostPort] = []
    for part in text.split(","):
        host, port = _address(url, part.strip(), DNS_PORT)
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ConfigurationError(
                f"memcache URL {url!r}: nameserver {part.strip()!r} must be an IP address "
                "(IP, IP:PORT or [IPv6]:PORT): a resolver's own name cannot be looked up"
            ) from None
        found.append((host, port))
    if len(set(found)) != len(found):
        raise ConfigurationError(f"memcache URL {url!r} names a nameserver twice")
    return tuple(found)


def _server(url: str, part: str) -> Address:
    """One server of the list: a socket path (it begins with ``/``) or ``HOST[:PORT]``."""
    if part.startswith("/"):
        if any(c.isspace() for c in part):
            raise ConfigurationError(
                f"memcache URL {url!r}: socket path {part!r} has a space; write it %20"
            )
        try:
            path = unquote(part, errors="strict")
        except UnicodeDecodeError:
            raise ConfigurationError(
                f"memcache URL {url!r}: socket path {part!r} is not UTF-8 once percent-decoded"
            ) from None
        return _check_path(path, f"memcache URL {url!r}")
    if any(mark in part for mark in "/@"):
        raise ConfigurationError(
            f"memcache URL {url!r}: only HOST:PORT pairs or Unix socket paths, comma-separated "
            "(no path after a host and no user: memcached has no databases and no passwords "
            "over this protocol; a socket is a server of its own, memcache:///PATH)"
        )
    return _address(url, part)


def _check_path(path: str, where: str) -> str:
    """``path`` (absolute) as a Unix socket server: a file, no NUL, short enough to connect to."""
    try:
        size = len(os.fsencode(path))
        path.encode()
    except UnicodeEncodeError:
        raise ConfigurationError(f"{where}: socket path {path!r} is not valid text") from None
    if path == "/":
        raise ConfigurationError(f"{where}: socket path '/' names no file")
    if "\0" in path:
        raise ConfigurationError(f"{where}: socket path {path!r} holds a NUL character")
    if size > MAX_SOCKET_PATH_BYTES:
        raise ConfigurationError(
            f"{where}: socket path {path!r} is {size} bytes; a Unix socket's path holds "
            f"{MAX_SOCKET_PATH_BYTES} at most (move the socket to a shorter path)"
        )
    return path


def _address(url: str, part: str, default_port: int = DEFAULT_PORT) -> HostPort:
    if part.startswith("["):
        host, close, tail = part[1:].partition("]")
        if not close or (tail and not tail.startswith(":")):
            raise ConfigurationError(f"memcache URL {url!r}: {part!r} is not [IPv6]:PORT")
        colon, port_text = tail[:1], tail[1:]
    else:
        host, colon, port_text = part.partition(":")
    if not host or any(c.isspace() for c in host):
        raise ConfigurationError(f"memcache URL {url!r}: a server without a host ({part!r})")
    if not colon:
        return host, default_port
    # ASCII digits only: str.isdigit() also takes '²' (which int() refuses) and '١٢'.
    if not (port_text.isascii() and port_text.isdigit()) or not 0 < int(port_text) < 65536:
        raise ConfigurationError(f"memcache URL {url!r}: port {port_text!r} is not 1-65535")
    return host, int(port_text)


def check_addresses(addresses: Sequence[object], url: str | None = None) -> tuple[Address, ...]:
    """``addresses`` as servers: ``(host, port)`` pairs (a non-empty host, a port 1-65535) or
    Unix socket paths (absolute), none twice."""
    where = f"memcache URL {url!r}" if url is not None else "memcache servers"
    found: list[Address] = []
    for address in addresses:
        if isinstance(address, str) and address.startswith("/"):
            found.append(_check_path(address, where))
            continue
        if (
            not isinstance(address, tuple)
            or len(address) != 2
            or not isinstance(address[0], str)
            or not address[0]
            or isinstance(address[1], bool)
            or not isinstance(address[1], int)
            or not 0 < address[1] < 65536
        ):
            raise ConfigurationError(
                f"{where}: {address!r} is not a (host, port 1-65535) pair or a Unix socket's "
                "absolute path"
            )
        found.append((address[0], address[1]))
    if not found:
        raise ConfigurationError("a memcache store needs at least one server")
    if len(set(found)) != len(found):
        raise ConfigurationError(f"{where} names a server twice")
    return tuple(found)


def shown(address: Address) -> str:
    """``host:port`` (``[v6]:port``) or a socket's path, as messages and ``node_of`` name a
    server (and rendezvous hashing scores it)."""
    if isinstance(address, str):
        return address
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def written(address: Address) -> str:
    """The server as a URL lists it: ``shown``, a socket's path percent-encoded."""
    return quote(address, safe="/") if isinstance(address, str) else shown(address)
