"""An abandon does not refill a token bucket: an Envoy that comes back to a bucket it was
told to forget gets no more than its old bucket would hold by then.

Envoy erases an abandoned bucket, and every new token bucket starts full. Without a memory
of it, an Envoy that pauses longer than ``--rlqs-idle`` would get a full burst back at each
return: 5 a day admitted 20 times in 43 s (the audit's case, one Envoy). ``QuotaService`` on
a ``ManualClock``; Envoy's side is a model token bucket fed with what was sent.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden import Limiter, MemoryStore
from ratewarden.server.config import loads
from ratewarden.server.rlqs import (
    DENY_ALL,
    Action,
    Fleet,
    QuotaService,
    Share,
    Usage,
    bucket_key,
)
from ratewarden.server.rlqs.refill import Abandoned, Refill
from ratewarden.testing import ManualClock
from tests.rlqs._quota import held, quota_service

TENANT = bucket_key({"tenant": "a"})
DAY_RULE = """\
domain: edge
descriptors:
  - key: tenant
    rate_limit: {algorithm: token_bucket, unit: day, requests_per_unit: 5}
"""
MINUTE_RULE = """\
domain: edge
descriptors:
  - key: tenant
    rate_limit: {algorithm: token_bucket, unit: minute, requests_per_unit: 6, burst: 6}
"""
DAY = 86_400


class EnvoyBucket:
    """Envoy's side of one bucket: a token bucket that a new assignment starts full, an
    identical one only renews, an abandon erases; DENY_ALL admits nothing."""

    def __init__(self) -> None:
        self.share: Share | str | None = None
        self.tokens = 0.0
        self.at = 0.0
        self.fill_s = 1

    def assign(self, action: Action, now: float) -> None:
        """Take ``action``: an assignment (held until the next; the TTL is not modelled,
        ratewarden renews every second) or an abandon (the bucket erased)."""
        if action.assignment is None or isinstance(action.assignment, str):
            self.share = action.assignment
            return
        self.refill(now)
        if action.assignment != self.share:
            self.share, self.tokens, self.fill_s = (
                action.assignment,
                action.assignment.max_tokens,
                action.fill_s,
            )
        self.at = now

    def refill(self, now: float) -> None:
        if isinstance(self.share, Share):
            rate = self.share.tokens_per_fill / self.fill_s
            self.tokens = min(self.share.max_tokens, self.tokens + rate * (now - self.at))
        self.at = now

    def admit(self, asked: int, now: float) -> int:
        """How many of ``asked`` requests it admits now."""
        if not isinstance(self.share, Share):
            return 0  # DENY_ALL, or no assignment (no_assignment_behavior: DENY_ALL)
        self.refill(now)
        admitted = min(asked, math.floor(self.tokens))
        self.tokens -= admitted
        return admitted


def ticking(quota: QuotaService, clock: ManualClock, seconds: float) -> list[Action]:
    """``seconds`` pass with a tick every second (rounds renew the assignments)."""
    seen: list[Action] = []
    for _ in range(int(seconds)):
        clock.advance(1)
        seen += quota.tick()
    return seen


def abandoned(quota: QuotaService, clock: ManualClock, stream: int) -> None:
    """Seconds pass, ticking, until ``stream`` is told to abandon the bucket."""
    while Action(stream, TENANT, None) not in ticking(quota, clock, 1):
        pass


def denied_until(quota: QuotaService, clock: ManualClock, stream: int, until: float) -> object:
    """Until ``until``, ``stream`` reports a denied request every 4 s (so it is not idle)
    and rounds run: what it holds then."""
    last: object = None
    while clock.now() < until:
        clock.advance(4)
        actions = quota.report(stream, "edge", [Usage(TENANT, 0, 1)]) + quota.tick()
        last = held(actions).get(stream, last)
    return last


def rejoin(quota: QuotaService, clock: ManualClock, stream: int, denied: int) -> object:
    """``stream`` reports the bucket again (``denied`` requests): the assignment it gets at
    once, or at the bucket's next round when the bucket is still tracked."""
    sent = held(quota.report(stream, "edge", [Usage(TENANT, 0, denied)]))
    if not sent:
        clock.advance(1)
        sent = held(quota.tick())
    return sent.get(stream)


