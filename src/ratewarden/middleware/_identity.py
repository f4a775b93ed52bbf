"""Who is asking: key extractors for API keys, authenticated users and client addresses.

An extractor maps a ``RequestInfo`` to an identity string, or to None when the
request does not carry that identity. Identities are prefixed by kind
(``key:``, ``user:``, ``ip:``) so an API key can never alias an address. A
rule whose extractor returns None limits the request under its ``fallback``
identity (``"anonymous"`` unless set): one shared bucket, never "unlimited".

Client addresses honour ``X-Forwarded-For`` or ``Forwarded`` (RFC 7239) only
when the socket peer is a trusted proxy, read right to left past trusted hops;
the first untrusted hop is the client. A client that forges these headers without
going through a trusted proxy is limited by its own socket address.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import ipaddress
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, ParamSpec, TypeVar

from ratewarden.checks import check_bool, keywords_checked, refuse_unknown
from ratewarden.errors import ConfigurationError
from ratewarden.middleware._forwarded import IPAddress, forwarded_for, parse_ip
from ratewarden.middleware._key_checks import not_a_key, user_text
from ratewarden.middleware._request import RequestInfo, first_value, from_asgi, list_value

__all__ = [
    "ANONYMOUS",
    "ClientIP",
    "KeyFunc",
    "by_api_key",
    "by_client_ip",
    "by_user",
    "first_of",
    "forwarded_for",
    "parse_ip",
]

#: An identity extractor: the identity of a request, or None when it has none.
KeyFunc = Callable[[RequestInfo], str | None]

#: The identity of requests whose extractor found none (unless a rule sets another).
ANONYMOUS = "anonymous"

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

P = ParamSpec("P")
R = TypeVar("R")


def calls_checked(func: Callable[P, R]) -> Callable[P, R]:
    """``func`` refusing a keyword it does not take, or missing a required keyword-only
    one, with a ``ConfigurationError`` naming it, what it takes and the nearest
    (``by_client_ip(trusted_proxy=...)``, ``limit("5/minute")`` without ``name=``):
    Python's TypeError says no "did you mean". ``checks.keywords_checked``'s twin."""
    params = inspect.signature(func).parameters.values()
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    takes = tuple(p.name for p in params if p.kind in kinds)
    needs = [p.name for p in params if p.kind == kinds[1] and p.default is p.empty]

    @functools.wraps(func)
    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        if not set(kwargs).issubset(takes):
            refuse_unknown(f"{func.__name__}()", kwargs, takes)
        for name in (n for n in needs if n not in kwargs):
            raise ConfigurationError(
                f"{func.__name__}() needs {name}=; it takes {', '.join(takes)}"
            )
        return func(*args, **kwargs)

    return checked


@calls_checked
def by_api_key(header: str = "x-api-key", *, hashed: bool = True) -> KeyFunc:
    """The API key header as ``key:<sha256 hex prefix>`` (the raw value with ``hashed=False``).

    Hashing keeps secrets out of the store, logs and shadow reports; 128 bits of
    SHA-256 keep distinct keys distinct. A header sent twice is keyed on what the app
    reads (``RequestInfo.headers``: the first line under ASGI, the server's joined
    value under WSGI), never a new identity of a key the app accepts.
    """
    if not isinstance(header, str) or not header.strip():
        raise ConfigurationError(f"by_api_key header {header!r} must be a header name")
    check_bool("by_api_key hashed", hashed)
    return _HeaderKey(header.strip().lower(), _hashed_key if hashed else _raw_key)


class _HeaderKey:
    """``by_api_key``'s extractor; ``asgi`` is the same function of an ASGI scope."""

    __slots__ = ("_identity", "_name", "_wanted")

    def __init__(self, name: str, identity: Callable[[str], str | None]) -> None:
        self._name = name
        self._wanted = name.encode("latin-1")
        self._identity = identity

    def __call__(self, request: RequestInfo) -> str | None:
        value = request.headers.get(self._name)
        return self._identity(value) if value else None

    def asgi(self, scope: Mapping[str, Any]) -> str | None:
        """The identity read from the scope's header list, with no ``RequestInfo`` made."""
        value = first_value(scope.get("headers", ()), self._wanted)
        return self._identity(value) if value else None

    def scope_keys(self, prefix: str, fallback: str) -> Callable[[Mapping[str, Any]], str]:
        """``prefix + (self.asgi(scope) or fallback)`` as one call, remembered per header value.

        A client sends the same key again and again: the store key of each value
        seen is kept (``SCOPE_KEYS`` of them, then the table starts over), so a
        request costs a walk of its header list (to the first line of the header,
        the one the app reads) and one lookup.
        """
        wanted, size, identity = self._wanted, len(self._wanted), self._identity
        known: dict[object, str] = {}

        def scope_key(scope: Mapping[str, Any]) -> str:
            value = None
            for name, raw in scope.get("headers", ()):
                if len(name) == size and (name == wanted or name.lower() == wanted):
                    value = raw
                    break
            try:
                return known[value]
            except KeyError:
                found = identity(value.decode("latin-1")) if value else None
                return _remember(known, value, prefix + (found or fallback))
            except TypeError:  # an unhashable value (a bytearray): not remembered
                text = bytes(value).decode("latin-1") if value else ""
                return prefix + ((identity(text) if text else None) or fallback)

        return scope_key

    def __repr__(self) -> str:
        hashed = "" if self._identity is _hashed_key else ", hashed=False"
        return f"by_api_key({self._name!r}{hashed})"


