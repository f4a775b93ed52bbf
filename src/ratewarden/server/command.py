"""``ratewarden serve``'s command line: its parser, built from ``OPTIONS`` with the flags in
groups by what they set, an example and where the docs are; and the line it prints when a
port cannot be listened on, naming the flag that moves the port.

``ratewarden.cli`` (the composition root of the commands) adds the parser and runs it.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
from collections.abc import Mapping

from ratewarden.server.options import OPTIONS
from ratewarden.server.options_rlqs import RLQS
from ratewarden.server.options_telemetry import TELEMETRY
from ratewarden.server.parsers import boolean

__all__ = ["GROUPS", "add_serve_parser", "refusal"]

#: The help's sections, in order: each title with its options (``Settings`` field names).
#: Every option is in one (a test holds it); those a newcomer needs first come first.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "rules (docs/config.md)",
        ("config_paths", "config_files", "merge_domains", "reload_interval"),
    ),
    (
        "store and failure mode (docs/storage.md)",
        (
            "store_url",
            "store_per_second",
            "store_timeout",
            "key_prefix",
            "failure_mode",
            "breaker_failures",
            "breaker_cooldown",
            "breaker_failure_ratio",
            "breaker_window",
            "over_limit_cache",
            "max_values_per_rule",
        ),
    ),
    (
        "ports and processes",
        (
            "host",
            "grpc_port",
            "http_port",
            "grpc_host",
            "grpc_uds",
            "workers",
            "transport",
            "loop",
            "grpc_max_connection_age",
            "grpc_max_connection_age_grace",
            "debug_port",
            "debug_host",
            "metrics_port",
            "metrics_host",
            "metrics_path",
            "dashboard",
        ),
    ),
    ("TLS of the gRPC port", ("tls_cert", "tls_key", "tls_client_ca", "tls_client_san")),
    (
        "the answers to Envoy",
        (
            "shadow",
            "quota_mode",
            "charge_denied",
            "near_limit_ratio",
            "on_error",
            "response_headers",
            "legacy_header_names",
            "response_metadata",
        ),
    ),
    (
        "health and shutdown",
        ("health_interval", "health_needs_rules", "health_follows_store", "grace", "drain"),
    ),
    ("logs, metrics and traces (docs/operations.md)", ("log_level", "log_format", *TELEMETRY)),
    (
        "rules from an xDS server instead of files (docs/xds.md)",
        tuple(name for name in OPTIONS if name == "config_xds" or name.startswith("xds_")),
    ),
    ("Envoy's quota service, RLQS (docs/rlqs.md)", tuple(RLQS)),
)

USAGE = (
    "%(prog)s (--config PATH... | --config-xds HOST:PORT) [--store URL] [--grpc-port N] "
    "[--http-port N] [options]"
)

EPILOG = """\
examples:
  ratewarden serve --config examples/ratelimit.yaml   # gRPC on 127.0.0.1:8081, HTTP on :8080
  curl 127.0.0.1:8080/                                # the HTTP endpoints, /json among them
  ratewarden serve --config rules/ --store redis://127.0.0.1:6379/0 --workers 2

Envoy's side (the bootstrap that sends its requests here) and every flag: docs/envoy.md
"""

#: Flags a newcomer may try that are no spelling of a real one, and the flags meant.
FLAG_HINTS: Mapping[str, tuple[str, ...]] = {
    "--port": ("--grpc-port", "--http-port"),
    "--redis": ("--store redis://HOST:PORT",),
    "--redis-url": ("--store redis://HOST:PORT",),
}

#: The flag that moves the port each "cannot listen for WHAT on ADDRESS" line names.
PORT_FLAGS = {
    "gRPC": "--grpc-port",
    "HTTP": "--http-port",
    "the debug port": "--debug-port",
    "metrics": "--metrics-port",
}


def add_serve_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], metavars: Mapping[str, str]
) -> None:
    """The ``serve`` command, each option as a flag with its variable in its group's
    section; ``metavars``: each valued option's placeholder (``ratewarden.cli.METAVARS``)."""
    serve = commands.add_parser(
        "serve",
        help="run the Envoy rate limit service (gRPC and HTTP)",
        usage=USAGE,
        description="Run the Envoy global rate limit service. Every flag can also be set by\n"
        "the environment variable shown; a flag wins over its variable.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        flag_hints=FLAG_HINTS,
        positional_flag="--config",
    )
    for title, names in GROUPS:
        group = serve.add_argument_group(title)
        for name in names:
            option = OPTIONS[name]
            help_text = f"{option.help} [env {option.env}]"
            if name == "config_paths":
                group.add_argument(
                    option.flag,
                    dest=name,
                    nargs="+",
                    action="extend",
                    metavar="PATH",
                    help=help_text,
                )
            elif option.parse is boolean:  # an on/off switch: --x and --no-x
                group.add_argument(
                    option.flag,
                    dest=name,
                    action=argparse.BooleanOptionalAction,
                    default=None,
                    help=help_text,
                )
            else:
                group.add_argument(option.flag, dest=name, metavar=metavars[name], help=help_text)


def refusal(exc: OSError, environ: Mapping[str, str] = os.environ) -> str:
    """The line ``serve`` prints for ``exc``, raised as it started; a port in use also says
    which flag gives another (``--http-port`` for the HTTP port). Another error keeps the
    file it names, and one in ``PROMETHEUS_MULTIPROC_DIR`` (of ``environ``) says so."""
    said = exc.strerror or str(exc)
    found = re.match(r"cannot listen for (.+?) on (\S+): ", said)
    if found is None:
        return _file_refusal(exc, environ) if exc.filename is not None else said
    flag = PORT_FLAGS.get(found[1])
    if exc.errno != errno.EADDRINUSE or flag is None:
        return said
    return f"{said}; give another port with {flag}"


def _file_refusal(exc: OSError, environ: Mapping[str, str]) -> str:
    """``exc`` naming its file, as ``str(exc)`` does without the ``[Errno N]``."""
    from ratewarden.server.stats import MULTIPROC_ENV  # prometheus_client: serve's alone

    files = [_text(name) for name in (exc.filename, exc.filename2) if name is not None]
    said = f"{exc.strerror or exc}: {' -> '.join(map(repr, files))}"
    metrics = environ.get(MULTIPROC_ENV)
    if metrics:
        where = os.path.abspath(metrics)
        if os.path.commonpath([where, os.path.abspath(files[0])]) == where:
            said += (
                f" (in {MULTIPROC_ENV} {metrics!r}, where prometheus_client keeps the metrics: "
                "make it a directory this user can write, or unset it)"
            )
    return said


def _text(name: object) -> str:
    return os.fsdecode(name) if isinstance(name, bytes) else str(name)