def run_pulses(
    rules: str,
    pulses: int,
    pause_s: int,
    asked: int,
    *,
    fleet: bool = False,
    change_rounds: int = 1,
) -> tuple[int, float]:
    """One Envoy (reporting every 5 s, and at once for a new bucket) asked ``asked`` requests
    a second for 3 s at the start of each of ``pulses`` periods of ``pause_s`` seconds, on a
    service abandoning after 7 s idle (``fleet``: its shares through a memory store's
    ``Fleet``): what it admitted, and over how many seconds."""
    clock = ManualClock()
    quota = QuotaService(
        loads(rules), clock=clock, interval=1.0, ttl_s=5, idle_s=7.0,
        change_rounds=change_rounds,
        fleet=Fleet(Limiter(MemoryStore(clock=clock)), replica="r1") if fleet else None,
    )  # fmt: skip
    stream = quota.open()
    envoy = EnvoyBucket()
    admitted = unreported = denied = 0
    report_at = 0
    seconds = pulses * pause_s
    for now in range(seconds):
        if now % pause_s < 3:
            got = envoy.admit(asked, clock.now())
            admitted, unreported, denied = admitted + got, unreported + got, denied + asked - got
            if envoy.share is None:  # a new bucket in Envoy: it reports at once
                report_at, envoy.share = now, DENY_ALL
        if envoy.share is not None and now >= report_at:  # an abandoned one: no reports
            actions = quota.report(stream, "edge", [Usage(TENANT, unreported, denied)])
            unreported = denied = 0
            report_at = now + 5
            for action in actions:
                envoy.assign(action, clock.now())
        clock.advance(1)
        for action in quota.tick():
            envoy.assign(action, clock.now())
    return admitted, seconds


def test_pauses_longer_than_the_idle_time_do_not_refill_a_day_limit() -> None:
    """The audit's case: 5 a day, a burst of requests every 14 s with 7 s of idle
    abandonment. One Envoy holding one unchanged share admits at most ``r W + M``: 5 and
    a few thousandths, so 5, however many times it is told to abandon the bucket."""
    admitted, seconds = run_pulses(DAY_RULE, pulses=4, pause_s=14, asked=10)
    assert seconds == 56
    assert admitted == 5


def test_the_same_holds_through_a_fleets_store_and_with_a_budget_of_changes() -> None:
    """With a ``Fleet`` (the store splits the limit) and with ``--rlqs-change-rounds 3``,
    the returning Envoy is capped the same way."""
    assert run_pulses(DAY_RULE, pulses=4, pause_s=14, asked=10, fleet=True)[0] == 5
    assert run_pulses(DAY_RULE, pulses=4, pause_s=14, asked=10, change_rounds=3)[0] == 5


def test_a_capped_share_does_not_spend_the_budget_of_changes() -> None:
    """A returning Envoy sent DENY_ALL or the capped share it holds hands nothing out: the
    bucket's budget of changes counts none of it, round after round."""
    quota, clock = quota_service(DAY_RULE, ttl_s=5, idle_s=7.0, change_rounds=5)
    stream = quota.open()
    quota.report(stream, "edge", [Usage(TENANT, 0, 1)])
    ticking(quota, clock, 5)
    quota.report(stream, "edge", [Usage(TENANT, 5, 0)])
    abandoned(quota, clock, stream)
    clock.advance(10)
    assert rejoin(quota, clock, stream, 1) == DENY_ALL
    denied_until(quota, clock, stream, clock.now() + 20)
    bucket = quota._buckets[("edge", TENANT)]
    assert bucket.spent(clock.now(), 5.0) == 0


