"""RetryBudget as pure logic: its bound, its floor and cap, its checks, its counters and log.

Time is a ManualClock; the flow test drives the real retry flow with fake sends (the only
fakes here: this is the logic, the transports are tested against real servers elsewhere).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden.client import RetryBudget, RetryPolicy
from ratewarden.client._retry import Io, Retrier, drive
from ratewarden.errors import ConfigurationError
from ratewarden.testing import ManualClock

# Parameters with a few decimals and awkward floats (0.1, 1/3) alike.
ratios = st.sampled_from([0.0, 0.05, 0.1, 1 / 3, 0.5, 1.0])
floors = st.sampled_from([0.0, 0.1, 1.0, 2.5, 7.0])
bursts = st.sampled_from([1.0, 1.5, 3.0, 10.0])
# ("request", how many), ("retry", how many) or ("advance", microseconds)
events = st.lists(
    st.one_of(
        st.tuples(st.just("request"), st.integers(min_value=1, max_value=20)),
        st.tuples(st.just("retry"), st.integers(min_value=1, max_value=20)),
        st.tuples(st.just("advance"), st.integers(min_value=0, max_value=5_000_000)),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(ratio=ratios, floor=floors, burst=bursts, script=events)
def test_no_stretch_of_time_grants_more_retries_than_the_bound(
    ratio: float, floor: float, burst: float, script: list[tuple[str, int]]
) -> None:
    """For every stretch between two moments of any run: retries granted in it are at most
    burst + ratio * requests in it + min_per_second * its seconds (exact, in fractions)."""
    clock = ManualClock()
    budget = RetryBudget(ratio, floor, burst, clock=clock)
    # After each event: (time in us, requests so far, retries granted so far)
    marks = [(clock.now_us(), 0, 0)]
    for kind, step in script:
        if kind == "advance":
            clock.advance_us(step)
        for _ in range(step if kind != "advance" else 0):
            budget.deposit() if kind == "request" else budget.withdraw()
            marks.append((clock.now_us(), budget.requests, budget.retries))
        marks.append((clock.now_us(), budget.requests, budget.retries))
    for i, (t0, n0, r0) in enumerate(marks):
        for t1, n1, r1 in marks[i + 1 :]:
            seconds = Fraction(t1 - t0, 1_000_000)
            bound = Fraction(burst) + Fraction(ratio) * (n1 - n0) + Fraction(floor) * seconds
            assert r1 - r0 <= bound, (r1 - r0, float(bound))


@dataclass
class FakeResponse:
    """A response as the flow reads it: a status, headers, and a close to call."""

    status_code: int
    headers: dict[str, str] = field(default_factory=dict)

    def close(self) -> None:
        """Nothing to release."""


outcomes = st.lists(st.sampled_from([200, 404, 429, 500, 503, "error"]), min_size=1, max_size=6)


@settings(max_examples=200, deadline=None)
@given(
    ratio=ratios,
    floor=floors,
    burst=bursts,
    requests=st.lists(
        st.tuples(outcomes, st.integers(min_value=0, max_value=3_000_000)), max_size=30
    ),
    attempts=st.integers(min_value=1, max_value=6),
)
def test_the_retry_flow_never_sends_more_retries_than_the_bound(
    ratio: float,
    floor: float,
    burst: float,
    requests: list[tuple[list[int | str], int]],
    attempts: int,
) -> None:
    """Requests through the real retry flow, each meeting a run of answers (a status or a
    connection error) with pauses between them: attempts beyond the first, counted at the
    send, stay within burst + ratio * requests + min_per_second * the seconds that passed
    (the flow's own sleeps included: they are the same clock's)."""
    clock = ManualClock()
    budget = RetryBudget(ratio, floor, burst, clock=clock)
    io = Io((OSError,), "close", None, "sleep")
    retrier = Retrier(
        RetryPolicy(max_attempts=attempts, max_wait=1e6, statuses=frozenset({429, 500, 503})),
        clock,
        lambda: 0.5,
        None,
        io,
        budget=budget,
    )
    start, sent = clock.now_us(), 0
    for answers, pause in requests:
        clock.advance_us(pause)
        queue = list(answers)

        def send(queue: list[int | str] = queue) -> FakeResponse:
            nonlocal sent
            sent += 1
            answer = queue.pop(0) if queue else 200
            if answer == "error":
                raise OSError("connection refused")
            assert isinstance(answer, int)
            return FakeResponse(answer)

        with contextlib.suppress(OSError):  # the flow gave up on a connection error
            drive(retrier.flow("GET", {}, send, lambda: None))
    seconds = Fraction(clock.now_us() - start, 1_000_000)
    bound = Fraction(burst) + Fraction(ratio) * len(requests) + Fraction(floor) * seconds
    assert sent - len(requests) <= bound
    assert sent - len(requests) == budget.retries


def test_starts_full_refills_at_the_floor_and_stops_at_burst() -> None:
    """Ten retries at once from a full budget, then one a second from the floor; a long quiet
    spell fills it to burst and no further."""
    clock = ManualClock()
    budget = RetryBudget(ratio=0.1, min_per_second=1.0, burst=10, clock=clock)
    assert [budget.withdraw() for _ in range(11)] == [True] * 10 + [False]
    clock.advance(1.0)
    assert budget.withdraw() is True
    assert budget.withdraw() is False
    clock.advance(3600)
    assert budget.balance == 10.0


def test_requests_pay_for_retries_at_ratio() -> None:
    """Without a floor, each request deposits ratio of a token: ten requests buy one retry."""
    clock = ManualClock()
    budget = RetryBudget(ratio=0.1, min_per_second=0, burst=1, clock=clock)
    assert budget.withdraw() is True
    for _ in range(9):
        budget.deposit()
    assert budget.withdraw() is False
    budget.deposit()
    assert budget.withdraw() is True
    assert (budget.requests, budget.retries, budget.refused) == (10, 2, 1)


def test_a_clock_that_steps_back_credits_nothing() -> None:
    """Time going backwards adds no tokens, and the floor counts on from the new reading."""
    clock = ManualClock(1_000_000)
    budget = RetryBudget(ratio=0, min_per_second=1.0, burst=5, clock=clock)
    for _ in range(5):
        budget.withdraw()
    clock.set(999_000)
    assert budget.balance == 0.0
    clock.advance(2)
    assert budget.balance == 2.0


def test_a_refusal_is_counted_and_logged_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    """Each refusal is counted; the warning on ratewarden.client is written once a minute, with
    the count held back when it comes again."""
    clock = ManualClock()
    budget = RetryBudget(ratio=0, min_per_second=0, burst=1, clock=clock)
    budget.withdraw()
    with caplog.at_level(logging.WARNING, logger="ratewarden.client"):
        for _ in range(3):
            budget.withdraw()
        clock.advance(60)
        budget.withdraw()
    assert budget.refused == 4
    lines = [r.getMessage() for r in caplog.records if r.name == "ratewarden.client"]
    assert len(lines) == 2
    assert lines[0].startswith("retry budget empty: a retry was not sent")
    assert "1 refused, 1 retries granted" in lines[0]
    assert "RetryBudget(ratio=0, min_per_second=0, burst=1)" in lines[0]
    assert lines[1].endswith("(2 similar lines suppressed)")


def test_threads_share_one_balance() -> None:
    """Eight threads draining and refilling one budget: exactly burst retries are granted, and
    the deposits of 2,000 requests at ratio 0.5 come to exactly 1,000 tokens again."""
    budget = RetryBudget(ratio=0.5, min_per_second=0, burst=1000, clock=ManualClock())
    barrier = threading.Barrier(8)

    def run(work: Any, times: int) -> None:
        barrier.wait()
        for _ in range(times):
            work()

    for work, times in ((budget.withdraw, 200), (budget.deposit, 250)):
        threads = [threading.Thread(target=run, args=(work, times)) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert (budget.retries, budget.refused, budget.requests) == (1000, 600, 2000)
    assert budget.balance == 1000.0


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"ratio": -0.1}, "RetryBudget.ratio=-0.1: must be a finite number from 0 to 1"),
        ({"ratio": 1.5}, "RetryBudget.ratio=1.5"),
        ({"ratio": True}, "RetryBudget.ratio=True"),
        ({"min_per_second": float("nan")}, "RetryBudget.min_per_second=nan: .* 0 or more"),
        ({"burst": 0.5}, "RetryBudget.burst=0.5: must be a finite number 1 or more"),
        ({"burst": "10"}, "RetryBudget.burst='10'"),
        ({"clock": 5}, "RetryBudget.clock=5: pass a ratewarden.clock.Clock"),
    ],
)
def test_bad_budget_values_name_the_field(kwargs: dict[str, object], words: str) -> None:
    """Each bad value raises ConfigurationError naming the field and the value."""
    with pytest.raises(ConfigurationError, match=words):
        RetryBudget(**kwargs)  # type: ignore[arg-type]
