"""envoyproxy/ratelimit's environment settings configure `ratewarden serve` (issue 19, item 1)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from ratewarden import cli
from ratewarden.errors import ConfigurationError
from ratewarden.server import process, upstream_env, upstream_settings
from ratewarden.server.logs import LOGGERS
from ratewarden.server.settings import Settings, resolve

CONFIG = {"config_paths": ["rules.yaml"]}


def settings(**environ: str) -> Settings:
    return resolve(CONFIG, environ)


def test_upstream_docker_compose_environment_names_ports_store_rules_and_logging() -> None:
    """The upstream docker-compose environment alone, no RATEWARDEN_* setting: every part read."""
    environ = {
        "USE_STATSD": "false",
        "LOG_LEVEL": "debug",
        "REDIS_SOCKET_TYPE": "tcp",
        "REDIS_URL": "redis:6379",
        "RUNTIME_ROOT": "/data",
        "RUNTIME_SUBDIRECTORY": "ratelimit",
        "PORT": "8080",
        "GRPC_PORT": "8081",
        "DEBUG_PORT": "6070",
    }
    chosen = resolve({}, environ)
    assert chosen.config_paths == (os.path.join("/data", "ratelimit", "config"),)
    assert chosen.store_url == "redis://redis:6379/0"
    assert (chosen.http_port, chosen.grpc_port, chosen.debug_port) == (8080, 8081, 6070)
    assert chosen.log_level == "debug"


def test_nothing_upstream_set_leaves_ratewarden_defaults() -> None:
    """Without upstream variables the settings are ratewarden's own defaults."""
    assert settings() == Settings(config_paths=("rules.yaml",))


def test_flags_win_over_ratewarden_variables_which_win_over_upstream_ones() -> None:
    """flag > RATEWARDEN_* > upstream variable > default, setting by setting."""
    environ = {"PORT": "7000", "GRPC_PORT": "7001", "RATEWARDEN_GRPC_PORT": "9001"}
    chosen = resolve({**CONFIG, "http_port": "9000"}, environ)
    assert (chosen.http_port, chosen.grpc_port) == (9000, 9001)
    assert resolve(CONFIG, {"PORT": "7000"}).http_port == 7000


def test_ratewarden_config_wins_over_the_runtime_layout() -> None:
    """--config (or RATEWARDEN_CONFIG) replaces RUNTIME_ROOT's directory."""
    environ = {"RUNTIME_ROOT": "/data", "RATEWARDEN_CONFIG": "mine.yaml"}
    assert resolve({}, environ).config_paths == ("mine.yaml",)
    assert resolve({"config_paths": ["flag.yaml"]}, environ).config_paths == ("flag.yaml",)


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"RUNTIME_ROOT": "/srv/rt"}, "/srv/rt/config"),
        ({"RUNTIME_SUBDIRECTORY": "ratelimit"}, "/srv/runtime_data/current/ratelimit/config"),
        ({"RUNTIME_ROOT": "/d", "RUNTIME_APPDIRECTORY": "rules"}, "/d/rules"),
        (
            {"RUNTIME_ROOT": "/d", "RUNTIME_SUBDIRECTORY": "s", "RUNTIME_APPDIRECTORY": "a"},
            "/d/s/a",
        ),
    ],
)
def test_runtime_layout_is_root_subdirectory_appdirectory_with_upstream_defaults(
    environ: dict[str, str], expected: str
) -> None:
    """Rules are read from RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY, as upstream."""
    assert resolve({}, environ).config_paths == (expected,)


