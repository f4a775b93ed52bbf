"""Settings of `ratewarden serve`: flags over environment over defaults, and clear errors."""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import pytest

from ratewarden.cli import _parser
from ratewarden.errors import ConfigurationError
from ratewarden.server.parsers import boolean
from ratewarden.server.settings import OPTIONS, XDS_OPTIONS, Settings, resolve, store_scheme


def test_defaults_bind_loopback_on_8081_and_8080_with_the_memory_store() -> None:
    """With only a config: 127.0.0.1, gRPC 8081, HTTP 8080, one worker on the memory store."""
    settings = resolve({"config_paths": ["rules.yaml"]}, {})
    assert settings == Settings(config_paths=("rules.yaml",))
    assert (settings.host, settings.grpc_port, settings.http_port) == ("127.0.0.1", 8081, 8080)
    assert store_scheme(settings.store_url) == "memory"
    assert settings.workers == 1 and not settings.reuse_port


def test_every_option_is_read_from_its_environment_variable() -> None:
    """Each RATEWARDEN_* variable sets its option when no flag is given."""
    environ = {
        "RATEWARDEN_CONFIG": os.pathsep.join(["a.yaml", "rules/"]),
        "RATEWARDEN_CONFIG_FILES": "all",
        "RATEWARDEN_STORE": "redis://10.0.0.5:6379/0",
        "RATEWARDEN_HOST": "0.0.0.0",
        "RATEWARDEN_GRPC_PORT": "9081",
        "RATEWARDEN_HTTP_PORT": "9080",
        "RATEWARDEN_WORKERS": "2",
        "RATEWARDEN_RELOAD_INTERVAL": "0",
        "RATEWARDEN_HEALTH_INTERVAL": "0.5",
        "RATEWARDEN_HEALTH_NEEDS_RULES": "true",
        "RATEWARDEN_HEALTH_FOLLOWS_STORE": "false",
        "RATEWARDEN_GRACE": "3",
        "RATEWARDEN_DRAIN": "1.5",
        "RATEWARDEN_SHADOW": "yes",
        "RATEWARDEN_QUOTA_MODE": "on",
        "RATEWARDEN_CHARGE_DENIED": "1",
        "RATEWARDEN_NEAR_LIMIT_RATIO": "0.9",
        "RATEWARDEN_ON_ERROR": "closed",
        "RATEWARDEN_FAILURE_MODE": "local",
        "RATEWARDEN_LOG_LEVEL": "DEBUG",
        "RATEWARDEN_LOG_FORMAT": "text",
        "RATEWARDEN_DASHBOARD": "off",
        "RATEWARDEN_TLS_CERT": "server.pem",
        "RATEWARDEN_TLS_KEY": "server.key",
        "RATEWARDEN_TLS_CLIENT_CA": "clients.pem",
        "RATEWARDEN_TLS_CLIENT_SAN": "envoy.internal",
        "RATEWARDEN_MAX_VALUES_PER_RULE": "500",
        "RATEWARDEN_RESPONSE_HEADERS": "draft-10",
        "RATEWARDEN_BREAKER_FAILURES": "0",
        "RATEWARDEN_BREAKER_COOLDOWN": "2.5",
        "RATEWARDEN_OVER_LIMIT_CACHE": "0",
        "RATEWARDEN_LOOP": "asyncio",
        "RATEWARDEN_TRANSPORT": "grpcio",
        "RATEWARDEN_GRPC_HOST": "127.0.0.2",
        "RATEWARDEN_GRPC_MAX_CONNECTION_AGE": "300",
        "RATEWARDEN_GRPC_MAX_CONNECTION_AGE_GRACE": "2.5",
        "RATEWARDEN_DEBUG_PORT": "9070",
        "RATEWARDEN_DEBUG_HOST": "127.0.0.3",
        "RATEWARDEN_MERGE_DOMAINS": "true",
        "RATEWARDEN_KEY_PREFIX": "edge",
        "RATEWARDEN_STORE_TIMEOUT": "0.25",
        "RATEWARDEN_STORE_PER_SECOND": "redis://10.0.0.6:6379/0",
        "RATEWARDEN_LEGACY_HEADER_NAMES": "X-RL-Limit, X-RL-Remaining ,X-RL-Reset",
        "RATEWARDEN_METRICS_PORT": "9090",
        "RATEWARDEN_METRICS_HOST": "127.0.0.4",
        "RATEWARDEN_METRICS_PATH": "/stats",
        "RATEWARDEN_METRICS_RESPONSE_TIME_MS": "true",
        "RATEWARDEN_METRICS_UPSTREAM_NAMES": "true",
        "RATEWARDEN_STATSD": "statsd.internal:9125",
        "RATEWARDEN_STATSD_TAGS": "region:eu.west, cell : 7 ,",
        "RATEWARDEN_STATSD_INTERVAL": "2.5",
        "RATEWARDEN_DOGSTATSD": "unix:///run/datadog/dsd.socket",
        "RATEWARDEN_RESPONSE_METADATA": "upstream",
        "RATEWARDEN_TRACING": "http",
        "RATEWARDEN_TRACING_SAMPLING_RATE": "0.5",
        "RATEWARDEN_TRACING_RESOURCE": "service.name=edge",
    }
    # RATEWARDEN_GRPC_UDS and RLQS do not go with 2 workers: read on their own below. The xDS
    # ones do not go with RATEWARDEN_CONFIG: tests/xds/test_settings.py reads them. The
    # mogrifiers' variable names a file: tests/upstream/test_dogstatsd.py reads it; so does
    # the mapping's: tests/upstream/test_prometheus_mapping.py.
    xds = {OPTIONS[name].env for name in ("config_xds", *XDS_OPTIONS)}
    rlqs = {"RATEWARDEN_RLQS": "on", "RATEWARDEN_RLQS_INTERVAL": "0.5", "RATEWARDEN_RLQS_TTL": "4"}
    rlqs["RATEWARDEN_RLQS_BUCKET_METRICS"] = "5"
    rlqs |= {"RATEWARDEN_RLQS_IDLE": "30", "RATEWARDEN_RLQS_DEMAND_REPORTS": "3"}
    rlqs["RATEWARDEN_RLQS_CHANGE_ROUNDS"] = "4"
    alone = {"RATEWARDEN_GRPC_UDS", "RATEWARDEN_DOGSTATSD_MOGRIFIERS", *rlqs, *xds}
    alone.add("RATEWARDEN_METRICS_MAPPING")
    ratio = {"RATEWARDEN_BREAKER_FAILURE_RATIO": "0.4", "RATEWARDEN_BREAKER_WINDOW": "50"}
    alone |= set(ratio)  # not with RATEWARDEN_BREAKER_FAILURES=0: read on their own below
    assert {option.env for option in OPTIONS.values()} == {*environ, *alone}
    judged = resolve({}, {"RATEWARDEN_CONFIG": "a.yaml", **ratio})
    assert (judged.breaker_failure_ratio, judged.breaker_window) == (0.4, 50)
    uds = resolve({}, {"RATEWARDEN_CONFIG": "a.yaml", "RATEWARDEN_GRPC_UDS": "/run/rl.sock"})
    assert uds.grpc_uds == "/run/rl.sock"
    quota = resolve({}, {"RATEWARDEN_CONFIG": "a.yaml", **rlqs})
    assert (quota.rlqs, quota.rlqs_interval, quota.rlqs_ttl) == (True, 0.5, 4)
    assert quota.rlqs_bucket_metrics == 5
    assert (quota.rlqs_idle, quota.rlqs_demand_reports) == (30.0, 3)
    assert quota.rlqs_change_rounds == 4
    assert resolve({}, environ) == Settings(
        config_paths=("a.yaml", "rules/"),
        config_files="all",
        store_url="redis://10.0.0.5:6379/0",
        host="0.0.0.0",
        grpc_port=9081,
        http_port=9080,
        workers=2,
        reload_interval=0.0,
        health_interval=0.5,
        health_needs_rules=True,
        health_follows_store=False,
        grace=3.0,
        drain=1.5,
        shadow=True,
        quota_mode=True,
        charge_denied=True,
        near_limit_ratio=0.9,
        on_error="closed",
        failure_mode="local",
        log_level="debug",
        log_format="text",
        dashboard="off",
        tls_cert="server.pem",
        tls_key="server.key",
        tls_client_ca="clients.pem",
        tls_client_san="envoy.internal",
        max_values_per_rule=500,
        response_headers="draft-10",
        breaker_failures=0,
        breaker_cooldown=2.5,
        over_limit_cache=0,
        loop="asyncio",
        transport="grpcio",
        grpc_host="127.0.0.2",
        grpc_max_connection_age=300.0,
        grpc_max_connection_age_grace=2.5,
        debug_port=9070,
        debug_host="127.0.0.3",
        merge_domains=True,
        key_prefix="edge",
        store_timeout=0.25,
        store_per_second="redis://10.0.0.6:6379/0",
        legacy_header_names=("X-RL-Limit", "X-RL-Remaining", "X-RL-Reset"),
        tracing="http",
        tracing_sampling_rate=0.5,
        tracing_resource=(("service.name", "edge"),),
        metrics_port=9090,
        metrics_host="127.0.0.4",
        metrics_path="/stats",
        metrics_response_time_ms=True,
        metrics_upstream_names=True,
        statsd="tcp://statsd.internal:9125",
        statsd_tags=(("cell", "7"), ("region", "eu.west")),
        statsd_interval=2.5,
        dogstatsd="unix:///run/datadog/dsd.socket",
        response_metadata="upstream",
    )


