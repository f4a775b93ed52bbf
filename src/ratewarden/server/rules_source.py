"""Where ``ratewarden serve`` takes its rules from: files (``--config``) or an xDS server
(``--config-xds`` and the ``--xds-*`` options), one of the two.

``XDS_OPTIONS`` names the xDS client's settings; ``check_rules_source`` refuses
settings that name both sources or neither, ``--xds-*`` options that cannot work as
given, ``--config-files all`` with an xDS server; ``check_reload_given`` refuses
``--reload-interval`` (a poll of rule files) given with an xDS server;
``own_source_wins`` keeps ratewarden's own choice of a source over
envoyproxy/ratelimit's. ``Settings`` (``server/settings.py``) uses them all.
``file_loader`` is how the server loads the files the settings name; ``file_variables``
and ``check_files_given``, how ``ratewarden config check`` chooses them as ``serve`` would.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from ratewarden.errors import ConfigurationError
from ratewarden.server import config as rules
from ratewarden.server.options import OPTIONS

if TYPE_CHECKING:
    from ratewarden.server.settings import Settings

__all__ = [
    "XDS_OPTIONS",
    "check_reload_given",
    "check_rules_source",
    "check_files_given",
    "file_loader",
    "file_variables",
    "own_source_wins",
]

#: The settings of the xDS client, which mean something only with ``config_xds``.
XDS_OPTIONS = (
    "xds_node_id",
    "xds_node_metadata",
    "xds_headers",
    "xds_retry_interval",
    "xds_retry_max",
    "xds_max_message_bytes",
    "xds_force_start",
    "xds_tls",
    "xds_tls_ca",
    "xds_tls_cert",
    "xds_tls_key",
    "xds_tls_server_name",
)


def check_rules_source(settings: Settings) -> None:
    """Raise ``ConfigurationError`` unless ``settings`` name one source of rules, with
    ``--xds-*`` options only for an xDS server, and those consistent."""
    if settings.config_paths and settings.config_xds is not None:
        raise ConfigurationError(
            f"rules from files ({', '.join(settings.config_paths)}) and from the xDS server "
            f"{settings.config_xds!r} both asked for; give --config (RATEWARDEN_CONFIG) or "
            "--config-xds (RATEWARDEN_CONFIG_XDS, upstream's CONFIG_TYPE=GRPC_XDS_SOTW), "
            "not both"
        )
    if not settings.config_paths and settings.config_xds is None:
        raise ConfigurationError(
            "no config given: pass --config PATH (a file or directory) or --config-xds "
            "HOST:PORT (an xDS server), or set RATEWARDEN_CONFIG, RATEWARDEN_CONFIG_XDS, "
            "or envoyproxy/ratelimit's RUNTIME_ROOT or CONFIG_TYPE=GRPC_XDS_SOTW"
        )
    if settings.config_xds is not None and settings.config_files != "yaml":
        raise ConfigurationError(
            f"--config-files {settings.config_files} says which files of a --config directory "
            f"are rules, and the rules come from the xDS server {settings.config_xds!r}; drop it"
        )
    if settings.config_xds is None:
        defaults = {field.name: field.default for field in fields(settings)}
        given = [
            OPTIONS[name].flag for name in XDS_OPTIONS if getattr(settings, name) != defaults[name]
        ]
        if given:
            several = len(given) > 1
            raise ConfigurationError(
                f"{', '.join(given)} {'apply' if several else 'applies'} only to "
                "rules from an xDS server; add --config-xds HOST:PORT (or "
                f"CONFIG_TYPE=GRPC_XDS_SOTW), or drop {'them' if several else 'it'}"
            )
        return
    if settings.xds_retry_max < settings.xds_retry_interval:
        raise ConfigurationError(
            f"--xds-retry-max {settings.xds_retry_max:g} is below --xds-retry-interval "
            f"{settings.xds_retry_interval:g}; the longest wait must be at least the first"
        )
    tls_files = ("xds_tls_ca", "xds_tls_cert", "xds_tls_key", "xds_tls_server_name")
    if not settings.xds_tls:
        for name in tls_files:
            if getattr(settings, name) is not None:
                raise ConfigurationError(
                    f"{OPTIONS[name].flag} is set but --xds-tls is not; add --xds-tls "
                    "(CONFIG_GRPC_XDS_SERVER_USE_TLS=true) to reach the xDS server over "
                    "TLS, or drop it"
                )
    if (settings.xds_tls_cert is None) != (settings.xds_tls_key is None):
        given_flag, missing = (
            ("--xds-tls-cert", "--xds-tls-key")
            if settings.xds_tls_key is None
            else ("--xds-tls-key", "--xds-tls-cert")
        )
        raise ConfigurationError(
            f"{given_flag} is set but {missing} is not; a client certificate needs its key"
        )


def check_reload_given(
    flags: Mapping[str, Any], environ: Mapping[str, str], config_xds: str | None
) -> None:
    """Refuse ``--reload-interval`` (or ``RATEWARDEN_RELOAD_INTERVAL``) given, even at its
    default, with rules from an xDS server: it polls rule files, and there are none."""
    option = OPTIONS["reload_interval"]
    if flags.get("reload_interval") is not None:
        given = f"{option.flag} {flags['reload_interval']}"
    elif environ.get(option.env) is not None:
        given = f"{option.env}={environ[option.env]!r}"
    else:
        return
    if config_xds is not None:
        raise ConfigurationError(
            f"{given} applies only to rules from files (--config): it polls them for changes, "
            f"and the xDS server {config_xds!r} sends each change as it is made; drop it"
        )


def own_source_wins(own: Mapping[str, Any], upstream: dict[str, Any]) -> None:
    """Where the rules come from is one setting given two ways: ratewarden's (``own``), if
    it names either source, wins over upstream's (CONFIG_TYPE, RUNTIME_*) with everything
    upstream's brought, which is dropped from ``upstream``."""
    if "config_paths" in own:
        for name in ("config_xds", "config_files", *XDS_OPTIONS):
            upstream.pop(name, None)
    elif "config_xds" in own:
        upstream.pop("config_paths", None)
        upstream.pop("config_files", None)


