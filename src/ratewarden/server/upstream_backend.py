"""envoyproxy/ratelimit's ``BACKEND_TYPE``: the store its settings describe.

``redis`` (upstream's default) takes the Redis settings (``upstream_redis``): the store URL,
and the per-second store's with ``REDIS_PERSECOND``. ``memcache`` takes memcached's::

    BACKEND_TYPE=memcache, MEMCACHE_HOST_PORT=h1:p1,h2:p2      memcache://h1:p1,h2:p2
    BACKEND_TYPE=memcache, MEMCACHE_HOST_PORT=/run/mc.sock,h:p memcache:///run/mc.sock,h:p
    BACKEND_TYPE=memcache, MEMCACHE_SRV=_mc._tcp.cache,
                           MEMCACHE_SRV_REFRESH=30s            memcache+srv://_mc._tcp.cache?refresh=30
    ... and MEMCACHE_TLS=true, MEMCACHE_TLS_CACERT=/ca.pem     memcaches://...?ssl_ca_certs=%2Fca.pem

as upstream reads them (``src/memcached/cache_impl.go``, ``src/settings/settings.go``):

- ``MEMCACHE_HOST_PORT`` or ``MEMCACHE_SRV`` is needed, not both (upstream stops then too).
  ``MEMCACHE_HOST_PORT`` is a comma-separated list of ``HOST:PORT`` (an IPv6 host in
  brackets) and Unix socket paths (an entry with a ``/`` in it, as upstream's client takes
  one; a relative path from the directory ratewarden starts in), each server once; TLS to a
  socket is refused.
  ``MEMCACHE_SRV`` is ``_SERVICE._PROTO.NAME``, looked up at the start and, with
  ``MEMCACHE_SRV_REFRESH`` (a Go duration), again that often (needs dnspython:
  ``ratewarden[memcache-srv]``).
- ``MEMCACHE_TLS=true`` speaks TLS to every server: ``MEMCACHE_TLS_CACERT`` (else the
  system's CAs), ``MEMCACHE_TLS_CLIENT_CERT`` and ``_KEY`` (both or neither),
  ``MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION`` (the chain is still checked, as upstream's).
  Those set without ``MEMCACHE_TLS=true`` are refused rather than left unused.
- ``MEMCACHE_MAX_IDLE_CONNS``: no effect (one pipelined connection per server per process).
- The Redis settings have no effect, as upstream's memcache backend reads none of them:
  ``REDIS_TIMEOUT`` neither (upstream's memcached client waits its own fixed 500 ms);
  ``--store-timeout`` (ratewarden's 20 ms unless given) bounds each memcached call, and
  ``REDIS_PERSECOND`` makes no per-second store. ``CACHE_KEY_PREFIX`` still is the key prefix.

Health follows the store as upstream's does (``health_follows_store``, whenever the store
comes from these settings or ``REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`` is set): with Redis only
when ``REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`` is true (upstream's default is false: health stays
SERVING through a Redis outage), with memcached never (upstream's memcache backend reports
nothing to its health).

``upstream_settings`` names the settings that cannot act for the backend chosen in the
start's "without effect" line.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

from ratewarden.errors import ConfigurationError
from ratewarden.server import upstream_redis
from ratewarden.server.upstream_settings import given, value_of

__all__ = ["BACKENDS", "store", "timeout_note"]

#: BACKEND_TYPE's values, as upstream's runner switches on them.
BACKENDS = ("redis", "memcache")
#: The longest Unix socket path the memcache store connects to (its MAX_SOCKET_PATH_BYTES:
#: the settings may not import the storage layer; a test holds the two equal).
MAX_SOCKET_PATH_BYTES = 107
#: memcached's TLS files, as the store URL's options name them.
_TLS_FILES = {
    "MEMCACHE_TLS_CACERT": "ssl_ca_certs",
    "MEMCACHE_TLS_CLIENT_CERT": "ssl_certfile",
    "MEMCACHE_TLS_CLIENT_KEY": "ssl_keyfile",
}


def store(values: Mapping[str, Any]) -> dict[str, Any]:
    """``store_url`` (and ``store_timeout``, ``store_per_second``, ``health_follows_store``)
    from the upstream settings ``values`` holds (the ones given), as the backend
    ``BACKEND_TYPE`` names reads them."""
    backend = value_of(values, "BACKEND_TYPE")
    if backend not in BACKENDS:
        raise ConfigurationError(f"BACKEND_TYPE={backend!r}: must be redis or memcache")
    if backend == "memcache":
        return {"store_url": _memcache_url(values), "health_follows_store": False}
    resolved = {
        name: value_of(values, name)
        for name in (*upstream_redis.REDIS_SETTINGS, *upstream_redis.PER_SECOND_SETTINGS)
    }
    out = upstream_redis.store(values, resolved)
    out.update(upstream_redis.per_second_store(values, resolved))
    if "store_url" in out or "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION" in values:
        out["health_follows_store"] = value_of(values, "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION")
    return out


def timeout_note(
    timeout: float, flags: Mapping[str, Any], environ: Mapping[str, str]
) -> str | None:
    """The start's warning when the store is a Redis the upstream settings describe and
    ``REDIS_TIMEOUT`` is not set (nor ``--store-timeout``): ``timeout`` (ratewarden's 20 ms)
    bounds every Redis reply where upstream waits 10 s, so a Redis slower than that turns
    each call it delays over to its rule's ``failure_mode``. None otherwise."""
    own = flags.get("store_timeout") is not None or environ.get("RATEWARDEN_STORE_TIMEOUT")
    own_store = flags.get("store_url") is not None or environ.get("RATEWARDEN_STORE")
    values = given(environ)
    if own or own_store or "REDIS_TIMEOUT" in values:
        return None
    if value_of(values, "BACKEND_TYPE") != "redis" or "store_url" not in store(values):
        return None
    return (
        f"REDIS_TIMEOUT is not set: a Redis reply may take {timeout * 1000:g} ms "
        "(ratewarden's store timeout; upstream's REDIS_TIMEOUT default is 10s) before the "
        "call counts as a store failure and its rule's failure_mode answers it (open: "
        "allowed, unlimited). Set REDIS_TIMEOUT (or --store-timeout) above your Redis's p99"
    )


def _memcache_url(values: Mapping[str, Any]) -> str:
    srv = str(values.get("MEMCACHE_SRV", "")).strip()
    if srv and "MEMCACHE_HOST_PORT" in values:
        raise ConfigurationError(
            "MEMCACHE_HOST_PORT and MEMCACHE_SRV are both set: give the servers one way "
            "(upstream refuses both too)"
        )
    if not srv and "MEMCACHE_HOST_PORT" not in values:
        raise ConfigurationError(
            "BACKEND_TYPE=memcache needs MEMCACHE_HOST_PORT, the memcached servers as "
            "HOST:PORT,HOST:PORT, or MEMCACHE_SRV, a DNS SRV name that lists them"
        )
    options = _tls_options(values)
    tls = bool(value_of(values, "MEMCACHE_TLS"))
    if srv:
        refresh = float(value_of(values, "MEMCACHE_SRV_REFRESH"))
        if refresh < 0:
            raise ConfigurationError(f"MEMCACHE_SRV_REFRESH={refresh:g}s must not be negative")
        if refresh:
            options["refresh"] = f"{refresh:g}"
        where = f"{'memcaches' if tls else 'memcache'}+srv://{srv}"
    else:
        text = str(values["MEMCACHE_HOST_PORT"])
        servers = [_server(text, part.strip()) for part in text.split(",")]
        for index, server in enumerate(servers):
            if server in servers[:index]:
                raise ConfigurationError(
                    f"MEMCACHE_HOST_PORT={text!r} names {server!r} twice: list each server "
                    "once (ratewarden spreads the items evenly over the servers)"
                )
        if tls and any(server.startswith("/") for server in servers):
            raise ConfigurationError(
                f"MEMCACHE_HOST_PORT={text!r} lists a Unix socket and MEMCACHE_TLS=true: "
                "ratewarden speaks no TLS to a socket (it never leaves the host); unset "
                "MEMCACHE_TLS or list HOST:PORT servers only"
            )
        where = f"{'memcaches' if tls else 'memcache'}://" + ",".join(servers)
    return where + (f"?{urlencode(options)}" if options else "")


def _tls_options(values: Mapping[str, Any]) -> dict[str, str]:
    """The TLS options of the store URL; files set without ``MEMCACHE_TLS=true`` refused."""
    options = {option: str(values[name]) for name, option in _TLS_FILES.items() if values.get(name)}
    if value_of(values, "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION"):
        options["ssl_check_hostname"] = "false"
    if options and not value_of(values, "MEMCACHE_TLS"):
        named = ", ".join((*_TLS_FILES, "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION"))
        raise ConfigurationError(f"{named} need MEMCACHE_TLS=true; set it, or unset them")
    if ("ssl_certfile" in options) != ("ssl_keyfile" in options):
        raise ConfigurationError(
            "MEMCACHE_TLS_CLIENT_CERT and MEMCACHE_TLS_CLIENT_KEY go together: the client "
            "certificate and its key; set both or neither"
        )
    return options


def _server(text: str, server: str) -> str:
    """One entry of ``MEMCACHE_HOST_PORT`` as the store URL lists it: ``HOST:PORT``, or a
    Unix socket's absolute path, percent-encoded (an entry with a ``/``, as upstream's)."""
    if "/" not in server:
        _check_server(text, server)
        return server
    path = server if server.startswith("/") else os.path.join(os.getcwd(), server)
    try:
        path.encode()
    except UnicodeEncodeError:  # bytes the environment held that are not UTF-8
        raise ConfigurationError(
            f"MEMCACHE_HOST_PORT={text!r}: a socket path is not UTF-8"
        ) from None
    size = len(os.fsencode(path))
    if size > MAX_SOCKET_PATH_BYTES:
        raise ConfigurationError(
            f"MEMCACHE_HOST_PORT={text!r}: socket path {path!r} is {size} bytes; a Unix "
            f"socket's path holds {MAX_SOCKET_PATH_BYTES} at most (move the socket to a "
            "shorter path)"
        )
    return quote(path, safe="/")


def _check_server(text: str, server: str) -> None:
    """``server`` is ``HOST:PORT`` (``[IPv6]:PORT``), as upstream's client needs it."""
    where = f"MEMCACHE_HOST_PORT={text!r}"
    if not server:
        raise ConfigurationError(
            f"{where}: an empty server; separate HOST:PORT pairs (or socket paths) with ','"
        )
    if server.startswith("["):
        host, close, tail = server[1:].partition("]")
        if not close or not tail.startswith(":"):
            raise ConfigurationError(f"{where}: {server!r} is not [IPv6]:PORT")
        port = tail[1:]
    else:
        host, colon, port = server.rpartition(":")
        if ":" in host:
            raise ConfigurationError(
                f"{where}: {server!r}: an IPv6 host goes in brackets, [ADDR]:PORT"
            )
        if not colon:
            raise ConfigurationError(f"{where}: {server!r} is not HOST:PORT (the port is needed)")
    if not host:
        raise ConfigurationError(f"{where}: {server!r} has no host")
    if any(c.isspace() for c in host):
        raise ConfigurationError(f"{where}: {server!r}: a host has no spaces")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigurationError(f"{where}: port {port!r} of {server!r} is not 1-65535")
