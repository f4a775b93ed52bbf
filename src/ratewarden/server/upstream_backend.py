"""envoyproxy/ratelimit's ``BACKEND_TYPE``: the store its settings describe.

``redis`` (upstream's default) takes the Redis settings (``upstream_redis``): the store URL,
and the per-second store's with ``REDIS_PERSECOND``. ``memcache`` takes memcached's::

    BACKEND_TYPE=memcache, MEMCACHE_HOST_PORT=h1:p1,h2:p2      memcache://h1:p1,h2:p2

as upstream reads them (``src/memcached/cache_impl.go``), where a ratewarden store can:

- ``MEMCACHE_HOST_PORT`` is needed, a comma-separated list of ``HOST:PORT`` (an IPv6 host in
  brackets), each server once; a Unix socket path (upstream's client takes one) is refused.
- ``MEMCACHE_SRV`` (servers from a DNS SRV record) is refused: no SRV lookup is built; list the
  servers in ``MEMCACHE_HOST_PORT``. ``MEMCACHE_SRV_REFRESH`` acts only with it: no effect.
- ``MEMCACHE_TLS=true`` is refused: the store speaks to memcached without TLS. Its files
  (``MEMCACHE_TLS_CACERT``...) act only with it: no effect.
- ``MEMCACHE_MAX_IDLE_CONNS``: no effect (one pipelined connection per server per process).
- The Redis settings have no effect, as upstream's memcache backend reads none of them:
  ``REDIS_TIMEOUT`` neither (upstream's memcached client waits its own fixed 500 ms);
  ``--store-timeout`` (ratewarden's 20 ms unless given) bounds each memcached call, and
  ``REDIS_PERSECOND`` makes no per-second store. ``CACHE_KEY_PREFIX`` still is the key prefix.

``upstream_settings`` names the settings that cannot act for the backend chosen in the
start's "without effect" line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ratewarden.errors import ConfigurationError
from ratewarden.server import upstream_redis
from ratewarden.server.upstream_settings import value_of

__all__ = ["BACKENDS", "store"]

#: BACKEND_TYPE's values, as upstream's runner switches on them.
BACKENDS = ("redis", "memcache")


def store(values: Mapping[str, Any]) -> dict[str, Any]:
    """``store_url`` (and ``store_timeout``, ``store_per_second``) from the upstream settings
    ``values`` holds (the ones given), as the backend ``BACKEND_TYPE`` names reads them."""
    backend = value_of(values, "BACKEND_TYPE")
    if backend not in BACKENDS:
        raise ConfigurationError(f"BACKEND_TYPE={backend!r}: must be redis or memcache")
    if backend == "memcache":
        return {"store_url": _memcache_url(values)}
    resolved = {
        name: value_of(values, name)
        for name in (*upstream_redis.REDIS_SETTINGS, *upstream_redis.PER_SECOND_SETTINGS)
    }
    out = upstream_redis.store(values, resolved)
    out.update(upstream_redis.per_second_store(values, resolved))
    return out


def _memcache_url(values: Mapping[str, Any]) -> str:
    if "MEMCACHE_SRV" in values:
        raise ConfigurationError(
            f"MEMCACHE_SRV={values['MEMCACHE_SRV']!r} cannot be honoured: ratewarden does not "
            "look memcached servers up in DNS SRV records; list them in MEMCACHE_HOST_PORT "
            "(HOST:PORT,HOST:PORT) and unset MEMCACHE_SRV"
        )
    if values.get("MEMCACHE_TLS"):
        raise ConfigurationError(
            "MEMCACHE_TLS=true cannot be honoured: ratewarden's memcache store does not speak "
            "TLS to memcached; reach memcached over a trusted network with MEMCACHE_TLS unset, "
            "or use BACKEND_TYPE=redis with REDIS_TLS"
        )
    if "MEMCACHE_HOST_PORT" not in values:
        raise ConfigurationError(
            "BACKEND_TYPE=memcache needs MEMCACHE_HOST_PORT, the memcached servers as "
            "HOST:PORT,HOST:PORT (MEMCACHE_SRV, upstream's other way, is not built)"
        )
    text = str(values["MEMCACHE_HOST_PORT"])
    servers = [part.strip() for part in text.split(",")]
    for server in servers:
        _check_server(text, server)
    for index, server in enumerate(servers):
        if server in servers[:index]:
            raise ConfigurationError(
                f"MEMCACHE_HOST_PORT={text!r} names {server!r} twice: list each server once "
                "(ratewarden spreads the items evenly over the servers)"
            )
    return "memcache://" + ",".join(servers)


def _check_server(text: str, server: str) -> None:
    """``server`` is ``HOST:PORT`` (``[IPv6]:PORT``), as upstream's client needs it."""
    where = f"MEMCACHE_HOST_PORT={text!r}"
    if not server:
        raise ConfigurationError(f"{where}: an empty server; separate HOST:PORT pairs with ','")
    if "/" in server:
        raise ConfigurationError(
            f"{where}: {server!r} is a Unix socket path; ratewarden reaches memcached over "
            "TCP only: give HOST:PORT"
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
