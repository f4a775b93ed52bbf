"""``--rlqs-idle`` and ``--rlqs-demand-reports``: read, refused when wrong, and honoured.

``QuotaService(idle_s=..., history=...)`` on a ``ManualClock``: a stream is told to abandon
a bucket ``idle_s`` seconds after its last reported request, and its demand is its rate over
its last ``history`` reports. The settings are read as every option is (server/options.py).
"""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

from ratewarden import AsyncLimiter
from ratewarden.errors import ConfigurationError
from ratewarden.server.config import loads
from ratewarden.server.rlqs import DENY_ALL, Action, QuotaService, Share, Usage, bucket_key
from ratewarden.server.rlqs.build import servicer
from ratewarden.server.settings import Settings, resolve
from ratewarden.testing import ManualClock

TENANT = bucket_key({"tenant": "a"})
RULES = """\
domain: edge
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 60}
"""
BASE = {"RATEWARDEN_CONFIG": "a.yaml", "RATEWARDEN_RLQS": "on"}


def service(**options: object) -> tuple[QuotaService, ManualClock]:
    clock = ManualClock()
    options = {"interval": 1.0, "ttl_s": 3, **options}
    return QuotaService(loads(RULES), clock=clock, **options), clock  # type: ignore[arg-type]


def test_the_defaults_are_60_seconds_and_2_reports_as_before() -> None:
    settings = resolve({}, BASE)
    assert (settings.rlqs_idle, settings.rlqs_demand_reports) == (60.0, 2)
    quota, _ = service()
    assert (quota.idle_s, quota.history) == (60.0, 2)


def test_flags_win_over_variables_and_both_are_read() -> None:
    environ = {**BASE, "RATEWARDEN_RLQS_IDLE": "30", "RATEWARDEN_RLQS_DEMAND_REPORTS": "4"}
    assert resolve({}, environ).rlqs_idle == 30.0
    assert resolve({}, environ).rlqs_demand_reports == 4
    flags = {"rlqs_idle": "12.5", "rlqs_demand_reports": "1"}
    settings = resolve(flags, environ)
    assert (settings.rlqs_idle, settings.rlqs_demand_reports) == (12.5, 1)


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("RATEWARDEN_RLQS_IDLE", "0", "RATEWARDEN_RLQS_IDLE"),
        ("RATEWARDEN_RLQS_IDLE", "soon", "number of seconds > 0"),
        ("RATEWARDEN_RLQS_DEMAND_REPORTS", "0", "whole number from 1 to 100"),
        ("RATEWARDEN_RLQS_DEMAND_REPORTS", "2.5", "RATEWARDEN_RLQS_DEMAND_REPORTS"),
    ],
)
def test_a_bad_value_is_refused_naming_its_variable(name: str, value: str, says: str) -> None:
    with pytest.raises(ConfigurationError, match=says):
        resolve({}, {**BASE, name: value})


def test_a_bad_flag_is_refused_naming_the_flag() -> None:
    with pytest.raises(ConfigurationError, match="--rlqs-demand-reports"):
        resolve({"rlqs_demand_reports": "101"}, BASE)
    with pytest.raises(ConfigurationError, match="--rlqs-idle"):
        resolve({"rlqs_idle": "-1"}, BASE)


def test_an_idle_time_at_or_below_the_interval_is_refused() -> None:
    """An abandon happens at a round: an idle time within one interval would abandon a
    bucket between two rounds of a busy Envoy."""
    with pytest.raises(ConfigurationError, match="--rlqs-idle 2 must be above --rlqs-interval 2"):
        Settings(config_paths=("r",), rlqs=True, rlqs_interval=2, rlqs_ttl=3, rlqs_idle=2)
    with pytest.raises(ConfigurationError, match="--rlqs-demand-reports 0 must be"):
        Settings(config_paths=("r",), rlqs=True, rlqs_demand_reports=0)


