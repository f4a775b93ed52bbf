"""The checks of ``Settings`` that concern the gRPC transport and what it must serve:
``--transport native`` installed and without TLS, ``--grpc-max-connection-age`` and its
grace, and ``--rlqs``'s options (a stream, which needs grpcio; its ``--rlqs-*`` options
only with it). ``Settings`` runs them when it is built, and ``settings.resolve`` runs
``check_rlqs_given``, which sees what was given; each raises ``ConfigurationError``
naming the options.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from ratewarden.errors import ConfigurationError
from ratewarden.server.options import OPTIONS

if TYPE_CHECKING:
    from ratewarden.server.settings import Settings

__all__ = ["RLQS_OPTIONS", "check_rlqs", "check_rlqs_given", "check_transport"]

#: The settings that tune the quota service, which mean something only with ``rlqs``.
RLQS_OPTIONS = (
    "rlqs_interval",
    "rlqs_ttl",
    "rlqs_idle",
    "rlqs_demand_reports",
    "rlqs_change_rounds",
    "rlqs_bucket_metrics",
)


def check_transport(settings: Settings, native: bool) -> None:
    """``native``: whether pygrpc-native is installed here."""
    _check_connection_age(settings)
    if settings.transport != "native":
        return
    if not native:
        raise ConfigurationError(
            "--transport native: the pygrpc-native package is not installed; "
            "pip install 'ratewarden[native]' or use --transport grpcio"
        )
    if settings.tls_cert is not None:
        raise ConfigurationError(
            "--transport native cannot serve TLS (--tls-cert): pygrpc-native has no TLS "
            "yet; use --transport grpcio, or auto, which picks grpcio when TLS is on"
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
    if age is not None and settings.transport == "native":
        raise ConfigurationError(
            "--grpc-max-connection-age (upstream's GRPC_MAX_CONNECTION_AGE) with --transport "
            "native: pygrpc-native cannot close connections by their age; use --transport "
            "grpcio, or auto, which picks grpcio when it is set"
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