def test_listening_hosts_ports_and_the_debug_port() -> None:
    """HOST binds HTTP, GRPC_HOST gRPC, DEBUG_HOST:DEBUG_PORT the debug port."""
    chosen = settings(HOST="0.0.0.0", GRPC_HOST="::1", DEBUG_HOST="127.0.0.2", DEBUG_PORT="6071")
    assert (chosen.host, chosen.grpc_host) == ("0.0.0.0", "::1")
    assert (chosen.debug_host, chosen.debug_port) == ("127.0.0.2", 6071)
    assert settings(DEBUG_HOST="127.0.0.2").debug_port == 6070  # upstream's default port
    assert settings().debug_port is None


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        ("trace", "debug"),
        ("DEBUG", "debug"),
        ("info", "info"),
        ("WARN", "warning"),
        ("warning", "warning"),
        ("error", "error"),
        ("fatal", "error"),
        ("panic", "error"),
    ],
)
def test_log_level_takes_logrus_levels(level: str, expected: str) -> None:
    """Every logrus level upstream accepts maps to the nearest of ratewarden's."""
    assert settings(LOG_LEVEL=level).log_level == expected


def test_log_format_json_or_text() -> None:
    """LOG_FORMAT json or text, any case."""
    assert settings(LOG_FORMAT="JSON").log_format == "json"
    assert settings(LOG_FORMAT="text").log_format == "text"


@pytest.mark.parametrize(
    ("environ", "url"),
    [
        ({"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379"}, "redis://redis:6379/0"),
        ({"REDIS_URL": "/run/redis.sock"}, "unix:///run/redis.sock"),
        ({"BACKEND_TYPE": "redis"}, "unix:///var/run/nutcracker/ratelimit.sock"),
        (
            {"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6379", "REDIS_AUTH": "p@ss"},
            "redis://:p%40ss@r:6379/0",
        ),
        (
            {"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6379", "REDIS_AUTH": "user:pw"},
            "redis://user:pw@r:6379/0",
        ),
        (
            {
                "REDIS_SOCKET_TYPE": "tcp",
                "REDIS_URL": "r:6380",
                "REDIS_TLS": "true",
                "REDIS_TLS_CACERT": "/ca.pem",
                "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true",
            },
            "rediss://r:6380/0?ssl_ca_certs=%2Fca.pem&ssl_check_hostname=false",
        ),
        (
            {"REDIS_TYPE": "cluster", "REDIS_URL": "a:7000,b:7001", "REDIS_AUTH": "pw"},
            "redis+cluster://:pw@a:7000,b:7001",
        ),
        (
            {
                "REDIS_TYPE": "SENTINEL",
                "REDIS_URL": "mymaster,s1:26379,s2:26379",
                "REDIS_SENTINEL_AUTH": "sentinelpw",
                "REDIS_TLS": "1",
            },
            "rediss+sentinel://s1:26379,s2:26379/mymaster?sentinel_password=sentinelpw",
        ),
    ],
)
def test_redis_settings_become_the_store_url(environ: dict[str, str], url: str) -> None:
    """REDIS_TYPE, REDIS_SOCKET_TYPE, REDIS_URL, REDIS_AUTH and REDIS_TLS* make one store URL."""
    assert settings(**environ).store_url == url


def test_redis_timeout_and_cache_key_prefix_reach_the_store() -> None:
    """REDIS_TIMEOUT (a Go duration) is the store's timeout; CACHE_KEY_PREFIX its key prefix."""
    chosen = settings(REDIS_TIMEOUT="250ms", CACHE_KEY_PREFIX="edge_")
    assert (chosen.store_timeout, chosen.key_prefix) == (0.25, "edge_")
    assert chosen.store_url.startswith("unix://")  # REDIS_TIMEOUT alone means upstream's Redis


def test_cache_and_charging_switches() -> None:
    """NEAR_LIMIT_RATIO, SHADOW_MODE, QUOTA_MODE, STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, the
    headers."""
    chosen = settings(
        NEAR_LIMIT_RATIO="0.9",
        SHADOW_MODE="true",
        QUOTA_MODE="true",
        LIMIT_RESPONSE_HEADERS_ENABLED="true",
        MERGE_DOMAIN_CONFIG="true",
    )
    assert chosen.near_limit_ratio == pytest.approx(0.9)
    assert chosen.shadow and chosen.quota_mode and chosen.merge_domains
    assert not settings(QUOTA_MODE="false").quota_mode
    assert not resolve({**CONFIG, "quota_mode": False}, {"QUOTA_MODE": "true"}).quota_mode
    assert not settings(QUOTA_MODE="true", RATEWARDEN_QUOTA_MODE="false").quota_mode
    assert resolve(CONFIG, {"RATEWARDEN_QUOTA_MODE": "true"}).quota_mode
    assert chosen.response_headers == "legacy"
    # Upstream charges every descriptor unless told to stop: the opposite switch here.
    assert settings(STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT="false").charge_denied
    assert not settings(STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT="true").charge_denied


