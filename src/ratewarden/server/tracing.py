"""Traces of ``ratewarden serve`` over OTLP (``--tracing http|grpc``; ``ratewarden[tracing]``).

``Tracing`` makes one SERVER span per ``ShouldRateLimit`` call on either gRPC transport, as
envoyproxy/ratelimit's gRPC instrumentation does: named
``envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit``, a child of the trace the
call's metadata carries (W3C ``traceparent``, B3 in one header or several, as Envoy's
tracers send them, B3 winning over ``traceparent`` on a call with both; baggage read too),
sampled as its parent was, or, with no parent or a B3 parent that defers the decision, for a
share of ``--tracing-sampling-rate`` of the calls. Its attributes: ``rpc.system``,
``rpc.service``, ``rpc.method``, ``rpc.grpc.status_code``, and ratewarden's
``ratelimit.domain``, ``ratelimit.descriptors`` (how many) and ``ratelimit.overall_code``.
A call that fails (UNAVAILABLE before the first rules, say) ends its span with that code
and an error status; a malformed request (INVALID_ARGUMENT) is the client's fault and
leaves the status unset, as OpenTelemetry's conventions for servers say.

Spans leave in batches from a thread of the SDK (``BatchSpanProcessor``), to the endpoint
the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``
variables name (``http://localhost:4318/v1/traces`` or ``localhost:4317`` by default), with
their headers, TLS and timeout variables, as upstream's exporter reads them. A collector
that is down costs the SDK's retries in that thread, and drops spans, never calls.
``shutdown`` sends what is left, waiting at most ``STOP_WAIT`` seconds: the exporter retries
a failed export for up to its timeout (10 s by default; 1 + 2 + 4 s of backoff against a
refused port), which would hold a graceful stop that long; past the wait the exporter is
stopped, its retries end and the spans left are dropped, with a ``spans_dropped_at_stop``
line (and ``STOP_WAIT`` more at most for an attempt in flight that the collector never
answers).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import threading
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from ratewarden.errors import ConfigurationError
from ratewarden.server.options_telemetry import warn_without_effect

__all__ = ["STOP_WAIT", "Tracing", "check_tracing", "tracing_of"]

log = logging.getLogger("ratewarden.server")

#: Seconds a stop waits for the collector to take the spans left.
STOP_WAIT = 2.0

SERVICE = "envoy.service.ratelimit.v3.RateLimitService"
SPAN_NAME = f"{SERVICE}/ShouldRateLimit"
#: gRPC codes a server span counts as errors (the others are the client's doing).
_SERVER_ERRORS = frozenset({2, 4, 12, 13, 14, 15})  # UNKNOWN, DEADLINE, UNIMPLEMENTED, ...
_OVERALL = {0: "UNKNOWN", 1: "OK", 2: "OVER_LIMIT"}


class Tracing:
    """Spans of ``ShouldRateLimit`` calls: ``start`` one, then ``answered`` or ``failed``."""

    def __init__(self, protocol: str, sampling_rate: float, resource: Mapping[str, str]) -> None:
        try:
            from opentelemetry.baggage.propagation import W3CBaggagePropagator
            from opentelemetry.propagators.b3 import B3MultiFormat
            from opentelemetry.propagators.composite import CompositePropagator
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
            from opentelemetry.trace import SpanKind, StatusCode
            from opentelemetry.trace.propagation.tracecontext import (
                TraceContextTextMapPropagator,
            )
        except ImportError as exc:
            raise ConfigurationError(
                f"--tracing {protocol} needs OpenTelemetry: pip install 'ratewarden[tracing]' "
                f"({exc})"
            ) from None
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[assignment]
                OTLPSpanExporter,
            )
        self.resource = _resource(Resource, resource)
        self._root = TraceIdRatioBased(sampling_rate)
        self.provider = TracerProvider(sampler=ParentBased(self._root), resource=self.resource)
        self._exporter = _stopped_once(OTLPSpanExporter)()
        self.provider.add_span_processor(BatchSpanProcessor(self._exporter))
        self._tracer = self.provider.get_tracer("ratewarden.server")
        self._propagator = CompositePropagator(
            [TraceContextTextMapPropagator(), B3MultiFormat(), W3CBaggagePropagator()]
        )
        self._server, self._error = SpanKind.SERVER, StatusCode.ERROR

    def start(self, request: Any, metadata: Iterable[Any] | None) -> Any:
        """A started span for ``request``, in the trace ``metadata`` (the call's) carries."""
        carrier = {key: value for key, value in metadata or () if isinstance(value, str)}
        context = self._propagator.extract(carrier)
        deferred = _deferred_b3(carrier)
        if deferred is not None:
            context = self._decided_here(context, deferred)
        return self._tracer.start_span(
            SPAN_NAME,
            context=context,
            kind=self._server,
            attributes={
                "rpc.system": "grpc",
                "rpc.service": SERVICE,
                "rpc.method": "ShouldRateLimit",
                "ratelimit.domain": request.domain,
                "ratelimit.descriptors": len(request.descriptors),
            },
        )

    def _decided_here(self, context: Any, trace_id: int) -> Any:
        """``context`` with its B3 parent (of ``trace_id``) sampled as a call with no parent
        would be, by ``--tracing-sampling-rate``: its sampling state was Defer, which the B3
        spec leaves to the receiver. OpenTelemetry's propagator reads it as sampled in the
        single header and as not sampled in several."""
        from opentelemetry import trace

        parent = trace.get_current_span(context).get_span_context()
        if not parent.is_valid or parent.trace_id != trace_id:  # not the B3 parent after all
            return context
        decision = self._root.should_sample(context, trace_id, SPAN_NAME).decision
        sampled = decision.is_sampled()  # type: ignore[no-untyped-call]  # the SDK's, untyped
        flags = trace.TraceFlags(trace.TraceFlags.SAMPLED if sampled else trace.TraceFlags.DEFAULT)
        decided = trace.SpanContext(
            trace_id,
            parent.span_id,
            is_remote=True,
            trace_flags=flags,
            trace_state=parent.trace_state,
        )
        return trace.set_span_in_context(trace.NonRecordingSpan(decided), context)

    @staticmethod
    def answered(span: Any, response: Any) -> None:
        """End ``span`` with the answer: a ``RateLimitResponse`` or its wire bytes."""
        if span.is_recording():
            if isinstance(response, bytes):
                from envoy.service.ratelimit.v3 import rls_pb2

                response = rls_pb2.RateLimitResponse.FromString(response)
            span.set_attribute("ratelimit.overall_code", _OVERALL.get(response.overall_code, ""))
            span.set_attribute("rpc.grpc.status_code", 0)
        span.end()

    def failed(self, span: Any, code: int, details: str) -> None:
        """End ``span`` as failed with gRPC status ``code``."""
        span.set_attribute("rpc.grpc.status_code", code)
        if code in _SERVER_ERRORS:
            span.set_status(self._error, details)
        span.end()

    def shutdown(self, wait: float = STOP_WAIT) -> None:
        """Send the spans still waiting, for at most ``wait`` seconds, and stop the exporter's
        thread (past the wait its retries end and the spans left are lost; its attempt in
        flight has ``wait`` more to end)."""
        stopping = threading.Thread(
            target=self.provider.shutdown, name="ratewarden-tracing-stop", daemon=True
        )
        stopping.start()
        stopping.join(wait)
        if stopping.is_alive():
            log.warning(
                "the trace collector did not take the spans left in %g s; stopping without them",
                wait,
                extra={"event": "spans_dropped_at_stop"},
            )
            # Ends the retries' waits (and the gRPC exporter's channel): the SDK's thread then
            # ends once its attempt in flight does, at once unless the collector never answers
            # (an HTTP attempt waits for its timeout); past a second wait, a daemon left behind.
            self._exporter.shutdown()
            stopping.join(wait)


def _deferred_b3(carrier: Mapping[str, str]) -> int | None:
    """The trace id of the call's B3 context when it carries no sampling state (Defer): a
    ``b3`` header of two fields, or ``x-b3-traceid`` without ``x-b3-sampled`` and without
    ``x-b3-flags: 1`` (debug, an accept); else None. The single header wins, as in the spec."""
    single = carrier.get("b3")
    if single:
        fields = single.split("-")
        return _hex(fields[0]) if len(fields) == 2 else None
    if "x-b3-sampled" in carrier or carrier.get("x-b3-flags") == "1":
        return None
    return _hex(carrier.get("x-b3-traceid", ""))


def _hex(text: str) -> int | None:
    try:
        return int(text, 16) if text else None
    except ValueError:
        return None


def _stopped_once(exporter_type: Any) -> Any:
    """``exporter_type`` whose ``shutdown`` does its work once: ``Tracing.shutdown`` may stop
    the exporter before the SDK's own shutdown reaches it, which would then log that the
    exporter is already shut down."""

    class Exporter(exporter_type):  # type: ignore[misc]
        _stopped = False

        def shutdown(self) -> None:
            if not self._stopped:
                self._stopped = True
                super().shutdown()

    return Exporter


def _resource(resource_type: Any, given: Mapping[str, str]) -> Any:
    """``given`` over ``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_SERVICE_NAME``, with
    ``service.name`` ratewarden and a random ``service.instance.id`` when none names them."""
    found = resource_type.create(dict(given))
    defaults: dict[str, str] = {}
    if str(found.attributes.get("service.name", "")).startswith("unknown_service"):
        defaults["service.name"] = "ratewarden"
    if "service.instance.id" not in found.attributes:
        defaults["service.instance.id"] = str(uuid.uuid4())
    return found.merge(resource_type(defaults)) if defaults else found


def check_tracing(protocol: str) -> None:
    """Raise ``ConfigurationError`` when ``--tracing protocol`` cannot run here."""
    if protocol == "off":
        return
    try:
        found = importlib.util.find_spec("opentelemetry.sdk") is not None
    except ModuleNotFoundError:  # not even the API's namespace package
        found = False
    if not found:
        raise ConfigurationError(
            f"--tracing {protocol}: OpenTelemetry's SDK is not installed; pip install "
            "'ratewarden[tracing]', or use --tracing off"
        )
    if _proto_shadowed():
        version = importlib.metadata.version("opentelemetry-proto")
        raise ConfigurationError(
            f"--tracing {protocol}: opentelemetry-proto's files were overwritten by the older "
            "copy that xds-protos ships (both install opentelemetry/proto/, and the one "
            "installed last wins); put them back: pip install --force-reinstall --no-deps "
            f"'opentelemetry-proto=={version}'"
        )


def _proto_shadowed() -> bool:
    """Whether ``opentelemetry.proto`` holds xds-protos's older files, not its own."""
    try:
        from opentelemetry.proto.common.v1 import common_pb2
    except ImportError:
        return False  # not there at all: the exporter's import says so
    return not hasattr(common_pb2, "InstrumentationScope")


def tracing_of(settings: Any) -> Tracing | None:
    """The tracing ``settings`` ask for (``--tracing``), or None when it is off.

    Serve assembles its telemetry with ``dogstatsd.statsd_sinks`` then this, so this also
    logs the one warning for the telemetry options given that change nothing (StatsD's
    with StatsD off, tracing's with tracing off)."""
    warn_without_effect(settings)
    if settings.tracing == "off":
        return None
    return Tracing(
        settings.tracing, settings.tracing_sampling_rate, dict(settings.tracing_resource)
    )
