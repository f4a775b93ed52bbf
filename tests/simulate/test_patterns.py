"""Traffic patterns: their shapes, their seeds, and clear errors for bad specs."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from ratewarden.errors import ConfigurationError
from ratewarden.simulate import patterns
from ratewarden.simulate.patterns import Horizon

MINUTE = 60_000_000
START = 1_700_000_000 * 1_000_000


def horizon(seconds: float = 600, limit: int = 100, period_us: int = MINUTE) -> Horizon:
    return Horizon(START, round(seconds * 1_000_000), limit, period_us)


def test_steady_spaces_requests_evenly_at_the_load() -> None:
    """steady:load=2 at 100/minute offers 200 a minute, 0.3 s apart."""
    arrivals = patterns.parse("steady:load=2").arrivals(horizon(60))
    assert len(arrivals) == 200
    gaps = {b[0] - a[0] for a, b in itertools.pairwise(arrivals)}
    assert gaps <= {299_999, 300_000, 300_001}


def test_poisson_is_seeded_and_averages_the_load() -> None:
    """The same seed gives the same traffic; the mean count is near load x limit."""
    one = patterns.parse("poisson:load=1.5,seed=7").arrivals(horizon(3600))
    two = patterns.parse("poisson:load=1.5,seed=7").arrivals(horizon(3600))
    other = patterns.parse("poisson:load=1.5,seed=8").arrivals(horizon(3600))
    assert one == two
    assert one != other
    assert 8_500 < len(one) < 9_500  # 150/minute for an hour: 9,000 +- 5 sigma


def test_onoff_is_silent_between_bursts() -> None:
    """onoff:on=5,off=25 sends only in the first 5 s of each 30 s."""
    arrivals = patterns.parse("onoff:load=6,on=5,off=25").arrivals(horizon(120))
    offsets = {(t - START) % 30_000_000 for t, _, _ in arrivals}
    assert max(offsets) < 5_000_000
    assert len(arrivals) == 4 * 50  # 10/s for 5 s, four cycles


def test_boundary_burst_straddles_every_other_window_edge() -> None:
    """The limit just before an edge and the limit on it, then a window of rest."""
    arrivals = patterns.parse("boundary").arrivals(horizon(300))
    times = sorted({t for t, _, _ in arrivals})
    first_edge = (START // MINUTE + 1) * MINUTE
    assert times[:2] == [first_edge - 1, first_edge]
    assert times[2:4] == [first_edge + 2 * MINUTE - 1, first_edge + 2 * MINUTE]
    assert sum(1 for t, _, _ in arrivals if t == first_edge - 1) == 100


def test_retry_storm_without_jitter_retries_in_lockstep() -> None:
    """Denied at once, the clients of a storm without jitter come back at the same instant."""
    storm = patterns.parse("retry-storm:clients=10").start(horizon())
    first = storm.arrivals
    retries = {storm.after(a, False, 0) for a in first}
    assert len({r[0] for r in retries if r is not None}) == 1


def test_retry_storm_with_jitter_spreads_the_retries() -> None:
    """Full jitter draws each client's wait uniformly, so the retries spread out."""
    storm = patterns.parse("retry-storm:clients=10,jitter=yes").start(horizon())
    retries = [storm.after(a, False, 0) for a in storm.arrivals]
    assert len({r[0] for r in retries if r is not None}) == 10


def test_retry_storm_backs_off_exponentially_up_to_the_cap() -> None:
    """Waits double per failed attempt (1, 2, 4 s) and stop growing at cap."""
    storm = patterns.parse("retry-storm:clients=1,base=1,cap=4").start(horizon())
    arrival = storm.arrivals[0]
    waits = []
    for _ in range(5):
        following = storm.after(arrival, False, 0)
        assert following is not None
        waits.append(following[0] - arrival[0])
        arrival = following
    assert waits == [1_000_000, 2_000_000, 4_000_000, 4_000_000, 4_000_000]


