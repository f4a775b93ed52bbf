"""A fake of Envoy's rate_limit_quota filter for the quota service's pure tests.

``SimEnvoy`` does what Envoy's filter does with an assignment (a new or changed token
bucket starts full, an unchanged one is kept, an expired one is gone), with no network
delay; the real Envoy is in tests/e2e/test_rlqs.py. ``draw_schedule`` and ``play`` run
several of them against one quota service or a fleet of replicas, for the property tests
of the bound (``assert_within_bound``) and of the budget of changes (``assert_fresh_within``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from hypothesis import strategies as st

from ratewarden.server.rlqs import ALLOW_ALL, Action, QuotaService, Share, Usage, bucket_key
from ratewarden.testing import ManualClock

#: The bucket every simulated Envoy reports, and the seconds between two steps.
TENANT = bucket_key({"tenant": "a"})
STEP = 0.25


@dataclass
class SimEnvoy:
    """One Envoy's bucket as the rate_limit_quota filter keeps it (no network delay); with no
    assignment it denies (no_assignment_behavior DENY_ALL)."""

    stream: int = 0
    assignment: object = None
    fill_s: int = 1
    tokens: Fraction = Fraction(0)
    last: float = 0.0
    expires: float = 0.0
    counted: int = 0
    last_report: float = 0.0
    admitted: list[int] = field(default_factory=list)
    #: Tokens it was handed afresh (a new or changed token bucket starts full) since read.
    fresh: int = 0

    def apply(self, action: Action, now: float) -> None:
        if action.assignment is None:
            self.assignment = None
            return
        if isinstance(action.assignment, Share) and (action.assignment, action.fill_s) != (
            self.assignment,
            self.fill_s,
        ):
            self.tokens, self.last = Fraction(action.assignment.max_tokens), now
            self.fresh += action.assignment.max_tokens
        self.assignment, self.fill_s = action.assignment, action.fill_s
        self.expires = now + action.ttl_s

    def admit(self, now: float) -> bool:
        self.counted += 1
        if now >= self.expires:
            self.assignment = None
        if not isinstance(self.assignment, Share):
            return self.assignment == ALLOW_ALL
        share = self.assignment
        refill = Fraction(share.tokens_per_fill) * Fraction(now - self.last) / self.fill_s
        self.tokens = min(Fraction(share.max_tokens), self.tokens + refill)
        self.last = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


def bound_limit(limit: int, period: int, burst: int | None) -> str:
    """The flow-style ``rate_limit`` of a bound test's rule: ``limit`` per ``period`` seconds
    (1, 10 or 60), a fixed window without ``burst``, a token bucket with it."""
    unit = {1: "second", 10: "second", 60: "minute"}[period]
    multiplier = 10 if period == 10 else 1
    algorithm = "fixed_window" if burst is None else "token_bucket"
    extra = "" if burst is None else f", burst: {burst}"
    return (
        f"{{algorithm: {algorithm}, unit: {unit}, unit_multiplier: {multiplier}, "
        f"requests_per_unit: {limit}{extra}}}"
    )


@dataclass(frozen=True)
class Schedule:
    """What the Envoys of a bound test do, per step of ``STEP`` seconds: Envoy ``i`` opens
    its stream at step ``joins[i]``, closes it after step ``leaves[i]`` (None: never), asks
    ``demand[step][i]`` requests, and reports every ``gaps[i]`` seconds (Envoy reports on
    its own timer, 5 s in Envoy 1.40, not in step with the rounds)."""

    steps: int
    joins: list[int]
    leaves: list[int | None]
    demand: list[list[int]]
    gaps: list[float]


def draw_schedule(data: st.DataObject, envoys: int, most_steps: int) -> Schedule:
    steps = data.draw(st.integers(8, most_steps), label="steps")
    each = {"min_size": envoys, "max_size": envoys}
    joins = data.draw(st.lists(st.integers(0, steps // 2), **each))
    leaves = data.draw(st.lists(st.one_of(st.none(), st.integers(1, steps)), **each))
    row = st.lists(st.integers(0, 12), **each)
    demand = data.draw(st.lists(row, min_size=steps, max_size=steps))
    gaps = data.draw(st.lists(st.sampled_from([1.0, 2.0, 5.0]), **each))
    return Schedule(steps, joins, leaves, demand, gaps)


@dataclass(frozen=True)
class Played:
    """What the Envoys of a played schedule did, per step: the requests they admitted, the
    shares they held after it, and the tokens they were handed afresh in it."""

    admitted: list[int]
    held: list[list[Share]]
    fresh: list[int]


def play(
    schedule: Schedule,
    fleet: Sequence[QuotaService],
    clock: ManualClock,
    homes: Sequence[int],
    peers: Sequence[str],
) -> Played:
    """Run ``schedule``: each step, every replica's round (in a rotating order), then each
    Envoy (on replica ``homes[i]``, named ``peers[i]``) asks its demand, joins, reports when
    its gap is over, and leaves."""
    sims = [SimEnvoy() for _ in homes]
    by_stream: dict[tuple[int, int], SimEnvoy] = {}
    admitted_by_step: list[int] = []
    held_by_step: list[list[Share]] = []
    fresh_by_step: list[int] = []
    for step in range(schedule.steps):
        now = clock.now()
        for turn in range(len(fleet)):
            home = (step + turn) % len(fleet)
            for action in fleet[home].tick():
                by_stream[(home, action.stream)].apply(action, now)
        admitted = 0
        for index, sim in enumerate(sims):
            if step < schedule.joins[index]:
                continue
            quota, home, leaves = fleet[homes[index]], homes[index], schedule.leaves[index]
            admitted += sum(sim.admit(now) for _ in range(schedule.demand[step][index]))
            open_stream = leaves is None or step < leaves
            if step == schedule.joins[index]:
                sim.stream = quota.open(peers[index])
                by_stream[(home, sim.stream)] = sim
            elif not open_stream or now - sim.last_report < schedule.gaps[index]:
                continue
            if open_stream:
                usage = Usage(TENANT, sim.counted, 0)
                sim.counted, sim.last_report = 0, now
                for action in quota.report(sim.stream, "edge", [usage]):
                    by_stream[(home, action.stream)].apply(action, now)
            if leaves is not None and step + 1 == leaves:
                quota.close(sim.stream)
        admitted_by_step.append(admitted)
        holding = [sim.assignment for sim in sims if sim.expires > now]
        held_by_step.append([share for share in holding if isinstance(share, Share)])
        fresh_by_step.append(sum(sim.fresh for sim in sims))
        for sim in sims:
            sim.fresh = 0
        clock.advance(STEP)
    return Played(admitted_by_step, held_by_step, fresh_by_step)


def assert_within_bound(
    admitted_by_step: Sequence[int],
    rate: Fraction,
    most: int,
    replicas: int = 1,
    change_rounds: int = 1,
) -> None:
    """Every window of steps admits at most r*W + M*(R*(floor(W/(K*I)) + 1) + 1) (I = 1 s;
    with K = 1, r*W + M*(R*(floor(W/I) + 1) + 1))."""
    for a in range(len(admitted_by_step)):
        total = 0
        for b in range(a, len(admitted_by_step)):
            total += admitted_by_step[b]
            width = Fraction(b - a) * Fraction(STEP)
            rounds = math.floor(width / change_rounds) + 1
            bound = rate * width + most * (replicas * rounds + 1)
            assert total <= bound, (a, b, total, bound)


def assert_fresh_within(
    fresh_by_step: Sequence[int], most: int, replicas: int = 1, change_rounds: int = 1
) -> None:
    """The budget of changes itself: in any span of steps shorter than K rounds (K*I, I =
    1 s), the tokens handed out afresh add up to at most R*M."""
    span = int(change_rounds / STEP)  # steps a window of K*I seconds covers, less one
    for a in range(len(fresh_by_step)):
        handed = sum(fresh_by_step[a : a + span])
        assert handed <= replicas * most, (a, handed, replicas * most)
