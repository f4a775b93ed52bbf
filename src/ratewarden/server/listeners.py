"""The ports one ``ratewarden serve`` process listens on: gRPC (grpcio or pygrpc-native, over
TLS with ``--tls-cert``), HTTP, and the debug and metrics ports when asked for.

The composition root (``server/app.py``) builds them with ``grpc_listener`` and
``http_listeners``, starts them with ``start_listeners`` (all or none: a port that
cannot be bound stops those already listening, and the ``OSError`` names it) and
stops them with ``stop_listeners``, which lets calls in flight finish (and counts those
the grace cuts). Each takes the settings and servers it needs, not the composition root;
``serving_fields`` is what the ``serving`` log line says they listen on (an IPv6 address
in brackets, ``[::1]:8080``, as curl takes it). A port that cannot be bound is said as the
gRPC port's is (``grpc.cannot_listen``): the port in use, an address not this host's, a
port below 1024 without the privileges.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

from ratewarden.server.grpc import Answer, GrpcServer, GrpcTls, cannot_listen, grpc_address
from ratewarden.server.grpc_native import NativeGrpcServer
from ratewarden.server.http import HttpBackend, HttpServer
from ratewarden.server.settings import Settings, redacted
from ratewarden.server.tls_metrics import TlsMetrics
from ratewarden.server.tracing import Tracing

__all__ = [
    "grpc_listener",
    "http_listeners",
    "serving_fields",
    "start_listeners",
    "stop_listeners",
]

log = logging.getLogger("ratewarden.server")


def grpc_listener(
    settings: Settings,
    answer: Answer,
    services: Sequence[Any] = (),
    answer_wire: Answer | None = None,
    tracing: Tracing | None = None,
    on_refused: Callable[[], None] | None = None,
    tls_events: TlsMetrics | None = None,
) -> GrpcServer | NativeGrpcServer:
    """The gRPC server ``--transport`` names (``settings.grpc_transport``), answering with
    ``answer`` (a ``RateLimitResponse``); the native one with ``answer_wire`` (its wire
    bytes) when given; grpcio's also serves ``services`` (the quota service's stream). Both
    make a span per call with ``tracing`` (``--tracing``); grpcio's calls ``on_refused`` for each
    call ``--tls-client-san`` refused, and tells ``tls_events`` of the certificate served and
    of its renewals."""
    tls = None
    if settings.tls_cert is not None and settings.tls_key is not None:
        tls = GrpcTls.load(
            settings.tls_cert, settings.tls_key, settings.tls_client_ca, settings.tls_client_san
        )
        if tls_events is not None:
            tls_events.served(tls)
    if settings.grpc_transport == "native":
        return NativeGrpcServer(answer_wire or answer, tls=tls, tracing=tracing)
    return GrpcServer(
        answer,
        tls=tls,
        services=services,
        max_connection_age=settings.grpc_max_connection_age,
        max_connection_age_grace=settings.grpc_max_connection_age_grace,
        tracing=tracing,
        on_refused=on_refused,
        tls_events=tls_events,
    )


def http_listeners(
    settings: Settings, backend: HttpBackend
) -> tuple[HttpServer, HttpServer | None, HttpServer | None]:
    """The HTTP port's server over ``backend``; the debug port's (``--debug-port``,
    upstream's ``DEBUG_PORT``: the same endpoints) and the metrics port's
    (``--metrics-port``, upstream's ``PROMETHEUS_ADDR``: the metrics), or None."""
    http = HttpServer(backend, dashboard=settings.dashboard)
    debug = None
    if settings.debug_port is not None:
        debug = HttpServer(backend, dashboard=settings.dashboard)
    prometheus = None
    if settings.metrics_port is not None:
        prometheus = HttpServer(backend, metrics_path=settings.metrics_path)
    return http, debug, prometheus


async def start_listeners(
    settings: Settings,
    grpc: GrpcServer | NativeGrpcServer,
    http: HttpServer,
    debug: HttpServer | None,
    prometheus: HttpServer | None,
) -> tuple[int, int, int, int]:
    """Bind the gRPC port, then the HTTP ones; the ports bound: gRPC, HTTP, debug and
    metrics (0 for a server that is None). OSError on a port that cannot be bound, once
    the ports already bound are stopped."""
    s = settings
    grpc_port = await grpc.start(
        s.grpc_host or s.host, s.grpc_port, reuse_port=s.reuse_port, uds=s.grpc_uds
    )
    try:
        http_port = await http.start(s.host, s.http_port, reuse_port=s.reuse_port)
    except OSError as exc:
        await grpc.stop(0)
        raise cannot_listen(grpc_address(s.host, s.http_port), s.host, exc, what="HTTP") from exc
    debug_port = metrics_port = 0
    if debug is not None:
        others = (grpc, http, prometheus)
        debug_port = await _start_extra(
            s, debug, "the debug port", s.debug_host, s.debug_port, others
        )
    if prometheus is not None:
        others = (grpc, http, debug)
        metrics_port = await _start_extra(
            s, prometheus, "metrics", s.metrics_host, s.metrics_port, others
        )
    return grpc_port, http_port, debug_port, metrics_port


async def _start_extra(
    settings: Settings,
    server: HttpServer,
    what: str,
    host: str | None,
    port: int | None,
    others: tuple[GrpcServer | NativeGrpcServer | HttpServer | None, ...],
) -> int:
    """Start a second HTTP port (debug, metrics); on failure stop the ``others``."""
    host, port = host or settings.host, port or 0
    try:
        return await server.start(host, port, reuse_port=settings.reuse_port)
    except OSError as exc:
        await stop_listeners(0, *others)
        raise cannot_listen(grpc_address(host, port), host, exc, what=what) from exc


async def stop_listeners(
    grace: float,
    *listeners: GrpcServer | NativeGrpcServer | HttpServer | None,
    running: Callable[[], int] = lambda: 0,
) -> None:
    """Stop each listener (None: none there), giving calls in flight ``grace`` seconds; the
    calls ``running()`` counts when the grace runs out are cut (gRPC UNAVAILABLE, HTTP 500),
    and a ``grace_expired`` warning says how many."""
    stopping = asyncio.gather(*[server.stop(grace) for server in listeners if server is not None])
    done, _ = await asyncio.wait({stopping}, timeout=grace)
    if not done and (cut := running()):
        log.warning(
            "calls still running when --grace ran out are cut",
            extra={"event": "grace_expired", "calls": cut, "grace_s": grace},
        )
    await stopping


def serving_fields(
    settings: Settings, transport: str, ports: tuple[int, int, int, int]
) -> dict[str, Any]:
    """The ``serving`` log line's fields: what listens where (``ports``: gRPC, HTTP, debug and
    metrics, 0 for one that is off), and what it serves with."""
    s = settings
    grpc_port, http_port, debug_port, metrics_port = ports
    return {
        "event": "serving",
        "grpc": grpc_address(s.grpc_host or s.host, grpc_port, s.grpc_uds),
        "transport": transport,
        "tls": ("mTLS" if s.tls_client_ca is not None else "TLS") if s.tls else None,
        "rlqs": s.rlqs,
        "http": grpc_address(s.host, http_port),
        "debug": grpc_address(s.debug_host or s.host, debug_port) if debug_port else None,
        "metrics": grpc_address(s.metrics_host or s.host, metrics_port) if metrics_port else None,
        "store": redacted(s.store_url),
        "store_per_second": s.store_per_second and redacted(s.store_per_second),
        "statsd": s.statsd,
        "tracing": s.tracing,
        "dogstatsd": s.dogstatsd,
        "config": list(s.config_paths),
        "xds": s.config_xds,
        "loop": type(asyncio.get_running_loop()).__module__.split(".")[0],
    }