def test_replay_reads_relative_times_costs_and_comments(tmp_path: Path) -> None:
    """Timestamps start the run at the earliest; a second column is the cost."""
    log = tmp_path / "access.log"
    log.write_text("# seconds cost\n1000.5 2\n1000.0\n\n1001.25  # late\n", encoding="utf-8")
    arrivals = patterns.parse(f"replay:file={log}").arrivals(horizon())
    assert arrivals == [(START, 0, 1), (START + 500_000, 0, 2), (START + 1_250_000, 0, 1)]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("1.0\nabc\n", ":2: timestamp 'abc' is neither seconds nor an ISO 8601 time"),
        ("inf\n", ":1: timestamp 'inf' is not finite"),
        ("1e300\n", ":1: timestamp '1e300' is out of range"),
        ("1.0 x\n", ":1: cost 'x' must be a whole number"),
        ("1.0 \u00b2\n", ":1: cost '\u00b2' must be a whole number"),
        ("1 2 3\n", ":1: expected 'SECONDS [COST]'"),
        ("nan\n", ":1: timestamp 'nan' is not finite"),
        ("# nothing\n", "has no timestamps"),
    ],
)
def test_replay_names_the_file_and_line_of_a_bad_entry(
    tmp_path: Path, content: str, message: str
) -> None:
    """A bad log line is a ConfigurationError with file:line and the offending text."""
    log = tmp_path / "bad.log"
    log.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigurationError, match=message.replace("[", r"\[").replace("]", r"\]")):
        patterns.parse(f"replay:file={log}").arrivals(horizon())


def test_replay_reads_iso_8601_times_and_exact_microseconds(tmp_path: Path) -> None:
    """ISO 8601 times (naive ones as UTC) and epoch seconds to the microsecond, without rounding."""
    iso = tmp_path / "iso.log"
    iso.write_text("2026-12-03T07:42:30.5Z\n2026-12-03T07:42:30\n2026-12-03T08:42:31+01:00 3\n")
    assert patterns.parse(f"replay:file={iso}").arrivals(horizon()) == [
        (START, 0, 1),
        (START + 500_000, 0, 1),
        (START + 1_000_000, 0, 3),
    ]
    epoch = tmp_path / "epoch.log"
    epoch.write_text("1700000000.000001\n1700000000.000002\n1700000000.000004\n")
    times = [t for t, _, _ in patterns.parse(f"replay:file={epoch}").arrivals(horizon())]
    assert [t - START for t in times] == [0, 1, 3]


def test_replay_of_a_missing_file_says_so(tmp_path: Path) -> None:
    """An unreadable file is a ConfigurationError, not an OSError."""
    with pytest.raises(ConfigurationError, match="cannot read"):
        patterns.parse(f"replay:file={tmp_path / 'missing.log'}").arrivals(horizon())


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nope", "unknown pattern 'nope'"),
        ("steady:speed=2", "bad parameter 'speed=2'"),
        ("steady:load", "bad parameter 'load'"),
        ("steady:load=fast", "load='fast' is not a number"),
        ("steady:load=0", "load=0.0 must be a number above 0"),
        ("poisson:load=nan", "must be a number above 0"),
        ("onoff:off=-1", "off=-1.0 must be a number above 0"),
        ("boundary:size=0", "size=0 must be at least 1"),
        ("boundary:size=\u00b2", "must be a whole number"),
        ("retry-storm:jitter=maybe", "must be yes or no"),
        ("retry-storm:clients=0", "clients=0 must be from 1"),
        ("retry-storm:clients=1000000", "clients=1000000 must be from 1"),
        ("replay", "needs file=PATH"),
    ],
)
def test_a_bad_spec_is_a_configuration_error_naming_it(spec: str, message: str) -> None:
    """Every bad spec fails up front with the offending parameter in the message."""
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(")):
        patterns.parse(spec)


def test_a_run_too_large_to_simulate_is_refused_before_generating() -> None:
    """steady at a billion times the rate is refused with the count, not generated."""
    with pytest.raises(ConfigurationError, match="more than 5,000,000"):
        patterns.parse("steady:load=1e9").arrivals(horizon())


def test_the_help_lists_every_pattern_and_parameter() -> None:
    """`ratewarden simulate --help` shows pattern_help(): it must not drift from PATTERNS."""
    text = patterns.pattern_help()
    for name, (_cls, parameters) in patterns.PATTERNS.items():
        assert f"\n  {name} " in text
        for key in parameters:
            assert f"{key}=" in text or f" {key} " in text, (name, key)