def test_every_on_off_setting_is_a_switch_on_the_command_line_as_the_docs_write_it() -> None:
    """Each setting read as on/off is ``--x`` / ``--no-x`` on ``ratewarden serve`` (not
    ``--x true``), and those are the ``--[no-]x`` flags the docs name."""
    switches = {option.flag for option in OPTIONS.values() if option.parse is boolean}
    for flag in switches:
        name = next(n for n, o in OPTIONS.items() if o.flag == flag)
        on = _parser().parse_args(["serve", flag])
        off = _parser().parse_args(["serve", "--no-" + flag.removeprefix("--")])
        assert (getattr(on, name), getattr(off, name)) == (True, False), flag
    docs = Path(__file__).parents[2] / "docs"
    written = {
        "--" + found
        for page in docs.glob("*.md")
        for found in re.findall(r"--\[no-\]([a-z-]+)", page.read_text())
    }
    assert written == switches
    assert {"--quota-mode", "--metrics-response-time-ms", "--xds-force-start"} <= switches


def test_a_flag_wins_over_its_environment_variable() -> None:
    """--grpc-port 7000 beats RATEWARDEN_GRPC_PORT=9081; --no-shadow beats RATEWARDEN_SHADOW=1."""
    environ = {"RATEWARDEN_GRPC_PORT": "9081", "RATEWARDEN_SHADOW": "1", "RATEWARDEN_CONFIG": "x"}
    settings = resolve({"grpc_port": "7000", "shadow": False, "config_paths": ["y"]}, environ)
    assert (settings.grpc_port, settings.shadow, settings.config_paths) == (7000, False, ("y",))


