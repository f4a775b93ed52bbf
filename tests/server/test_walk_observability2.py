"""What the service logs and counts about limit overrides it cannot use or cannot hold apart.

A client (or a misconfigured Envoy) may send the same bad override on every call, or a new
override value on every call: the service's log says so at most once a minute, and the
overflow of overrides is one series per domain, not one per value. Over every store and
both twins (the ``rls`` harness), on its ManualClock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ratewarden.server.stats import ServiceStats
from tests.server.conftest import OK, SERVICE_RULES, Harness, desc

MINUTE = 2  # RateLimitResponse.RateLimit.MINUTE
LOGGER = "ratewarden.server.service"


def events(caplog: pytest.LogCaptureFixture, event: str) -> list[str]:
    """The messages of the service's records with ``event``."""
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == LOGGER and getattr(record, "event", None) == event
    ]


def overflow_series(stats: ServiceStats) -> dict[str, float]:
    """``rule`` label -> value of ``ratelimit_service_rate_limit_value_overflow_total``."""
    body, _ = stats.exposition()
    return {
        sample.labels["rule"]: sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
        if sample.name == "ratelimit_service_rate_limit_value_overflow_total"
    }


def test_bad_overrides_on_every_call_are_logged_once_a_minute(
    rls: Callable[..., Harness], caplog: pytest.LogCaptureFixture
) -> None:
    """5 calls with an override of unit 99 and 3 of unit 0 (UNKNOWN): the config's 9 a minute
    answers each, and one limit_override_ignored line is written, not eight; a minute later
    the next one is logged again, saying how many were held back."""
    harness = rls(SERVICE_RULES)
    caplog.set_level(logging.WARNING, logger=LOGGER)
    for unit in [99] * 5 + [0] * 3:
        assert harness.codes(desc(("c", "k"), limit=(100, unit))) == [OK, OK]
    (line,) = events(caplog, "limit_override_ignored")
    assert line == (
        "ignoring a limit override in domain 'd': its unit 99 is not a RateLimit unit; "
        "the config applies"
    )
    assert harness.remaining(("c", "k")) == 1  # the config's 9 a minute counted all eight
    harness.clock.advance(60)
    assert harness.codes(desc(("c", "k"), limit=(100, 99))) == [OK, OK]
    assert events(caplog, "limit_override_ignored")[1].endswith("(7 similar lines suppressed)")


def test_override_values_past_the_cap_make_one_line_and_one_series_per_domain(
    rls: Callable[..., Harness], caplog: pytest.LogCaptureFixture
) -> None:
    """--max-values-per-rule 2 and 9 distinct override values: 7 overflow, all on the domain's
    one overflow counter of overrides, so one value_overflow line (saying that the domain's
    overrides hold 2 values) and one series, counting 7; each value was a series and a line."""
    harness = rls(SERVICE_RULES, max_values_per_rule=2)
    stats = ServiceStats()
    harness.service.hooks = stats
    caplog.set_level(logging.WARNING, logger=LOGGER)
    for n in range(9):
        assert harness.codes(desc(("c", f"q{n}"), limit=(100, MINUTE))) == [OK, OK]
    assert events(caplog, "value_overflow") == [
        "the limit overrides of domain 'd' hold 2 distinct values; "
        "new ones share one overflow counter"
    ]
    assert overflow_series(stats) == {"d.(limit overrides)": 7}
