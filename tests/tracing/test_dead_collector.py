"""A trace collector that is down: OpenTelemetry's own lines come out as serve's JSON lines,
bounded, and a stop waits for the spans left only so long.

The collector here is a port bound and never listened on, so every export is refused at once;
the exporter then retries for its timeout (1 + 2 + 4 s of backoff), which held a graceful stop
about 7 s and wrote plain-text lines to stderr through Python's last-resort handler.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from envoy.service.ratelimit.v3 import rls_pb2

from ratewarden.server.logs import LOGGERS, OTEL_INTERVAL, configure_logging
from ratewarden.server.tracing import Tracing
from ratewarden.testing import ManualClock

EXPORTER = "opentelemetry.exporter.otlp.proto.http.trace_exporter"


@pytest.fixture
def serve_logging() -> Iterator[None]:
    """Puts the loggers back after a test that called ``configure_logging``."""
    try:
        yield
    finally:
        for name in LOGGERS:
            logging.getLogger(name).handlers.clear()
            logging.getLogger(name).propagate = True
            logging.getLogger(name).setLevel(logging.NOTSET)


@pytest.fixture
def dead_collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """A port on loopback that refuses connections (bound, never listening), named by
    ``OTEL_EXPORTER_OTLP_ENDPOINT``."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
        for name in ("OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"):
            monkeypatch.delenv(name, raising=False)
        yield port


def _entries(capfd: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in capfd.readouterr().err.splitlines()]


def _one_span_then_stop(protocol: str, wait: float) -> float:
    """Seconds ``Tracing.shutdown(wait)`` took with one span waiting to be sent."""
    tracing = Tracing(protocol, 1.0, {})
    span = tracing.start(rls_pb2.RateLimitRequest(domain="web"), ())
    tracing.answered(span, rls_pb2.RateLimitResponse(overall_code=1))
    started = time.monotonic()
    tracing.shutdown(wait)
    return time.monotonic() - started


@pytest.mark.usefixtures("serve_logging", "dead_collector")
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_stop_with_the_collector_down_is_bounded_and_logged_as_json(
    protocol: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """The stop returns soon after its wait (it took the exporter's ~7 s of retries), saying
    the spans left are dropped; every line on stderr, OpenTelemetry's included, is a JSON
    object with an event (they were plain text)."""
    configure_logging("info", "json")
    assert _one_span_then_stop(protocol, 0.5) < 2.5
    entries = _entries(capfd)
    events = [entry["event"] for entry in entries]
    assert "spans_dropped_at_stop" in events
    theirs = [entry for entry in entries if entry["logger"].startswith("opentelemetry.")]
    assert theirs, entries
    assert {entry["event"] for entry in theirs} == {"opentelemetry"}


@pytest.mark.usefixtures("serve_logging")
def test_opentelemetry_lines_repeat_at_most_once_a_minute_each(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Five of the exporter's retry lines within a minute write one; the first after the minute
    says how many were held back. Another message is not held back by the first."""
    clock = ManualClock(0)
    configure_logging("info", "json", clock=clock)
    exporter = logging.getLogger(EXPORTER)
    transient = "Transient error %s encountered while exporting %s batch, retrying in %.2fs."
    for attempt in range(5):
        exporter.warning(transient, "refused", "spans", 2.0**attempt)
    exporter.error("Failed to export spans batch due to timeout, max retries or shutdown.")
    clock.advance(OTEL_INTERVAL)
    exporter.warning(transient, "refused", "spans", 1.0)
    msgs = [entry["msg"] for entry in _entries(capfd)]
    assert msgs == [
        "Transient error refused encountered while exporting spans batch, retrying in 1.00s.",
        "Failed to export spans batch due to timeout, max retries or shutdown.",
        "Transient error refused encountered while exporting spans batch, retrying in 1.00s."
        " (4 similar lines suppressed)",
    ]


@pytest.mark.usefixtures("serve_logging", "dead_collector")
def test_text_logs_take_opentelemetry_lines_too(capfd: pytest.CaptureFixture[str]) -> None:
    """``--log-format text``: OpenTelemetry's lines are in ratewarden's text format, with
    their event."""
    configure_logging("info", "text", clock=ManualClock(0))
    logging.getLogger(EXPORTER).warning("Exporter already shutdown, ignoring batch")
    (line,) = capfd.readouterr().err.splitlines()
    assert f"WARNING {EXPORTER}: Exporter already shutdown, ignoring batch" in line
    assert line.endswith('event="opentelemetry"')