@pytest.mark.parametrize(
    ("flags", "environ", "names"),
    [
        ({"grpc_port": "http"}, {}, "--grpc-port 'http'"),
        ({}, {"RATEWARDEN_HTTP_PORT": "70000"}, "RATEWARDEN_HTTP_PORT '70000'"),
        ({"workers": "0"}, {}, "--workers '0'"),
        ({}, {"RATEWARDEN_SHADOW": "maybe"}, "RATEWARDEN_SHADOW 'maybe'"),
        ({"grace": "-1"}, {}, "--grace '-1'"),
        ({"drain": "-1"}, {}, "--drain '-1'"),
        ({"health_interval": "0"}, {}, "--health-interval '0'"),
        ({"near_limit_ratio": "1.5"}, {}, "--near-limit-ratio '1.5'"),
        ({"on_error": "sometimes"}, {}, "--on-error 'sometimes'"),
        ({"log_level": "loud"}, {}, "--log-level 'loud'"),
        ({"store_url": "  "}, {}, "--store '  '"),
        ({"loop": "trio"}, {}, "--loop 'trio'"),
        ({}, {"RATEWARDEN_TRANSPORT": "h3"}, "RATEWARDEN_TRANSPORT 'h3'"),
    ],
)
def test_a_bad_value_names_the_flag_or_variable_it_came_from(
    flags: dict[str, str], environ: dict[str, str], names: str
) -> None:
    """The error starts with the flag or variable and its value, then says what is allowed."""
    with pytest.raises(ConfigurationError) as raised:
        resolve({"config_paths": ["rules.yaml"], **flags}, environ)
    assert str(raised.value).startswith(names + ": ")
    assert "must" in str(raised.value)


