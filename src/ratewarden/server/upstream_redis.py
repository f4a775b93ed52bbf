"""envoyproxy/ratelimit's Redis settings as a ratewarden store URL (docs/storage.md).

``store(values)`` takes the upstream variables ``upstream_env`` read and,
when any Redis one (or ``BACKEND_TYPE``) is set, builds the store URL they
describe, the unset ones taking upstream's defaults::

    REDIS_TYPE=single, REDIS_SOCKET_TYPE=tcp,  REDIS_URL=host:port   redis://host:port/0
    REDIS_TYPE=single, REDIS_SOCKET_TYPE=unix, REDIS_URL=/path        unix:///path
    REDIS_TYPE=cluster,  REDIS_URL=h1:p1,h2:p2                        redis+cluster://h1:p1,h2:p2
    REDIS_TYPE=sentinel, REDIS_URL=master,s1:p1,s2:p2                 redis+sentinel://s1:p1,s2:p2/master

``REDIS_AUTH`` (``password`` or ``user:password``) becomes the URL's credentials,
``REDIS_SENTINEL_AUTH`` the sentinels' (``sentinel_username``/``sentinel_password``),
``REDIS_TLS`` the ``rediss`` schemes and its CA, certificate and hostname
settings redis-py's TLS options of a single server's URL; ``REDIS_TIMEOUT`` the
store's timeout and ``CACHE_KEY_PREFIX`` (read in ``upstream_env``) its key prefix.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

from ratewarden.errors import ConfigurationError

__all__ = ["REDIS_SETTINGS", "store"]

#: The upstream variables that make the store a Redis one when any is set.
REDIS_SETTINGS = (
    "BACKEND_TYPE",
    "REDIS_SOCKET_TYPE",
    "REDIS_TYPE",
    "REDIS_URL",
    "REDIS_AUTH",
    "REDIS_SENTINEL_AUTH",
    "REDIS_TLS",
    "REDIS_TLS_CLIENT_CERT",
    "REDIS_TLS_CLIENT_KEY",
    "REDIS_TLS_CACERT",
    "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
    "REDIS_TIMEOUT",
)
#: The TLS settings a single server's URL carries as redis-py options.
_TLS_FILES = {
    "REDIS_TLS_CACERT": "ssl_ca_certs",
    "REDIS_TLS_CLIENT_CERT": "ssl_certfile",
    "REDIS_TLS_CLIENT_KEY": "ssl_keyfile",
}


def store(values: Mapping[str, Any], resolved: Mapping[str, Any]) -> dict[str, Any]:
    """``store_url`` (and ``store_timeout``) from the upstream Redis settings that are set.

    ``values`` holds the settings given, ``resolved`` every one of ``REDIS_SETTINGS``,
    upstream's default where not given.
    """
    if not any(name in values for name in REDIS_SETTINGS):
        return {}
    backend = resolved["BACKEND_TYPE"]
    if backend == "memcache":
        raise ConfigurationError(
            "BACKEND_TYPE='memcache' cannot be honoured: ratewarden stores counters in memory "
            "or Redis only; set BACKEND_TYPE=redis with REDIS_URL, or use --store"
        )
    if backend != "redis":
        raise ConfigurationError(f"BACKEND_TYPE={backend!r}: must be redis (or memcache)")
    kind = resolved["REDIS_TYPE"]
    if kind not in ("single", "sentinel", "cluster"):
        raise ConfigurationError(f"REDIS_TYPE={kind!r}: must be single, sentinel or cluster")
    tls = bool(resolved["REDIS_TLS"])
    auth = _credentials(str(resolved["REDIS_AUTH"]))
    address = str(resolved["REDIS_URL"]).strip()
    if kind == "single":
        url = _single(values, resolved, address, auth, tls)
    else:
        for name in (*_TLS_FILES, "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"):
            if values.get(name):  # set, and not to false
                raise ConfigurationError(
                    f"{name} cannot be honoured with REDIS_TYPE={kind}: ratewarden's "
                    f"{kind} store takes no TLS files; use the system's CA store or a "
                    "single server"
                )
        if kind == "cluster":
            url = f"{_scheme(tls)}+cluster://{auth}{_hosts(address)}"
        else:
            url = _sentinel(resolved, address, auth, tls)
    out: dict[str, Any] = {"store_url": url}
    if "REDIS_TIMEOUT" in values:
        timeout = values["REDIS_TIMEOUT"]
        if timeout <= 0:
            raise ConfigurationError(
                f"REDIS_TIMEOUT={timeout!r}: ratewarden never waits on Redis without a bound; "
                "give a duration above 0 (such as 50ms)"
            )
        out["store_timeout"] = timeout
    return out


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


def _hosts(address: str, name: str = "REDIS_URL") -> str:
    hosts = [part.strip() for part in address.split(",")]
    for host in hosts:
        head, colon, port = host.rpartition(":")
        if not colon or not head or not port.isdigit():
            raise ConfigurationError(
                f"{name}={address!r}: {host!r} is not HOST:PORT (REDIS_SOCKET_TYPE=tcp, and "
                "every REDIS_TYPE but single with a unix socket, names servers as HOST:PORT)"
            )
    return ",".join(hosts)


def _single(
    values: Mapping[str, Any], resolved: Mapping[str, Any], address: str, auth: str, tls: bool
) -> str:
    socket_type = resolved["REDIS_SOCKET_TYPE"]
    if socket_type not in ("tcp", "unix"):
        raise ConfigurationError(f"REDIS_SOCKET_TYPE={socket_type!r}: must be tcp or unix")
    if socket_type == "unix":
        if not address.startswith("/"):
            raise ConfigurationError(
                f"REDIS_URL={address!r} is not a socket path, and REDIS_SOCKET_TYPE is unix "
                "(upstream's default); set REDIS_SOCKET_TYPE=tcp for HOST:PORT"
            )
        if tls:
            raise ConfigurationError(
                "REDIS_TLS=true cannot be honoured over a unix socket; set REDIS_SOCKET_TYPE=tcp"
            )
        return f"unix://{auth}{quote(address)}"
    if "," in address:
        raise ConfigurationError(
            f"REDIS_URL={address!r} names several servers, and REDIS_TYPE is single; "
            "set REDIS_TYPE=cluster or sentinel"
        )
    options = {option: values[name] for name, option in _TLS_FILES.items() if name in values}
    if resolved["REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"]:
        options["ssl_check_hostname"] = "false"
    if options and not tls:
        named = ", ".join(name for name in (*_TLS_FILES, "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"))
        raise ConfigurationError(f"{named} need REDIS_TLS=true; set it, or unset them")
    query = f"?{urlencode(options)}" if options else ""
    return f"{_scheme(tls)}://{auth}{_hosts(address)}/0{query}"


def _sentinel(resolved: Mapping[str, Any], address: str, auth: str, tls: bool) -> str:
    master, comma, sentinels = address.partition(",")
    if not comma or not master.strip() or not sentinels.strip():
        raise ConfigurationError(
            f"REDIS_URL={address!r}: with REDIS_TYPE=sentinel it is the master's name, then "
            "the sentinels: MASTER,HOST:PORT[,HOST:PORT...]"
        )
    query = ""
    sentinel_auth = str(resolved["REDIS_SENTINEL_AUTH"])
    if sentinel_auth:
        user, colon, password = sentinel_auth.partition(":")
        options = {"sentinel_password": password} if colon else {"sentinel_password": user}
        if colon:
            options = {"sentinel_username": user, **options}
        query = f"?{urlencode(options)}"
    hosts = _hosts(sentinels)
    return f"{_scheme(tls)}+sentinel://{auth}{hosts}/{quote(master.strip(), safe='')}{query}"
