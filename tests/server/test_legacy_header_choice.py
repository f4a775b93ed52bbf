"""Which descriptor the RateLimit-* headers describe: envoyproxy/ratelimit's choice.

Upstream's ``shouldRateLimitWorker`` (src/service/ratelimit.go) walks the statuses in
request order: one with fewer requests remaining than the least so far is chosen, and a
regular (not quota) descriptor over its limit is chosen whatever came before, the least
then 0. A quota descriptor over its limit has 0 remaining and is chosen only by that.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from envoy.service.ratelimit.v3 import rls_pb2

from ratewarden.server.response_headers import response_headers
from tests.server.conftest import OK, OVER, SERVICE_RULES, Harness, desc

Make = Callable[..., Harness]
Status = rls_pb2.RateLimitResponse.DescriptorStatus
MINUTE = rls_pb2.RateLimitResponse.RateLimit.MINUTE


def status(code: int, limit: int, remaining: int) -> Status:
    """A limited descriptor's status: OVER_LIMIT ones report 0 remaining, as upstream's."""
    found = Status(code=code, limit_remaining=0 if code == OVER else remaining)
    found.current_limit.requests_per_unit = limit
    found.current_limit.unit = MINUTE
    found.duration_until_reset.seconds = 30
    return found


def chosen_limit(statuses: list[Status], quota: list[bool]) -> str:
    """The RateLimit-Limit header of these statuses (every one a minute's window)."""
    headers = dict(response_headers("legacy", statuses, [60] * len(statuses), quota=quota))
    return headers["RateLimit-Limit"]


@pytest.mark.parametrize(
    ("statuses", "quota", "limit"),
    [
        # A quota descriptor over its limit does not replace a regular one over its limit.
        ([status(OVER, 0, 0), status(OVER, 1, 0)], [False, True], "0"),
        # Nor one with 0 left: the first of equals stays.
        ([status(OK, 5, 0), status(OVER, 1, 0)], [False, True], "5"),
        # It does replace one with room left: 0 is fewer.
        ([status(OK, 5, 3), status(OVER, 1, 0)], [False, True], "1"),
        ([status(OVER, 1, 0), status(OK, 5, 3)], [True, False], "1"),
        # A regular descriptor over its limit replaces whatever came before it.
        ([status(OVER, 1, 0), status(OVER, 2, 0)], [True, False], "2"),
        ([status(OVER, 2, 0), status(OVER, 3, 0)], [False, False], "3"),
        ([status(OK, 5, 0), status(OVER, 9, 0)], [False, False], "9"),
        # The global quota mode: every descriptor a quota one, the first over stays.
        ([status(OVER, 2, 0), status(OVER, 3, 0)], [True, True], "2"),
        # Fewest remaining, the first of equals.
        ([status(OK, 5, 2), status(OK, 9, 2), status(OK, 7, 4)], [False] * 3, "5"),
    ],
)
def test_the_headers_describe_the_descriptor_upstream_chooses(
    statuses: list[Status], quota: list[bool], limit: str
) -> None:
    """Each case as upstream's loop chooses it (the first three fail on the old choice, the
    last descriptor over its limit of any kind)."""
    assert chosen_limit(statuses, quota) == limit


def test_a_status_with_no_fewer_than_upstreams_start_is_never_chosen() -> None:
    """Upstream starts from MaxUint32 and chooses only fewer: a limit of 4294967295 with
    nothing used has no header, as there."""
    untouched = status(OK, 2**32 - 1, 2**32 - 1)
    assert response_headers("legacy", [untouched], [60], quota=[False]) == []


def test_an_exhausted_quota_rule_beside_a_zero_limit_reports_the_zero_limit(rls: Make) -> None:
    """The walk's case through the service: q (quota_mode, 1 a minute) exhausted, then zero
    (0 a minute) and q in one request: both over; RateLimit-Limit is zero's 0, as upstream
    sends it, not q's 1."""
    h = rls(SERVICE_RULES, response_headers="legacy")
    assert h.codes(desc(("q", "x"))) == [OK, OK]
    response = h.ask(desc(("zero", "z")), desc(("q", "x")))
    assert [s.code for s in response.statuses] == [OVER, OVER]
    headers = {header.key: header.value for header in response.response_headers_to_add}
    assert (headers["RateLimit-Limit"], headers["RateLimit-Remaining"]) == ("0", "0")


def test_the_global_quota_mode_keeps_the_first_descriptor_over_its_limit(rls: Make) -> None:
    """--quota-mode: a (2 a minute) and b (5) both exhausted, then asked together: both over,
    both quota descriptors; the headers describe a, the first with 0 left."""
    h = rls(SERVICE_RULES, response_headers="legacy", quota_mode=True)
    h.ask(desc(("a", "x")), hits=2)
    h.ask(desc(("b", "y")), hits=5)
    response = h.ask(desc(("a", "x")), desc(("b", "y")))
    assert [s.code for s in response.statuses] == [OVER, OVER]
    headers = {header.key: header.value for header in response.response_headers_to_add}
    assert headers["RateLimit-Limit"] == "2"