@pytest.mark.parametrize("idle_s", [5.0, 12.0])
def test_the_service_abandons_a_bucket_idle_s_after_its_last_request(idle_s: float) -> None:
    """With ``idle_s``, the idle Envoy is sent an abandon at the first round ``idle_s``
    seconds after its last reported request, not a round before."""
    quota, clock = service(idle_s=idle_s)
    busy, idle = quota.open(), quota.open()
    quota.report(busy, "edge", [Usage(TENANT, 1, 0)])
    quota.report(idle, "edge", [Usage(TENANT, 0, 0)])
    rounds = 0
    seen: list[Action] = []
    while Action(idle, TENANT, None) not in seen:
        assert rounds <= idle_s, f"no abandon {idle_s} s after its last request"
        clock.advance(1)
        quota.report(busy, "edge", [Usage(TENANT, 100, 0)])
        seen = quota.tick()
        rounds += 1
    assert rounds == idle_s


@pytest.mark.parametrize("history", [1, 2, 4])
def test_an_envoy_that_stops_asking_holds_nothing_after_history_reports(history: int) -> None:
    """Two Envoys ask for the whole limit; then one asks nothing. Its demand is its rate over
    its last ``history`` reports, so its share is gone at the round after ``history`` empty
    reports, not before."""
    quota, clock = service(history=history)
    quiet, busy = quota.open(), quota.open()
    for stream in (quiet, busy):
        quota.report(stream, "edge", [Usage(TENANT, 60, 0)])
    latest: dict[int, object] = {}
    for _ in range(3):  # both busy: a share each
        clock.advance(1)
        for stream in (quiet, busy):
            quota.report(stream, "edge", [Usage(TENANT, 60, 0)])
        latest |= {action.stream: action.assignment for action in quota.tick()}
    assert isinstance(latest[quiet], Share)
    for empty in range(1, history + 1):
        clock.advance(1)
        quota.report(quiet, "edge", [Usage(TENANT, 0, 0)])
        quota.report(busy, "edge", [Usage(TENANT, 60, 0)])
        latest |= {action.stream: action.assignment for action in quota.tick()}
        if empty < history:
            assert isinstance(latest[quiet], Share), (empty, latest)
    assert latest == {quiet: DENY_ALL, busy: Share(60, 1)}


@pytest.mark.parametrize(("idle", "warned"), [("2", True), ("4.9", True), ("5", False)])
def test_an_idle_time_below_envoys_pace_of_reports_is_warned_of_at_start(
    idle: str, warned: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Envoy reports every 5 s: with --rlqs-idle 2 a busy bucket is abandoned after each
    report, before the requests since that report are counted. Taken (a client of one's own may
    report faster), with a warning naming the flag at start."""
    settings = resolve({"rlqs_idle": idle}, BASE)
    with caplog.at_level(logging.WARNING, "ratewarden.server.rlqs"):
        made = servicer(settings, loads(RULES), AsyncLimiter(), CollectorRegistry(), None)
    assert made.quota.idle_s == float(idle)
    found = [r for r in caplog.records if getattr(r, "event", None) == "rlqs_idle_short"]
    assert bool(found) == warned
    if warned:
        assert f"--rlqs-idle {idle} is below Envoy's 5 s between reports" in found[0].getMessage()


@pytest.mark.parametrize("value", ["0.001", "0.05", "0.0999"])
def test_an_interval_below_a_tenth_of_a_second_is_refused_saying_why(value: str) -> None:
    """--rlqs-interval 0.001 (milliseconds meant as seconds) burnt half a core with no Envoy
    connected: the round timer wakes four times an interval."""
    with pytest.raises(ConfigurationError, match=r"--rlqs-interval.*below 0.1 s.*not milliseconds"):
        resolve({"rlqs_interval": value}, BASE)
    with pytest.raises(ConfigurationError, match=r"RATEWARDEN_RLQS_INTERVAL.*below 0.1 s"):
        resolve({}, {**BASE, "RATEWARDEN_RLQS_INTERVAL": value})


def test_an_interval_of_a_tenth_of_a_second_or_more_is_taken() -> None:
    assert resolve({"rlqs_interval": "0.1", "rlqs_ttl": "1"}, BASE).rlqs_interval == 0.1
    assert resolve({"rlqs_interval": "2.5", "rlqs_ttl": "5"}, BASE).rlqs_interval == 2.5
