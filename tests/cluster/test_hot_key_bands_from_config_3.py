"""Bands read from a config file are lists (JSON, YAML and TOML have no tuples), and
``CellLimiter`` takes them as the ``(start, end)`` pairs they stand for: the same cells as the
tuples give. Before, ``[0, 5461]`` was refused with a message whose stated condition it met.
What is still refused says what a band must be."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ratewarden import MemoryStore
from ratewarden.errors import ConfigurationError
from ratewarden.hotkeys import CellLimiter, cell_keys

TUPLES = [(0, 5461), (5461, 10923), (10923, 16384)]


def test_bands_from_json_place_the_cells_the_tuples_place() -> None:
    """``json.loads`` of the three primaries' bands: kept as tuples, the same cell keys."""
    bands = json.loads("[[0, 5461], [5461, 10923], [10923, 16384]]")
    cells = CellLimiter(MemoryStore(), 3, bands=bands)
    assert cells.bands == TUPLES
    assert cells.keys("tenant:big") == cell_keys("tenant:big", 3, TUPLES)
    assert cell_keys("tenant:big", 3, bands) == cell_keys("tenant:big", 3, TUPLES)


@pytest.mark.parametrize(
    ("band", "why"),
    [
        ([0, 5461, 3], r"\[0, 5461, 3\] must be \(start, end\) slots: two whole numbers"),
        ([0.0, 5461], r"\[0.0, 5461\] must be \(start, end\) slots: two whole numbers"),
        ({"start": 0}, r"\{'start': 0\} must be \(start, end\) slots"),
        ([5461, 0], r"\[5461, 0\] must be .* with 0 <= start < end <= 16384"),
    ],
)
def test_a_band_that_is_not_two_slots_is_refused_saying_what_a_band_is(band: Any, why: str) -> None:
    """Three numbers, a float, a mapping, an empty range: a ConfigurationError naming it."""
    with pytest.raises(ConfigurationError, match=why):
        CellLimiter(MemoryStore(), 3, bands=[band])
