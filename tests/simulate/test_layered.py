"""Layered runs: several rates on one key, decided all or nothing as the library decides them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ratewarden import algorithms
from ratewarden.errors import ConfigurationError
from ratewarden.limiter import Limiter
from ratewarden.rate import Rate
from ratewarden.simulate import (
    LayerSummary,
    format_layered,
    parse,
    parse_layers,
    run_layered,
)
from ratewarden.simulate.layered import LayeredRun, check_layers
from ratewarden.simulate.runner import START_US
from ratewarden.storage.memory import MemoryStore
from ratewarden.testing import ManualClock

SECOND_AND_HOUR = parse_layers("10/second,1000/hour")
SECOND_AND_MINUTE = parse_layers("10/second,100/minute")


def test_steady_traffic_at_twice_the_burst_layer_is_held_to_the_quota() -> None:
    """GCRA, 10/second + 1000/hour, steady at 2x the first layer (20/s, one every 50 ms), 600 s.

    As buckets: the second layer holds 10 and refills one per 100 ms, the hour layer holds
    1000 and refills one per 3.6 s. From rest the second layer admits the arrivals at 0 to
    0.9 s (19: it gains half a unit per 50 ms), then every other one (at 0.1 k s, admitted
    number 10 + k). The hour layer has room for admitted number m while m <= 1000 + t / 3.6:
    10 + k <= 1000 + k / 36 holds up to k = 1018 (t = 101.8 s, 1028 admitted). From then
    on the hour layer admits number m at t = 3.6 (m - 1000), and 3.6 s is 72 arrivals, so
    one lands on every refill: m up to 1166 (597.6 s; the next would be at 601.2 s).
    Admitted 1166 of 12,000: the quota's 1000 plus 600 / 3.6.

    Denied 10,834. The second layer had no room for the odd arrivals from 0.95 s to 101.75 s
    (1009, the hour layer had room for each) and for 101.85 s, where both refused and the hour
    layer, waiting 2.55 s against 0.05 s, speaks for it: denied 1009, no room 1010. The hour
    layer speaks for every other denial: 12,000 - 1166 - 1009 = 9825. Worst periods: the
    second layer's 19 in (t - 1 s, t] (B + L - 1), the hour layer's whole run, 1166.
    """
    summary = run_layered(parse("steady:load=2"), "gcra", SECOND_AND_HOUR, 600).summary()
    assert (summary.offered, summary.admitted, summary.denied) == (12_000, 1_166, 10_834)
    assert summary.layers == (
        LayerSummary(rate="10/second", limit=10, denied=1_009, no_room=1_010, worst_window=19),
        LayerSummary(rate="1000/hour", limit=1000, denied=9_825, no_room=9_825, worst_window=1166),
    )
    assert sum(layer.denied for layer in summary.layers) == summary.denied


def test_fixed_windows_count_the_denials_both_layers_refuse_once() -> None:
    """Fixed windows, 10/second + 100/minute, steady at 20/s for 600 s (12,000 arrivals).

    The run starts 20 s into a minute, so the minute windows are [0, 40), [40, 100), ...,
    [580, 640) of the run: 11 that start in it. In each, the minute has room for the first
    10 s: the first 10 arrivals of each second are admitted (100 a window, 1100 in all) and
    the other 10 meet a full second. In seconds 1 to 9 the minute still has room, so the
    second layer alone refuses them (90); in the 10th the minute is full too, and its wait
    (the rest of the minute) is longer than the second's: both had no room, the minute
    speaks for them. Then, to the window's end, the minute alone refuses everything (the
    second layer is empty: nothing admitted, nothing counted). Per window: 10/second denied
    90, no room 100; 100/minute denied and no room 610 (first window: 10 + 30 s x 20), 1010
    (the nine whole ones) and 210 (the last 20 s): 9910. The first window's 100 (at 0-10 s)
    and the second's (at 40-50 s) lie within one trailing minute: 200, twice the limit.
    """
    summary = run_layered(parse("steady:load=2"), "fixed_window", SECOND_AND_MINUTE, 600).summary()
    assert (summary.offered, summary.admitted, summary.denied) == (12_000, 1_100, 10_900)
    assert [(layer.denied, layer.no_room) for layer in summary.layers] == [(990, 1100),
                                                                          (9910, 9910)]  # fmt: skip
    assert [layer.worst_window for layer in summary.layers] == [10, 200]
    assert summary.layers[1].worst_ratio == 2.0


def test_a_request_the_minute_refuses_consumes_nothing_on_the_second() -> None:
    """All or nothing: once the minute is full, every arrival is refused by the minute alone.

    Same run as above. From 10 s to 40 s the minute has no room; had the denied requests
    been counted by the second layer, it would have filled after 10 each second and had no
    room for the other 10. It had room for every one of the 600.
    """
    run = run_layered(parse("steady:load=2"), "fixed_window", SECOND_AND_MINUTE, 600)
    stretch = [
        (binding, no_room)
        for t, binding, no_room in zip(run.times_us, run.binding, run.no_room, strict=True)
        if 10_000_000 <= t < 40_000_000
    ]
    assert len(stretch) == 600
    assert set(stretch) == {(1, 0b10)}


def test_costs_count_in_units_and_a_denial_consumes_nothing(tmp_path: Path) -> None:
    """A replay with costs, GCRA 10/second + 12/minute (T = 100 ms and 5 s).

    At 0 s: 5 and 5 are admitted (the second layer is full, the minute 50 s of 60 s ahead);
    the third 5 meets both full, and the minute's wait (15 s) is longer than the second's
    (0.5 s). At 1 s the second layer is empty again: 3 fits it, not the minute (64 s > 60 s).
    Then 10 fits the second layer only if the 3 before consumed nothing there, and the
    minute refuses it. Offered 28, admitted 10; 10/second: denied 0, no room 5; 12/minute:
    denied and no room 18.
    """
    log = tmp_path / "costs.log"
    log.write_text("0 5\n0 5\n0 5\n1 3\n1 10\n", encoding="utf-8")
    layers = parse_layers("10/second,12/minute")
    run = run_layered(parse(f"replay:file={log}"), "gcra", layers, 60)
    assert run.no_room == (0, 0, 0b11, 0b10, 0b10)
    assert run.binding == (-1, -1, 1, 1, 1)
    summary = run.summary()
    assert (summary.offered, summary.admitted, summary.denied) == (28, 10, 18)
    assert [(layer.denied, layer.no_room) for layer in summary.layers] == [(0, 5), (18, 18)]


def _limiter_replay(run: LayeredRun) -> list[tuple[bool, int, int, int]]:
    """The run's arrivals offered again to the library's own ``Limiter`` over a ``MemoryStore``
    on a ``ManualClock``: per decision (allowed, binding layer or -1, no-room bits, delay)."""
    clock = ManualClock(START_US / 1_000_000)
    limiter = Limiter(MemoryStore(clock=clock), algorithm=run.algorithm, clock=clock)
    rates = list(run.rates)
    out = []
    for t, cost in zip(run.times_us, run.costs, strict=True):
        clock.advance_us(START_US + t - clock.now_us())
        decision = limiter.hit("reference", rates, cost)
        refused = sum(1 << i for i, layer in enumerate(decision.layers) if not layer.allowed)
        binding = -1 if decision.allowed else rates.index(decision.rate)
        out.append((decision.allowed, binding, refused, round(decision.delay * 1_000_000)))
    return out


def _pure_replay(run: LayeredRun) -> list[tuple[bool, int]]:
    """The same arrivals through the pure ``algorithms.layered`` loop, state kept by hand:
    per decision (allowed, no-room bits). Only what every layer allowed is written."""
    module = algorithms.get(run.algorithm)
    params = [module.params(rate) for rate in run.rates]
    states: list[object] = [None] * len(params)
    out = []
    for t, cost in zip(run.times_us, run.costs, strict=True):
        outcomes, writes = algorithms.layered(module.check, params, states, START_US + t, cost)
        if writes is not None:
            states = [state for state, _ttl in writes]
        allowed = all(outcome.allowed for outcome in outcomes)
        out.append((allowed, sum(1 << i for i, o in enumerate(outcomes) if not o.allowed)))
    return out


@pytest.mark.parametrize("algorithm", sorted(algorithms.ALGORITHMS))
@pytest.mark.parametrize(
    "spec", ["poisson:load=3", "onoff", "boundary", "retry-storm:jitter=yes,clients=20"]
)
def test_the_simulation_is_the_limiter_decision_by_decision(algorithm: str, spec: str) -> None:
    """Differential: every layered decision of a run equals the library's ``Limiter`` over a
    ``MemoryStore`` fed the same arrivals at the same instants (allowed, the layer that speaks
    for a denial, the layers without room, the shaper's delay), and the pure layered loop's.
    A retry storm's arrivals depend on the decisions, so it checks they drove the same path."""
    layers = parse_layers("10/second:burst=15,100/minute")
    run = run_layered(parse(spec), algorithm, layers, 90)
    assert len(run.times_us) > 200
    assert sum(run.allowed) < len(run.allowed)  # the layers did refuse some
    simulated = list(zip(run.allowed, run.binding, run.no_room, run.delays_us, strict=True))
    assert simulated == _limiter_replay(run)
    assert [(ok, refused) for ok, _, refused, _ in simulated] == _pure_replay(run)


def test_window_algorithms_run_the_layers_without_a_burst() -> None:
    """A layer's burst is for the bucket algorithms; a window algorithm counts its limit."""
    layers = parse_layers("10/second:burst=20,1000/hour")
    assert parse_layers("10/second:burst=20, 1000/hour")[0] == Rate.parse("10/second", burst=20)
    assert check_layers("sliding_log", layers)[0] == Rate.parse("10/second")
    assert check_layers("gcra", layers)[0].burst == 20
    summary = run_layered(parse("steady"), "fixed_window", layers, 10).summary()
    assert [layer.rate for layer in summary.layers] == ["10/second", "1000/hour"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("10/second", "two rates or more"),
        ("10/second;", "two rates or more"),
        ("10/second,1000/fortnight", "unknown unit 'fortnight'"),
        ("10/second:bust=3,1000/hour", "the one option a layer takes is burst=N"),
        ("10/second:burst=0,1000/hour", "burst=N"),
        ("10/second:burst=" + "9" * 5000 + ",1000/hour", "burst=N"),
    ],
)
def test_malformed_layers_are_refused(text: str, message: str) -> None:
    """Layer text is ``RATE[:burst=N]`` separated by ``,`` or ``;``; anything else says why."""
    with pytest.raises(ConfigurationError, match=message):
        parse_layers(text)


