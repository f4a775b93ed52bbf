"""The accuracy report: the sliding window's estimate judged against the exact count."""

from __future__ import annotations

import random

import pytest

from ratewarden.algorithms import sliding_log, sliding_window
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.simulate import accuracy

FIFTY = Rate.parse("50/minute")
MINUTE = 60_000_000
START = 1_700_000_000 * 1_000_000


def reference(
    streams: list[list[int]], rate: Rate, count_all: bool = False
) -> tuple[int, int, int, float]:
    """Wrongly allowed, wrongly limited, worst and mean difference, using the algorithm modules.

    With ``count_all`` a denied request is counted too, as if it had been admitted.
    """
    window_params = sliding_window.params(rate)
    log_params = sliding_log.params(rate)
    allowed_wrong = limited_wrong = worst = counted = 0
    difference = 0.0
    for times in streams:
        state = None
        log: tuple[tuple[int, int], ...] = ()
        for t in times:
            outcome, new_state, _ = sliding_window.check(window_params, state, t, 1)
            # The exact count in the trailing period: the log's live entries. (A sliding log's
            # ``remaining`` stops at 0, so it cannot say by how much a count is over.)
            live = tuple(e for e in log if e[0] > t - rate.period_us)
            exact = sum(cost for _, cost in live)
            assert sliding_log.check(log_params, log, t, 0)[0].remaining == max(
                0, rate.limit - exact
            )
            if exact:
                # The estimate before this request, from the state as sliding_window reads it.
                index = t // rate.period_us
                prev, cur = sliding_window._counts(state, index)
                elapsed = t - index * rate.period_us
                estimate = prev * (rate.period_us - elapsed) / rate.period_us + cur
                difference += abs(estimate - exact) / exact
                counted += 1
            if outcome.allowed:
                allowed_wrong += exact >= rate.limit
                worst = max(worst, exact + 1)
            else:
                limited_wrong += exact < rate.limit
            if outcome.allowed or count_all:
                index = t // rate.period_us
                prev, cur = sliding_window._counts(state, index)
                state = (index, prev, cur + 1)
                assert not outcome.allowed or state == new_state
                log = (*live, (t, 1))
    return allowed_wrong, limited_wrong, worst, difference / max(counted, 1)


def random_streams(seed: int, sources: int = 40) -> list[list[int]]:
    rng = random.Random(seed)
    streams = []
    for _ in range(sources):
        gap = rng.choice([0.2, 0.6, 1.5, 5.0]) * 1_000_000
        t, times = float(START), []
        while t < START + 20 * MINUTE:
            t += rng.expovariate(1 / gap) if rng.random() < 0.9 else rng.uniform(0, 30e6)
            times.append(int(t))
        streams.append(times)
    return streams


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_fast_loop_decides_exactly_as_the_algorithm_modules(seed: int) -> None:
    """The inlined loop decides as sliding_window.check and sliding_log.check, each request."""
    streams = random_streams(seed)
    report = accuracy.compare("test", FIFTY, streams, len(streams))
    allowed_wrong, limited_wrong, worst, mean = reference(streams, FIFTY)
    assert report.requests == sum(map(len, streams))
    assert (report.wrongly_allowed, report.wrongly_limited) == (allowed_wrong, limited_wrong)
    assert report.wrongly_allowed + report.wrongly_limited > 0
    assert report.worst == worst
    assert report.mean_difference == pytest.approx(mean)


def test_counting_every_request_is_judged_as_the_modules_would_count_it() -> None:
    """counting="all": denied requests count too, in both counters, and decide the same."""
    streams = random_streams(4)
    report = accuracy.compare("test", FIFTY, streams, len(streams), counting="all")
    allowed_wrong, limited_wrong, _worst, mean = reference(streams, FIFTY, count_all=True)
    assert (report.wrongly_allowed, report.wrongly_limited) == (allowed_wrong, limited_wrong)
    assert report.mean_difference == pytest.approx(mean)
    assert report.worst == 0  # not tracked: the log holds every request, not the admitted


def test_sources_far_below_the_limit_are_never_misjudged() -> None:
    """Under half the limit per window, estimate and exact count both always have room."""
    rng = random.Random(5)
    streams = [
        sorted(START + rng.randrange(30 * MINUTE) for _ in range(30 * 20)) for _ in range(20)
    ]
    report = accuracy.compare("quiet", FIFTY, streams, len(streams))
    assert report.requests == 20 * 600
    assert report.wrong_share == 0.0
    assert report.worst <= 50


def test_the_adversarial_stream_gets_2l_minus_1_past_the_estimate() -> None:
    """All of one window's requests at its very end fool the estimate, as the burst table says."""
    edge = (START // MINUTE + 1) * MINUTE
    first = [edge - 1] * 50
    then = [edge + i * 10_000 for i in range(6_000)]  # every 10 ms through the next window
    report = accuracy.compare("edge", FIFTY, [first + then], 1)
    assert report.worst == 99
    assert report.wrongly_allowed == 49


def test_a_report_is_seeded_and_counts_what_it_generated() -> None:
    """Same seed, same numbers; the request count is near the asked-for count."""
    one = accuracy.estimate_accuracy("onoff", FIFTY, 50_000, sources=100, load=0.5, seed=4)
    two = accuracy.estimate_accuracy("onoff", FIFTY, 50_000, sources=100, load=0.5, seed=4)
    assert one == two
    assert 35_000 < one.requests < 65_000
    assert one.periods >= accuracy.MIN_PERIODS


def test_busier_sources_are_misjudged_more_often() -> None:
    """Decisions only go wrong near the limit: raising the load raises the wrong share."""
    quiet = accuracy.estimate_accuracy("poisson", FIFTY, 100_000, sources=200, load=0.05)
    busy = accuracy.estimate_accuracy("poisson", FIFTY, 100_000, sources=200, load=0.5)
    assert quiet.wrong_share < busy.wrong_share


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"model": "gaussian"}, "unknown traffic model 'gaussian'"),
        ({"requests": 0}, "requests 0 must be from 1"),
        ({"requests": 10**9}, "must be from 1 to 100,000,000"),
        ({"sources": 0}, "sources 0 must be at least 1"),
        ({"load": 0.0}, "load 0.0 must be a number above 0"),
        ({"counting": "denied"}, "counting 'denied' must be one of: admitted, all"),
        ({"load": float("nan")}, "load nan must be a number above 0"),
        ({"rate": Rate.parse("50/minute", burst=10)}, "no separate burst"),
        ({"requests": 1_000, "sources": 1_000}, "last only 0.0 periods"),
    ],
)
def test_bad_report_arguments_are_configuration_errors(
    kwargs: dict[str, object], message: str
) -> None:
    """Each argument is checked before anything is simulated, and named in the error."""
    arguments: dict[str, object] = {"model": "poisson", "rate": FIFTY, "requests": 100_000}
    arguments.update(kwargs)
    with pytest.raises(ConfigurationError, match=message):
        accuracy.estimate_accuracy(**arguments)  # type: ignore[arg-type]


def test_the_table_ends_with_cloudflares_published_figures() -> None:
    """The report prints our rows and Cloudflare's 0.003% / 6% for comparison."""
    row = accuracy.estimate_accuracy("pareto", FIFTY, 20_000, sources=20)
    lines = accuracy.format_accuracy([row]).splitlines()
    assert lines[1].startswith("pareto")
    assert lines[-1].split()[0] == "cloudflare"
    assert "0.0030%" in lines[-1]
    assert "6.00%" in lines[-1]