def test_no_config_says_how_to_give_one() -> None:
    """Without --config or RATEWARDEN_CONFIG the error names both."""
    with pytest.raises(ConfigurationError, match=r"--config PATH.*RATEWARDEN_CONFIG"):
        resolve({}, {})


def test_several_workers_on_the_memory_store_are_refused() -> None:
    """Workers cannot share memory counters, so more than one needs a shared store."""
    with pytest.raises(ConfigurationError, match=r"own counters.*--store redis://"):
        Settings(config_paths=("x",), workers=2)
    shared = Settings(config_paths=("x",), workers=2, store_url="redis://127.0.0.1:6379/0")
    assert shared.reuse_port


def test_several_workers_need_fixed_ports_and_the_two_ports_differ() -> None:
    """Port 0 cannot be shared by workers; gRPC and HTTP cannot share one port."""
    with pytest.raises(ConfigurationError, match="fixed ports"):
        Settings(config_paths=("x",), workers=2, store_url="redis://h", grpc_port=0)
    with pytest.raises(ConfigurationError, match="different ports"):
        Settings(config_paths=("x",), grpc_port=9000, http_port=9000)


def test_a_store_url_without_a_scheme_is_refused() -> None:
    """A bare host name is not a URL: the error says which forms are."""
    with pytest.raises(ConfigurationError, match="no scheme; use memory, redis://"):
        Settings(config_paths=("x",), store_url="localhost")
    assert store_scheme("memory://") == "memory"
    assert store_scheme("rediss://h:6380/0") == "rediss"


def test_loop_uvloop_without_uvloop_installed_says_how_to_get_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ratewarden.server import settings as settings_module

    monkeypatch.setattr(settings_module, "uvloop_installed", lambda: False)
    with pytest.raises(ConfigurationError, match="pip install uvloop"):
        resolve({"config_paths": ["rules.yaml"], "loop": "uvloop"}, {})
    assert resolve({"config_paths": ["rules.yaml"], "loop": "auto"}, {}).loop == "auto"


def test_the_loop_factory_follows_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """auto takes uvloop when it is installed, asyncio's loop otherwise."""
    from ratewarden.server import process

    assert process.loop_factory("asyncio") is None
    if importlib.util.find_spec("uvloop") is not None:
        import uvloop

        assert process.loop_factory("auto") is uvloop.new_event_loop
        assert process.loop_factory("uvloop") is uvloop.new_event_loop
    monkeypatch.setattr(process, "uvloop_installed", lambda: False)
    assert process.loop_factory("auto") is None


def test_transport_auto_takes_native_when_installed_and_tls_is_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """auto: native when pygrpc-native is installed and TLS is off; grpcio otherwise."""
    from ratewarden.server import settings as settings_module

    monkeypatch.setattr(settings_module, "native_installed", lambda: True)
    assert Settings(config_paths=("r",)).grpc_transport == "native"
    tls = Settings(config_paths=("r",), tls_cert="c.pem", tls_key="k.pem")
    assert tls.grpc_transport == "grpcio"
    assert Settings(config_paths=("r",), transport="grpcio").grpc_transport == "grpcio"
    monkeypatch.setattr(settings_module, "native_installed", lambda: False)
    assert Settings(config_paths=("r",)).grpc_transport == "grpcio"


def test_transport_native_without_the_package_says_how_to_get_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ratewarden.server import settings as settings_module

    monkeypatch.setattr(settings_module, "native_installed", lambda: False)
    with pytest.raises(ConfigurationError, match=r"pip install 'ratewarden\[native\]'"):
        resolve({"config_paths": ["rules.yaml"], "transport": "native"}, {})


@pytest.mark.skipif(
    importlib.util.find_spec("pygrpc_native") is None, reason="pygrpc-native is not installed"
)
def test_transport_native_with_tls_is_refused_at_start_naming_the_way_out() -> None:
    """TLS is never dropped silently: native + --tls-cert stops the start and names grpcio."""
    with pytest.raises(ConfigurationError, match="--transport native cannot serve TLS") as raised:
        resolve(
            {"config_paths": ["r.yaml"], "transport": "native"},
            {"RATEWARDEN_TLS_CERT": "c.pem", "RATEWARDEN_TLS_KEY": "k.pem"},
        )
    assert "--transport grpcio" in str(raised.value)