def test_layers_that_cannot_run_together_are_refused_before_anything_runs() -> None:
    """One rate is not a layered limit; the same rate twice (here after a window algorithm
    drops the burst that told them apart) is refused, as ``Limiter.hit`` refuses it."""
    with pytest.raises(ConfigurationError, match="two rates or more"):
        run_layered(parse("steady"), "gcra", [Rate.parse("10/second")], 10)
    twice = parse_layers("10/second:burst=20,10/second")
    assert check_layers("gcra", twice) == twice
    with pytest.raises(ConfigurationError, match=r"as layers of fixed_window: .* same rate twice"):
        run_layered(parse("steady"), "fixed_window", twice, 10)
    with pytest.raises(ConfigurationError, match="choose one of"):
        run_layered(parse("steady"), "concurrency", SECOND_AND_HOUR, 10)


def test_the_table_has_a_row_for_all_layers_then_one_per_layer() -> None:
    """format_layered: the run's totals, then per layer denied, no room and worst period."""
    rows = [
        run_layered(parse("steady:load=2"), name, SECOND_AND_HOUR, 600).summary()
        for name in ("gcra", "leaky_bucket")
    ]
    cells = [re.split(r"\s{2,}", line) for line in format_layered(rows).splitlines()]
    assert cells[0] == ["pattern", "algorithm", "layer", "offered", "admitted", "denied",
                        "no room", "worst period", "p99 wait"]  # fmt: skip
    assert cells[1] == ["steady x2", "gcra", "all layers", "12000", "1166", "10834", "-", "-", "-"]
    assert cells[2] == ["steady x2", "gcra", "10/second", "-", "-", "1009", "1010",
                        "19 (1.90x)", "-"]  # fmt: skip
    assert cells[3][2:] == ["1000/hour", "-", "-", "9825", "9825", "1166 (1.17x)", "-"]
    assert cells[4][1:3] == ["leaky_bucket", "all layers"]
    assert cells[4][-1].endswith("s") and cells[5][-1] == "-"  # the shaper's p99 wait
