"""Many buckets: renewals are cheap, run in chunks that let the event loop in, oldest first.

``QuotaService`` on a ``ManualClock``, ticked as ``RateLimitQuotaServicer.run`` ticks it
(``atick`` every interval/4 of idle time). A round costs CPU; the clock cannot see it, so
``Charged`` advances the clock by a model of it at each chunk: a round that works a split
out in exact arithmetic costs ``SPLIT_S``, any other ``RENEW_S``, the two measured here
(about 50 and 20 us a bucket, docs/rlqs.md#many-buckets) times 50, so that 2,000 buckets
stand for 100,000. No wall time is measured.
"""

from __future__ import annotations

import asyncio
import itertools

from hypothesis import given
from hypothesis import strategies as st

from ratewarden.server.rlqs import Action, QuotaService, Usage, bucket_key
from ratewarden.testing import ManualClock
from tests.rlqs._quota import quota_service

RULES = """\
domain: edge
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 60}
"""
SPLIT_S = 50 * 50e-6
RENEW_S = 50 * 20e-6


class Charged:
    """``atick``'s ``send``: charges the clock for the rounds of each chunk, then records when
    each assignment went out and how often the event loop got a turn before it."""

    def __init__(self, quota: QuotaService, clock: ManualClock) -> None:
        self.quota, self.clock = quota, clock
        self.sent: dict[tuple[int, object], list[float]] = {}
        self.counted = (0, 0)
        #: Per chunk: its rounds, and the turns the loop's other tasks had before it.
        self.chunks: list[tuple[int, int]] = []
        self.turns = 0

    def charge(self) -> int:
        rounds, splits = self.quota.stats.rounds, self.quota.stats.splits
        ran, worked = rounds - self.counted[0], splits - self.counted[1]
        self.counted = (rounds, splits)
        self.clock.advance(worked * SPLIT_S + (ran - worked) * RENEW_S)
        return ran

    def __call__(self, actions: list[Action]) -> None:
        self.chunks.append((self.charge(), self.turns))
        for action in actions:
            self.sent.setdefault((action.stream, action.bucket), []).append(self.clock.now())

    async def other_task(self) -> None:
        """What else the loop serves (other streams, /healthcheck): counts its turns."""
        while True:
            self.turns += 1
            await asyncio.sleep(0)


async def serve(quota: QuotaService, clock: ManualClock, charged: Charged, until: float) -> None:
    """``RateLimitQuotaServicer.run`` on the manual clock, up to ``until``."""
    while clock.now() < until:
        clock.advance(quota.interval / 4)
        await quota.atick(charged)


async def test_with_many_buckets_every_assignment_is_renewed_before_its_ttl() -> None:
    """2,000 buckets on one stream, a probe bucket on another, interval 1 s, TTL 5 s: every
    assignment is renewed less than 5 s after the one before. When every round worked its
    split out again, a round of all took 5 s: every assignment lapsed in Envoy before its
    renewal, over and over."""
    quota, clock = quota_service(RULES, ttl_s=5)
    charged = Charged(quota, clock)
    big, probe = quota.open(), quota.open()
    charged(await quota.areport(probe, "edge", [Usage(bucket_key({"tenant": "probe"}), 1, 0)]))
    usages = [Usage(bucket_key({"tenant": f"big{n}"}), 1, 0) for n in range(2000)]
    charged(await quota.areport(big, "edge", usages))
    other = asyncio.create_task(charged.other_task())
    try:
        for _ in range(3):  # the probe reports every 5 s, as Envoy does
            await serve(quota, clock, charged, clock.now() + 5)
            await quota.areport(probe, "edge", [Usage(bucket_key({"tenant": "probe"}), 1, 0)])
    finally:
        other.cancel()
    assert len(charged.sent) == 2001
    gaps = [b - a for times in charged.sent.values() for a, b in itertools.pairwise(times)]
    assert len(gaps) > 2001 * 5 and max(gaps) < quota.ttl_s
    assert quota.stats.splits == 0  # one Envoy a bucket: its share is the whole


async def test_a_tick_runs_in_chunks_and_the_loop_gets_a_turn_between_two() -> None:
    """With 1,000 due buckets and chunks of 50 members, a tick is 20 chunks of at most 50
    rounds, and the loop's other tasks run between any two (they waited for the whole tick)."""
    quota, clock = quota_service(RULES, ttl_s=5, chunk=50)
    charged = Charged(quota, clock)
    stream = quota.open()
    await quota.areport(stream, "edge", [Usage(bucket_key({"tenant": f"t{n}"}), 1, 0)
                                         for n in range(1000)])  # fmt: skip
    charged.charge()  # the report's first rounds
    clock.advance(1)
    other = asyncio.create_task(charged.other_task())
    await asyncio.sleep(0)
    try:
        assert await quota.atick(charged) == 20
    finally:
        other.cancel()
    assert [rounds for rounds, _ in charged.chunks] == [50] * 20
    turns = [turn for _, turn in charged.chunks]
    assert all(later > earlier for earlier, later in itertools.pairwise(turns))