@pytest.mark.parametrize(
    ("size", "entries"), [("0", 0), ("1", 1), ("400", 1), ("401", 2), ("1048576", 2622)]
)
def test_local_cache_bytes_become_over_limit_cache_entries(size: str, entries: int) -> None:
    """LOCAL_CACHE_SIZE_IN_BYTES / 400 bytes per counter, rounded up; 0 turns the cache off."""
    assert upstream_env.BYTES_PER_CACHED_COUNTER == 400
    assert settings(LOCAL_CACHE_SIZE_IN_BYTES=size).over_limit_cache == entries


def test_grpc_server_tls_settings() -> None:
    """GRPC_SERVER_USE_TLS with its certificate, key and the client CA (mutual TLS)."""
    chosen = settings(
        GRPC_SERVER_USE_TLS="true",
        GRPC_SERVER_TLS_CERT="/c.pem",
        GRPC_SERVER_TLS_KEY="/k.pem",
        GRPC_CLIENT_TLS_CACERT="/ca.pem",
        RATEWARDEN_TRANSPORT="grpcio",
    )
    assert (chosen.tls_cert, chosen.tls_key, chosen.tls_client_ca) == (
        "/c.pem",
        "/k.pem",
        "/ca.pem",
    )
    with pytest.raises(ConfigurationError, match="GRPC_SERVER_TLS_KEY is not set"):
        settings(GRPC_SERVER_USE_TLS="true", GRPC_SERVER_TLS_CERT="/c.pem")
    with pytest.raises(ConfigurationError, match="GRPC_SERVER_USE_TLS is not true"):
        settings(GRPC_SERVER_TLS_CERT="/c.pem")


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("PORT", "http", r"PORT='http': must be a whole number"),
        ("GRPC_PORT", "70000", "GRPC_PORT=70000: must be a port number"),
        ("LOG_LEVEL", "verbose", "LOG_LEVEL='verbose': must be one of"),
        ("LOG_FORMAT", "xml", "LOG_FORMAT='xml': must be json or text"),
        ("SHADOW_MODE", "maybe", "SHADOW_MODE='maybe': must be true or false"),
        ("REDIS_TIMEOUT", "10", "REDIS_TIMEOUT='10': must be a duration"),
        ("REDIS_TIMEOUT", "0", "never waits on Redis without a bound"),
        ("NEAR_LIMIT_RATIO", "1.5", "NEAR_LIMIT_RATIO=1.5: must be a number above 0"),
        ("LOCAL_CACHE_SIZE_IN_BYTES", "-1", "must be 0 or more"),
        ("CACHE_KEY_PREFIX", "a{b}", "must not hold"),
        ("REDIS_TYPE", "ring", "REDIS_TYPE='ring': must be single, sentinel or cluster"),
        ("REDIS_SOCKET_TYPE", "udp", "REDIS_SOCKET_TYPE='udp': must be tcp or unix"),
        ("REDIS_URL", "redis:6379", "not a socket path, and REDIS_SOCKET_TYPE is unix"),
        ("BACKEND_TYPE", "etcd", "BACKEND_TYPE='etcd': must be redis or memcache"),
    ],
)
def test_bad_values_name_the_variable(name: str, value: str, message: str) -> None:
    """A bad upstream value is refused with the variable, its value and what is wrong."""
    with pytest.raises(ConfigurationError, match=message):
        settings(**{name: value})


