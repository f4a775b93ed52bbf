"""A B3 parent with no sampling state (Defer: "the next hop decides", in the B3 spec) is
sampled by ``--tracing-sampling-rate``, in the single header and in several, and stays the
span's parent; an explicit decision (``1``, ``0``, ``d``, ``x-b3-flags: 1``) is followed
whatever the rate. Spans go to an OTLP collector on loopback through a real ``Tracing``.

OpenTelemetry's B3 propagator alone reads a deferred single header as sampled (traced even at
rate 0) and deferred multiple headers as not sampled (never traced, even at rate 1).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from envoy.service.ratelimit.v3 import rls_pb2

from ratewarden.server.tracing import Tracing
from tests.tracing._collector import HttpCollector

#: Trace ids whose low 64 bits TraceIdRatioBased(0.5) samples (low) and does not (high).
LOW = "0af7651916cd43dd0000000000000001"
HIGH = "0af7651916cd43ddffffffffffffff00"
PARENT = "00f067aa0ba902b7"


@pytest.fixture
async def collector(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[HttpCollector]:
    """An OTLP/HTTP collector that ``Tracing`` exports to."""
    found = HttpCollector()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", found.endpoint)
    yield found
    await found.stop()


def _traced(rate: float, *calls: tuple[tuple[str, str], ...]) -> None:
    """One span per call's metadata, at ``rate``; then the spans left are sent."""
    tracing = Tracing("http", rate, {})
    for metadata in calls:
        span = tracing.start(rls_pb2.RateLimitRequest(domain="web"), metadata)
        tracing.answered(span, rls_pb2.RateLimitResponse(overall_code=1))
    tracing.shutdown()


def single(trace_id: str, *state: str) -> tuple[tuple[str, str], ...]:
    return (("b3", "-".join((trace_id, PARENT, *state))),)


def multi(trace_id: str, *more: tuple[str, str]) -> tuple[tuple[str, str], ...]:
    return (("x-b3-traceid", trace_id), ("x-b3-spanid", PARENT), *more)


async def test_a_deferred_b3_parent_is_not_traced_at_rate_0(collector: HttpCollector) -> None:
    """Rate 0: deferred single and multiple headers make no span (the single one did); the
    accepted, debug and x-b3-flags parents do, under their trace and parent."""
    _traced(
        0.0,
        single(HIGH),
        multi(HIGH),
        single(LOW, "1"),
        single(LOW, "d"),
        multi(LOW, ("x-b3-flags", "1")),
    )
    spans = await collector.wait_for(3)
    assert len(spans) == 3
    assert {(span.trace_id, span.parent_span_id) for span in spans} == {(LOW, PARENT)}


async def test_a_deferred_b3_parent_is_traced_at_rate_1(collector: HttpCollector) -> None:
    """Rate 1: deferred single and multiple headers are traced as children of the B3 parent
    (the multiple ones were not); a denied parent (``-0``, ``x-b3-sampled: 0``) is not."""
    _traced(1.0, single(LOW), multi(LOW), single(HIGH, "0"), multi(HIGH, ("x-b3-sampled", "0")))
    spans = await collector.wait_for(2)
    assert len(spans) == 2
    assert {(span.trace_id, span.parent_span_id) for span in spans} == {(LOW, PARENT)}


async def test_a_deferred_b3_parent_is_sampled_by_its_trace_id(collector: HttpCollector) -> None:
    """Rate 0.5: the decision is TraceIdRatioBased's on the B3 trace id, as for a call with no
    parent, so each service that defers to the rate decides alike for one trace."""
    _traced(0.5, single(LOW), single(HIGH), multi(LOW), multi(HIGH))
    spans = await collector.wait_for(2)
    assert len(spans) == 2
    assert {span.trace_id for span in spans} == {LOW}
