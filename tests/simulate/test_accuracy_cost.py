"""The accuracy report's traffic costs work per request, not per simulated second."""

from __future__ import annotations

import random

import pytest

from ratewarden.simulate import accuracy


class _Counted(random.Random):
    """A seeded Random that counts its draws and stops a generator that draws too many."""

    def __init__(self, seed: int, most: int) -> None:
        super().__init__(seed)
        self.draws = 0
        self.most = most

    def random(self) -> float:
        self.draws += 1
        if self.draws > self.most:
            raise AssertionError(f"more than {self.most:,} draws")
        return super().random()


@pytest.mark.parametrize("gap_us", [1e9, 1e13])
def test_onoff_draws_a_few_numbers_per_request_at_a_quiet_load(gap_us: float) -> None:
    """A quiet source (a request every 1e13 us lets about 200,000 bursts of 10 s and
    silences of 40 s pass between two requests) costs a few draws a request, as a busy one
    does, and keeps its mean rate: over 50 seeded sources of about 2,000 requests, the mean
    count is within four standard errors of the rate's."""
    duration_us = int(2_000 * gap_us)
    counts = []
    for seed in range(50):
        rng = _Counted(seed, most=20 * 4_000)
        times = list(accuracy.MODELS["onoff"](gap_us, duration_us, rng))
        assert times == sorted(times)
        assert rng.draws <= 20 * (len(times) + 1)
        counts.append(len(times))
    mean = sum(counts) / len(counts)
    spread = (sum((c - mean) ** 2 for c in counts) / len(counts)) ** 0.5
    assert abs(mean - 2_000) < 4 * spread / len(counts) ** 0.5 + 1
