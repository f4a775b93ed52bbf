"""The gRPC port's TLS options checked together, and ``--tls-client-san``'s name matching.

``check_tls`` refuses the combinations that cannot work (a certificate without its key,
a client CA or a client name without TLS or the CA) and a private key protected by a pass
phrase (grpcio would ask for it on the terminal, and wait); ``check_san`` reads
``--tls-client-san``; ``names_host`` says whether a certificate names that host.

``--tls-client-san`` is envoyproxy/ratelimit's ``GRPC_CLIENT_TLS_SAN``: under mutual TLS,
the client's certificate must also name this host, matched as Go's ``VerifyHostname``
matches it (upstream verifies with it): an IP address against the certificate's IP
addresses, a name against its DNS names, case-insensitively, a trailing dot aside, and a
``*`` as a whole leftmost label standing for exactly one label (``*.mesh.local`` names
``envoy.mesh.local``, not ``mesh.local`` nor ``a.b.mesh.local``). The wildcard is the
certificate's: ``--tls-client-san`` itself names one host, and a ``*`` in it is refused
(Go would match it only against a certificate naming ``*.mesh.local`` literally, so it
would refuse every client; a pattern standing for many hosts would widen the trust the
flag narrows).

grpcio has no hook in the handshake for the names, so the check is a server interceptor
on the ``grpcio`` transport, the only one with TLS (``grpc_san.ClientSanCheck``): a call
whose certificate names another host is refused ``UNAUTHENTICATED`` before it runs.
Upstream refuses the handshake itself; for Envoy both are a failed call, which its
filter's ``failure_mode_deny`` decides.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

from ratewarden.errors import ConfigurationError
from ratewarden.server.tls_files import check_key

__all__ = ["TLS_FLAGS", "check_san", "check_tls", "names_host"]


#: The TLS options by ``Settings`` field name, as ``check_tls`` names them by default.
TLS_FLAGS = {
    "tls_cert": "--tls-cert",
    "tls_key": "--tls-key",
    "tls_client_ca": "--tls-client-ca",
    "tls_client_san": "--tls-client-san",
}


def check_tls(
    cert: str | None,
    key: str | None,
    client_ca: str | None,
    client_san: str | None,
    names: Mapping[str, str] = TLS_FLAGS,
) -> None:
    """Raise ``ConfigurationError`` for TLS options that cannot work together, naming each
    as ``names`` say (``TLS_FLAGS``' keys: its flag, or the variable it was given by)."""
    if (cert is None) != (key is None):
        given, missing = ("tls_cert", "tls_key") if key is None else ("tls_key", "tls_cert")
        raise ConfigurationError(
            f"{names[given]} is set but {names[missing]} is not; TLS needs both the "
            "certificate and its key"
        )
    if client_ca is not None and cert is None:
        raise ConfigurationError(
            f"{names['tls_client_ca']} is set without {names['tls_cert']}/{names['tls_key']}; "
            "mutual TLS needs the server's own certificate too"
        )
    if client_san is not None and client_ca is None:
        raise ConfigurationError(
            f"{names['tls_client_san']} is set without {names['tls_client_ca']}; only a "
            "client certificate the client CA verified can be checked for the name"
        )
    if key is not None:
        check_key(key, names["tls_key"])


def check_san(name: Any) -> str:
    """``name`` as ``--tls-client-san`` takes it (its parser): one host name or IP address."""
    host = str(name).strip()
    if _ip(host) is None and (not host or any(c.isspace() or c in "/,:[]" for c in host)):
        raise ConfigurationError(
            "must be the one host name or IP address a client certificate has to name"
        )
    if "*" in host:
        raise ConfigurationError(
            "must name one host, without a wildcard: give the name the client's certificate "
            "is checked for (envoy.internal); a certificate's own *.internal names it"
        )
    return host


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    if len(text) >= 3 and text[0] == "[" and text[-1] == "]":
        text = text[1:-1]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _matches(pattern: str, host: str) -> bool:
    pattern = pattern.lower().rstrip(".")
    if pattern == host:
        return True
    if not pattern.startswith("*."):
        return False
    first, _, rest = host.partition(".")
    return bool(first) and rest == pattern[2:]


def names_host(host: str, dns_names: Iterable[str], ip_addresses: Iterable[str]) -> bool:
    """Whether a certificate with these DNS names and IP addresses names ``host``."""
    ip = _ip(host)
    if ip is not None:
        return any(_ip(candidate) == ip for candidate in ip_addresses)
    wanted = host.lower().rstrip(".")
    return any(_matches(pattern, wanted) for pattern in dns_names)
