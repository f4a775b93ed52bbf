"""A TwoTier given no store makes an in-process one, as Limiter does, and two-tiers.md says so."""

from __future__ import annotations

from pathlib import Path

from ratewarden import AsyncMemoryStore, MemoryStore, Rate
from ratewarden.testing import ManualClock
from ratewarden.tiers import AsyncTwoTier, TwoTier

DOC = Path(__file__).resolve().parents[2] / "docs" / "two-tiers.md"


def test_no_store_is_a_memory_store_on_the_clock_given() -> None:
    """TwoTier() is over a new MemoryStore (AsyncTwoTier: AsyncMemoryStore), on ``clock``."""
    clock = ManualClock()
    tier = TwoTier(clock=clock)
    assert type(tier.store) is MemoryStore and tier.store.clock is clock
    assert type(AsyncTwoTier().store) is AsyncMemoryStore
    assert tier.hit("k", Rate.parse("1/second")).allowed


def test_the_option_table_says_store_is_optional() -> None:
    """The option table's first rows: store (optional, a new MemoryStore) and algorithm."""
    rows = [line for line in DOC.read_text("utf-8").splitlines() if line.startswith("| `")]
    store = next(row for row in rows if row.startswith("| `store`"))
    assert "optional" in store and "`MemoryStore(clock=clock)`" in store
    assert "`AsyncMemoryStore` for `AsyncTwoTier`" in store
    assert any(row.startswith("| `algorithm`") and '`"gcra"`' in row for row in rows)
