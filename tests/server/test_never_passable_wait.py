"""A call that costs more than one of its rule's limits can ever hold: which wait it reports.

With several limits, a denial reports the denied limit that waits longest. A cost above a
limit's capacity never passes that limit (its retry is never), and its own reset (a second,
here) is no time to wait: the minute's limit may hold the key far longer, and with
--charge-denied the denied cost was counted against it. So the status reports the denied
limit with the longest wait: the minute's, 10 s before its window ends.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.server.conftest import ALIGNED, OK, OVER, Harness, Response, desc

Make = Callable[..., Harness]
SECOND, MINUTE = Response.RateLimit.SECOND, Response.RateLimit.MINUTE

RULES = """\
domain: d
descriptors:
  - key: m
    rate_limit:
      limits:
        - {unit: second, requests_per_unit: 3}
        - {unit: minute, requests_per_unit: 5}
"""

#: 50 s into a minute: that minute's window ends in 10 s.
START = ALIGNED + 50


def status(h: Harness, hits: int) -> tuple[int, int, int]:
    """One descriptor's code, reported limit's unit and whole seconds until reset."""
    [found] = h.ask(desc(("m", "x"), hits=hits)).statuses
    return found.code, found.current_limit.unit, found.duration_until_reset.seconds


def test_a_cost_no_limit_of_the_second_can_hold_reports_the_minutes_wait(rls: Make) -> None:
    """2 hits pass; 4 more are denied (4 > 3 a second, never), and the minute is what
    a smaller call waits for (2 + 4 > 5): 10 s, reported with the minute's limit."""
    h = rls(RULES, start=START)
    assert status(h, 2)[0] == OK
    assert status(h, 4) == (OVER, MINUTE, 10)


def test_with_charge_denied_the_client_is_told_the_wait_that_holds_the_key(rls: Make) -> None:
    """--charge-denied: 7 hits are denied and counted on both limits (7 > 5 a minute), so
    every call is over until the minute ends: the denial says 10 s, not the second's 1 s,
    and so does the next call."""
    h = rls(RULES, start=START, charge_denied=True)
    assert status(h, 7) == (OVER, MINUTE, 10)
    h.clock.advance(2)
    assert status(h, 1) == (OVER, MINUTE, 8)
    h.clock.advance(8)
    assert status(h, 1)[0] == OK


def test_a_call_that_waits_reports_the_binding_limit_as_before(rls: Make) -> None:
    """A denial a wait can pass is unchanged: 3 hits fill the second; one more waits for
    the second's window (1 s), reported with the second's limit."""
    h = rls(RULES, start=START)
    assert status(h, 3)[0] == OK
    assert status(h, 1) == (OVER, SECOND, 1)