def test_several_workers_cannot_share_a_unix_socket() -> None:
    """--grpc-uds has one listener: more than one worker is refused, naming both."""
    with pytest.raises(ConfigurationError, match="2 workers cannot share --grpc-uds"):
        Settings(
            config_paths=("r",), store_url="redis://127.0.0.1:6379/0", workers=2, grpc_uds="/tmp/s"
        )


def test_store_per_second_needs_a_scheme_and_shared_counters_with_workers() -> None:
    """--store-per-second: a URL with a scheme, not memory with several workers; its
    password never shows."""
    with pytest.raises(
        ConfigurationError, match=r"--store-per-second 'fast\.internal' has no scheme"
    ):
        Settings(config_paths=("r",), store_per_second="fast.internal")
    with pytest.raises(ConfigurationError, match="--store-per-second memory with 2 workers"):
        Settings(
            config_paths=("r",),
            store_url="redis://main:6379/0",
            store_per_second="memory",
            workers=2,
        )
    shown = repr(Settings(config_paths=("r",), store_per_second="redis://:pw@fast:6379/0"))
    assert "pw" not in shown


def test_legacy_header_names_are_three_distinct_field_names() -> None:
    """--legacy-header-names: three HTTP field names, distinct; anything else is refused,
    naming the flag and the name at fault."""
    for bad, said in (
        ("A,B", "three header names"),
        ("A,B C,D", "'B C' is not an HTTP header name"),
        ("A,a,B", "must differ"),
    ):
        with pytest.raises(ConfigurationError, match=f"--legacy-header-names .*{said}"):
            resolve({"legacy_header_names": bad}, {"RATEWARDEN_CONFIG": "r"})


