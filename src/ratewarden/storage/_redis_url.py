"""Store URLs: which Redis to use and how, in one string.

::

    redis://[[user]:password@]host[:port][/db][?option=value...]       one server
    rediss://...                                                       the same over TLS
    unix://[[user]:password@]/path/to/redis.sock[?db=N]                a Unix socket
    redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/service[/db]
                     [?sentinel_username=...&sentinel_password=...]    Sentinel (port 26379)
                     [&ssl_ca_certs=...&ssl_certfile=...&...]          (rediss+sentinel only)
    redis+cluster://[[user]:password@]host[:port][,host[:port]...][/0] Cluster (port 6379)
    rediss+sentinel://... and rediss+cluster://...                     over TLS

``valkey`` may stand for ``redis`` in any scheme (``valkey://``,
``valkeys+cluster://``). For Sentinel the user and password are the data
nodes'; the sentinels' own credentials go in ``sentinel_username`` and
``sentinel_password``, and TLS applies to both, with the same TLS options (which a
``rediss+sentinel://`` URL's query may give: ``TLS_QUERY``). The three ``redis://`` forms
accept redis-py's query options (``?client_name=api``); any other client
option is a keyword argument of ``from_url``. Options the store sets itself on
its connections (``socket_timeout``, ``socket_connect_timeout``, ``retry*``,
``protocol``), TLS options on a URL without TLS, and a ``db=`` option that
differs from the URL's database are refused (``check_options``). A ``redis://`` URL without a host
is refused (redis-py would take localhost), and so is one whose path and
``?db=`` name different databases.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from redis.connection import URL_QUERY_ARGUMENT_PARSERS

from ratewarden.errors import ConfigurationError
from ratewarden.redaction import redact_url

__all__ = ["TLS_QUERY", "Target", "check_options", "client_options", "parse", "tls_query"]

_SCHEMES = {
    "redis": ("redis", False),
    "rediss": ("redis", True),
    "unix": ("redis", False),
    "redis+sentinel": ("sentinel", False),
    "rediss+sentinel": ("sentinel", True),
    "redis+cluster": ("cluster", False),
    "rediss+cluster": ("cluster", True),
}
_DEFAULT_PORT = {"redis": 6379, "sentinel": 26379, "cluster": 6379}
_QUERY = {"sentinel": {"sentinel_username", "sentinel_password"}, "cluster": set[str]()}
#: The TLS options a ``rediss+sentinel://`` URL's query may give (``serve`` has no keyword
#: arguments): for the sentinels and the primary alike, parsed as in a ``rediss://`` URL.
TLS_QUERY = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_check_hostname", "ssl_cert_reqs")
_HOST = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<name>[^:\[\]]+))(?::(?P<port>[^:]*))?$")


@dataclass(frozen=True, slots=True)
class Target:
    """A parsed store URL. ``url`` is the redis-py form for the plain kinds."""

    kind: str  # "redis", "sentinel" or "cluster"
    url: str
    tls: bool = False
    hosts: tuple[tuple[str, int], ...] = ()
    service: str = ""
    db: int = 0
    username: str | None = None
    password: str | None = None
    query: tuple[tuple[str, str], ...] = ()
    #: Whether the URL names the database (``/3``, ``?db=3``, ``/service/3``): a ``db=``
    #: option that differs is then refused, as a URL naming two is.
    db_given: bool = False


#: The URL with its passwords replaced by ``***`` (``ratewarden.redaction.redact_url``).
redact = redact_url


_ENCODE = (
    "a user or password holding @ / # ? or : must be percent-encoded (%40, %2F, %23, %3F, %3A)"
)


def _fail(url: str, problem: str) -> ConfigurationError:
    return ConfigurationError(f"store URL {redact(url)!r}: {problem}")


def _misplaced_credentials(url: str) -> bool:
    """Whether text before the URL's last ``@`` holds a / ? or #: a user or password that
    was not percent-encoded, which no part of the URL can then be read around."""
    rest = url.partition("://")[2]
    return bool(set(rest[: max(rest.rfind("@"), 0)]) & {"/", "?", "#"})


def _digits(text: str) -> bool:
    """Whether ``text`` is a whole number in ASCII digits (``str.isdigit`` takes ``²``, ``٣``)."""
    return text.isascii() and text.isdigit()


def _port(url: str, text: str, host: str) -> int:
    if not _digits(text) or not 0 < int(text) < 65536:
        raise _fail(url, f"port {text!r} of host {host!r} must be a number from 1 to 65535")
    return int(text)


def _hosts(url: str, hostlist: str, default_port: int) -> tuple[tuple[str, int], ...]:
    hosts: list[tuple[str, int]] = []
    for part in hostlist.split(","):
        match = _HOST.match(part.strip())
        if match is None:
            raise _fail(url, f"host {part!r} is not HOST[:PORT] (IPv6 as [ADDR]:PORT)")
        host = match.group("v6") or match.group("name")
        port = match.group("port")
        address = (host, default_port if port is None else _port(url, port, part))
        if any(known.lower() == host.lower() and at == address[1] for known, at in hosts):
            # As a memcache URL refuses it: harmless, but likely a typo for another host.
            raise _fail(url, f"host {part.strip()!r} is named twice; list each host once")
        hosts.append(address)
    return tuple(hosts)


def _db(url: str, text: str, where: str = "in the path") -> int:
    if not _digits(text):
        raise _fail(url, f"database {text!r} {where} must be a whole number (0, 1, ...)")
    return int(text)


def parse(url: str) -> Target:
    """Check ``url`` and split it into its parts; ConfigurationError names the bad one.

    A URL whose credentials hold an unencoded / ? or # (so its parts cannot be told apart)
    fails saying so, with no part of it quoted but the redacted URL.
    """
    if not isinstance(url, str) or "://" not in url:
        shown = redact(url) if isinstance(url, str) else url
        raise ConfigurationError(
            f"store URL {shown!r} must look like redis://host:6379/0 (see RedisStore.from_url)"
        )
    odd = next((i for i, char in enumerate(url) if char.isspace() or not char.isprintable()), -1)
    if odd >= 0:
        raise _fail(
            url,
            f"holds a space or control character ({url[odd]!r} at offset {odd}); in a user or "
            "password percent-encode it (%20 for a space)",
        )
    try:
        return _parse(url)
    except ValueError as exc:  # a ConfigurationError naming the part, or a parser's own
        if _misplaced_credentials(url):
            raise _fail(url, f"cannot tell its parts apart: {_ENCODE}") from None
        if isinstance(exc, ConfigurationError):
            raise
        raise _fail(url, f"cannot be read ({exc})") from None


def _parse(url: str) -> Target:
    scheme, rest = url.split("://", 1)
    if "#" in rest:  # redis-py would drop it, Sentinel take it into the service name
        raise _fail(url, "a store URL takes no #fragment; a # in a password is written %23")
    scheme = scheme.lower()
    if scheme.startswith("valkey"):
        scheme = "redis" + scheme[len("valkey") :]
    if scheme not in _SCHEMES:
        choices = ", ".join(f"{s}://" for s in _SCHEMES)
        raise _fail(
            url,
            f"scheme {scheme!r} is not one of {choices} (valkey may stand for redis in each: "
            "valkey://, valkeys://, valkey+cluster://, ...)",
        )
    kind, tls = _SCHEMES[scheme]
    if kind == "redis":
        return _parse_plain(url, scheme, rest)
    return _parse_nodes(url, scheme, kind, tls, rest)


def _parse_nodes(url: str, scheme: str, kind: str, tls: bool, rest: str) -> Target:
    """The Sentinel and Cluster forms: several hosts, then a path and a query of our own."""
    netloc, _, tail = rest.partition("/")
    path, _, query_text = tail.partition("?")
    if "?" in netloc:
        netloc, _, query_text = netloc.partition("?")
    userinfo, at, hostlist = netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    if not hostlist:
        raise _fail(url, f"no host given; write {scheme}://HOST:PORT")
    hosts = _hosts(url, hostlist, _DEFAULT_PORT[kind])
    query = tuple(parse_qsl(query_text, keep_blank_values=True))
    known = _QUERY[kind] | (set(TLS_QUERY) if kind == "sentinel" and tls else set())
    for name, _value in query:
        if name in TLS_QUERY and kind == "sentinel" and not tls:
            raise _fail(
                url, f"{name} is a TLS option, and the URL is not TLS; use {_TLS_SCHEME[kind]}"
            )
        if name not in known:
            allowed = ", ".join(sorted(known)) or "none"
            raise _fail(
                url,
                f"query option {name!r} is not understood here (allowed: {allowed}); {ELSEWHERE}",
            )
    service, db = _path(url, kind, path)
    given = kind == "sentinel" and bool(path.partition("/")[2])  # SERVICE/DB
    return Target(kind, url, tls, hosts, service, db, username, password, query, given)


#: Where a store's other settings go, for a URL given one it does not take: the library's
#: ``from_url`` and ``ratewarden serve`` (whose user has no keyword arguments) alike.
ELSEWHERE = (
    "other settings are not written in the URL: in Python, keyword arguments of from_url "
    "(timeout=, prefix=, redis-py's client options); under ratewarden serve, --store-timeout "
    "and --key-prefix"
)


def _path(url: str, kind: str, path: str) -> tuple[str, int]:
    """``(service, db)`` from ``SERVICE[/DB]`` (Sentinel) or ``[0]`` (Cluster)."""
    segments = path.split("/") if path else []
    if kind == "cluster":
        if len(segments) > 1 or (segments and segments[0] not in ("", "0")):
            raise _fail(url, f"path {'/' + path!r}: a Redis Cluster has only database 0")
        return "", 0
    if not segments or not segments[0]:
        raise _fail(url, "no Sentinel service name; write .../SERVICE_NAME[/DB]")
    if len(segments) > 2:
        raise _fail(url, f"path {'/' + path!r} must be /SERVICE_NAME or /SERVICE_NAME/DB")
    db = _db(url, segments[1]) if len(segments) == 2 and segments[1] else 0
    return unquote(segments[0]), db


def _parse_plain(url: str, scheme: str, rest: str) -> Target:
    # redis-py parses these; check the parts it would silently ignore or misread.
    redis_url = f"{scheme}://{rest}"
    try:
        parts = urlsplit(redis_url)
    except ValueError as exc:  # an unclosed [ of an IPv6 address
        host = rest.partition("/")[0].rpartition("@")[2]
        raise _fail(url, f"host {host!r} is not HOST[:PORT] (IPv6 as [ADDR]:PORT): {exc}") from None
    # redis-py takes the query's db over the path's: a URL that says both must agree
    dbs = [(f"db={value}", value) for name, value in parse_qsl(parts.query) if name == "db"]
    for _label, value in dbs:
        _db(url, value, "in ?db=")
    if scheme == "unix":
        if not parts.path:
            raise _fail(url, "no socket path; write unix:///path/to/redis.sock")
    else:
        if not parts.hostname:  # redis-py would take localhost
            raise _fail(
                url,
                f"no host given; write {scheme}://HOST[:PORT][/DB] "
                f"({scheme}://localhost:6379/0 for a Redis on this machine)",
            )
        try:
            port = parts.port  # raises on a port out of 0-65535 or not a number
        except ValueError:
            port = -1
        if port is not None and not 0 < port < 65536:  # urlsplit takes port 0
            host = parts.netloc.rpartition("@")[2]
            raise _fail(url, f"port of host {host!r} must be a number from 1 to 65535")
        path = parts.path.strip("/")
        if path:
            _db(url, path)
            dbs.insert(0, (f"/{path}", path))
    if len({int(value) for _, value in dbs}) > 1:
        given = " and ".join(label for label, _ in dbs)
        raise _fail(
            url,
            f"the database is given more than once and differs ({given}); give it once, "
            + ("as ?db=DB" if scheme == "unix" else "in the path (/DB) or as ?db=DB"),
        )
    db = int(dbs[0][1]) if dbs else 0
    return Target("redis", redis_url, scheme == "rediss", db=db, db_given=bool(dbs))


def tls_query(target: Target) -> dict[str, Any]:
    """The TLS options of a Sentinel URL's query (``TLS_QUERY``), parsed as redis-py parses
    a ``rediss://`` URL's (``ssl_check_hostname=false``)."""
    found: dict[str, Any] = {}
    for name, value in target.query:
        if name in TLS_QUERY:
            parse_value: Any = URL_QUERY_ARGUMENT_PARSERS.get(name, str)
            try:
                found[name] = parse_value(value)
            except (TypeError, ValueError):
                raise _fail(target.url, f"query option {name}={value!r} cannot be read") from None
    return found


