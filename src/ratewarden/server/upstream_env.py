"""envoyproxy/ratelimit's environment settings, read as ``ratewarden serve`` settings.

A platform replacing the upstream container keeps its environment: ``PORT``,
``REDIS_URL``, ``RUNTIME_ROOT`` and the rest. ``read(environ)`` turns the
upstream variables that are set into values of ``Settings`` fields, with the
upstream meaning; ``settings.resolve`` puts them under ratewarden's own flags and
``RATEWARDEN_*`` variables, so those win where both are given. An upstream
variable that is not set leaves ratewarden's default (docs/envoy.md lists where
the two differ), except where a set variable needs an unset sibling's upstream
default to mean what it means upstream (``RUNTIME_SUBDIRECTORY`` under the default
``RUNTIME_ROOT``, ``REDIS_URL`` over the default ``REDIS_SOCKET_TYPE``).

Every upstream setting is in ``UPSTREAM`` (``upstream_settings``) with its
default and its role: ``mapped`` (turned into a ratewarden setting here, the
store's by ``upstream_backend``: Redis or memcached), ``no_effect`` (checked, and logged
at start) or ``refused`` (the start stops with a message naming it and what to use instead).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from typing import Any

from ratewarden.errors import ConfigurationError
from ratewarden.server import upstream_backend
from ratewarden.server.dogstatsd import mogrifiers_from_env
from ratewarden.server.options import OPTIONS
from ratewarden.server.parsers import hidden
from ratewarden.server.response_headers import check_header_names
from ratewarden.server.statsd import parse_tags
from ratewarden.server.upstream_settings import UPSTREAM, Upstream, given, no_effect, value_of

__all__ = [
    "BYTES_PER_CACHED_COUNTER",
    "UPSTREAM",
    "XDS_VARIABLES",
    "Upstream",
    "no_effect",
    "read",
    "xds_chosen",
]


def read(environ: Mapping[str, str], flags: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``Settings`` field values from the upstream variables set in ``environ``; ``flags``
    and ``RATEWARDEN_*`` variables, which win, may give GRPC_SERVER_USE_TLS's TLS files.

    Raises ``ConfigurationError`` naming the variable, and its value when bad or refused.
    """
    values = given(environ)
    out: dict[str, Any] = {}
    for reader in (_listening, _logging, _runtime, _xds, _switches, _prometheus, _tracing):
        out.update(reader(values))
    flags = flags or {}
    own = {name for name, o in OPTIONS.items() if flags.get(name) is not None or o.env in environ}
    out.update(_tls(values, own))
    out.update(_stats(values, environ))
    out.update(upstream_backend.store(values))  # BACKEND_TYPE's: Redis or memcached
    return out


def _port(values: Mapping[str, Any], name: str) -> int:
    port = int(value_of(values, name))
    if not 0 <= port <= 65535:
        raise ConfigurationError(f"{name}={port!r}: must be a port number from 0 to 65535")
    return port