async def test_a_long_report_lets_the_loop_in_between_its_chunks() -> None:
    """A report of 1,000 new buckets is applied 50 at a time: the loop's other tasks run
    between two chunks, and the report's result is the same as taken whole."""
    quota, _ = quota_service(RULES, chunk=50)
    whole, _ = quota_service(RULES)
    usages = [Usage(bucket_key({"tenant": f"t{n}"}), 1, 0) for n in range(1000)]
    turns = 0

    async def other_task() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    other = asyncio.create_task(other_task())
    await asyncio.sleep(0)
    try:
        actions = await quota.areport(quota.open(), "edge", usages)
    finally:
        other.cancel()
    assert turns >= 20
    assert actions == whole.report(whole.open(), "edge", usages)
    assert quota.stats.reports == 1


def test_the_oldest_assignments_are_renewed_first() -> None:
    """A was renewed at 1 s, B (tracked after A) last at 0.5 s: at 2 s both are due and B,
    whose assignment expires first, is renewed first, whatever order they came in."""
    quota, clock = quota_service(RULES)
    stream = quota.open()
    a, b = bucket_key({"tenant": "a"}), bucket_key({"tenant": "b"})
    quota.report(stream, "edge", [Usage(a, 1, 0)])
    clock.advance(0.5)
    quota.report(stream, "edge", [Usage(b, 1, 0)])
    clock.advance(0.5)
    assert [action.bucket for action in quota.tick()] == [a]
    clock.advance(1)
    assert [action.bucket for action in quota.tick()] == [b, a]


def test_a_renewal_sends_the_last_split_and_a_change_splits_again() -> None:
    """Two Envoys on a bucket: rounds without a new report renew the last shares unchanged
    (no split worked out); a report moves the split at the next round."""
    quota, clock = quota_service(RULES)
    one, two = quota.open(), quota.open()
    tenant = bucket_key({"tenant": "a"})
    quota.report(one, "edge", [Usage(tenant, 30, 0)])
    quota.report(two, "edge", [Usage(tenant, 10, 0)])
    clock.advance(1)
    first = quota.tick()
    assert quota.stats.splits == 1
    clock.advance(1)
    assert quota.tick() == first and quota.stats.splits == 1
    quota.report(two, "edge", [Usage(tenant, 90, 0)])
    clock.advance(1)
    moved = quota.tick()
    assert moved != first and quota.stats.splits == 2


async def test_a_tick_is_not_held_behind_a_long_report() -> None:
    """A report of 1,000 new buckets (chunks of 50) is under way when a tick is due: the
    tick's rounds run between the report's chunks and are sent before the report ends (they
    waited for the whole report, and the assignments they renew with it)."""
    quota, clock = quota_service(RULES, chunk=50)
    probe = quota.open()
    quota.report(probe, "edge", [Usage(bucket_key({"tenant": "probe"}), 1, 0)])
    clock.advance(1)
    events: list[str] = []
    usages = [Usage(bucket_key({"tenant": f"t{n}"}), 1, 0) for n in range(1000)]

    async def report() -> None:
        await quota.areport(quota.open(), "edge", usages)
        events.append("report")

    reporting = asyncio.create_task(report())
    await asyncio.sleep(0)  # the report's first chunk
    await quota.atick(lambda actions: events.extend(f"tick:{a.stream}" for a in actions))
    await reporting
    assert events == [f"tick:{probe}", "report"]


@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 1), st.integers(0, 40), st.booleans()),
        min_size=10,
        max_size=60,
    ),
    st.integers(1, 3),
)
def test_a_round_that_takes_its_last_split_again_sends_what_working_it_out_would(
    steps: list[tuple[int, int, int, bool]], change_rounds: int
) -> None:
    """Three Envoys and two buckets, random reports, closes and rounds: the actions are the
    same as a service's that works every split out (its buckets' last splits dropped)."""
    text = RULES.replace(
        "rate_limit: {unit: minute, requests_per_unit: 60}",
        "rate_limit: {unit: second, requests_per_unit: 10, burst: 4, algorithm: token_bucket}",
    )
    fast, clock = quota_service(text, change_rounds=change_rounds)
    slow, other = quota_service(text, change_rounds=change_rounds)
    streams = [(fast.open(), slow.open()) for _ in range(3)]
    tenants = [bucket_key({"tenant": name}) for name in "ab"]
    for who, tenant, count, close in steps:
        if who == 3:
            clock.advance(0.5)
            other.advance(0.5)
            for bucket in slow._buckets.values():
                bucket.split = None
            assert fast.tick() == slow.tick()
        elif close and count < 5:  # a close now and then
            fast.close(streams[who][0])
            slow.close(streams[who][1])
            streams[who] = (fast.open(), slow.open())
        else:
            usage = [Usage(tenants[tenant], count, 0)]
            assert fast.report(streams[who][0], "edge", usage) == slow.report(
                streams[who][1], "edge", usage
            )
