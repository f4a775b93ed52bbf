"""envoyproxy/ratelimit's settings, as its src/settings/settings.go lists them: ``UPSTREAM``.

Each variable has upstream's default, the parser upstream's type needs (Go
booleans, integers, durations) and one of three roles: ``mapped`` to a ratewarden
setting (by ``upstream_env``), ``no_effect`` (a tuning knob of upstream's
internals: checked, and named in the start's log line by ``no_effect``) or
``refused`` (any value but ``allowed`` stops the start: ``given`` raises a
``ConfigurationError`` naming the variable, its value and what to use instead).
An empty value counts as not set. The settings of the backend ``BACKEND_TYPE`` does not
choose (``REDIS_*`` with memcache, ``MEMCACHE_*`` with redis) are read by neither, here as
upstream: whatever their role, they are checked, never refused, and named without effect.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ratewarden.errors import ConfigurationError
from ratewarden.server.tls_names import check_san

__all__ = ["UPSTREAM", "Upstream", "applied", "given", "no_effect", "value_of"]


def go_bool(text: str) -> bool:
    """``strconv.ParseBool``: 1, t, true / 0, f, false, any case."""
    lowered = text.strip().lower()
    if lowered in ("1", "t", "true"):
        return True
    if lowered in ("0", "f", "false"):
        return False
    raise ConfigurationError("must be true or false (or 1, t, 0, f)")


def go_int(text: str) -> int:
    try:
        return int(text.strip(), 10)
    except ValueError:
        raise ConfigurationError("must be a whole number") from None


def go_float(text: str) -> float:
    try:
        return float(text.strip())
    except ValueError:
        raise ConfigurationError("must be a number") from None


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def go_duration(text: str) -> float:
    """``time.ParseDuration`` in seconds: ``10s``, ``500ms``, ``1h30m``, ``0``."""
    body = text.strip()
    if body == "0":
        return 0.0
    parts = list(_DURATION_PART.finditer(body))
    if not parts or "".join(part.group(0) for part in parts) != body:
        raise ConfigurationError("must be a duration such as 10s, 500ms or 1m30s")
    return sum(float(part.group(1)) * _UNIT_S[part.group(2)] for part in parts)


#: CONFIG_TYPE's values: upstream's two, and GRPC_XDS, read as GRPC_XDS_SOTW.
CONFIG_TYPES = ("FILE", "GRPC_XDS_SOTW", "GRPC_XDS")


def config_type(text: str) -> str:
    value = text.strip().upper()
    if value not in CONFIG_TYPES:
        raise ConfigurationError(f"must be one of {', '.join(CONFIG_TYPES)}")
    return value


def go_text(text: str) -> str:
    return text


def lowered(text: str) -> str:
    return text.strip().lower()


@dataclass(frozen=True, slots=True)
class Upstream:
    """One upstream variable: its default, how to read it, and what ratewarden does with it.

    ``allowed``: for a ``refused`` setting, the values that are accepted (read
    with ``parse``); ``advice`` says why it is refused or has no effect, and what
    to use instead.
    """

    default: str
    parse: Callable[[str], Any]
    role: str  # "mapped", "no_effect" or "refused"
    advice: str = ""
    allowed: tuple[Any, ...] = ()


def _mapped(default: str, parse: Callable[[str], Any] = go_text) -> Upstream:
    return Upstream(default, parse, "mapped")


def _no_effect(default: str, parse: Callable[[str], Any], advice: str) -> Upstream:
    return Upstream(default, parse, "no_effect", advice)


def _refused(default: str, parse: Callable[[str], Any], advice: str, *allowed: Any) -> Upstream:
    return Upstream(default, parse, "refused", advice, allowed or (parse(default),))


_XDS_BACKOFF = (
    "ratewarden has one backoff for a connection that fails and a stream that breaks: it "
    "waits CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL, doubled per failure in a row up to "
    "XDS_CLIENT_BACKOFF_MAX_INTERVAL, each wait jittered between half and 1.5 times"
)
_POOL = "ratewarden's Redis client opens connections as calls need them"
_PIPELINE = "ratewarden already sends the decisions of calls in flight together"

#: Every setting of envoyproxy/ratelimit's src/settings/settings.go, by variable.
UPSTREAM: dict[str, Upstream] = {
    # listening
    "HOST": _mapped("0.0.0.0"),
    "PORT": _mapped("8080", go_int),
    "GRPC_HOST": _mapped("0.0.0.0"),
    "GRPC_PORT": _mapped("8081", go_int),
    "DEBUG_HOST": _mapped("0.0.0.0"),
    "DEBUG_PORT": _mapped("6070", go_int),
    "GRPC_UDS": _mapped("", go_text),
    "GRPC_MAX_CONNECTION_AGE": _mapped("24h", go_duration),
    "GRPC_MAX_CONNECTION_AGE_GRACE": _mapped("1h", go_duration),
    # TLS of the gRPC port
    "GRPC_SERVER_USE_TLS": _mapped("false", go_bool),
    "GRPC_SERVER_TLS_CERT": _mapped(""),
    "GRPC_SERVER_TLS_KEY": _mapped(""),
    "GRPC_CLIENT_TLS_CACERT": _mapped(""),
    "GRPC_CLIENT_TLS_SAN": _mapped("", lambda text: check_san(text) if text.strip() else ""),
    # logging
    "LOG_LEVEL": _mapped("WARN", lowered),
    "LOG_FORMAT": _mapped("text", lowered),
    # where the rules come from
    "CONFIG_TYPE": _mapped("FILE", config_type),
    "FORCE_START_WITHOUT_INITIAL_CONFIG": _mapped("false", go_bool),
    "CONFIG_GRPC_XDS_NODE_ID": _mapped("default"),
    "CONFIG_GRPC_XDS_NODE_METADATA": _mapped(""),
    "CONFIG_GRPC_XDS_SERVER_URL": _mapped("localhost:18000"),
    "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": _mapped("3s", go_duration),
    "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": _mapped(""),
    "CONFIG_GRPC_XDS_SERVER_USE_TLS": _mapped("false", go_bool),
    "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": _mapped(""),
    "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": _mapped(""),
    "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": _mapped(""),
    "CONFIG_GRPC_XDS_SERVER_TLS_SAN": _mapped(""),
    "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": _no_effect("10s", go_duration, _XDS_BACKOFF),
    "XDS_CLIENT_BACKOFF_MAX_INTERVAL": _mapped("60s", go_duration),
    "XDS_CLIENT_BACKOFF_RANDOM_FACTOR": _no_effect("0.5", go_float, _XDS_BACKOFF),
    "XDS_CLIENT_BACKOFF_JITTER": _no_effect("true", go_bool, _XDS_BACKOFF),
    "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": _mapped("0", go_int),
    # stats
    "USE_STATSD": _mapped("true", go_bool),
    "USE_DOG_STATSD": _mapped("false", go_bool),
    "USE_DOG_STATSD_MOGRIFIERS": _mapped("", go_text),
    "STATSD_HOST": _mapped("localhost"),
    "STATSD_PORT": _mapped("8125", go_int),
    "EXTRA_TAGS": _mapped(""),
    "STATS_FLUSH_INTERVAL": _mapped("10s", go_duration),
    "DISABLE_STATS": _mapped("false", go_bool),
    "USE_PROMETHEUS": _mapped("false", go_bool),
    "PROMETHEUS_ADDR": _mapped(":9090"),
    "PROMETHEUS_PATH": _mapped("/metrics"),
    "PROMETHEUS_MAPPER_YAML": _mapped(""),
    "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS": _mapped("false", go_bool),
    # the runtime directory
    "RUNTIME_ROOT": _mapped("/srv/runtime_data/current"),
    "RUNTIME_SUBDIRECTORY": _mapped(""),
    "RUNTIME_APPDIRECTORY": _mapped("config"),
    "RUNTIME_IGNOREDOTFILES": _no_effect(
        "false",
        go_bool,
        "ratewarden never reads hidden names (starting with a dot), as upstream's true; "
        "a hidden file is named in the config_files_skipped warning",
    ),
    "RUNTIME_WATCH_ROOT": _no_effect(
        "true",
        go_bool,
        "ratewarden polls the rule directory through any symlink, so both a swapped "
        "RUNTIME_ROOT link and files changed in place are reloaded",
    ),
    "MERGE_DOMAIN_CONFIG": _mapped("false", go_bool),
    # the cache and charging switches
    "EXPIRATION_JITTER_MAX_SECONDS": _no_effect(
        "300", go_int, "ratewarden's counters expire when their window ends, unjittered"
    ),
    "LOCAL_CACHE_SIZE_IN_BYTES": _mapped("0", go_int),
    "NEAR_LIMIT_RATIO": _mapped("0.8", go_float),
    "CACHE_KEY_PREFIX": _mapped(""),
    "BACKEND_TYPE": _mapped("redis", lowered),
    "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": _mapped("false", go_bool),
    "LIMIT_RESPONSE_HEADERS_ENABLED": _mapped("false", go_bool),
    "LIMIT_LIMIT_HEADER": _mapped("RateLimit-Limit"),
    "LIMIT_REMAINING_HEADER": _mapped("RateLimit-Remaining"),
    "LIMIT_RESET_HEADER": _mapped("RateLimit-Reset"),
    "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": _mapped("false", go_bool),
    "SHADOW_MODE": _mapped("false", go_bool),
    "QUOTA_MODE": _mapped("false", go_bool),
    "RESPONSE_DYNAMIC_METADATA": _mapped("false", go_bool),
    # Redis (turned into a store URL by upstream_redis)
    "REDIS_SOCKET_TYPE": _mapped("unix", lowered),
    "REDIS_TYPE": _mapped("SINGLE", lowered),
    "REDIS_URL": _mapped("/var/run/nutcracker/ratelimit.sock"),
    "REDIS_AUTH": _mapped(""),
    "REDIS_SENTINEL_AUTH": _mapped(""),
    "REDIS_TLS": _mapped("false", go_bool),
    "REDIS_TLS_CLIENT_CERT": _mapped(""),
    "REDIS_TLS_CLIENT_KEY": _mapped(""),
    "REDIS_TLS_CACERT": _mapped(""),
    "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": _mapped("false", go_bool),
    "REDIS_TIMEOUT": _mapped("10s", go_duration),
    "REDIS_POOL_SIZE": _no_effect("10", go_int, _POOL),
    "REDIS_POOL_ON_EMPTY_BEHAVIOR": _refused(
        "WAIT", str.upper, "upstream itself supports only WAIT; remove the setting"
    ),
    "REDIS_PIPELINE_WINDOW": _no_effect("0", go_duration, _PIPELINE),
    "REDIS_PIPELINE_LIMIT": _no_effect("0", go_int, _PIPELINE),
    "REDIS_CLUSTER_PIPELINE_PARALLELISM": _no_effect("1", go_int, _PIPELINE),
    "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": _mapped("false", go_bool),  # (upstream_backend)
    "REDIS_STARTUP_INITIAL_INTERVAL": _no_effect(
        "1s", go_duration, "ratewarden starts without waiting for Redis and reports health"
    ),
    "REDIS_STARTUP_MAX_INTERVAL": _no_effect(
        "30s", go_duration, "ratewarden starts without waiting for Redis and reports health"
    ),
    "REDIS_STARTUP_MAX_ELAPSED_TIME": _no_effect(
        "0", go_duration, "ratewarden starts without waiting for Redis and reports health"
    ),
    # per-second limits on a Redis of their own (upstream_redis); with REDIS_PERSECOND
    # not true, upstream ignores the others: named without effect then (``no_effect``)
    "REDIS_PERSECOND": _mapped("false", go_bool),
    "REDIS_PERSECOND_SOCKET_TYPE": _mapped("unix", lowered),
    "REDIS_PERSECOND_TYPE": _mapped("SINGLE", lowered),
    "REDIS_PERSECOND_URL": _mapped("/var/run/nutcracker/ratelimitpersecond.sock"),
    "REDIS_PERSECOND_AUTH": _mapped(""),
    "REDIS_PERSECOND_TLS": _mapped("false", go_bool),
    "REDIS_PERSECOND_SENTINEL_AUTH": _mapped(""),
    "REDIS_PERSECOND_TIMEOUT": _mapped("10s", go_duration),
    "REDIS_PERSECOND_POOL_SIZE": _no_effect("10", go_int, _POOL),
    "REDIS_PERSECOND_PIPELINE_WINDOW": _no_effect("0", go_duration, _PIPELINE),
    "REDIS_PERSECOND_PIPELINE_LIMIT": _no_effect("0", go_int, _PIPELINE),
    "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM": _no_effect("1", go_int, _PIPELINE),
    "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR": _refused(
        "WAIT", str.upper, "upstream itself supports only WAIT; remove the setting"
    ),
    # memcached, with BACKEND_TYPE=memcache (upstream_backend); with the redis backend
    # upstream ignores them (its docker-compose sets MEMCACHE_HOST_PORT beside Redis):
    # named without effect then (``no_effect``)
    "MEMCACHE_HOST_PORT": _mapped(""),
    "MEMCACHE_MAX_IDLE_CONNS": _no_effect(
        "2",
        go_int,
        "ratewarden keeps one connection per memcached server in each process and writes "
        "the requests of the calls in flight on it together; there is no pool to size",
    ),
    "MEMCACHE_SRV": _mapped(""),
    "MEMCACHE_SRV_REFRESH": _mapped("0", go_duration),  # acts only with MEMCACHE_SRV (_idle)
    "MEMCACHE_TLS": _mapped("false", go_bool),
    **{
        name: _mapped(default, parse)
        for name, default, parse in (
            ("MEMCACHE_TLS_CLIENT_CERT", "", go_text),
            ("MEMCACHE_TLS_CLIENT_KEY", "", go_text),
            ("MEMCACHE_TLS_CACERT", "", go_text),
            ("MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", "false", go_bool),
        )
    },
    # tracing
    "TRACING_ENABLED": _mapped("false", go_bool),
    "TRACING_SERVICE_NAME": _mapped("RateLimit"),
    "TRACING_SERVICE_NAMESPACE": _mapped(""),
    "TRACING_SERVICE_INSTANCE_ID": _mapped(""),
    "TRACING_EXPORTER_PROTOCOL": _mapped("http", lowered),
    "TRACING_SAMPLING_RATE": _mapped("1", go_float),
}


def given(environ: Mapping[str, str]) -> dict[str, Any]:
    """The upstream variables set in ``environ`` (not empty), read; refusals raised."""
    values: dict[str, Any] = {}
    for name, setting in UPSTREAM.items():
        raw = environ.get(name, "")
        if not raw.strip():
            continue
        try:
            value = setting.parse(raw)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{name}={raw!r}: {exc}") from None
        refused = setting.role == "refused" and not _other_backend(environ, name)
        if refused and value not in setting.allowed:
            raise ConfigurationError(f"{name}={raw!r} cannot be honoured: {setting.advice}")
        values[name] = value
    return values


def no_effect(environ: Mapping[str, str], *, xds: bool = False) -> tuple[str, ...]:
    """The ``no_effect`` upstream variables set in ``environ``, for the start's log line,
    the mapped ones that cannot act here (``_idle``; ``xds``: the rules come from xDS,
    as ``--config-xds`` says) and the refused ones of the backend not chosen
    (``_other_backend``: not refused, as upstream does not read them)."""
    return (
        _set(environ, "no_effect")
        + tuple(name for name in _set(environ, "mapped") if _idle(environ, name, xds))
        + tuple(name for name in _set(environ, "refused") if _other_backend(environ, name))
    )


def applied(environ: Mapping[str, str], *, xds: bool = False) -> tuple[str, ...]:
    """The upstream variables set in ``environ`` that configure this process (``mapped``;
    ``xds``: the rules come from xDS, as ``--config-xds`` says).

    Named in a start log line, so that a variable set for something else (``PORT``
    on a platform that sets it, say) is never a silent change of address.
    """
    return tuple(name for name in _set(environ, "mapped") if not _idle(environ, name, xds))


def _idle(environ: Mapping[str, str], name: str, xds: bool = False) -> bool:
    """``name`` is mapped but cannot act: a setting of the backend not chosen
    (``_other_backend``), a per-second Redis setting while ``REDIS_PERSECOND``
    is not true, a tracing one while ``TRACING_ENABLED`` is not, a Prometheus one while
    ``USE_PROMETHEUS`` is not (upstream ignores them then; the milliseconds too beside a
    mapping file), ``FORCE_START_WITHOUT_INITIAL_CONFIG`` with rules from files (read
    before the ports open, as upstream's first file event is), or the ``RUNTIME_*`` rule
    directory with rules from xDS (``CONFIG_TYPE=GRPC_XDS_SOTW``, or ``xds``: the
    ``--config-xds`` flag; upstream reads no file then)."""
    if _other_backend(environ, name):
        return True
    try:
        if name.startswith("REDIS_PERSECOND_"):
            return not go_bool(environ.get("REDIS_PERSECOND", "") or "false")
        if name.startswith("TRACING_") and name != "TRACING_ENABLED":
            return not go_bool(environ.get("TRACING_ENABLED", "") or "false")
        if name.startswith("PROMETHEUS_"):
            mapper = name.endswith("_MILLISECONDS") and environ.get("PROMETHEUS_MAPPER_YAML")
            return bool(mapper) or not go_bool(environ.get("USE_PROMETHEUS", "") or "false")
        if name == "MEMCACHE_SRV_REFRESH":
            return not environ.get("MEMCACHE_SRV", "").strip()
        files = not xds and config_type(environ.get("CONFIG_TYPE", "") or "FILE") == "FILE"
        if name == "FORCE_START_WITHOUT_INITIAL_CONFIG":
            return files
        if name.startswith("RUNTIME_"):
            return not files
    except ConfigurationError:
        pass  # the bad value stops the start: given() names it
    return False


def _other_backend(environ: Mapping[str, str], name: str) -> bool:
    """``name`` is a setting of the backend ``BACKEND_TYPE`` does not choose: a memcached one
    unless it is memcache, a Redis one when it is (upstream's backends read their own only)."""
    if not name.startswith(("MEMCACHE_", "REDIS_")):
        return False
    memcache = lowered(environ.get("BACKEND_TYPE", "") or "redis") == "memcache"
    return memcache != name.startswith("MEMCACHE_")


def _set(environ: Mapping[str, str], role: str) -> tuple[str, ...]:
    return tuple(
        name
        for name, setting in UPSTREAM.items()
        if setting.role == role and environ.get(name, "").strip()
    )


def value_of(values: Mapping[str, Any], name: str) -> Any:
    """``name``'s value as given, else upstream's default for it."""
    if name in values:
        return values[name]
    return UPSTREAM[name].parse(UPSTREAM[name].default)