def file_loader(settings: Settings) -> Callable[[Sequence[str]], rules.RateLimitConfig]:
    """``config.load`` as ``settings`` ask for it (``--merge-domains``, ``--config-files``,
    ``--failure-mode``): what the server loads its rule files with, at start and at every
    reload."""
    return functools.partial(
        rules.load,
        merge_domains=settings.merge_domains,
        files=settings.config_files,
        default_failure_mode=settings.failure_mode,
    )


#: How serve loads rule files: what ``file_variables`` keeps of the environment, flags aside.
_HOW = ("config_files", "failure_mode", "merge_domains")
#: Where serve finds them, envoyproxy/ratelimit's way (with ``--config``'s and
#: ``--config-xds``'s variables): kept by ``file_variables`` when no path is given.
_WHERE_UPSTREAM = ("CONFIG_TYPE", "RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY")


def file_variables(flags: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``environ`` that say how serve loads rule files (``--config-files``,
    ``--failure-mode``, ``--merge-domains``) and, with no ``config_paths`` in ``flags``
    (``None``: not given), where they are (``RATEWARDEN_CONFIG``, upstream's ``RUNTIME_*``,
    which choose ``--config-files all``): ``settings.resolve(flags, file_variables(...))``
    are the settings ``ratewarden config check`` loads with, as serve would. No other
    variable is kept: one that only serve uses cannot fail a check.

    Raises ``ConfigurationError`` when no path is given and no variable names one.
    """
    names = [OPTIONS[name].env for name in _HOW] + ["MERGE_DOMAIN_CONFIG"]
    if flags.get("config_paths") is None:
        where = [OPTIONS["config_paths"].env, OPTIONS["config_xds"].env, *_WHERE_UPSTREAM]
        if not any(environ.get(name, "").strip() for name in where):
            raise ConfigurationError(
                "no rule files given: name them (PATH...), or set RATEWARDEN_CONFIG or "
                "envoyproxy/ratelimit's RUNTIME_ROOT (RUNTIME_SUBDIRECTORY, "
                "RUNTIME_APPDIRECTORY) to check what serve would read"
            )
        names += where
    return {name: environ[name] for name in names if name in environ}


def check_files_given(settings: Settings) -> None:
    """Raise ``ConfigurationError`` when ``settings`` take the rules from an xDS server: there
    are no files for ``ratewarden config check`` to check."""
    if settings.config_xds is not None:
        raise ConfigurationError(
            "serve would take its rules from an xDS server (RATEWARDEN_CONFIG_XDS or "
            "CONFIG_TYPE=GRPC_XDS_SOTW), not from files: name the rule files to check (PATH...)"
        )
