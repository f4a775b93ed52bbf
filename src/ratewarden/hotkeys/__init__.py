"""Hot keys: find the keys one process sees above a rate, and keep them off one shard.

::

    detector = HotKeyDetector(threshold=1_000, interval=1.0)      # units/s in this process
    cells = CellLimiter(store, cells=3)                           # or TwoTier(store, lease=20)
    limiter = HotKeyLimiter(store, cells, detector=detector, hot_keys=["tenant:big"])
    decision = limiter.hit("tenant:big", Rate.parse("30000/second"))

``HotKeyDetector`` is a Space-Saving sketch over a sliding interval (bounded
memory, injected clock). ``CellLimiter`` splits a key into N cells placed on N
slot bands, each with 1/N of every rate; ``HotKeyLimiter`` sends configured or
detected hot keys through cells or leases. ``AsyncCellLimiter`` and
``AsyncHotKeyLimiter`` are the asyncio twins. ``read_slot_map(client).bands``
(``aread_slot_map``) places cells from a Cluster's live slot map, and
``SlotMap.owners`` says on which primaries cells are. docs/scaling.md states
the bounds.
"""

from __future__ import annotations

from ratewarden.hotkeys._cells import AsyncCellLimiter, CellLimiter, round_robin
from ratewarden.hotkeys._detector import HotKey, HotKeyDetector
from ratewarden.hotkeys._limiter import AsyncHotKeyLimiter, HotKeyLimiter
from ratewarden.hotkeys._placement import cell_keys, key_slot, split_rate, store_slot
from ratewarden.hotkeys._slotmap import SlotMap, SlotRange, aread_slot_map, read_slot_map

__all__ = [
    "AsyncCellLimiter",
    "AsyncHotKeyLimiter",
    "CellLimiter",
    "HotKey",
    "HotKeyDetector",
    "HotKeyLimiter",
    "SlotMap",
    "SlotRange",
    "aread_slot_map",
    "cell_keys",
    "key_slot",
    "read_slot_map",
    "round_robin",
    "split_rate",
    "store_slot",
]
