"""Rules from xDS as settings: ratewarden's flags and variables, and envoyproxy/ratelimit's."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trustme

from ratewarden import cli
from ratewarden.errors import ConfigurationError
from ratewarden.server import upstream_env, upstream_settings
from ratewarden.server.logs import LOGGERS
from ratewarden.server.settings import OPTIONS, XDS_OPTIONS, Settings, resolve
from ratewarden.server.xds import source_of


def test_every_xds_option_is_read_from_its_environment_variable() -> None:
    """Each RATEWARDEN_*XDS* variable sets its option (the table of every option is complete)."""
    environ = {
        "RATEWARDEN_CONFIG_XDS": "control-plane:18000",
        "RATEWARDEN_XDS_NODE_ID": "rl-1",
        "RATEWARDEN_XDS_NODE_METADATA": "cluster=edge, zone=a",
        "RATEWARDEN_XDS_HEADERS": "Authorization=Bearer t",
        "RATEWARDEN_XDS_RETRY_INTERVAL": "0.5",
        "RATEWARDEN_XDS_RETRY_MAX": "30",
        "RATEWARDEN_XDS_MAX_MESSAGE_BYTES": "8388608",
        "RATEWARDEN_XDS_FORCE_START": "true",
        "RATEWARDEN_XDS_TLS": "true",
        "RATEWARDEN_XDS_TLS_CA": "ca.pem",
        "RATEWARDEN_XDS_TLS_CERT": "client.pem",
        "RATEWARDEN_XDS_TLS_KEY": "client.key",
        "RATEWARDEN_XDS_TLS_SERVER_NAME": "xds.internal",
    }
    assert {OPTIONS[name].env for name in ("config_xds", *XDS_OPTIONS)} == set(environ)
    assert resolve({}, environ) == Settings(
        config_paths=(),
        config_xds="control-plane:18000",
        xds_node_id="rl-1",
        xds_node_metadata=(("cluster", "edge"), ("zone", "a")),
        xds_headers=(("authorization", "Bearer t"),),
        xds_retry_interval=0.5,
        xds_retry_max=30.0,
        xds_max_message_bytes=8388608,
        xds_force_start=True,
        xds_tls=True,
        xds_tls_ca="ca.pem",
        xds_tls_cert="client.pem",
        xds_tls_key="client.key",
        xds_tls_server_name="xds.internal",
    )


def test_upstreams_xds_settings_map_with_upstreams_meaning_and_defaults() -> None:
    """CONFIG_TYPE=GRPC_XDS_SOTW alone: upstream's defaults (localhost:18000, node
    "default", 3 s); each variable maps to its ratewarden setting; RUNTIME_* is not read,
    as upstream reads no file then."""
    alone = resolve({}, {"CONFIG_TYPE": "GRPC_XDS_SOTW", "RUNTIME_ROOT": "/srv/runtime"})
    assert (alone.config_xds, alone.config_paths) == ("localhost:18000", ())
    assert (alone.xds_node_id, alone.xds_retry_interval, alone.xds_retry_max) == (
        "default",
        3.0,
        60.0,
    )
    chosen = resolve(
        {},
        {
            "CONFIG_TYPE": "grpc_xds",  # the name, read as GRPC_XDS_SOTW
            "CONFIG_GRPC_XDS_SERVER_URL": "127.0.0.1:18001",
            "CONFIG_GRPC_XDS_NODE_ID": "rl-node",
            "CONFIG_GRPC_XDS_NODE_METADATA": "cluster=edge,zone=a",
            "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "X-Tenant:blue,authorization:t",
            "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "250ms",
            "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "10s",
            "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "1048576",
            "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true",
            "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "ca.pem",
            "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "c.pem",
            "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": "c.key",
            "CONFIG_GRPC_XDS_SERVER_TLS_SAN": "xds.internal",
            "MERGE_DOMAIN_CONFIG": "true",
            "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true",
            "FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
        },
    )
    assert chosen == Settings(
        config_paths=(),
        config_xds="127.0.0.1:18001",
        xds_node_id="rl-node",
        xds_node_metadata=(("cluster", "edge"), ("zone", "a")),
        xds_headers=(("x-tenant", "blue"), ("authorization", "t")),
        xds_retry_interval=0.25,
        xds_retry_max=10.0,
        xds_max_message_bytes=1048576,
        xds_tls=True,
        xds_tls_ca="ca.pem",
        xds_tls_cert="c.pem",
        xds_tls_key="c.key",
        xds_tls_server_name="xds.internal",
        merge_domains=True,
        health_needs_rules=True,
        xds_force_start=True,
    )


def test_upstreams_force_start_acts_on_xds_rules_and_is_without_effect_on_files() -> None:
    """FORCE_START_WITHOUT_INITIAL_CONFIG=true: with CONFIG_TYPE=GRPC_XDS_SOTW it is
    --xds-force-start (and named as applied); with files, whose rules are read before the
    ports open as upstream's first file event is, it is accepted and named without effect."""
    xds = {"CONFIG_TYPE": "GRPC_XDS_SOTW", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true"}
    assert resolve({}, xds).xds_force_start
    assert not resolve({}, {"CONFIG_TYPE": "GRPC_XDS_SOTW"}).xds_force_start
    assert "FORCE_START_WITHOUT_INITIAL_CONFIG" in upstream_settings.applied(xds)
    assert "FORCE_START_WITHOUT_INITIAL_CONFIG" not in upstream_env.no_effect(xds)
    files = {"RUNTIME_ROOT": "/srv/runtime", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true"}
    chosen = resolve({}, files)
    assert (chosen.config_paths, chosen.xds_force_start) == (("/srv/runtime/config",), False)
    assert upstream_env.no_effect(files) == ("FORCE_START_WITHOUT_INITIAL_CONFIG",)
    assert "FORCE_START_WITHOUT_INITIAL_CONFIG" not in upstream_settings.applied(files)
    # --config beats CONFIG_TYPE=GRPC_XDS_SOTW with everything it brought, this too
    assert not resolve({"config_paths": ["rules.yaml"]}, xds).xds_force_start


def test_upstreams_rule_directory_is_named_without_effect_with_xds_rules() -> None:
    """RUNTIME_ROOT, _SUBDIRECTORY and _APPDIRECTORY with CONFIG_TYPE=GRPC_XDS_SOTW are not
    read (upstream reads no file then): the start log names them without effect, not in use.
    With files they are in use."""
    layout = {"RUNTIME_ROOT": "/nonexist", "RUNTIME_SUBDIRECTORY": "x", "RUNTIME_APPDIRECTORY": "c"}
    xds = {"CONFIG_TYPE": "GRPC_XDS_SOTW", **layout}
    assert resolve({}, xds).config_paths == ()
    assert upstream_settings.applied(xds) == ("CONFIG_TYPE",)
    assert set(upstream_env.no_effect(xds)) == set(layout)
    assert set(upstream_settings.applied(layout)) == set(layout)
    assert upstream_env.no_effect(layout) == ()
    # --config-xds (the flag, not CONFIG_TYPE) takes the rules from xDS alike
    assert upstream_settings.applied(layout, xds=True) == ()
    assert set(upstream_env.no_effect(layout, xds=True)) == set(layout)


def test_ratewarden_settings_win_over_upstreams_rules_source() -> None:
    """--config (files) beats CONFIG_TYPE=GRPC_XDS_SOTW with everything it brought;
    --config-xds beats RUNTIME_ROOT; a ratewarden node id beats upstream's."""
    environ = {"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_NODE_ID": "upstream"}
    files = resolve({"config_paths": ["rules.yaml"]}, environ)
    assert (files.config_paths, files.config_xds, files.xds_node_id) == (
        ("rules.yaml",),
        None,
        "default",
    )
    xds = resolve({"config_xds": "cp:18000"}, {"RUNTIME_ROOT": "/srv/runtime"})
    assert (xds.config_paths, xds.config_xds) == ((), "cp:18000")
    mine = resolve({"xds_node_id": "mine"}, environ)
    assert (mine.config_xds, mine.xds_node_id) == ("localhost:18000", "mine")


@pytest.mark.parametrize(
    ("flags", "environ", "says"),
    [
        (
            {"config_paths": ["rules.yaml"], "config_xds": "cp:18000"},
            {},
            "give --config (RATEWARDEN_CONFIG) or --config-xds",
        ),
        ({}, {"RATEWARDEN_CONFIG": "r.yaml", "RATEWARDEN_CONFIG_XDS": "cp:1"}, "not both"),
        ({"config_paths": ["r.yaml"], "xds_node_id": "n"}, {}, "--xds-node-id applies only"),
        ({"config_paths": ["r.yaml"], "xds_node_id": "n"}, {}, "SOTW), or drop it"),
        (
            {"config_paths": ["r.yaml"], "xds_node_id": "n", "xds_retry_max": "9"},
            {},
            "--xds-node-id, --xds-retry-max apply only to rules from an xDS server; add "
            "--config-xds HOST:PORT (or CONFIG_TYPE=GRPC_XDS_SOTW), or drop them",
        ),
        (
            {"config_xds": "cp:1", "reload_interval": "10"},
            {},
            "--reload-interval 10 applies only to rules from files (--config): it polls them "
            "for changes, and the xDS server 'cp:1' sends each change as it is made; drop it",
        ),
        (
            {},
            {"CONFIG_TYPE": "GRPC_XDS_SOTW", "RATEWARDEN_RELOAD_INTERVAL": "0"},
            "RATEWARDEN_RELOAD_INTERVAL='0' applies only to rules from files",
        ),
        (
            {},
            {"CONFIG_GRPC_XDS_NODE_ID": "n", "RUNTIME_ROOT": "/r"},
            "CONFIG_GRPC_XDS_NODE_ID is set but CONFIG_TYPE is not GRPC_XDS_SOTW",
        ),
        (
            {},
            {"CONFIG_GRPC_XDS_NODE_ID": "n", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "9s"},
            "CONFIG_GRPC_XDS_NODE_ID, XDS_CLIENT_BACKOFF_MAX_INTERVAL are set but",
        ),
        ({}, {"CONFIG_GRPC_XDS_SERVER_URL": "cp:18000"}, "CONFIG_TYPE is not GRPC_XDS_SOTW"),
        ({}, {"CONFIG_TYPE": "REST"}, "CONFIG_TYPE='REST': must be one of FILE, GRPC_XDS_SOTW"),
        ({"config_xds": "no-port"}, {}, "--config-xds 'no-port': must be HOST:PORT"),
        ({"config_xds": "cp:1", "xds_tls_ca": "ca.pem"}, {}, "--xds-tls-ca is set but --xds-tls"),
        (
            {"config_xds": "cp:1", "xds_tls": True, "xds_tls_cert": "c.pem"},
            {},
            "--xds-tls-cert is set but --xds-tls-key is not",
        ),
        (
            {"config_xds": "cp:1", "xds_retry_interval": "10", "xds_retry_max": "5"},
            {},
            "--xds-retry-max 5 is below --xds-retry-interval 10",
        ),
        ({"config_xds": "cp:1", "xds_node_metadata": "zone:a"}, {}, "'zone:a' is not KEY=VALUE"),
        ({"config_xds": "cp:1", "xds_headers": "grpc-timeout=1"}, {}, "cannot be sent"),
        (
            {},
            {"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "a=b"},
            "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS='a=b': 'a=b' is not KEY:VALUE",
        ),
        (
            {},
            {"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "0"},
            "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
        ),
        ({"config_paths": ["r.yaml"], "xds_force_start": True}, {}, "--xds-force-start applies"),
        ({}, {"CONFIG_TYPE": "GRPC_XDS", "FORCE_START_WITHOUT_INITIAL_CONFIG": "y"}, "true or"),
        ({}, {}, "--config-xds HOST:PORT"),
    ],
)
def test_contradictory_or_bad_xds_settings_are_refused_clearly(
    flags: dict[str, object], environ: dict[str, str], says: str
) -> None:
    """Each contradiction or bad value stops the start with a message that says what and where."""
    with pytest.raises(ConfigurationError) as caught:
        resolve(flags, environ)
    assert says in str(caught.value)


def test_upstream_backoff_knobs_without_a_counterpart_are_named_in_the_start_log() -> None:
    """ratewarden's one backoff has no separate first wait for a broken stream, nor a growth
    factor, nor jitter to turn off: those are accepted, checked and listed as without effect."""
    environ = {
        "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "5s",
        "XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "2",
        "XDS_CLIENT_BACKOFF_JITTER": "false",
    }
    assert set(upstream_env.no_effect(environ)) == set(environ)
    with pytest.raises(ConfigurationError, match="XDS_CLIENT_BACKOFF_JITTER='maybe'"):
        resolve({}, {"CONFIG_TYPE": "GRPC_XDS_SOTW", "XDS_CLIENT_BACKOFF_JITTER": "maybe"})


def test_unreadable_tls_files_are_named_when_serve_builds_the_client(tmp_path: Path) -> None:
    """The TLS files are read when the client is built; one that cannot be is named by its flag."""
    ca = tmp_path / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(ca))
    settings = Settings(config_paths=(), config_xds="cp:1", xds_tls=True, xds_tls_ca=str(ca))
    source = source_of(settings)
    assert source.tls is not None and source.tls.ca == ca.read_bytes()
    missing = Settings(
        config_paths=(), config_xds="cp:1", xds_tls=True, xds_tls_ca=str(tmp_path / "no.pem")
    )
    with pytest.raises(ConfigurationError, match=r"--xds-tls-ca '.*no\.pem': cannot read it"):
        source_of(missing)


def test_the_flags_are_on_the_serve_command(capsys: pytest.CaptureFixture[str]) -> None:
    """`ratewarden serve --help` lists every xDS flag, --xds-tls with its --no- form."""
    with pytest.raises(SystemExit):
        cli.main(["serve", "--help"])
    text = capsys.readouterr().out
    for name in ("config_xds", *XDS_OPTIONS):
        assert OPTIONS[name].flag in text
    assert "--no-xds-tls" in text


def test_header_values_never_show_in_errors_or_the_settings_repr() -> None:
    """A header may carry a token: errors and ``repr(settings)`` show its name, not its value."""
    for flags, environ in (
        ({"config_xds": "cp:1", "xds_headers": "authorization=s3cret,grpc-x=1"}, {}),
        (
            {},
            {
                "CONFIG_TYPE": "GRPC_XDS_SOTW",
                "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "a:s3cret,b",
            },
        ),
    ):
        with pytest.raises(ConfigurationError) as caught:
            resolve(flags, environ)
        assert "s3cret" not in str(caught.value)
    chosen = resolve({"config_xds": "cp:1", "xds_headers": "authorization=s3cret"}, {})
    assert "s3cret" not in repr(chosen) and "authorization" in repr(chosen)
    assert "s3cret" not in repr(source_of(chosen))


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_stops_at_an_unreadable_tls_file_with_one_line(
    workers: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 2 and one line naming the file's flag, before any port or worker is started."""
    args = ["serve", "--config-xds", "127.0.0.1:1", "--xds-tls", "--xds-tls-ca"]
    args += [str(tmp_path / "missing.pem"), "--workers", workers, "--log-level", "error"]
    args += ["--store", "redis://127.0.0.1:1/0"] if workers == "2" else []
    loggers = [logging.getLogger(name) for name in LOGGERS]
    kept = [(logger.handlers[:], logger.propagate, logger.level) for logger in loggers]
    try:
        assert cli.main(args) == 2
    finally:  # serve configured the loggers: leave them as the other tests expect them
        for logger, (handlers, propagate, level) in zip(loggers, kept, strict=True):
            logger.handlers[:] = handlers
            logger.propagate = propagate
            logger.setLevel(level)
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("ratewarden serve: error: --xds-tls-ca ")
    assert err[-1].endswith("missing.pem': cannot read it (No such file or directory)")
