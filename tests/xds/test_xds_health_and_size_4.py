"""Rules from xDS and what operators see: health that follows the rules as they arrive
(``--health-needs-rules``), a start without rules said in the log, and a response larger
than ``--xds-max-message-bytes`` counted as a config error, with the option named.

The health interval is 60 s in the health tests, so anything that happens within their few
seconds happened because the rules changed, not because the health loop ticked.
"""

from __future__ import annotations

import logging

import pytest

from ratewarden.server.app import RateLimitServer
from tests.xds._control_plane import ControlPlane, until
from tests.xds.conftest import START_S, forced, limit, resource


def health_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, bool]]:
    return [
        (record.getMessage(), record.serving)  # type: ignore[attr-defined]
        for record in caplog.records
        if getattr(record, "event", None) == "health"
    ]


async def test_health_follows_the_rules_as_they_come_and_go(
    plane: ControlPlane, servers: list[RateLimitServer], caplog: pytest.LogCaptureFixture
) -> None:
    """--xds-force-start --health-needs-rules: NOT_SERVING at start, said in the log; the
    first domain turns it SERVING at once, with that reason (the store never changed); an
    update that leaves no domain turns it NOT_SERVING at once."""
    caplog.set_level(logging.INFO, logger="ratewarden.server")
    server = await forced(plane, servers, health_needs_rules=True, health_interval=60.0)
    assert not server.serving()
    assert health_lines(caplog) == [("no domain loaded (--health-needs-rules): not serving", False)]
    plane.publish("v1", resource("r", "shop", limit("api_key", 1)))
    await until(server.serving, "SERVING once a domain is loaded", timeout=START_S)
    assert health_lines(caplog)[-1] == ("a domain is loaded (--health-needs-rules): serving", True)
    plane.publish("v2")
    await until(lambda: not server.serving(), "NOT_SERVING once none is", timeout=START_S)
    assert health_lines(caplog)[-1] == (
        "no domain loaded (--health-needs-rules): not serving",
        False,
    )


async def test_a_response_over_the_size_limit_is_a_config_error_naming_the_option(
    plane: ControlPlane, servers: list[RateLimitServer], caplog: pytest.LogCaptureFixture
) -> None:
    """Rules larger than --xds-max-message-bytes never arrive: each attempt counts as a failed
    config load, the failed-load gauge is 1, and the disconnection's reason says which
    option to raise and above what."""
    caplog.set_level(logging.WARNING, logger="ratewarden.server.xds")
    many = [limit(f"key_{index}", 10) for index in range(200)]
    plane.publish("v1", resource("big", "shop", *many))
    server = await forced(plane, servers, xds_max_message_bytes=2000)
    xds = server.xds
    assert xds is not None
    await until(lambda: xds.failures >= 2, "two refused responses", timeout=START_S)
    text = server.metrics("")[0].decode()
    errors = [line for line in text.splitlines() if line.startswith("ratelimit_service_config_l")]
    assert "ratelimit_service_config_last_load_failed 1.0" in errors
    [count] = [line for line in errors if line.startswith("ratelimit_service_config_load_error_t")]
    assert float(count.split()[1]) >= 2
    reasons = [
        record.reason  # type: ignore[attr-defined]
        for record in caplog.records
        if getattr(record, "event", None) == "xds_disconnected"
    ]
    assert reasons and all("RESOURCE_EXHAUSTED" in reason for reason in reasons)
    assert "raise --xds-max-message-bytes (RATEWARDEN_XDS_MAX_MESSAGE_BYTES) above" in reasons[0]
    assert xds.last_error is not None and "(2000 bytes)" in xds.last_error
    assert not server.rules_loaded