def test_redis_url_forms_are_checked_per_type() -> None:
    """A sentinel URL needs MASTER,HOST:PORT...; tcp and cluster need HOST:PORT each."""
    with pytest.raises(ConfigurationError, match="master's name, then the sentinels"):
        settings(REDIS_TYPE="sentinel", REDIS_URL="s1:26379")
    with pytest.raises(ConfigurationError, match="is not HOST:PORT"):
        settings(REDIS_TYPE="cluster", REDIS_URL="a:7000,b")
    with pytest.raises(ConfigurationError, match="set REDIS_TYPE=cluster or sentinel"):
        settings(REDIS_SOCKET_TYPE="tcp", REDIS_URL="a:1,b:2")
    with pytest.raises(ConfigurationError, match="REDIS_TLS_CACERT cannot be honoured with"):
        settings(REDIS_TYPE="cluster", REDIS_URL="a:1", REDIS_TLS="true", REDIS_TLS_CACERT="/ca")
    cluster = settings(
        REDIS_TYPE="cluster", REDIS_URL="a:1", REDIS_TLS_SKIP_HOSTNAME_VERIFICATION="false"
    )
    assert cluster.store_url == "redis+cluster://a:1"


@pytest.mark.parametrize(
    ("name", "value", "names"),
    [
        ("BACKEND_TYPE", "memcache", "needs MEMCACHE_HOST_PORT"),
        ("REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "CREATE", "WAIT"),
        ("REDIS_POOL_ON_EMPTY_BEHAVIOR", "CREATE", "WAIT"),
    ],
)
def test_settings_that_cannot_be_honoured_stop_the_start(name: str, value: str, names: str) -> None:
    """A setting ratewarden cannot honour is refused, naming it and what to use instead."""
    with pytest.raises(ConfigurationError) as caught:
        settings(**{name: value})
    assert str(caught.value).startswith(f"{name}=") or str(caught.value).startswith(name)
    assert names in str(caught.value)


def test_grpc_uds_serves_grpc_on_a_unix_socket_as_upstream() -> None:
    """GRPC_UDS replaces GRPC_HOST:GRPC_PORT (upstream's meaning); --grpc-uds wins over it."""
    assert settings(GRPC_UDS="/run/rl.sock").grpc_uds == "/run/rl.sock"
    environ = {"GRPC_UDS": "/run/rl.sock", "RATEWARDEN_CONFIG": "rules.yaml"}
    assert resolve({"grpc_uds": "/tmp/mine.sock"}, environ).grpc_uds == "/tmp/mine.sock"


def test_upstream_defaults_of_refused_settings_are_accepted() -> None:
    """USE_STATSD=false (docker-compose's) and other refused settings at their defaults pass."""
    chosen = settings(USE_STATSD="false", CONFIG_TYPE="file", GRPC_UDS="", QUOTA_MODE="false")
    assert chosen == Settings(config_paths=("rules.yaml",))


def test_settings_without_effect_are_checked_and_named_for_the_log() -> None:
    """Tuning knobs of upstream's internals are accepted, checked, and listed for the start log."""
    environ = {"REDIS_POOL_SIZE": "20", "RUNTIME_WATCH_ROOT": "false", "PORT": "1"}
    assert upstream_env.no_effect(environ) == ("RUNTIME_WATCH_ROOT", "REDIS_POOL_SIZE")
    compose = {"MEMCACHE_HOST_PORT": "m:11211", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6379"}
    assert upstream_env.no_effect(compose) == ("MEMCACHE_HOST_PORT",)
    assert settings(**compose).store_url == "redis://r:6379/0"
    with pytest.raises(ConfigurationError, match="REDIS_POOL_SIZE='many'"):
        settings(REDIS_POOL_SIZE="many")


def test_every_upstream_setting_has_a_role() -> None:
    """The table covers upstream's settings.go: its 114 variables, each mapped, without effect or
    refused, and every default reads with its own parser."""
    assert len(upstream_env.UPSTREAM) == 114
    for name, setting in upstream_env.UPSTREAM.items():
        assert setting.role in ("mapped", "no_effect", "refused"), name
        setting.parse(setting.default)
        assert setting.role == "mapped" or setting.advice, name


def test_every_upstream_setting_is_in_the_migration_table() -> None:
    """docs/envoy.md's migration table names each setting, or its family (``MEMCACHE_*``)."""
    page = (Path(__file__).parents[2] / "docs" / "envoy.md").read_text(encoding="utf-8")
    table = page[page.index("## From envoyproxy/ratelimit") :]
    families = ("CONFIG_GRPC_XDS_", "XDS_CLIENT_", "MEMCACHE_", "REDIS_PERSECOND_", "TRACING_")
    missing = [
        name
        for name in upstream_env.UPSTREAM
        if f"`{name}`" not in table
        and not any(name.startswith(family) and f"`{family}*`" in table for family in families)
    ]
    assert missing == []


def serve_start_log(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    environ: dict[str, str],
) -> tuple[str, list[dict[str, Any]]]:
    """``ratewarden serve`` up to its start (the process run stubbed out) with only ``environ``
    of the upstream and RATEWARDEN_* variables: (its stderr, the JSON log lines)."""
    (tmp_path / "rules.yaml").write_text("domain: d\n")
    for name in os.environ:
        if name in upstream_env.UPSTREAM or name.startswith("RATEWARDEN_"):
            monkeypatch.delenv(name)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(process, "run", lambda settings: 0)
    loggers = [logging.getLogger(name) for name in LOGGERS]
    kept = [(logger.handlers[:], logger.propagate, logger.level) for logger in loggers]
    try:
        assert cli.main(["serve", "--config", str(tmp_path / "rules.yaml")]) == 0
    finally:
        for logger, (handlers, propagate, level) in zip(loggers, kept, strict=True):
            logger.handlers[:] = handlers
            logger.propagate = propagate
            logger.setLevel(level)
    err = capsys.readouterr().err
    return err, [json.loads(line) for line in err.splitlines()]


def test_serve_logs_the_upstream_settings_without_effect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ratewarden serve` names the no-effect upstream settings it was given in one log line."""
    environ = {"REDIS_POOL_SIZE": "20", "REDIS_PIPELINE_WINDOW": "150us"}
    _, lines = serve_start_log(tmp_path, monkeypatch, capsys, environ)
    [line] = [line for line in lines if line.get("event") == "upstream_settings_without_effect"]
    assert line["settings"] == ["REDIS_POOL_SIZE", "REDIS_PIPELINE_WINDOW"]
    assert not [line for line in lines if line.get("event") == "upstream_settings_applied"]


def test_serve_names_the_upstream_settings_it_applies_but_not_their_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A PORT or REDIS_AUTH set for the upstream (or for something else) is named at start,
    never silent; a value (a password, say) is not logged."""
    environ = {
        "PORT": "18080",
        "REDIS_SOCKET_TYPE": "tcp",
        "REDIS_URL": "127.0.0.1:6379",
        "REDIS_AUTH": "s3cret-password",
    }
    err, lines = serve_start_log(tmp_path, monkeypatch, capsys, environ)
    [line] = [line for line in lines if line.get("event") == "upstream_settings_applied"]
    assert sorted(line["settings"]) == ["PORT", "REDIS_AUTH", "REDIS_SOCKET_TYPE", "REDIS_URL"]
    assert "s3cret-password" not in err


def test_statsd_settings_turn_statsd_on_with_upstreams_meaning() -> None:
    """USE_STATSD=true sends to STATSD_HOST:STATSD_PORT over TCP (upstream's sink), with
    EXTRA_TAGS and STATS_FLUSH_INTERVAL; unset, it is on when a StatsD setting is given
    (upstream's default is true), off otherwise; DISABLE_STATS wins; flags win over all."""
    on = settings(USE_STATSD="true")
    assert (on.statsd, on.statsd_tags, on.statsd_interval) == ("tcp://localhost:8125", (), 10.0)
    given = settings(
        STATSD_HOST="stats.internal",
        STATSD_PORT="9125",
        EXTRA_TAGS="env:prod,cell:a.b",
        STATS_FLUSH_INTERVAL="1500ms",
    )
    assert given.statsd == "tcp://stats.internal:9125"
    assert given.statsd_tags == (("cell", "a.b"), ("env", "prod"))
    assert given.statsd_interval == 1.5
    assert settings(STATSD_HOST="::1", USE_STATSD="1").statsd == "tcp://[::1]:8125"
    assert settings(USE_STATSD="false", STATSD_HOST="stats").statsd is None
    assert settings(DISABLE_STATS="true", USE_STATSD="true").statsd is None
    assert settings(PORT="8080").statsd is None
    environ = {"USE_STATSD": "true", "RATEWARDEN_CONFIG": "rules.yaml"}
    assert resolve({"statsd": "udp://127.0.0.1:8125"}, environ).statsd == "udp://127.0.0.1:8125"
    with pytest.raises(ConfigurationError, match=r"STATS_FLUSH_INTERVAL=0\.0: must be a duration"):
        settings(USE_STATSD="true", STATS_FLUSH_INTERVAL="0s")
    with pytest.raises(ConfigurationError, match=r"EXTRA_TAGS='env'.*NAME:VALUE"):
        settings(EXTRA_TAGS="env")
    with pytest.raises(ConfigurationError, match="STATSD_PORT=70000"):
        settings(STATSD_PORT="70000")


def test_per_second_limits_go_to_the_redis_that_redis_persecond_names() -> None:
    """REDIS_PERSECOND=true puts per-second limits on their own Redis, described by the
    REDIS_PERSECOND_* variables with upstream's defaults (a unix socket), sharing the main
    one's TLS files; without it they have no effect and are named so; a per-second timeout
    other than the main one's is refused, since one timeout serves both stores."""
    chosen = settings(
        REDIS_SOCKET_TYPE="tcp",
        REDIS_URL="main:6379",
        REDIS_PERSECOND="true",
        REDIS_PERSECOND_SOCKET_TYPE="tcp",
        REDIS_PERSECOND_URL="fast:6380",
        REDIS_PERSECOND_AUTH="s3cret",
    )
    assert (chosen.store_url, chosen.store_per_second) == (
        "redis://main:6379/0",
        "redis://:s3cret@fast:6380/0",
    )
    assert "s3cret" not in repr(chosen)
    assert settings(REDIS_PERSECOND="1").store_per_second == (
        "unix:///var/run/nutcracker/ratelimitpersecond.sock"
    )
    cluster = settings(
        REDIS_PERSECOND="true", REDIS_PERSECOND_TYPE="CLUSTER", REDIS_PERSECOND_URL="a:1,b:2"
    )
    assert cluster.store_per_second == "redis+cluster://a:1,b:2"
    idle = {"REDIS_PERSECOND": "false", "REDIS_PERSECOND_URL": "fast:6380"}
    assert settings(**idle).store_per_second is None
    assert "REDIS_PERSECOND_URL" in upstream_env.no_effect(idle)
    assert "REDIS_PERSECOND_URL" not in upstream_settings.applied(idle)
    assert "REDIS_PERSECOND_URL" in upstream_settings.applied({**idle, "REDIS_PERSECOND": "t"})
    same = settings(
        REDIS_PERSECOND="true",
        REDIS_PERSECOND_SOCKET_TYPE="tcp",
        REDIS_PERSECOND_URL="fast:6380",
        REDIS_TIMEOUT="50ms",
        REDIS_PERSECOND_TIMEOUT="50ms",
    )
    assert same.store_timeout == 0.05
    with pytest.raises(ConfigurationError, match="REDIS_PERSECOND_TIMEOUT=1s cannot be honoured"):
        settings(REDIS_PERSECOND="true", REDIS_PERSECOND_TIMEOUT="1s")
    with pytest.raises(ConfigurationError, match="REDIS_PERSECOND_URL='fast:6380' is not a socket"):
        settings(REDIS_PERSECOND="true", REDIS_PERSECOND_URL="fast:6380")
    with pytest.raises(ConfigurationError, match="REDIS_PERSECOND_TYPE='ring'"):
        settings(REDIS_PERSECOND="true", REDIS_PERSECOND_TYPE="ring")
    given = {"store_per_second": "redis://mine:6379/0"}
    environ = {"REDIS_PERSECOND": "true", "RATEWARDEN_CONFIG": "rules.yaml"}
    assert resolve(given, environ).store_per_second == "redis://mine:6379/0"


def test_limit_header_names_rename_the_legacy_headers() -> None:
    """LIMIT_*_HEADER name the legacy headers (an unset one keeps upstream's default name);
    a name that is not an HTTP field name is refused, naming the variables."""
    chosen = settings(LIMIT_RESPONSE_HEADERS_ENABLED="true", LIMIT_LIMIT_HEADER="X-Limit")
    assert chosen.response_headers == "legacy"
    assert chosen.legacy_header_names == ("X-Limit", "RateLimit-Remaining", "RateLimit-Reset")
    with pytest.raises(ConfigurationError, match="LIMIT_RESET_HEADER: 'a b' is not an HTTP"):
        settings(LIMIT_RESET_HEADER="a b")


def test_use_prometheus_serves_the_metrics_where_upstream_would() -> None:
    """USE_PROMETHEUS=true: the metrics alone on PROMETHEUS_ADDR's port (its host when it
    names one, else ratewarden's bind address) at PROMETHEUS_PATH; not set or false: none."""
    chosen = settings(USE_PROMETHEUS="true")
    assert (chosen.metrics_host, chosen.metrics_port, chosen.metrics_path) == (
        None,
        9090,
        "/metrics",
    )
    named = settings(USE_PROMETHEUS="1", PROMETHEUS_ADDR="127.0.0.5:9191", PROMETHEUS_PATH="/m")
    assert (named.metrics_host, named.metrics_port, named.metrics_path) == ("127.0.0.5", 9191, "/m")
    assert settings(PROMETHEUS_ADDR=":9191").metrics_port is None
    with pytest.raises(ConfigurationError, match="PROMETHEUS_ADDR='9090': must be HOST:PORT"):
        settings(USE_PROMETHEUS="true", PROMETHEUS_ADDR="9090")
    with pytest.raises(ConfigurationError, match="PROMETHEUS_PATH='metrics': must start with /"):
        settings(USE_PROMETHEUS="true", PROMETHEUS_PATH="metrics")
    with pytest.raises(ConfigurationError, match="--metrics-port are both 9090"):
        settings(USE_PROMETHEUS="true", PORT="9090")


def test_grpc_max_connection_age_as_upstream() -> None:
    """GRPC_MAX_CONNECTION_AGE and _GRACE: either set gives both as upstream has them (the other
    at upstream's default, 24h or 1h; 0 is grpc-go's no limit); neither set keeps
    ratewarden's default, no limit, and the native transport."""
    aged = settings(GRPC_MAX_CONNECTION_AGE="5m")
    assert (aged.grpc_max_connection_age, aged.grpc_max_connection_age_grace) == (300.0, 3600.0)
    assert aged.grpc_transport == "grpcio"
    graced = settings(GRPC_MAX_CONNECTION_AGE_GRACE="30s")
    assert (graced.grpc_max_connection_age, graced.grpc_max_connection_age_grace) == (86400.0, 30.0)
    both = settings(GRPC_MAX_CONNECTION_AGE="1m30s", GRPC_MAX_CONNECTION_AGE_GRACE="0")
    assert (both.grpc_max_connection_age, both.grpc_max_connection_age_grace) == (90.0, None)
    for unlimited in (settings(GRPC_MAX_CONNECTION_AGE="0"), settings()):
        assert unlimited.grpc_max_connection_age is None
        assert unlimited.grpc_max_connection_age_grace is None
    with pytest.raises(ConfigurationError, match="GRPC_MAX_CONNECTION_AGE='soon'"):
        settings(GRPC_MAX_CONNECTION_AGE="soon")
    environ = {"GRPC_MAX_CONNECTION_AGE": "5m", "RATEWARDEN_CONFIG": "rules.yaml"}
    own = resolve({"grpc_max_connection_age": "60"}, environ)
    assert (own.grpc_max_connection_age, own.grpc_max_connection_age_grace) == (60.0, 3600.0)
