"""``ratewarden serve``'s store failure reports: bounded lines that name the rules, the open
breaker's reason, and a store that answers with the wrong shape refused at start.

Before: an exception the store's boundary missed (``TypeError`` from a reply of the wrong
shape) was logged with its traceback on every call (8 lines each: at Envoy's call rates, a
flood); one ``store_failed`` line a minute per error class named only the first rule to fail,
so a ``closed`` rule denying every call was never named; the open breaker was counted as
``reason="StorageUnavailableError"`` where the library says ``breaker_open``; and a store that
answers with the wrong shape was not refused at start (its ping raised ``TypeError``, read
as "does not answer"). Time is a ``ManualClock``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace

import pytest

from ratewarden.errors import CircuitOpenError, ConfigurationError, StorageUnavailableError
from ratewarden.server import config
from ratewarden.server.config import DescriptorRule
from ratewarden.server.hooks import FAILURE_INTERVAL, NAMED_RULES, Reports, ServiceHooks
from ratewarden.server.stats import ServiceStats
from ratewarden.server.store_check import refuse_unusable, store_fault
from ratewarden.storage.redis import AsyncRedisStore
from ratewarden.testing import ManualClock
from tests._servers import HOST, free_port
from tests.server.test_stats import value
from tests.storage.test_redis_wrong_reply_shape import REPLIES, WrongShapeServer

MODES = ["open", "closed", "local"] * 3  # 9 rules: more than NAMED_RULES


def _rules() -> list[DescriptorRule]:
    lines = ["domain: rel", "descriptors:"]
    for i, mode in enumerate(MODES):
        lines += [
            f"  - key: r{i}",
            f"    rate_limit: {{unit: minute, requests_per_unit: 3, failure_mode: {mode}}}",
        ]
    found = config.loads("\n".join(lines) + "\n", "rules.yaml").domains["rel"]
    rules = [found.match(((f"r{i}", "x"),)).rule for i in range(len(MODES))]
    assert all(rule is not None for rule in rules)
    return [rule for rule in rules if rule is not None]


class Lines:
    """The service logger's records of the running test (caplog's list is per phase)."""

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        self._caplog = caplog

    def __iter__(self) -> Iterator[logging.LogRecord]:
        return iter(self._caplog.records)

    def __len__(self) -> int:
        return len(self._caplog.records)

    def __getitem__(self, i: int) -> logging.LogRecord:
        return self._caplog.records[i]


@pytest.fixture
def lines(caplog: pytest.LogCaptureFixture) -> Iterator[Lines]:
    with caplog.at_level(logging.WARNING, logger="ratewarden.server.service"):
        yield Lines(caplog)


def test_an_unexpected_error_is_logged_bounded_with_one_traceback_a_minute(
    lines: Lines,
) -> None:
    """A store error the store's boundary missed, on every call of one rule: one line (with
    its traceback) a minute, the next saying how many were held back."""
    clock = ManualClock(0)
    reports = Reports(ServiceHooks(), clock)
    rule = _rules()[0]
    for _ in range(100):
        reports.store_error(rule, TypeError("'int' object is not subscriptable"))
    clock.advance(FAILURE_INTERVAL)
    reports.store_error(rule, TypeError("'int' object is not subscriptable"))
    assert [r.event for r in lines] == ["store_call_raised"] * 2  # type: ignore[attr-defined]
    first, second = list(lines)
    assert first.exc_info is not None and second.exc_info is not None
    assert "(99 similar lines suppressed)" in second.getMessage()
    assert first.getMessage() == (
        "store call for rel.r0 raised unexpectedly (TypeError: 'int' object is not "
        "subscriptable); failure_mode open answers"
    )


def test_the_rules_an_outage_fails_are_named_closed_ones_too(
    lines: Lines,
) -> None:
    """An outage failing 9 rules, 10 calls each: a line for each of the first NAMED_RULES
    rules, whatever its failure mode (rel.r1 is closed); the others are counted, and the next
    interval's first line names them."""
    clock = ManualClock(0)
    reports = Reports(ServiceHooks(), clock)
    rules = _rules()
    for _ in range(10):
        for rule in rules:
            reports.store_error(rule, StorageUnavailableError("Redis at h:1 did not answer"))
    named = [r.rule for r in lines]  # type: ignore[attr-defined]
    assert named == [f"rel.r{i}" for i in range(NAMED_RULES)]
    assert "failure_mode closed answers for rel.r1" in lines[1].getMessage()
    clock.advance(FAILURE_INTERVAL)
    reports.store_error(rules[0], StorageUnavailableError("Redis at h:1 did not answer"))
    held = 10 * len(rules) - NAMED_RULES
    assert (
        lines[-1]
        .getMessage()
        .endswith(
            f"answers for rel.r0 ({held} similar lines suppressed, for rules not named: "
            "rel.r5, rel.r6, rel.r7, rel.r8)"
        )
    )


