"""The gRPC side of ``ratewarden serve``: Envoy's rate limit service and grpc.health.v1.

``RateLimitServicer`` answers ``envoy.service.ratelimit.v3.RateLimitService/
ShouldRateLimit`` through a callable the composition root hands it (the
service, wrapped in the failure mode), so no exception ever reaches grpc and
becomes ``UNKNOWN``: a request the service rejects as malformed is answered
``INVALID_ARGUMENT``, a call before the first rules (``--xds-force-start``)
``UNAVAILABLE``; everything else has already been turned into an answer. With
``--tracing``, each call is a span (``tracing.py``).

The request arrives as raw bytes and is decoded here, not by grpc: protobuf
refuses a string field that is not UTF-8, and grpc would report that as
``UNKNOWN``; decoded here it is ``INVALID_ARGUMENT`` naming the reason.

The health service reports the names in ``HEALTH_SERVICES``: ``""`` (the whole
server, what Envoy's and Kubernetes' gRPC health checks ask by default), the
rate limit service's full name, and ``ratelimit`` (the name envoyproxy/ratelimit
registers, so existing probes keep working).

``GrpcTls`` (``grpc_tls.py``) turns the port into TLS (``--tls-cert``/``--tls-key``)
and, with ``--tls-client-ca``, into mutual TLS: a client must present a certificate
that CA signed, or the handshake fails before any call; with ``--tls-client-san`` too,
a call whose certificate does not name that host is refused (``grpc_san.py``). The
files are read again when they change, for the connections made after.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpc
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from ratewarden.errors import ConfigurationError, ServiceUnavailableError
from ratewarden.server.grpc_san import ClientSanCheck
from ratewarden.server.grpc_tls import GrpcTls
from ratewarden.server.tls_metrics import TlsMetrics
from ratewarden.server.tracing import Tracing

__all__ = [
    "HEALTH_SERVICES",
    "GrpcServer",
    "GrpcTls",
    "RateLimitServicer",
    "bind_refusal",
    "cannot_listen",
    "grpc_address",
]

log = logging.getLogger("ratewarden.server.grpc")

RATE_LIMIT_SERVICE = "envoy.service.ratelimit.v3.RateLimitService"
HEALTH_SERVICES = ("", RATE_LIMIT_SERVICE, "ratelimit")

Answer = Callable[[Any], Awaitable[Any]]
_UNKNOWN = grpc.StatusCode.UNKNOWN


class RateLimitServicer(rls_pb2_grpc.RateLimitServiceServicer):  # type: ignore[misc]
    """``ShouldRateLimit`` over ``answer(request) -> RateLimitResponse``.

    ``request`` is a ``RateLimitRequest`` or its serialized bytes (as the server
    registers it); bytes that do not decode are ``INVALID_ARGUMENT``.
    """

    def __init__(self, answer: Answer, tracing: Tracing | None = None) -> None:
        self._answer = answer
        self._tracing = tracing

    async def ShouldRateLimit(self, request: Any, context: Any) -> Any:  # noqa: N802 - grpc's name
        if isinstance(request, bytes):
            try:
                request = rls_pb2.RateLimitRequest.FromString(request)
            except DecodeError as exc:
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"the request is not a valid RateLimitRequest: {exc}",
                )
        tracing = self._tracing
        span = None if tracing is None else tracing.start(request, context.invocation_metadata())
        try:
            response = await self._answer(request)
        except ConfigurationError as exc:
            code, details = grpc.StatusCode.INVALID_ARGUMENT, str(exc)
        except ServiceUnavailableError as exc:
            code, details = grpc.StatusCode.UNAVAILABLE, str(exc)
        except BaseException as exc:  # a cancellation, or a bug's path (grpcio answers UNKNOWN)
            if tracing is not None:
                gone = isinstance(exc, asyncio.CancelledError)
                tracing.failed(span, (grpc.StatusCode.CANCELLED if gone else _UNKNOWN).value[0], "")
            raise
        else:
            if tracing is not None:
                tracing.answered(span, response)
            return response
        if tracing is not None:
            tracing.failed(span, code.value[0], details)
        await context.abort(code, details)

    def handler(self) -> grpc.GenericRpcHandler:
        """The service for ``server.add_generic_rpc_handlers``, taking requests as raw bytes."""
        method = grpc.unary_unary_rpc_method_handler(
            self.ShouldRateLimit,
            request_deserializer=None,
            response_serializer=rls_pb2.RateLimitResponse.SerializeToString,
        )
        return grpc.method_handlers_generic_handler(RATE_LIMIT_SERVICE, {"ShouldRateLimit": method})


def grpc_address(host: str, port: int, uds: str | None = None) -> str:
    """The gRPC listening address: ``unix:PATH``, ``[v6]:port`` or ``host:port``."""
    if uds is not None:
        return f"unix:{uds}"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class GrpcServer:
    """A grpc.aio server: the rate limit and health services, and any ``services`` more (the
    quota service's stream). ``start`` binds, ``stop`` drains."""

    def __init__(
        self,
        answer: Answer,
        *,
        tls: GrpcTls | None = None,
        services: Sequence[grpc.GenericRpcHandler] = (),
        max_connection_age: float | None = None,
        max_connection_age_grace: float | None = None,
        tracing: Tracing | None = None,
        on_refused: Callable[[], None] | None = None,
        tls_events: TlsMetrics | None = None,
    ) -> None:
        self.health = health.aio.HealthServicer()
        self._on_refused = on_refused  # each call --tls-client-san refused (ClientSanCheck)
        self._tls_events = tls_events  # the certificate's renewals (serve's metrics)
        self.tls = tls
        # grpc-core's own: at the age (jittered by +-10%) a connection is sent GOAWAY, and
        # after the grace it is closed, calls in flight or not. None: no limit.
        self._options: list[tuple[str, int]] = []
        if max_connection_age is not None:
            self._options.append(("grpc.max_connection_age_ms", _ms(max_connection_age)))
        if max_connection_age_grace is not None:
            grace = _ms(max_connection_age_grace)
            self._options.append(("grpc.max_connection_age_grace_ms", grace))
        self._servicer = RateLimitServicer(answer, tracing)
        self._services = tuple(services)
        self._server: Any = None

    async def start(
        self, host: str, port: int, *, reuse_port: bool = False, uds: str | None = None
    ) -> int:
        """Listen on ``host:port`` (or the Unix socket ``uds``); return the port bound (useful
        with port 0; 0 on a Unix socket).

        Raises ``OSError`` (``cannot_listen``'s, with the OS's errno) when the address cannot
        be bound.
        """
        address = grpc_address(host, port, uds)
        # grpcio's add_port says only that it failed (grpc-core logs the reason to stderr, a
        # line before ours): a plain socket bound as grpc-core binds first gives the OS's
        # reason, and grpc-core is not asked, so its line is not written either.
        refused = None if uds is not None else bind_refusal(host, port, reuse_port=reuse_port)
        if refused is not None:
            raise cannot_listen(address, host, refused)
        # grpc turns SO_REUSEPORT on by default; keep it off unless workers share the
        # port, so that a second server on a busy port fails instead of splitting traffic.
        san = None if self.tls is None else self.tls.client_san
        self._server = grpc.aio.server(
            interceptors=() if san is None else (ClientSanCheck(san, self._on_refused),),
            options=[("grpc.so_reuseport", int(reuse_port)), *self._options],
        )
        self._server.add_generic_rpc_handlers((self._servicer.handler(), *self._services))
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self._server)
        try:
            if self.tls is None:
                bound = int(self._server.add_insecure_port(address))
            else:
                credentials = self.tls.credentials(self._tls_events)
                bound = int(self._server.add_secure_port(address, credentials))
        except RuntimeError:  # grpc's "Failed to bind"; its log line has the OS's reason
            bound = 0
        if bound == 0:  # taken since the trial bind, or a Unix socket: ask again for the reason
            refused = None if uds is not None else bind_refusal(host, port, reuse_port=reuse_port)
            if refused is None:
                raise OSError(
                    errno.EADDRNOTAVAIL,
                    f"cannot listen for gRPC on {address}: grpc-core could not bind it (its "
                    "log line above gives the reason)",
                )
            raise cannot_listen(address, host, refused)
        for name in HEALTH_SERVICES:
            await self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        await self._server.start()
        return 0 if uds is not None else bound

    async def set_serving(self, serving: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in HEALTH_SERVICES:
            await self.health.set(name, status)

    async def stop(self, grace: float) -> None:
        """Report NOT_SERVING for good, refuse new calls, give calls in flight ``grace`` seconds."""
        await self.health.enter_graceful_shutdown()
        if self._server is not None:
            await self._server.stop(grace)


def bind_refusal(host: str, port: int, *, reuse_port: bool = False) -> OSError | None:
    """The OS's refusal of a socket bound to ``host:port`` as grpc-core binds its own
    (SO_REUSEADDR; SO_REUSEPORT when workers share the port), or None when one of the host's
    addresses binds (grpc-core listens on every one it can). The socket is closed at once:
    it never listens. A host that does not resolve is a ``socket.gaierror``."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        return exc
    first: OSError | None = None
    for family, kind, proto, _, where in found:
        try:
            with socket.socket(family, kind, proto) as trial:
                trial.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if reuse_port:
                    trial.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                trial.bind(where)
        except OSError as exc:
            first = first or exc
        else:
            return None
    return first


def cannot_listen(address: str, host: str, error: OSError, *, what: str = "gRPC") -> OSError:
    """``error`` (a bind's or a host lookup's) as the one line ``ratewarden serve`` prints:
    ``cannot listen for gRPC on ADDRESS: REASON (the OS's words)`` (``what`` for another
    port than gRPC's), the reason saying which refusal it is: the port in use, or an address
    that is not this host's."""
    code = error.errno or 0
    words = error.strerror or str(error)
    if isinstance(error, socket.gaierror) or code <= 0:
        # a lookup's: gaierror's codes are not errnos; pygrpc-native's has none (0)
        reason = f"{host!r} is not an IP address or a name this host can resolve"
        words = words.removeprefix(f"{address}: ")
        code = errno.EADDRNOTAVAIL
    else:
        words = os.strerror(code)
        if code == errno.EADDRINUSE:
            reason = "the port is in use by another process"
        elif code == errno.EADDRNOTAVAIL:
            reason = f"{host} is not an address of this host"
        elif code == errno.EACCES:
            reason = "not allowed (a port below 1024 needs privileges)"
        else:
            reason = "the OS refused it"
    return OSError(code, f"cannot listen for {what} on {address}: {reason} ({words})")


def _ms(seconds: float) -> int:
    """Whole milliseconds for a grpc-core option, at least 1 (its 0 would not mean none)."""
    return max(1, round(seconds * 1000))
