"""Small inputs of the hot-key API, each taken or refused with a ConfigurationError that says
what is wrong: a ``NegativeCache`` as a ``CellLimiter``'s ``negative_cache`` (taken, with its
``max_hold``, as a Limiter and a TwoTier take one; before, refused as "max_keys
NegativeCache(...) must be a whole number"), ``hold=`` with no detector (refused; before,
taken and never used), ``key_slot`` of bytes (taken, as ``CLUSTER KEYSLOT`` takes any key)
or of a number, ``store_slot`` of bytes (before: AttributeError, TypeError), and
``HotKeyDetector.rate("")`` (refused as ``record`` refuses it; before, answered)."""

from __future__ import annotations

from typing import Any

import pytest

from ratewarden import MemoryStore, Rate
from ratewarden.errors import ConfigurationError
from ratewarden.hotkeys import CellLimiter, HotKeyDetector, HotKeyLimiter, key_slot, store_slot
from ratewarden.limiter import NegativeCache
from ratewarden.testing import ManualClock

RATE = Rate(30, 3600)


def test_cells_take_a_negative_cache_and_honour_its_max_hold() -> None:
    """``NegativeCache(100, max_hold=1.0)``: the cells' double denial is answered from it
    (no store call) for at most 1 s, then asked of the store again."""
    clock = ManualClock()
    store = MemoryStore(clock=clock)
    negative = NegativeCache(100, max_hold=1.0)
    cells = CellLimiter(store, 3, negative_cache=negative)
    assert cells.negative is negative
    assert sum(cells.hit("k", RATE).allowed for _ in range(30)) == 30
    assert not cells.hit("k", RATE).allowed  # both cells denied: remembered
    assert len(negative) == 1
    assert not cells.hit("k", RATE).allowed and negative.hits == 1  # from the cache
    clock.advance(1.0)
    assert not cells.hit("k", RATE).allowed and negative.hits == 1  # held no longer: asked


def test_a_bad_negative_cache_still_names_the_option() -> None:
    with pytest.raises(ConfigurationError, match="negative cache max_keys 'x'"):
        CellLimiter(MemoryStore(), 3, negative_cache="x")  # type: ignore[arg-type]


def test_hold_without_a_detector_is_refused() -> None:
    """``hold`` times a detected key's stay: without a detector it would do nothing."""
    store = MemoryStore()
    with pytest.raises(ConfigurationError, match=r"hold=5 .* there is no detector"):
        HotKeyLimiter(store, CellLimiter(store), hold=5)
    HotKeyLimiter(store, CellLimiter(store), hold=5, detector=HotKeyDetector(10))


def test_key_slot_takes_bytes_and_refuses_what_is_no_key() -> None:
    """Bytes are a Redis key as they are; a number is not a key at all."""
    assert key_slot(b"tenant:big") == key_slot("tenant:big")
    assert key_slot(b"{user1}.a") == key_slot("{user1}.b")
    with pytest.raises(ConfigurationError, match=r"key_slot: name 5 must be a Redis key"):
        key_slot(5)  # type: ignore[arg-type]


@pytest.mark.parametrize("key", [b"x", 5, None])
def test_store_slot_refuses_what_is_not_a_key_as_given_to_hit(key: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"store_slot: key .* must be a string"):
        store_slot(key)


@pytest.mark.parametrize("key", ["", b"x", 5])
def test_a_detector_reads_no_rate_for_what_it_would_not_count(key: Any) -> None:
    detector = HotKeyDetector(1000)
    with pytest.raises(ConfigurationError, match=r"hot-key detector: key .* non-empty string"):
        detector.rate(key)
