"""The local bucket: a per-process share of the rate, checked before the store."""

from __future__ import annotations

from fractions import Fraction

import pytest

from ratewarden import Rate
from ratewarden.errors import ConfigurationError
from ratewarden.limiter import local_rates, scaled
from ratewarden.testing import ManualClock
from ratewarden.tiers import TwoTier
from tests.tiers._helpers import CountingStore


def test_a_fraction_scales_limit_and_burst_and_keeps_the_period() -> None:
    """Half of 10/s burst 4 is 5/s burst 2; a quarter of 3/min rounds down to 1, not 0."""
    half = scaled(Rate.parse("10/second", burst=4), Fraction(1, 2))
    assert (half.limit, half.burst, half.period_us) == (5, 2, 1_000_000)
    tiny = scaled(Rate.parse("3/minute"), Fraction(1, 4))
    assert (tiny.limit, tiny.burst) == (1, None)


def test_fractions_are_read_exactly() -> None:
    """0.29 of 100 is 29, not 28 (100 * 0.29 is 28.999... in floating point)."""
    scale = local_rates(0.29)
    assert scale is not None
    assert scale((Rate.parse("100/minute"),))[0].limit == 29


def test_fixed_local_rates_apply_to_every_key() -> None:
    """local=Rate: the same bucket rate whatever the key's global rates."""
    scale = local_rates(Rate.parse("2/second"))
    assert scale is not None
    assert scale((Rate.parse("100/minute"),)) == (Rate.parse("2/second"),)


def test_two_rates_that_scale_to_one_are_kept_once() -> None:
    """1/s burst 1 and 1/s burst 2 both halve to 1/s burst 1: the local bucket keeps it once."""
    scale = local_rates(0.5)
    assert scale is not None
    out = scale((Rate.parse("1/second", burst=1), Rate.parse("1/second", burst=2)))
    assert out == (Rate(1, 1, burst=1),)


@pytest.mark.parametrize("bad", [0, -0.5, 1.5, True, "half", [Rate.parse("1/s"), "x"]])
def test_bad_local_settings_are_configuration_errors(bad: object) -> None:
    """A fraction outside (0, 1], a bool, a string or a list with a non-Rate is refused."""
    with pytest.raises(ConfigurationError):
        TwoTier(CountingStore(), local=bad)  # type: ignore[arg-type]


def test_a_local_denial_never_reaches_the_store_nor_charges_it() -> None:
    """local=0.5 of 10/min: five requests reach the store; the next five stop here."""
    clock = ManualClock()
    store = CountingStore(clock=clock)
    tiers = TwoTier(store, local=0.5)
    rate = Rate.parse("10/minute")
    decisions = [tiers.hit("k", rate) for _ in range(10)]
    assert [d.allowed for d in decisions] == [True] * 5 + [False] * 5
    assert store.calls == 5 and store.charged == 5
    assert tiers.counts.local_denials == 5
    # The local denial speaks for the local bucket: its limit and its exact wait.
    assert decisions[-1].limit == 5 and decisions[-1].retry_after == 12.0


def test_the_store_still_decides_what_the_local_bucket_lets_through() -> None:
    """Two processes, each with local=1.0 of 4/min over one store: together they get 4, not 8."""
    clock = ManualClock()
    store = CountingStore(clock=clock)
    rate = Rate.parse("4/minute")
    first, second = TwoTier(store, local=1.0), TwoTier(store, local=1.0)
    allowed = sum(t.hit("k", rate).allowed for _ in range(4) for t in (first, second))
    assert allowed == 4


def test_the_local_bucket_refills_with_time() -> None:
    """Time frees the local bucket as it frees the store (ManualClock, no sleeps)."""
    clock = ManualClock()
    tiers = TwoTier(CountingStore(clock=clock), local=Rate.parse("1/second"))
    rate = Rate.parse("100/second")
    assert tiers.hit("k", rate).allowed
    assert not tiers.hit("k", rate).allowed
    clock.advance(1.0)
    assert tiers.hit("k", rate).allowed