def _listening(values: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, field in (("HOST", "host"), ("GRPC_HOST", "grpc_host")):
        if name in values:
            out[field] = values[name].strip()
    for name, field in (("PORT", "http_port"), ("GRPC_PORT", "grpc_port")):
        if name in values:
            out[field] = _port(values, name)
    if "DEBUG_PORT" in values or "DEBUG_HOST" in values:
        out["debug_port"] = _port(values, "DEBUG_PORT")
    if "DEBUG_HOST" in values:
        out["debug_host"] = values["DEBUG_HOST"].strip()
    if "GRPC_UDS" in values:
        out["grpc_uds"] = values["GRPC_UDS"].strip()
    out.update(_connection_age(values))
    return out


def _connection_age(values: Mapping[str, Any]) -> dict[str, Any]:
    """GRPC_MAX_CONNECTION_AGE and its _GRACE, when either is set: both as upstream has them
    (the other at upstream's default, 24h or 1h), where 0 is grpc-go's "no limit". Neither
    set: no limit, ratewarden's default (upstream's is a day), so that ``--transport auto``
    keeps the native transport, which cannot close connections by their age."""
    names = ("GRPC_MAX_CONNECTION_AGE", "GRPC_MAX_CONNECTION_AGE_GRACE")
    if not any(name in values for name in names):
        return {}
    age, grace = (value_of(values, name) for name in names)
    if age <= 0:
        return {}
    out = {"grpc_max_connection_age": age}
    if grace > 0:
        out["grpc_max_connection_age_grace"] = grace
    return out


#: logrus's levels and the nearest of ratewarden's.
_LOG_LEVELS = {
    "trace": "debug",
    "debug": "debug",
    "info": "info",
    "warn": "warning",
    "warning": "warning",
    "error": "error",
    "fatal": "error",
    "panic": "error",
}


def _logging(values: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "LOG_LEVEL" in values:
        level = _LOG_LEVELS.get(values["LOG_LEVEL"])
        if level is None:
            raise ConfigurationError(
                f"LOG_LEVEL={values['LOG_LEVEL']!r}: must be one of {', '.join(_LOG_LEVELS)}"
            )
        out["log_level"] = level
    if "LOG_FORMAT" in values:
        if values["LOG_FORMAT"] not in ("json", "text"):
            raise ConfigurationError(f"LOG_FORMAT={values['LOG_FORMAT']!r}: must be json or text")
        out["log_format"] = values["LOG_FORMAT"]
    return out


def xds_chosen(values: Mapping[str, Any]) -> bool:
    """Whether CONFIG_TYPE asks for the rules from xDS (upstream then reads no RUNTIME_*)."""
    return bool(values.get("CONFIG_TYPE", "FILE") != "FILE")


def _runtime(values: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    layout = ("RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY")
    if any(name in values for name in layout) and not xds_chosen(values):
        parts = [str(value_of(values, name)).strip() for name in layout]
        out["config_paths"] = (os.path.join(*parts),)
        out["config_files"] = "all"  # goruntime reads every file there, subdirectories too
    if "MERGE_DOMAIN_CONFIG" in values:
        out["merge_domains"] = values["MERGE_DOMAIN_CONFIG"]
    return out


#: The xDS client's upstream variables and the settings they map to (CONFIG_TYPE aside).
XDS_VARIABLES = {
    "CONFIG_GRPC_XDS_NODE_ID": "xds_node_id",
    "CONFIG_GRPC_XDS_NODE_METADATA": "xds_node_metadata",
    "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "xds_headers",
    "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "xds_retry_interval",
    "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "xds_retry_max",
    "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "xds_max_message_bytes",
    "CONFIG_GRPC_XDS_SERVER_USE_TLS": "xds_tls",
    "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "xds_tls_ca",
    "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "xds_tls_cert",
    "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": "xds_tls_key",
    "CONFIG_GRPC_XDS_SERVER_TLS_SAN": "xds_tls_server_name",
}


def _xds(values: Mapping[str, Any]) -> dict[str, Any]:
    """CONFIG_TYPE=GRPC_XDS_SOTW: ``config_xds`` from CONFIG_GRPC_XDS_SERVER_URL (or its
    default), and each xDS variable set. Set without it, they are refused: upstream would
    not use them, and neither can ratewarden."""
    given = [name for name in ("CONFIG_GRPC_XDS_SERVER_URL", *XDS_VARIABLES) if name in values]
    if not xds_chosen(values):
        if given:
            several = len(given) > 1
            raise ConfigurationError(
                f"{', '.join(given)} {'are' if several else 'is'} set but CONFIG_TYPE is not "
                "GRPC_XDS_SOTW; set CONFIG_TYPE=GRPC_XDS_SOTW to take the rules from an xDS "
                f"server, or unset {'them' if several else 'it'}"
            )
        return {}
    out: dict[str, Any] = {
        "config_xds": _option(values, "CONFIG_GRPC_XDS_SERVER_URL", "config_xds")
    }
    if "FORCE_START_WITHOUT_INITIAL_CONFIG" in values:  # with files: no effect (no_effect)
        out["xds_force_start"] = values["FORCE_START_WITHOUT_INITIAL_CONFIG"]
    for name, field in XDS_VARIABLES.items():
        if name == "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS" and name in values:
            out[field] = _option(values, name, field, _go_map(name, values[name]))
        elif name in values:
            out[field] = _option(values, name, field)
    return out


def _option(values: Mapping[str, Any], name: str, field: str, text: Any = None) -> Any:
    """``name``'s value (or ``text``) read by ``field``'s own parser; errors name ``name``."""
    raw = value_of(values, name) if text is None else text
    try:
        return OPTIONS[field].parse(raw)
    except ConfigurationError as exc:
        shown = value_of(values, name)
        if field == "xds_headers":
            shown = hidden(shown, ":")
        raise ConfigurationError(f"{name}={shown!r}: {exc}") from None


def _go_map(name: str, text: str) -> str:
    """envconfig's ``map[string]string`` (``KEY:VALUE,KEY:VALUE``) as ``KEY=VALUE,...``."""
    pairs = []
    for item in text.split(","):
        key, colon, value = item.partition(":")
        if not colon or not key.strip():
            raise ConfigurationError(
                f"{name}={hidden(text, ':')!r}: {hidden(item, ':')!r} is not KEY:VALUE; "
                "separate pairs with ','"
            )
        pairs.append(f"{key.strip()}={value.strip()}")
    return ",".join(pairs)


#: Bytes one remembered counter of the over-limit cache takes (measured with tracemalloc, a
#: 60-character key: about 170 for the entry, 130 for the key, 100 for the denial), so that
#: LOCAL_CACHE_SIZE_IN_BYTES keeps its meaning, a memory budget.
BYTES_PER_CACHED_COUNTER = 400
_MAX_CACHED_COUNTERS = 10_000_000


def _switches(values: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if values.get("RESPONSE_DYNAMIC_METADATA"):
        out["response_metadata"] = "upstream"
    if "LOCAL_CACHE_SIZE_IN_BYTES" in values:
        size = values["LOCAL_CACHE_SIZE_IN_BYTES"]
        if size < 0:
            raise ConfigurationError(f"LOCAL_CACHE_SIZE_IN_BYTES={size!r}: must be 0 or more")
        entries = -(-size // BYTES_PER_CACHED_COUNTER)  # any size above 0 keeps one at least
        out["over_limit_cache"] = min(entries, _MAX_CACHED_COUNTERS)
    if "NEAR_LIMIT_RATIO" in values:
        ratio = values["NEAR_LIMIT_RATIO"]
        if not 0.0 < ratio <= 1.0:
            raise ConfigurationError(
                f"NEAR_LIMIT_RATIO={ratio!r}: must be a number above 0 and at most 1"
            )
        out["near_limit_ratio"] = ratio
    if "CACHE_KEY_PREFIX" in values:
        prefix = values["CACHE_KEY_PREFIX"].strip()
        if "{" in prefix or "}" in prefix:
            raise ConfigurationError(
                f"CACHE_KEY_PREFIX={prefix!r}: must not hold '{{' or '}}' (ratewarden puts "
                "each key between braces for Redis Cluster)"
            )
        out["key_prefix"] = prefix
    if "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT" in values:
        out["charge_denied"] = not values["STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"]
    if "SHADOW_MODE" in values:
        out["shadow"] = values["SHADOW_MODE"]
    if "QUOTA_MODE" in values:
        out["quota_mode"] = values["QUOTA_MODE"]
    if "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED" in values:
        out["health_needs_rules"] = values["HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED"]
    if "LIMIT_RESPONSE_HEADERS_ENABLED" in values:
        out["response_headers"] = "legacy" if values["LIMIT_RESPONSE_HEADERS_ENABLED"] else "off"
    named = ("LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER")
    if any(name in values for name in named):
        names = [str(value_of(values, name)).strip() for name in named]
        try:
            out["legacy_header_names"] = check_header_names(names)
        except ValueError as exc:
            raise ConfigurationError(f"{', '.join(named)}: {exc}") from None
    return out


def _tls(values: Mapping[str, Any], own: Collection[str]) -> dict[str, Any]:
    """GRPC_SERVER_USE_TLS=true: the files its variables name; one that ratewarden's own
    settings give (``own``: the fields set by a flag or ``RATEWARDEN_*`` variable, which
    win) need not be set. The files' variables without it are refused."""
    files = {
        "GRPC_SERVER_TLS_CERT": "tls_cert",
        "GRPC_SERVER_TLS_KEY": "tls_key",
        "GRPC_CLIENT_TLS_CACERT": "tls_client_ca",
        "GRPC_CLIENT_TLS_SAN": "tls_client_san",
    }
    if not value_of(values, "GRPC_SERVER_USE_TLS"):
        for name in files:
            if name in values:
                raise ConfigurationError(
                    f"{name} is set but GRPC_SERVER_USE_TLS is not true; set "
                    "GRPC_SERVER_USE_TLS=true to serve gRPC over TLS, or unset it"
                )
        return {}
    out = {field: values[name] for name, field in files.items() if name in values}
    for name, field in list(files.items())[:2]:
        if field not in out and field not in own:
            raise ConfigurationError(
                f"GRPC_SERVER_USE_TLS is true but {name} is not set (nor {OPTIONS[field].flag} "
                "or its variable); TLS needs the certificate and its key"
            )
    if "tls_client_san" in out and "tls_client_ca" not in out and "tls_client_ca" not in own:
        raise ConfigurationError(  # upstream would ignore it: no client certificate asked
            "GRPC_CLIENT_TLS_SAN is set but GRPC_CLIENT_TLS_CACERT is not; only a client "
            "certificate that CA verified can be checked for the name"
        )
    return out


#: The settings of upstream's StatsD sink; any of them set means the operator uses it.
_STATSD = ("STATSD_HOST", "STATSD_PORT", "EXTRA_TAGS", "STATS_FLUSH_INTERVAL")


def _stats(values: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """StatsD as upstream sends it: on when ``USE_STATSD`` is true, or when it is unset
    (upstream's default is true) and a StatsD setting is given; ``DISABLE_STATS`` wins.
    ``USE_DOG_STATSD=true`` sends DogStatsD there instead, over UDP, with the mogrifiers
    ``USE_DOG_STATSD_MOGRIFIERS`` names; upstream runs one sink, so ``USE_STATSD=true`` or
    ``USE_PROMETHEUS=true`` beside it stops the start, as upstream's does.

    Nothing set leaves StatsD off (ratewarden's default), so a container that only
    sets ``PORT`` does not start sending to localhost:8125.
    """
    if values.get("DISABLE_STATS"):
        return {}
    dog = values.get("USE_DOG_STATSD", False)
    use = values.get("USE_STATSD")
    if dog and (use or values.get("USE_PROMETHEUS")):
        raise ConfigurationError(
            "USE_DOG_STATSD=true: upstream runs one stats sink, and USE_STATSD or USE_PROMETHEUS "
            "is true too; set USE_STATSD=false and USE_PROMETHEUS=false (/metrics answers anyway)"
        )
    if use is None:
        use = any(name in values for name in _STATSD)
    if not (use or dog):
        return {}
    port = _port(values, "STATSD_PORT")
    host = str(value_of(values, "STATSD_HOST")).strip()
    if ":" in host:
        host = f"[{host}]"
    out: dict[str, Any] = (
        {"dogstatsd": f"udp://{host}:{port}"} if dog else {"statsd": f"tcp://{host}:{port}"}
    )
    if dog and "USE_DOG_STATSD_MOGRIFIERS" in values:
        out["dogstatsd_mogrifiers"] = mogrifiers_from_env(
            values["USE_DOG_STATSD_MOGRIFIERS"], environ
        )
    if "EXTRA_TAGS" in values:
        try:
            out["statsd_tags"] = parse_tags(values["EXTRA_TAGS"])
        except ConfigurationError as exc:
            raise ConfigurationError(f"EXTRA_TAGS={values['EXTRA_TAGS']!r}: {exc}") from None
    if "STATS_FLUSH_INTERVAL" in values:
        interval = values["STATS_FLUSH_INTERVAL"]
        if not interval > 0:
            raise ConfigurationError(
                f"STATS_FLUSH_INTERVAL={interval!r}: must be a duration above 0, such as 10s"
            )
        out["statsd_interval"] = interval
    return out


def _prometheus(values: Mapping[str, Any]) -> dict[str, Any]:
    """``USE_PROMETHEUS=true``: the metrics alone at ``PROMETHEUS_ADDR`` (``HOST:PORT``, or
    ``:PORT`` for ratewarden's bind address), path ``PROMETHEUS_PATH``, named by
    ``PROMETHEUS_MAPPER_YAML``'s file, else in milliseconds if asked, counters by the bare
    names upstream's registry gives them (``metrics_upstream_names``), as upstream."""
    if not values.get("USE_PROMETHEUS"):
        return {}
    address = str(value_of(values, "PROMETHEUS_ADDR")).strip()
    host, colon, port = address.rpartition(":")
    if not colon or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigurationError(f"PROMETHEUS_ADDR={address!r}: must be HOST:PORT or :PORT")
    out: dict[str, Any] = {"metrics_port": int(port), "metrics_upstream_names": True}
    if host.strip("[]"):
        out["metrics_host"] = host.strip("[]")
    path = str(value_of(values, "PROMETHEUS_PATH")).strip()
    if not path.startswith("/"):
        raise ConfigurationError(f"PROMETHEUS_PATH={path!r}: must start with /")
    out["metrics_path"] = path
    if "PROMETHEUS_MAPPER_YAML" in values:
        out["metrics_mapping"] = _option(values, "PROMETHEUS_MAPPER_YAML", "metrics_mapping")
    elif values.get("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS"):
        out["metrics_response_time_ms"] = True
    return out


def _tracing(values: Mapping[str, Any]) -> dict[str, Any]:
    """TRACING_ENABLED=true: ``--tracing`` over TRACING_EXPORTER_PROTOCOL, the resource from
    TRACING_SERVICE_NAME, _NAMESPACE and _INSTANCE_ID (upstream's: the name always, a random
    id when none), the rate clamped to 0..1 as upstream's sampler reads it."""
    if not values.get("TRACING_ENABLED"):
        return {}
    protocol = value_of(values, "TRACING_EXPORTER_PROTOCOL").strip() or "http"
    if protocol not in ("http", "grpc"):
        raise ConfigurationError(
            f"TRACING_EXPORTER_PROTOCOL={values['TRACING_EXPORTER_PROTOCOL']!r}: must be http "
            "or grpc"
        )
    resource = [("service.name", value_of(values, "TRACING_SERVICE_NAME"))]
    for name, key in (("NAMESPACE", "service.namespace"), ("INSTANCE_ID", "service.instance.id")):
        if f"TRACING_SERVICE_{name}" in values:
            resource.append((key, values[f"TRACING_SERVICE_{name}"]))
    rate = min(1.0, max(0.0, value_of(values, "TRACING_SAMPLING_RATE")))
    return {"tracing": protocol, "tracing_sampling_rate": rate, "tracing_resource": tuple(resource)}
