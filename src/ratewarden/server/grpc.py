"""The gRPC side of ``ratewarden serve``: Envoy's rate limit service and grpc.health.v1.

``RateLimitServicer`` answers ``envoy.service.ratelimit.v3.RateLimitService/
ShouldRateLimit`` through a callable the composition root hands it (the
service, wrapped in the failure policy), so no exception ever reaches grpc and
becomes ``UNKNOWN``: a request the service rejects as malformed is answered
``INVALID_ARGUMENT``; everything else has already been turned into an answer.

The health service reports the names in ``HEALTH_SERVICES``: ``""`` (the whole
server, what Envoy's and Kubernetes' gRPC health checks ask by default), the
rate limit service's full name, and ``ratelimit`` (the name envoyproxy/ratelimit
registers, so existing probes keep working).
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from envoy.service.ratelimit.v3 import rls_pb2_grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from ratewarden.errors import ConfigurationError

__all__ = ["HEALTH_SERVICES", "GrpcServer", "RateLimitServicer"]

log = logging.getLogger("ratewarden.server.grpc")

RATE_LIMIT_SERVICE = "envoy.service.ratelimit.v3.RateLimitService"
HEALTH_SERVICES = ("", RATE_LIMIT_SERVICE, "ratelimit")

Answer = Callable[[Any], Awaitable[Any]]


class RateLimitServicer(rls_pb2_grpc.RateLimitServiceServicer):  # type: ignore[misc]
    """``ShouldRateLimit`` over ``answer(request) -> RateLimitResponse``."""

    def __init__(self, answer: Answer) -> None:
        self._answer = answer

    async def ShouldRateLimit(self, request: Any, context: Any) -> Any:  # noqa: N802 - grpc's name
        try:
            return await self._answer(request)
        except ConfigurationError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))


class GrpcServer:
    """A grpc.aio server: the rate limit and health services. ``start`` binds, ``stop`` drains."""

    def __init__(self, answer: Answer) -> None:
        self.health = health.aio.HealthServicer()
        self._servicer = RateLimitServicer(answer)
        self._server: Any = None

    async def start(self, host: str, port: int, *, reuse_port: bool = False) -> int:
        """Listen on ``host:port`` and return the port bound (useful with port 0).

        Raises ``OSError`` (EADDRINUSE) when the address cannot be bound.
        """
        # grpc turns SO_REUSEPORT on by default; keep it off unless workers share the
        # port, so that a second server on a busy port fails instead of splitting traffic.
        self._server = grpc.aio.server(options=[("grpc.so_reuseport", int(reuse_port))])
        rls_pb2_grpc.add_RateLimitServiceServicer_to_server(self._servicer, self._server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self._server)
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            bound = int(self._server.add_insecure_port(address))
        except RuntimeError:  # grpc's "Failed to bind"; its log line has the OS's reason
            bound = 0
        if bound == 0:
            raise OSError(
                errno.EADDRINUSE,
                f"cannot listen for gRPC on {address}: the address is in use or not available",
            )
        for name in HEALTH_SERVICES:
            await self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        await self._server.start()
        return bound

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