def test_a_flood_of_rules_is_named_a_few_and_counted(lines: Lines) -> None:
    """Rules past the named ones are listed up to NAMED_RULES and counted beyond."""
    clock = ManualClock(0)
    reports = Reports(ServiceHooks(), clock)
    rule = _rules()[0]
    for i in range(NAMED_RULES + 20):
        reports.store_error(replace(rule, path=f"rel.v{i}"), StorageUnavailableError("down"))
    assert len(lines) == NAMED_RULES
    clock.advance(FAILURE_INTERVAL)
    reports.store_error(rule, StorageUnavailableError("down"))
    unnamed = ", ".join(f"rel.v{i}" for i in range(NAMED_RULES, 2 * NAMED_RULES))
    assert (
        lines[-1]
        .getMessage()
        .endswith(f"(20 similar lines suppressed, for rules not named: {unnamed} and 15 more)")
    )


def test_the_open_breaker_is_counted_as_breaker_open() -> None:
    """serve's degraded metric says breaker_open when the open circuit answered, as the
    library's does; a store failure keeps its class."""
    stats = ServiceStats(clock=ManualClock(0))
    rule = _rules()[1]
    stats.on_store_error("rel", rule, CircuitOpenError("circuit breaker open; probe in 1 s"))
    stats.on_store_error("rel", rule, StorageUnavailableError("down"))
    labels = {"rule": "rel.r1", "failure_mode": "closed"}
    assert value(stats, "ratewarden_degraded_total", reason="breaker_open", **labels) == 1
    assert (
        value(stats, "ratewarden_degraded_total", reason="StorageUnavailableError", **labels) == 1
    )


def test_the_open_breaker_has_its_own_lines(lines: Lines) -> None:
    """The line's reason field says breaker_open; a store failure's line is its own."""
    reports = Reports(ServiceHooks(), ManualClock(0))
    rule = _rules()[1]
    reports.store_error(rule, StorageUnavailableError("Redis at h:1 did not answer"))
    reports.store_error(rule, CircuitOpenError("circuit breaker open; probe in 1 s"))
    assert [r.reason for r in lines] == ["StorageUnavailableError", "breaker_open"]  # type: ignore[attr-defined]


@pytest.mark.redis
@pytest.mark.parametrize("reply", ["integer", "status", "8-byte string"])
async def test_a_store_answering_the_wrong_shape_is_refused_at_start(reply: str) -> None:
    """serve's start check refuses a store whose replies are not the scripts' (it used to
    start, and never serve); the health line says what it answered."""
    server = WrongShapeServer(REPLIES[reply])
    store = AsyncRedisStore.from_url(f"redis://{HOST}:{server.port}/0", timeout=1.0)
    try:
        fault = await store_fault(store, 2.0)
        assert fault is not None and "answered a ratewarden script with" in fault
        with pytest.raises(ConfigurationError, match=r"the store cannot be used: .* answered"):
            await refuse_unusable(store, 2.0)
    finally:
        await store.aclose()
        server.close()


@pytest.mark.redis
async def test_the_health_line_names_what_a_false_ping_met() -> None:
    """A Redis store's ping answers False for an outage; the health line still says why
    (here a refused connection), from the store's last_ping_error."""
    store = AsyncRedisStore.from_url(f"redis://{HOST}:{free_port()}/0", timeout=1.0)
    try:
        assert await store.ping() is False
        assert isinstance(store.last_ping_error, StorageUnavailableError)
        fault = await store_fault(store, 2.0)
    finally:
        await store.aclose()
    assert fault is not None and fault.startswith("store does not answer (Redis at")
    assert "cannot connect to" in fault