def client_options(timeout: float, options: dict[str, Any]) -> dict[str, Any]:
    """Client options: the store's timeout for connect and reads (``check_options`` refuses
    one given)."""
    return {**options, "socket_timeout": timeout, "socket_connect_timeout": timeout}


_TIMEOUT = (
    "the store's timeout bounds each connect and each reply on its connections; give "
    "from_url timeout= (under ratewarden serve, --store-timeout)"
)
_RETRY = (
    "the store never retries on its own (a decision is not idempotent: it sends again only "
    "what provably did not run); leave it out"
)
#: Connection options the store sets itself, and why one given would not be used.
_STORE_SETS = {
    "socket_timeout": _TIMEOUT,
    "socket_connect_timeout": _TIMEOUT,
    "retry": _RETRY,
    "retry_on_timeout": _RETRY,
    "retry_on_error": _RETRY,
    "protocol": "the store speaks RESP2 on its connections; leave it out",
}
_TLS_SCHEME = {
    "redis": "rediss://",
    "sentinel": "rediss+sentinel://",
    "cluster": "rediss+cluster://",
}


def _given(target: Target, options: dict[str, Any]) -> dict[str, str]:
    """Each client option given, and where: a keyword of from_url, or a plain URL's query."""
    found = {name: "the keyword option" for name in options}
    if target.kind == "redis":
        for name, _value in parse_qsl(urlsplit(target.url).query, keep_blank_values=True):
            found[name] = "the URL's query option"
    return found


