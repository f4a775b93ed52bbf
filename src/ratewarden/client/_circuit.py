"""A circuit per host: what the transports ask of a breaker, and what they raise when it is open.

The breaker itself is ``ratewarden.CircuitBreaker(per_node=True)``, given to the
transports (this package is a leaf and imports nothing of the limiter): each host,
written ``scheme://host:port``, is one of its nodes. ``Circuit`` is one request's
turn at its host's circuit: every attempt the breaker allowed gets exactly one
verdict (success, failure, or none: ``abandon``), so that a probe never stays
taken.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable
from urllib.parse import urlsplit

from ratewarden.errors import ConfigurationError, RatewardenError

__all__ = ["Circuit", "HostBreaker", "HostCircuitOpenError", "check_breaker", "origin"]

_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
_METHODS = ("allow", "success", "failure", "abandon", "retry_in")


@runtime_checkable
class HostBreaker(Protocol):
    """What the transports call, with a host (``scheme://host:port``) as the node:
    ``ratewarden.CircuitBreaker(per_node=True)`` is one."""

    per_node: bool

    def allow(self, node: str = "") -> bool: ...

    def success(self, node: str = "") -> None: ...

    def failure(self, node: str = "", hold: float = 0.0) -> None: ...

    def abandon(self, node: str = "") -> None: ...

    def retry_in(self, node: str = "") -> float: ...


class HostCircuitOpenError(RatewardenError):
    """The host's circuit is open: the request was not sent.

    What a transport raises is also its library's own transport error
    (``httpx.TransportError``; requests' ``ConnectionError``), so existing handlers
    catch it. ``origin`` is the host (``scheme://host:port``), ``retry_in`` the
    seconds until the breaker lets a probe through (0 when a probe is already out).
    """

    def __init__(self, origin: str, retry_in: float) -> None:
        self.origin = origin
        self.retry_in = retry_in
        when = f"next probe in {retry_in:.3f} s" if retry_in > 0 else "its probe is in flight"
        super().__init__(f"circuit open for {origin} after failed attempts: not sent ({when})")


def origin(url: str) -> str:
    """``scheme://host:port`` of ``url``, the default port filled in (one circuit per host)."""
    parts = urlsplit(url)
    scheme, host = parts.scheme.lower(), parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port or _DEFAULT_PORTS.get(scheme)
    except ValueError:  # a malformed port: the request will fail on its own
        port = None
    return f"{scheme}://{host}" if port is None else f"{scheme}://{host}:{port}"


def check_breaker(breaker: object) -> HostBreaker | None:
    """``breaker`` if it can keep a circuit per host, else a ConfigurationError naming it."""
    if breaker is None:
        return None
    missing = [name for name in _METHODS if not callable(getattr(breaker, name, None))]
    if missing or not isinstance(breaker, HostBreaker):
        raise ConfigurationError(
            f"breaker={breaker!r} has no {', '.join(missing) or 'per_node'}: "
            "pass ratewarden.CircuitBreaker(per_node=True)"
        )
    if breaker.per_node is not True:
        raise ConfigurationError(
            f"breaker={breaker!r} keeps one circuit for every host: pass "
            "CircuitBreaker(per_node=True), so that each host has its own"
        )
    return breaker


class Circuit:
    """One request's turn at its host's circuit (every method a no-op without a breaker)."""

    __slots__ = ("breaker", "origin", "pending")

    def __init__(self, breaker: HostBreaker | None, url: str) -> None:
        self.breaker = breaker
        self.origin = origin(url) if breaker is not None else ""
        self.pending = False  # an allowed attempt awaits its verdict

    def admit(self) -> float | None:
        """Let an attempt go: None, or the seconds until a probe may go (refused)."""
        if self.breaker is None:
            return None
        if self.breaker.allow(self.origin):
            self.pending = True
            return None
        return self.breaker.retry_in(self.origin)

    def open_for(self) -> float:
        """Seconds the circuit stays open (0: closed, half open, or no breaker)."""
        return 0.0 if self.breaker is None else self.breaker.retry_in(self.origin)

    def report(self, failed: bool | None, hold: float | None = None) -> None:
        """The verdict on the attempt let through (None: none, the place is given back);
        after the first, further reports of the same attempt do nothing. ``hold``: the
        seconds a failed response asked the client to wait (its ``Retry-After``): the
        circuit that failure opens stays open at least that long."""
        if not self.pending or self.breaker is None:
            return
        self.pending = False
        if failed is None:
            self.breaker.abandon(self.origin)
        elif failed and hold is not None and hold > 0:
            self.breaker.failure(self.origin, hold=hold)
        elif failed:
            self.breaker.failure(self.origin)
        else:
            self.breaker.success(self.origin)
