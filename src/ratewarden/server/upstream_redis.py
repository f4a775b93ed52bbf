"""envoyproxy/ratelimit's Redis settings as a ratewarden store URL (docs/storage.md).

``store(values)`` takes the upstream variables ``upstream_env`` read and, with
``BACKEND_TYPE`` redis (``upstream_backend`` picks the backend), when any Redis one (or
``BACKEND_TYPE``) is set, builds the store URL they describe, the unset ones taking
upstream's defaults::

    REDIS_TYPE=single, REDIS_SOCKET_TYPE=tcp,  REDIS_URL=host:port   redis://host:port/0
    REDIS_TYPE=single, REDIS_SOCKET_TYPE=unix, REDIS_URL=/path        unix:///path
    REDIS_TYPE=cluster,  REDIS_URL=h1:p1,h2:p2                        redis+cluster://h1:p1,h2:p2
    REDIS_TYPE=sentinel, REDIS_URL=master,s1:p1,s2:p2                 redis+sentinel://s1:p1,s2:p2/master

``REDIS_AUTH`` (``password`` or ``user:password``) becomes the URL's credentials,
``REDIS_SENTINEL_AUTH`` the sentinels' (``sentinel_username``/``sentinel_password``),
``REDIS_TLS`` the ``rediss`` schemes and its CA, certificate and hostname
settings redis-py's TLS options in the URL's query (a single server's, or the
Sentinels' and their primary's; a cluster's URL takes none); ``REDIS_TIMEOUT`` the
store's timeout and ``CACHE_KEY_PREFIX`` (read in ``upstream_env``) its key prefix.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from ratewarden.errors import ConfigurationError

__all__ = ["PER_SECOND_SETTINGS", "REDIS_SETTINGS", "per_second_store", "store"]

#: The TLS settings a single server's or a Sentinel URL carries as redis-py options.
_TLS_FILES = {
    "REDIS_TLS_CACERT": "ssl_ca_certs",
    "REDIS_TLS_CLIENT_CERT": "ssl_certfile",
    "REDIS_TLS_CLIENT_KEY": "ssl_keyfile",
}


@dataclass(frozen=True)
class _Names:
    """The variables of one Redis: upstream's main one, or its per-second one."""

    socket_type: str
    type: str
    url: str
    auth: str
    sentinel_auth: str
    tls: str
    timeout: str


_MAIN = _Names(
    "REDIS_SOCKET_TYPE",
    "REDIS_TYPE",
    "REDIS_URL",
    "REDIS_AUTH",
    "REDIS_SENTINEL_AUTH",
    "REDIS_TLS",
    "REDIS_TIMEOUT",
)
_PER_SECOND = _Names(
    "REDIS_PERSECOND_SOCKET_TYPE",
    "REDIS_PERSECOND_TYPE",
    "REDIS_PERSECOND_URL",
    "REDIS_PERSECOND_AUTH",
    "REDIS_PERSECOND_SENTINEL_AUTH",
    "REDIS_PERSECOND_TLS",
    "REDIS_PERSECOND_TIMEOUT",
)
#: The upstream variables that make the store a Redis one when any is set: the main
#: Redis's, its TLS files and ``BACKEND_TYPE``.
REDIS_SETTINGS = (
    "BACKEND_TYPE",
    *vars(_MAIN).values(),
    *_TLS_FILES,
    "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
)
#: The per-second Redis's variables (it shares the TLS files of the main one, as upstream).
PER_SECOND_SETTINGS = ("REDIS_PERSECOND", *vars(_PER_SECOND).values())


def store(values: Mapping[str, Any], resolved: Mapping[str, Any]) -> dict[str, Any]:
    """``store_url`` (and ``store_timeout``) from the upstream Redis settings that are set,
    with ``BACKEND_TYPE`` redis (``upstream_backend`` asks: memcache reads none of them).

    ``values`` holds the settings given, ``resolved`` every one of ``REDIS_SETTINGS``,
    upstream's default where not given.
    """
    if not any(name in values for name in REDIS_SETTINGS):
        return {}
    out: dict[str, Any] = {"store_url": _url(values, resolved, _MAIN)}
    if "REDIS_TIMEOUT" in values:
        out["store_timeout"] = _timeout(values, "REDIS_TIMEOUT")
    return out


def per_second_store(values: Mapping[str, Any], resolved: Mapping[str, Any]) -> dict[str, Any]:
    """``store_per_second`` from the per-second Redis's settings, when ``REDIS_PERSECOND``
    is true (``resolved``: every one of ``PER_SECOND_SETTINGS`` and of the TLS files).

    ratewarden has one timeout for both stores: ``REDIS_PERSECOND_TIMEOUT`` different
    from the main store's is refused, naming both.
    """
    if not resolved["REDIS_PERSECOND"]:
        return {}
    out: dict[str, Any] = {"store_per_second": _url(values, resolved, _PER_SECOND)}
    if "REDIS_PERSECOND_TIMEOUT" in values:
        timeout = _timeout(values, "REDIS_PERSECOND_TIMEOUT")
        main = values.get("REDIS_TIMEOUT")
        if timeout != main:
            shown = "not set (ratewarden's 20ms)" if main is None else f"{main:g}s"
            raise ConfigurationError(
                f"REDIS_PERSECOND_TIMEOUT={timeout:g}s cannot be honoured: ratewarden waits on "
                f"both stores for one timeout, REDIS_TIMEOUT, which is {shown}; set both to "
                "the same duration, or unset REDIS_PERSECOND_TIMEOUT"
            )
    return out


