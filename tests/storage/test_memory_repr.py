"""The memory stores' repr names their prefix, as the Redis stores' does: two stores whose
states cannot meet (``rw`` and ``rw:``) no longer look alike."""

from __future__ import annotations

from ratewarden import AsyncMemoryStore, MemoryStore
from ratewarden.testing import ManualClock


def test_the_memory_stores_show_their_prefix() -> None:
    """The default ``rw`` and a given one, in both twins."""
    clock = ManualClock()
    assert repr(MemoryStore(clock=clock)) == (
        f"MemoryStore(clock={clock!r}, max_keys=1000000, prefix='rw')"
    )
    assert repr(AsyncMemoryStore(clock=clock, prefix="rw:", max_keys=10)) == (
        f"AsyncMemoryStore(clock={clock!r}, max_keys=10, prefix='rw:')"
    )
