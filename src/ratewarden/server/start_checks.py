"""What ``ratewarden serve`` refuses before it starts anything (exit 2, one line naming
where the value was given): a rule path that does not exist, an address to listen on
that can only fail to bind, TLS files the gRPC port cannot serve (``GrpcTls.load``'s
checks) or the xDS client cannot use (``xds.source_of``'s, the same ones), and a
``PROMETHEUS_MULTIPROC_DIR`` that is no directory this user can write (prometheus_client
would fail on its first metric, naming a file in it)."""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Mapping, Sequence

from ratewarden.errors import ConfigurationError
from ratewarden.server.options import OPTIONS
from ratewarden.server.options_env import given_as
from ratewarden.server.settings import Settings
from ratewarden.server.stats import MULTIPROC_ENV
from ratewarden.server.transport_checks import tls_given_as
from ratewarden.server.upstream_env import XDS_VARIABLES

__all__ = ["check_start", "host_problem"]

#: Each listening address, and the upstream variable it can also come from.
_HOSTS = {
    "host": "HOST",
    "grpc_host": "GRPC_HOST",
    "debug_host": "DEBUG_HOST",
    "metrics_host": "PROMETHEUS_ADDR",
}


def check_start(chosen: Settings, flags: Mapping[str, object], environ: Mapping[str, str]) -> None:
    """Refuse ``chosen`` (resolved from ``flags`` and ``environ``) with a ConfigurationError
    when a rule path is missing, an address to listen on cannot be one, a TLS file cannot
    be served or used to reach the xDS server, or the metrics directory of the environment
    cannot be written."""
    _config_paths_exist(chosen.config_paths, flags.get("config_paths") is not None, environ)
    _hosts_resolve(chosen, flags, environ)
    if chosen.tls_cert is not None and chosen.tls_key is not None:
        # Imported here: grpcio reads GRPC_VERBOSITY when first imported, which serve sets
        # after importing this module (logs.quiet_grpc_core).
        from ratewarden.server.grpc_tls import GrpcTls

        names = tls_given_as(flags, environ)  # a flag, its RATEWARDEN_* or GRPC_* variable
        GrpcTls.load(chosen.tls_cert, chosen.tls_key, chosen.tls_client_ca, names=names)
    if chosen.config_xds is not None and chosen.xds_tls:
        from ratewarden.server.xds.source import XDS_TLS_FLAGS, source_of

        source_of(chosen, names=_given_as(XDS_TLS_FLAGS, flags, environ))
    _metrics_dir_writable(environ)


def _given_as(
    names: Mapping[str, str], flags: Mapping[str, object], environ: Mapping[str, str]
) -> dict[str, str]:
    """How each setting of ``names`` was given, as ``settings.resolve`` takes it: its flag,
    else its ``RATEWARDEN_*`` variable, else envoyproxy/ratelimit's variable when that is
    set (``options_env.given_as`` names one given by none)."""
    shown = given_as(names, flags, environ)
    for variable, name in XDS_VARIABLES.items():
        own = flags.get(name) is not None or OPTIONS[name].env in environ
        if name in names and not own and environ.get(variable, "").strip():
            shown[name] = variable
    return shown


def _metrics_dir_writable(environ: Mapping[str, str]) -> None:
    """``PROMETHEUS_MULTIPROC_DIR``, when set, must be a directory this user can write: with
    it set, prometheus_client keeps every metric in files there, one process or several."""
    where = environ.get(MULTIPROC_ENV)
    if not where:
        return
    if not os.path.exists(where):
        problem = "does not exist"
    elif not os.path.isdir(where):
        problem = "is not a directory"
    elif not os.access(where, os.W_OK | os.X_OK):
        problem = f"is not writable by this user (uid {os.getuid()})"
    else:
        return
    raise ConfigurationError(
        f"{MULTIPROC_ENV} {where!r}: {problem}; prometheus_client keeps the metrics in files "
        "there while it is set: make it a directory this user can write, or unset it "
        "(--workers makes one of its own)"
    )


def _config_paths_exist(paths: Sequence[str], flagged: bool, environ: Mapping[str, str]) -> None:
    """A rule path that does not exist, refused naming where it was given: ``--config``, its
    variable, or the upstream RUNTIME_* variables the path was made of."""
    if flagged:
        source = OPTIONS["config_paths"].flag
    elif OPTIONS["config_paths"].env in environ:
        source = OPTIONS["config_paths"].env
    else:
        source = "RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY"
    for path in paths:
        if not os.path.exists(path):
            raise ConfigurationError(f"{source} {path!r}: does not exist")


def _hosts_resolve(
    chosen: Settings, flags: Mapping[str, object], environ: Mapping[str, str]
) -> None:
    """An address to listen on that is neither an IP address nor a name this host resolves,
    refused naming where it was given, as a bad value (exit 2): binding it could only fail.
    An address that resolves but is not this host's is the bind's to refuse (exit 1)."""
    for name, upstream in _HOSTS.items():
        host = getattr(chosen, name)
        if host is None:
            continue
        problem = host_problem(host)
        if problem is None:
            continue
        if flags.get(name) is not None:
            given = f"{OPTIONS[name].flag} {host!r}"
        elif OPTIONS[name].env in environ:
            given = f"{OPTIONS[name].env} {host!r}"
        else:
            given = f"{upstream}={environ.get(upstream, host)!r}"
        raise ConfigurationError(f"{given}: {problem}")


def host_problem(host: str) -> str | None:
    """Why ``host`` cannot be an address to listen on, or None. Numbers and dots only are
    an IPv4 address or nothing: no name is looked up for them (999.1.1.1 is no name)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return None
    if all(part.isascii() and part.isdigit() for part in host.split(".")):
        return "not an IP address (IPv4 is four numbers from 0 to 255, as 127.0.0.1)"
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        why = exc.strerror if isinstance(exc, socket.gaierror) else exc
        return f"not an IP address or a name this host can resolve ({why})"
    return None