def _timeout(values: Mapping[str, Any], name: str) -> float:
    timeout: float = values[name]
    if timeout <= 0:
        raise ConfigurationError(
            f"{name}={timeout!r}: ratewarden never waits on Redis without a bound; "
            "give a duration above 0 (such as 50ms)"
        )
    return timeout


def _url(values: Mapping[str, Any], resolved: Mapping[str, Any], n: _Names) -> str:
    kind = resolved[n.type]
    if kind not in ("single", "sentinel", "cluster"):
        raise ConfigurationError(f"{n.type}={kind!r}: must be single, sentinel or cluster")
    tls = bool(resolved[n.tls])
    auth = _credentials(str(resolved[n.auth]))
    address = str(resolved[n.url]).strip()
    if kind == "single":
        return _single(values, resolved, address, auth, tls, n)
    if kind == "sentinel":
        return _sentinel(resolved, address, auth, _tls_options(values, resolved, tls, n), n)
    for name in (*_TLS_FILES, "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"):
        if values.get(name):  # set, and not to false
            raise ConfigurationError(
                f"{name} cannot be honoured with {n.type}={kind}: ratewarden's "
                f"{kind} store takes no TLS files; use the system's CA store, a "
                "single server or Sentinel"
            )
    return f"{_scheme(tls)}+cluster://{auth}{_hosts(address, n.url)}"


def _scheme(tls: bool) -> str:
    return "rediss" if tls else "redis"


def _credentials(auth: str) -> str:
    """``user:password@`` or ``:password@`` for the URL, each part percent-encoded."""
    if not auth:
        return ""
    user, colon, password = auth.partition(":")
    if not colon:
        user, password = "", auth
    return f"{quote(user, safe='')}:{quote(password, safe='')}@"


def _hosts(address: str, name: str) -> str:
    hosts = [part.strip() for part in address.split(",")]
    for host in hosts:
        head, colon, port = host.rpartition(":")
        if not colon or not head or not port.isdigit():
            raise ConfigurationError(
                f"{name}={address!r}: {host!r} is not HOST:PORT (a tcp socket type, and "
                "every Redis type but single with a unix socket, names servers as HOST:PORT)"
            )
    return ",".join(hosts)


def _single(
    values: Mapping[str, Any],
    resolved: Mapping[str, Any],
    address: str,
    auth: str,
    tls: bool,
    n: _Names,
) -> str:
    socket_type = resolved[n.socket_type]
    if socket_type not in ("tcp", "unix"):
        raise ConfigurationError(f"{n.socket_type}={socket_type!r}: must be tcp or unix")
    if socket_type == "unix":
        if not address.startswith("/"):
            raise ConfigurationError(
                f"{n.url}={address!r} is not a socket path, and {n.socket_type} is unix "
                f"(upstream's default); set {n.socket_type}=tcp for HOST:PORT"
            )
        if tls:
            raise ConfigurationError(
                f"{n.tls}=true cannot be honoured over a unix socket; set {n.socket_type}=tcp"
            )
        return f"unix://{auth}{quote(address)}"
    if "," in address:
        raise ConfigurationError(
            f"{n.url}={address!r} names several servers, and {n.type} is single; "
            f"set {n.type}=cluster or sentinel"
        )
    options = _tls_options(values, resolved, tls, n)
    query = f"?{urlencode(options)}" if options else ""
    return f"{_scheme(tls)}://{auth}{_hosts(address, n.url)}/0{query}"


def _tls_options(
    values: Mapping[str, Any], resolved: Mapping[str, Any], tls: bool, n: _Names
) -> dict[str, str]:
    """The TLS files and hostname setting as the URL's query options (``REDIS_TLS`` needed)."""
    options = {option: values[name] for name, option in _TLS_FILES.items() if name in values}
    if resolved["REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"]:
        options["ssl_check_hostname"] = "false"
    if options and not tls:
        named = ", ".join(name for name in (*_TLS_FILES, "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"))
        raise ConfigurationError(f"{named} need {n.tls}=true; set it, or unset them")
    return options


def _sentinel(
    resolved: Mapping[str, Any], address: str, auth: str, tls: dict[str, str], n: _Names
) -> str:
    master, comma, sentinels = address.partition(",")
    if not comma or not master.strip() or not sentinels.strip():
        raise ConfigurationError(
            f"{n.url}={address!r}: with {n.type}=sentinel it is the master's name, then "
            "the sentinels: MASTER,HOST:PORT[,HOST:PORT...]"
        )
    options: dict[str, str] = {}
    sentinel_auth = str(resolved[n.sentinel_auth])
    if sentinel_auth:
        user, colon, password = sentinel_auth.partition(":")
        if colon:
            options["sentinel_username"] = user
        options["sentinel_password"] = password if colon else user
    options.update(tls)
    query = f"?{urlencode(options)}" if options else ""
    hosts = _hosts(sentinels, n.url)
    scheme = _scheme(bool(resolved[n.tls]))
    return f"{scheme}+sentinel://{auth}{hosts}/{quote(master.strip(), safe='')}{query}"