def test_a_returning_envoy_keeps_what_it_had_not_spent() -> None:
    """Abandoned after 1 request of 5, it comes back with 4 left: a token bucket of 4 at the
    rule's rate, not DENY_ALL (which would under-admit) and not 5."""
    quota, clock = quota_service(DAY_RULE, ttl_s=5, idle_s=7.0)
    stream = quota.open()
    assert held(quota.report(stream, "edge", [Usage(TENANT, 0, 1)])) == {stream: Share(5, 5)}
    ticking(quota, clock, 5)
    quota.report(stream, "edge", [Usage(TENANT, 1, 0)])
    abandoned(quota, clock, stream)
    clock.advance(3)
    assert rejoin(quota, clock, stream, 1) == Share(5, 4)


def test_a_returning_envoy_that_spent_everything_waits_for_the_refill() -> None:
    """Spent 5 of 5 a day, it comes back: DENY_ALL until a token would have refilled (a
    fifth of a day after it was spent), then a bucket of the whole tokens refilled, one more
    at each (each new bucket starts full in Envoy, with no more than the old one would
    hold), and its whole share once the old bucket would be full."""
    quota, clock = quota_service(DAY_RULE, ttl_s=5, idle_s=7.0)
    stream = quota.open()
    quota.report(stream, "edge", [Usage(TENANT, 0, 1)])
    ticking(quota, clock, 5)
    quota.report(stream, "edge", [Usage(TENANT, 5, 20)])
    spent_at = clock.now()
    abandoned(quota, clock, stream)
    clock.advance(2)
    assert rejoin(quota, clock, stream, 3) == DENY_ALL
    for since_spent, assignment in [
        (DAY / 5 - 10, DENY_ALL),
        (DAY / 5 + 10, Share(5, 1)),
        (2 * DAY / 5 - 10, Share(5, 1)),
        (2 * DAY / 5 + 10, Share(5, 2)),
        (DAY - 10, Share(5, 4)),
        (DAY + 10, Share(5, 5)),
    ]:
        assert denied_until(quota, clock, stream, spent_at + since_spent) == assignment


def test_a_pause_longer_than_a_refill_gets_the_whole_share_at_once() -> None:
    """6 a minute: after a pause of a minute or more the old bucket would be full again, so
    the returning Envoy gets its whole share, as a newcomer does."""
    quota, clock = quota_service(MINUTE_RULE, ttl_s=5, idle_s=7.0)
    stream = quota.open()
    quota.report(stream, "edge", [Usage(TENANT, 0, 1)])
    ticking(quota, clock, 5)
    quota.report(stream, "edge", [Usage(TENANT, 6, 0)])
    abandoned(quota, clock, stream)
    clock.advance(60)
    assert rejoin(quota, clock, stream, 1) == Share(6, 6)


@settings(max_examples=40, deadline=None)
@given(pause_s=st.integers(8, 40), asked=st.integers(1, 12), pulses=st.integers(2, 6))
def test_one_envoy_never_admits_more_than_its_steady_figure(
    pause_s: int, asked: int, pulses: int
) -> None:
    """6 a minute, burst 6, any pause: what one Envoy admits over the run stays within
    ``r W + M``, the steady figure, abandoned or not."""
    admitted, seconds = run_pulses(MINUTE_RULE, pulses, pause_s, asked)
    assert admitted <= 6 * seconds / 60 + 6


def test_the_memory_of_abandoned_buckets_is_capped_dropping_the_soonest_full() -> None:
    """At most ``cap`` remembered; over it, the one that would be full soonest goes first,
    and a remembered bucket is dropped once it would be full again."""
    abandoned = Abandoned(cap=2)
    slow = Refill(Share(1, 5), 100, 0.0, 0.0)  # full at 500 s
    fast = Refill(Share(5, 5), 100, 0.0, 0.0)  # full at 100 s
    mid = Refill(Share(2, 5), 100, 0.0, 0.0)  # full at 250 s
    abandoned.remember(("a",), slow, 0.0)
    abandoned.remember(("b",), fast, 0.0)
    abandoned.remember(("c",), mid, 0.0)
    assert len(abandoned) == 2
    assert abandoned.take(("b",), 1.0) is None
    assert abandoned.take(("c",), 300.0) is None
    assert abandoned.take(("a",), 300.0) is slow