#: Store keys a rule's scope path remembers per header value or peer before it starts over.
SCOPE_KEYS = 4096


def _remember(known: dict[object, str], raw: object, key: str) -> str:
    if len(known) >= SCOPE_KEYS:
        known.clear()
    known[raw] = key
    return key


# A client sends the same key again and again: remember the last few thousand
# identities rather than hash each request (SHA-256 is most of the extractor's time).
@functools.lru_cache(maxsize=4096)
def _hashed_key(value: str) -> str | None:
    value = value.strip()
    if not value:
        return None
    return "key:" + hashlib.sha256(value.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def _raw_key(value: str) -> str | None:
    value = value.strip()
    return f"key:{value}" if value else None


def by_user(callback: Callable[[RequestInfo], object | None]) -> KeyFunc:
    """The authenticated user, as ``user:<id>``; no user (None, "") means anonymous.

    ``callback`` reads the framework's own state from ``request.raw`` and returns the
    user's id, a str or int (Starlette behind ``AuthenticationMiddleware``:
    ``request.raw["user"].identity``). A user object is taken too: one whose
    ``is_authenticated`` is false is anonymous, and any other counts by its ``str``,
    which must be its own (see ``_key_checks.user_text``).
    """
    if not callable(callback):
        raise ConfigurationError(f"by_user callback {callback!r} must be callable")

    def extract(request: RequestInfo) -> str | None:
        user = user_text(callback(request))
        return None if user is None else "user:" + user

    return extract


def first_of(*extractors: KeyFunc) -> KeyFunc:
    """The first identity found: ``first_of(by_api_key(), by_client_ip())``."""
    if not extractors or not all(callable(e) for e in extractors):
        raise ConfigurationError("first_of needs one or more key extractors (callables)")

    def extract(request: RequestInfo) -> str | None:
        for extractor in extractors:
            found = extractor(request)
            if found:
                return found
        return None

    return extract


def _network(text: object) -> IPNetwork:
    try:
        network = ipaddress.ip_network(str(text).strip(), strict=False)
    except ValueError as exc:
        raise ConfigurationError(
            f"trusted proxy {text!r} is not an IP address or network (e.g. '10.0.0.0/8')"
        ) from exc
    if network.prefixlen == 0:
        raise ConfigurationError(
            f"trusted proxy {text!r} trusts every address: each client would name its own "
            "identity (a fresh budget per request); name your proxies ('10.0.0.0/8'), or none"
        )
    return network


def _networks(trusted_proxies: object) -> tuple[IPNetwork, ...]:
    if isinstance(trusted_proxies, str):
        trusted_proxies = [trusted_proxies]
    if not isinstance(trusted_proxies, Iterable):
        raise ConfigurationError(
            f"trusted_proxies={trusted_proxies!r}: give a list of your proxies' addresses or "
            "networks (['10.0.0.0/8']), or none for the socket peer"
        )
    return tuple(_network(n) for n in trusted_proxies)


class ClientIP:
    """The client's address, trusting forwarding headers only from ``trusted_proxies``.

    ``header`` is ``"x-forwarded-for"`` (the default) or ``"forwarded"``, in any
    case; only that one is read (under WSGI, a server that maps ``X_Forwarded_For``
    onto the same environ key lets a client add to it: middleware.md). IPv6 clients
    are grouped by their ``/ipv6_prefix`` network (64 by default), IPv4 clients by
    address. A hop that is not an address (``unknown``, an obfuscated name, a
    ``Forwarded`` element that does not parse) stops the walk: the last address
    read, a trusted proxy, is the client. A network of every address is refused.
    """

    __slots__ = ("_header", "_ipv6_prefix", "_trusted")

    @keywords_checked
    def __init__(
        self,
        trusted_proxies: Iterable[str] = (),
        *,
        header: Literal["x-forwarded-for", "forwarded"] = "x-forwarded-for",
        ipv6_prefix: int = 64,
    ) -> None:
        self._trusted = _networks(trusted_proxies)
        named = header.strip().lower() if isinstance(header, str) else header
        if named not in ("x-forwarded-for", "forwarded"):
            raise ConfigurationError(
                f"client IP header {header!r} must be 'x-forwarded-for' or 'forwarded' "
                "(in any case)"
            )
        self._header: str = named
        if isinstance(ipv6_prefix, bool) or not isinstance(ipv6_prefix, int):
            raise ConfigurationError(f"ipv6_prefix {ipv6_prefix!r} must be a whole number")
        if not 1 <= ipv6_prefix <= 128:
            raise ConfigurationError(f"ipv6_prefix {ipv6_prefix!r} must be between 1 and 128")
        self._ipv6_prefix = ipv6_prefix

    def trusted(self, address: IPAddress) -> bool:
        """True when ``address`` is in one of the trusted proxy networks."""
        return any(address in network for network in self._trusted)

    def _hops(self, request: RequestInfo) -> list[str]:
        # Every line: each proxy may append its own, and the walk needs them all.
        value = list_value(request, self._header)
        if not value:
            return []
        if self._header == "forwarded":
            return forwarded_for(value)
        return value.split(",")

    def address(self, request: RequestInfo) -> IPAddress | None:
        """The client address, or None when the peer is unknown (e.g. a Unix socket)."""
        peer = parse_ip(request.peer or "")
        if peer is None or not self.trusted(peer):
            return peer
        current = peer
        for hop in reversed(self._hops(request)):
            address = parse_ip(hop)
            if address is None:
                return current
            current = address
            if not self.trusted(address):
                return address
        return current

    def __call__(self, request: RequestInfo) -> str | None:
        """The identity ``ip:<address>`` (``ip:<network>/<prefix>`` for IPv6)."""
        if not self._trusted and request.peer is not None:
            # No proxies to trust: the identity is a function of the peer text alone.
            return _peer_identity(request.peer, self._ipv6_prefix)
        return _identity(self.address(request), self._ipv6_prefix)

    def asgi(self, scope: Mapping[str, Any]) -> str | None:
        """``self(from_asgi(scope))``; without trusted proxies, from the peer alone."""
        if not self._trusted:
            client = scope.get("client")
            if client:
                return _peer_identity(str(client[0]), self._ipv6_prefix)
        return self(from_asgi(scope))

    def scope_keys(self, prefix: str, fallback: str) -> Callable[[Mapping[str, Any]], str]:
        """``prefix + (self.asgi(scope) or fallback)`` as one call; without trusted proxies,
        remembered per peer address (see ``_HeaderKey.scope_keys``)."""
        if self._trusted:
            asgi = self.asgi
            return lambda scope: prefix + (asgi(scope) or fallback)
        ipv6_prefix = self._ipv6_prefix
        known: dict[object, str] = {}

        def scope_key(scope: Mapping[str, Any]) -> str:
            client = scope.get("client")
            peer = client[0] if client else None
            try:
                return known[peer]
            except KeyError:
                found = None if peer is None else _peer_identity(str(peer), ipv6_prefix)
                return _remember(known, peer, prefix + (found or fallback))
            except TypeError:  # an unhashable peer: not remembered
                return prefix + (_peer_identity(str(peer), ipv6_prefix) or fallback)

        return scope_key

    def __repr__(self) -> str:
        trusted = [str(n) for n in self._trusted]
        return f"ClientIP(trusted_proxies={trusted!r}, header={self._header!r})"


def _identity(address: IPAddress | None, ipv6_prefix: int) -> str | None:
    if address is None:
        return None
    if isinstance(address, ipaddress.IPv6Address) and ipv6_prefix < 128:
        network = ipaddress.ip_network(f"{address}/{ipv6_prefix}", strict=False)
        return f"ip:{network}"
    return f"ip:{address}"


@functools.lru_cache(maxsize=4096)
def _peer_identity(peer: str, ipv6_prefix: int) -> str | None:
    """The identity of a socket peer (parsing an address costs more than the rest of a rule)."""
    return _identity(parse_ip(peer), ipv6_prefix)


@calls_checked
def by_client_ip(
    trusted_proxies: Iterable[str] = (),
    *,
    header: Literal["x-forwarded-for", "forwarded"] = "x-forwarded-for",
    ipv6_prefix: int = 64,
) -> ClientIP:
    """The client's address; see ``ClientIP``. With no trusted proxies, the socket peer."""
    return ClientIP(trusted_proxies, header=header, ipv6_prefix=ipv6_prefix)


for _factory, _call in (
    (by_api_key, "call it, key=by_api_key() (or by_api_key('x-my-header'))"),
    (by_client_ip, "call it, key=by_client_ip() (or by_client_ip(trusted_proxies=[...]))"),
    (ClientIP, "make one, key=ClientIP() (or ClientIP(trusted_proxies=[...]))"),
    (by_user, "call it with your callback, key=by_user(callback)"),
    (first_of, "call it, key=first_of(by_api_key(), by_client_ip())"),
):
    not_a_key(_factory, _call)
