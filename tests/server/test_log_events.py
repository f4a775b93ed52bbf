"""Every line ``ratewarden serve`` logs is a JSON object with an ``event`` field, as
docs/operations.md says: here the store failure and the statsd send failure, written through
serve's own JSON formatter (``configure_logging``)."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from ratewarden.errors import StorageUnavailableError
from ratewarden.server.config import loads
from ratewarden.server.hooks import Reports, ServiceHooks
from ratewarden.server.logs import LOGGERS, configure_logging
from ratewarden.server.reload import report_load
from ratewarden.server.statsd import StatsdSink
from ratewarden.testing import ManualClock

CONFIG = """
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
"""


@pytest.fixture
def serve_logging() -> Iterator[None]:
    """Puts the loggers back after a test that called ``configure_logging`` (in the test
    itself: the handler keeps the stderr of the moment, which pytest swaps per phase)."""
    try:
        yield
    finally:
        for name in LOGGERS:
            logging.getLogger(name).handlers.clear()
            logging.getLogger(name).propagate = True
        logging.getLogger("ratewarden").setLevel(logging.NOTSET)


def _entries(capfd: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in capfd.readouterr().err.splitlines()]


@pytest.mark.usefixtures("serve_logging")
def test_a_store_failure_is_logged_with_an_event(capfd: pytest.CaptureFixture[str]) -> None:
    """The line "store failed (...); failure_mode open answers for api.user" has the event
    store_failed and names the rule."""
    (rule,) = loads(CONFIG).rules
    configure_logging("info", "json")
    Reports(ServiceHooks(), ManualClock()).store_error(rule, StorageUnavailableError("down"))
    (entry,) = _entries(capfd)
    assert entry["logger"] == "ratewarden.server.service"
    assert entry["msg"] == "store failed (down); failure_mode open answers for api.user"
    assert entry["event"] == "store_failed" and entry["rule"] == "api.user"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.usefixtures("serve_logging")
async def test_a_statsd_send_failure_is_logged_with_an_event_and_a_singular(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The line "cannot send stats to statsd ...: 1 line dropped" (not "1 lines") has the
    event statsd_send_failed and the count dropped."""
    configure_logging("info", "json")
    sink = StatsdSink("tcp", "127.0.0.1", _closed_port())
    sink.count("ratelimit.service.call.should_rate_limit.total_hits")
    await sink.send()
    (entry,) = _entries(capfd)
    assert entry["logger"] == "ratewarden.server.statsd"
    assert entry["msg"].startswith("cannot send stats to statsd at 127.0.0.1:")
    assert entry["msg"].endswith(": 1 line dropped")
    assert entry["event"] == "statsd_send_failed" and entry["dropped"] == 1
    assert sink.dropped == 1


def test_one_line_held_back_is_said_in_the_singular(caplog: pytest.LogCaptureFixture) -> None:
    """After one suppressed line the next says "(1 similar line suppressed)", not "lines"."""
    from ratewarden.metrics import LogRateLimiter

    clock = ManualClock()
    lines = LogRateLimiter(60.0, clock=clock)
    logger = logging.getLogger("ratewarden.test")
    for _ in range(2):
        lines.log(logger, logging.WARNING, "k", "failed", extra={"event": "failed"})
    clock.advance(60)
    lines.log(logger, logging.WARNING, "k", "failed", extra={"event": "failed"})
    assert [r.getMessage() for r in caplog.records] == [
        "failed",
        "failed (1 similar line suppressed)",
    ]
    assert all(r.event == "failed" for r in caplog.records)  # type: ignore[attr-defined]


@pytest.mark.usefixtures("serve_logging")
def test_a_failing_on_load_hook_is_logged_with_an_event(capfd: pytest.CaptureFixture[str]) -> None:
    """The reload's instrumentation callback raising: one JSON line with the event
    hook_failed naming on_load, and the load stands."""

    def broken(ok: bool) -> None:
        raise RuntimeError("instrumentation down")

    configure_logging("info", "json")
    report_load(broken, True)
    (entry,) = _entries(capfd)
    assert entry["logger"] == "ratewarden.server.reload"
    assert entry["event"] == "hook_failed" and entry["hook"] == "on_load"