def test_a_maximum_connection_age_needs_grpcio_and_auto_picks_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--grpc-max-connection-age: pygrpc-native cannot close connections by their age, so auto
    picks grpcio and --transport native is refused, naming the way out; never dropped."""
    from ratewarden.server import settings as settings_module

    monkeypatch.setattr(settings_module, "native_installed", lambda: True)
    aged = resolve({"config_paths": ["r.yaml"], "grpc_max_connection_age": "300"}, {})
    assert (aged.grpc_max_connection_age, aged.grpc_max_connection_age_grace) == (300.0, None)
    assert aged.grpc_transport == "grpcio"
    with pytest.raises(ConfigurationError, match="cannot close connections by their age") as raised:
        resolve(
            {"config_paths": ["r.yaml"], "transport": "native"},
            {"RATEWARDEN_GRPC_MAX_CONNECTION_AGE": "60"},
        )
    assert "--transport grpcio" in str(raised.value)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"breaker_failure_ratio": "0"}, "--breaker-failure-ratio '0': must be a number above 0"),
        ({"breaker_failure_ratio": "1.5"}, "--breaker-failure-ratio '1.5': must be a number"),
        ({"breaker_failure_ratio": "half"}, "--breaker-failure-ratio 'half': must be a number"),
        (
            {"breaker_failure_ratio": "0.5", "breaker_window": "1"},
            "--breaker-window '1': must be a whole number from 2",
        ),
        ({"breaker_window": "50"}, "set the ratio too, or neither"),
        (
            {"breaker_failure_ratio": "0.5", "breaker_failures": "0"},
            "which --breaker-failures 0 turns off",
        ),
    ],
)
def test_a_bad_failure_ratio_is_refused_naming_the_flag(
    options: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        resolve({"config_paths": ["r.yaml"], **options}, {})


@pytest.mark.parametrize(
    "values",
    [
        {"breaker_failure_ratio": 0.0},
        {"breaker_failure_ratio": True},
        {"breaker_failure_ratio": "0.5"},
        {"breaker_failure_ratio": float("nan")},
        {"breaker_failure_ratio": 0.5, "breaker_window": 2.5},
        {"breaker_failure_ratio": 0.5, "breaker_failures": 0},
        {"breaker_window": 10},
    ],
)
def test_settings_built_in_code_check_the_failure_ratio_too(values: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError, match="--breaker-"):
        Settings(config_paths=("r",), **values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"grpc_max_connection_age": "0"}, "--grpc-max-connection-age '0': must be a number of"),
        ({"grpc_max_connection_age": "soon"}, "--grpc-max-connection-age 'soon': must be a"),
        (
            {"grpc_max_connection_age": "1", "grpc_max_connection_age_grace": "-1"},
            "--grpc-max-connection-age-grace '-1': must be a number of seconds >= 0",
        ),
        ({"grpc_max_connection_age_grace": "5"}, "set both, or neither"),
    ],
)
def test_bad_connection_ages_are_refused_naming_the_flag(
    options: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        resolve({"config_paths": ["r.yaml"], **options}, {})


@pytest.mark.parametrize(
    "values",
    [
        {"grpc_max_connection_age": -1.0},
        {"grpc_max_connection_age": True},
        {"grpc_max_connection_age": "60"},
        {"grpc_max_connection_age": float("inf")},
        {"grpc_max_connection_age": 1.0, "grpc_max_connection_age_grace": -0.5},
    ],
)
def test_settings_built_in_code_check_connection_ages_too(values: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError, match="--grpc-max-connection-age"):
        Settings(config_paths=("r",), **values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("flags", "environ", "message"),
    [
        ({"rlqs_interval": "2"}, {}, "--rlqs-interval needs --rlqs"),
        ({"rlqs_ttl": "5"}, {}, "--rlqs-ttl needs --rlqs"),  # the default value, still refused
        ({"rlqs_idle": "30", "rlqs": False}, {}, "--rlqs-idle needs --rlqs"),  # --no-rlqs
        ({"rlqs_demand_reports": "3"}, {}, "--rlqs-demand-reports needs --rlqs"),
        ({"rlqs_change_rounds": "2"}, {}, "--rlqs-change-rounds needs --rlqs"),
        ({"rlqs_bucket_metrics": "5"}, {}, "--rlqs-bucket-metrics needs --rlqs"),
        ({}, {"RATEWARDEN_RLQS_TTL": "9"}, "RATEWARDEN_RLQS_TTL needs --rlqs"),
        (
            {"rlqs_ttl": "9"},
            {"RATEWARDEN_RLQS": "off", "RATEWARDEN_RLQS_IDLE": "30"},
            "--rlqs-ttl, RATEWARDEN_RLQS_IDLE need --rlqs",
        ),
    ],
)
def test_an_rlqs_option_without_rlqs_is_refused_naming_the_flag_or_variable(
    flags: dict[str, object], environ: dict[str, str], message: str
) -> None:
    """An --rlqs-* flag or RATEWARDEN_RLQS_* variable while the quota service is off would
    change nothing: refused, even at its default value, naming where it was given."""
    with pytest.raises(ConfigurationError, match=re.escape(message)) as raised:
        resolve({"config_paths": ["r.yaml"], **flags}, environ)
    assert "add --rlqs, or drop" in str(raised.value)


def test_rlqs_options_with_rlqs_from_the_flag_or_the_variable_are_taken() -> None:
    """With --rlqs (or RATEWARDEN_RLQS=true) the same options are read as usual."""
    flagged = resolve({"config_paths": ["r.yaml"], "rlqs": True, "rlqs_ttl": "9"}, {})
    assert (flagged.rlqs, flagged.rlqs_ttl) == (True, 9)
    environ = {"RATEWARDEN_RLQS": "true", "RATEWARDEN_RLQS_IDLE": "30"}
    from_env = resolve({"config_paths": ["r.yaml"]}, environ)
    assert (from_env.rlqs, from_env.rlqs_idle) == (True, 30.0)


def test_settings_built_in_code_refuse_rlqs_options_without_rlqs() -> None:
    """Settings(rlqs_ttl=9) without rlqs=True names the flag, as the command line does."""
    with pytest.raises(ConfigurationError, match=r"--rlqs-ttl needs --rlqs"):
        Settings(config_paths=("r",), rlqs_ttl=9)


def test_serve_help_says_what_the_xds_node_id_defaults_to(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``serve --help`` says --xds-node-id's default is the id 'default', rather than a bare
    '(default)' that reads as if the option were the default."""
    with pytest.raises(SystemExit):
        _parser().parse_args(["serve", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "--xds-node-id ID node id this service gives the xDS server" in shown
    assert "(unset: the id 'default') [env RATEWARDEN_XDS_NODE_ID]" in shown