def check_options(target: Target, options: dict[str, Any]) -> None:
    """Refuse what would be given and not used: a connection option the store sets itself,
    TLS options on a URL without TLS, and a database the URL names otherwise."""
    where = f"store URL {redact(target.url)!r}"
    given = _given(target, options)
    for name, how in given.items():
        if name in _STORE_SETS:
            raise ConfigurationError(f"{where}: {how} {name} is not used: {_STORE_SETS[name]}")
    tls = sorted(name for name in given if name.startswith("ssl_"))
    if target.kind == "redis" and "ssl" in given:
        tls.insert(0, "ssl")
    # A Sentinel or Cluster client may be made TLS by its options (ssl=True, a class).
    made_tls = bool(options.get("ssl")) or bool(
        {"connection_class", "connection_pool"} & set(options)
    )
    if tls and not target.tls and not (target.kind != "redis" and made_tls):
        named = ", ".join(tls) + (" is a TLS option" if len(tls) == 1 else " are TLS options")
        if target.url.startswith("unix:"):
            fix = "a Unix socket is not TLS: leave it out, or reach the server by rediss://"
        else:
            fix = f"use {_TLS_SCHEME[target.kind]} for TLS, or leave it out"
        raise ConfigurationError(f"{where}: {named}, and the URL is not TLS; {fix}")
    if "db" in options and target.db_given and str(options["db"]) != str(target.db):
        raise ConfigurationError(
            f"{where}: the database is given twice and differs (database {target.db} in the "
            f"URL, db={options['db']!r} as a keyword option); give it once"
        )
