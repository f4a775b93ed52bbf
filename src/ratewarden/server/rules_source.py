"""Where ``ratewarden serve`` takes its rules from: files (``--config``) or an xDS server
(``--config-xds`` and the ``--xds-*`` options), one of the two.

``XDS_OPTIONS`` names the xDS client's settings; ``check_rules_source`` refuses
settings that name both sources or neither, ``--xds-*`` options that cannot work as
given, ``--config-files all`` with an xDS server; ``check_reload_given`` refuses
``--reload-interval`` (a poll of rule files) given with an xDS server;
``own_source_wins`` keeps ratewarden's own choice of a source over
envoyproxy/ratelimit's. ``Settings`` (``server/settings.py``) uses them all.
``file_loader`` is how the server loads the files the settings name.
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
    "file_loader",
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
