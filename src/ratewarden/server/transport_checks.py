"""The checks of ``Settings`` that concern the gRPC transport and what it must serve:
``--transport native`` installed and without TLS, ``--grpc-max-connection-age`` and its
grace, and ``--rlqs``'s options (a stream, which needs grpcio; its ``--rlqs-*`` options
only with it). ``Settings`` runs them when it is built, and ``settings.resolve`` runs
``check_rlqs_given`` and ``check_transport_given``, which see what was given; each raises
``ConfigurationError`` naming the options, as given where it knows (``tls_given_as``: the
TLS settings by flag, ``RATEWARDEN_*`` or upstream ``GRPC_*`` variable).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from ratewarden.errors import ConfigurationError
from ratewarden.server.options import OPTIONS
from ratewarden.server.options_env import given_as
from ratewarden.server.tls_names import TLS_FLAGS

if TYPE_CHECKING:
    from ratewarden.server.settings import Settings

__all__ = [
    "RLQS_OPTIONS",
    "UPSTREAM_TLS",
    "check_rlqs",
    "check_rlqs_given",
    "check_transport",
    "check_transport_given",
    "tls_given_as",
]

#: The settings that tune the quota service, which mean something only with ``rlqs``.
RLQS_OPTIONS = (
    "rlqs_interval",
    "rlqs_ttl",
    "rlqs_idle",
    "rlqs_demand_reports",
    "rlqs_change_rounds",
    "rlqs_bucket_metrics",
)


#: envoyproxy/ratelimit's variables of the TLS settings (with GRPC_SERVER_USE_TLS=true).
UPSTREAM_TLS = {
    "tls_cert": "GRPC_SERVER_TLS_CERT",
    "tls_key": "GRPC_SERVER_TLS_KEY",
    "tls_client_ca": "GRPC_CLIENT_TLS_CACERT",
    "tls_client_san": "GRPC_CLIENT_TLS_SAN",
}


def tls_given_as(flags: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, str]:
    """How each TLS setting was given (``TLS_FLAGS``' keys), as ``settings.resolve`` takes
    them: its flag, else its ``RATEWARDEN_*`` variable, else the upstream variable when that
    is set (``options_env.given_as`` names one given by none)."""
    shown = given_as(TLS_FLAGS, flags, environ)
    for name, upstream in UPSTREAM_TLS.items():
        own = flags.get(name) is not None or OPTIONS[name].env in environ
        if not own and environ.get(upstream, "").strip():
            shown[name] = upstream
    return shown


def check_transport(settings: Settings, native: bool) -> None:
    """``native``: whether pygrpc-native is installed here."""
    _check_connection_age(settings)
    if settings.transport == "native":
        age = settings.grpc_max_connection_age is not None
        _check_native(native, settings.tls_cert is not None, age, _FLAGS)


def check_transport_given(
    values: Mapping[str, Any], flags: Mapping[str, Any], environ: Mapping[str, str], native: bool
) -> None:
    """``check_transport``'s refusals of ``--transport native`` for the ``Settings`` field
    ``values`` resolved from ``flags`` and ``environ``, naming each setting as given."""
    if values.get("transport") != "native":
        return
    transport = "--transport"
    if flags.get("transport") is None and OPTIONS["transport"].env in environ:
        transport = OPTIONS["transport"].env
    names = {"transport": transport, **tls_given_as(flags, environ)}
    age = values.get("grpc_max_connection_age") is not None
    _check_native(native, values.get("tls_cert") is not None, age, names)


_FLAGS = {"transport": "--transport", **TLS_FLAGS}


def _check_native(native: bool, tls: bool, age: bool, names: Mapping[str, str]) -> None:
    """Refuse ``--transport native`` (named as ``names`` say) when it is not installed
    (``native``), or asked to serve TLS or to close connections by their age."""
    transport = names["transport"]
    if not native:
        raise ConfigurationError(
            f"{transport} native: the pygrpc-native package is not installed; "
            "pip install 'ratewarden[native]' or use --transport grpcio"
        )
    if tls:
        raise ConfigurationError(
            f"{transport} native cannot serve TLS ({names['tls_cert']}): pygrpc-native has "
            "no TLS yet; use --transport grpcio, or auto, which picks grpcio when TLS is on"
        )
    if age:
        raise ConfigurationError(
            f"--grpc-max-connection-age (upstream's GRPC_MAX_CONNECTION_AGE) with {transport} "
            "native: pygrpc-native cannot close connections by their age; use --transport "
            "grpcio, or auto, which picks grpcio when it is set"
        )


def _check_connection_age(settings: Settings) -> None:
    age, grace = settings.grpc_max_connection_age, settings.grpc_max_connection_age_grace
    for flag, value, zero in (("", age, False), ("-grace", grace, True)):
        if value is None:
            continue
        number = not isinstance(value, bool) and isinstance(value, int | float)
        if not number or not (value >= 0 if zero else value > 0) or value == float("inf"):
            bound = "0 or more" if zero else "above 0"
            raise ConfigurationError(
                f"--grpc-max-connection-age{flag} {value!r} must be a number of seconds {bound}"
            )
    if grace is not None and age is None:
        raise ConfigurationError(
            "--grpc-max-connection-age-grace is set without --grpc-max-connection-age: "
            "the grace is counted from a connection's age; set both, or neither"
        )


def check_rlqs_given(flags: Mapping[str, Any], environ: Mapping[str, str], rlqs: bool) -> None:
    """Refuse an ``--rlqs-*`` flag or ``RATEWARDEN_RLQS_*`` variable given while ``rlqs``
    is off, even at its default value, naming where each came from (a flag wins over its
    variable, as ``options.read`` takes them)."""
    if rlqs:
        return
    given = []
    for name in RLQS_OPTIONS:
        option = OPTIONS[name]
        if flags.get(name) is not None:
            given.append(option.flag)
        elif environ.get(option.env) is not None:
            given.append(option.env)
    if given:
        raise ConfigurationError(_without_rlqs(given))


def _without_rlqs(given: list[str]) -> str:
    several = len(given) > 1
    return (
        f"{', '.join(given)} {'need' if several else 'needs'} --rlqs (RATEWARDEN_RLQS=true): "
        f"{'they tune' if several else 'it tunes'} Envoy's quota service, which is off; "
        f"add --rlqs, or drop {'them' if several else 'it'}"
    )


def check_rlqs(settings: Settings) -> None:
    if not settings.rlqs:
        defaults = {field.name: field.default for field in fields(settings)}
        changed = [
            OPTIONS[name].flag for name in RLQS_OPTIONS if getattr(settings, name) != defaults[name]
        ]
        if changed:
            raise ConfigurationError(_without_rlqs(changed))
        return
    if settings.transport == "native":
        raise ConfigurationError(
            "--rlqs with --transport native: the native transport serves unary calls only "
            "and RLQS is a bidirectional stream; use --transport grpcio, or auto, which "
            "picks grpcio when --rlqs is on"
        )
    if settings.rlqs_ttl <= settings.rlqs_interval:
        raise ConfigurationError(
            f"--rlqs-ttl {settings.rlqs_ttl} must be above --rlqs-interval "
            f"{settings.rlqs_interval:g}: an assignment must outlive the round that renews it"
        )
    if not settings.rlqs_idle > settings.rlqs_interval:
        raise ConfigurationError(
            f"--rlqs-idle {settings.rlqs_idle:g} must be above --rlqs-interval "
            f"{settings.rlqs_interval:g}: a bucket is abandoned at a round, after that long "
            "without a request reported (keep it above Envoy's 5 s between reports)"
        )
    if not 1 <= settings.rlqs_demand_reports <= 100:
        raise ConfigurationError(
            f"--rlqs-demand-reports {settings.rlqs_demand_reports} must be a whole number "
            "from 1 to 100: the reports an Envoy's demand is measured over"
        )
    if not 1 <= settings.rlqs_change_rounds <= 100:
        raise ConfigurationError(
            f"--rlqs-change-rounds {settings.rlqs_change_rounds} must be a whole number from 1 "
            "to 100: the rounds over which a bucket's changed shares hand out at most one "
            "full burst (1: every round, as before)"
        )
