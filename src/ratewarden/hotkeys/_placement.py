"""Where a key's cells go, and what share of each rate each cell holds.

Placement. Cell ``i`` of key ``k`` is the key ``k~cell:i:s``, where the salt
``s`` is the smallest number that puts the cell's hash slot in the middle half
of band ``i`` (by default the slots cut into N equal bands; a Cluster created
by ``redis-cli --cluster create`` gives each primary one such band when N is a
multiple of the primary count). The store uses the whole key as its hash tag,
so the slot is CRC16 of the escaped cell key (``store_slot``), computed here
exactly as Redis does (``CLUSTER KEYSLOT`` of the state key agrees; the tests
check it). A placement depends
only on the key, N and the bands: every process finds the same cells.

Shares. Each rate of ``limit`` L and capacity C is split with
``L // N`` (plus one for the first ``L % N`` cells) and likewise for C, so the
cells' limits add up to L and their capacities to C exactly: the cells together
never admit more than the key would have. What splitting costs is the
fragmentation error: a request is denied when the cell it picked and the one it
retries are both short, while the other N - 2 cells may still have room
(docs/scaling.md gives the bound and the measured figures).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from ratewarden.checks import check_key
from ratewarden.errors import ConfigurationError
from ratewarden.limiter import hash_tag
from ratewarden.rate import Rate

__all__ = [
    "MAX_CELLS",
    "SLOTS",
    "cell_keys",
    "check_bands",
    "check_cells",
    "key_slot",
    "not_split",
    "slot_bands",
    "split_rate",
    "store_slot",
]

#: Hash slots of a Redis Cluster.
SLOTS = 16384
#: The most cells one key may be split into.
MAX_CELLS = 256
#: Salts tried per cell: a one-slot band needs about 16,384 on average.
_MAX_SALT = 64 * SLOTS


def _crc16_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
        table.append(crc & 0xFFFF)
    return table


_CRC16 = _crc16_table()


def _crc16_slot(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC16[((crc >> 8) ^ byte) & 0xFF]
    return crc % SLOTS


def key_slot(name: str | bytes) -> int:
    """The Cluster hash slot of the Redis key ``name``, as ``CLUSTER KEYSLOT name`` gives it.

    CRC16/XMODEM mod 16384 of the UTF-8 bytes (or of ``name`` itself, given bytes), of only
    the hash tag when there is one: the bytes between the first ``{`` and the first ``}``
    after it, if any lie between.
    """
    if isinstance(name, bytes):
        data = name
    elif isinstance(name, str) and (name.isascii() or check_key(name)):
        data = name.encode()
    else:
        raise ConfigurationError(f"key_slot: name {name!r} must be a Redis key (str or bytes)")
    start = data.find(b"{")
    if start >= 0:
        end = data.find(b"}", start + 1)
        if end > start + 1:
            data = data[start + 1 : end]
    return _crc16_slot(data)


def store_slot(key: str) -> int:
    """The slot a store puts every state of ``key`` in (a cell name from ``cell_keys`` too).

    The store's keys use the escaped ``key`` as their hash tag (``{``, ``}`` and ``%``
    percent-escaped), so this is ``key_slot`` of any of them, not of ``key`` itself
    when ``key`` holds a brace.
    """
    if not isinstance(key, str):
        raise ConfigurationError(
            f"store_slot: key {key!r} must be a string, a key as given to hit "
            "(for a Redis key's own slot, bytes or str, use key_slot)"
        )
    return _crc16_slot(hash_tag(key).encode())


def check_cells(cells: object) -> int:
    if isinstance(cells, bool) or not isinstance(cells, int) or not 2 <= cells <= MAX_CELLS:
        raise ConfigurationError(
            f"cells {cells!r} must be a whole number from 2 to {MAX_CELLS} "
            "(3 or more spread a key over 3 primaries)"
        )
    return cells


def check_bands(bands: object) -> list[tuple[int, int]]:
    """``bands`` as a list of tuples, once checked: ``(start, end)`` slot ranges (tuples, or
    two-item lists as a config file gives them) in slot order, none overlapping the next
    (as ``SlotMap.bands`` gives them). Two cells on one slot range
    would share a primary, which is what cells are there to avoid."""
    if isinstance(bands, str | bytes) or not isinstance(bands, Sequence):
        raise ConfigurationError(f"bands {bands!r} must be a list of (start, end) slot ranges")
    if not bands:
        raise ConfigurationError("bands must name at least one slot range (start, end)")
    found = []
    for band in bands:
        # A pair read from JSON, YAML or TOML is a list: taken as the tuple it stands for.
        ok = isinstance(band, tuple | list) and len(band) == 2
        if not ok or not all(type(b) is int for b in band) or not 0 <= band[0] < band[1] <= SLOTS:
            raise ConfigurationError(
                f"bands: {band!r} must be (start, end) slots: two whole numbers (a tuple or "
                f"a list) with 0 <= start < end <= {SLOTS}"
            )
        found.append((band[0], band[1]))
    for before, band in pairwise(found):
        if band[1] <= before[0]:
            raise ConfigurationError(
                f"bands: {band!r} comes after {before!r} but lies before it; give the "
                "slot ranges in slot order (as read_slot_map(client).bands does)"
            )
        if band[0] < before[1]:
            raise ConfigurationError(
                f"bands: {before!r} and {band!r} overlap; each slot range must start at or "
                "after the end of the one before it (one range per primary)"
            )
    return found


def slot_bands(cells: int, bands: Sequence[tuple[int, int]] | None) -> list[tuple[int, int]]:
    """The band of each of ``cells`` cells: ``bands`` (``check_bands``) taken in turn, or
    equal bands. With more cells than bands a band holds several cells (6 cells on 3
    bands: two each), so the list returned is not in slot order: pass ``bands`` itself,
    not this list, wherever bands are asked for."""
    if bands is None:
        return [(i * SLOTS // cells, (i + 1) * SLOTS // cells) for i in range(cells)]
    found = check_bands(bands)
    return [found[i % len(found)] for i in range(cells)]


def cell_keys(
    key: str, cells: int, bands: Sequence[tuple[int, int]] | None = None
) -> tuple[str, ...]:
    """The ``cells`` keys that stand for ``key``, cell ``i`` in the middle of slot band ``i``.

    ``bands`` are ``(start, end)`` slot ranges, one per primary for instance
    (``read_slot_map(client).bands`` reads them from a Cluster's live slot map);
    cell ``i`` goes to ``bands[i % len(bands)]``. By default the 16,384 slots
    are cut into ``cells`` equal bands.
    """
    check_key(key)
    cells = check_cells(cells)
    found = []
    for i, band in enumerate(slot_bands(cells, bands)):
        start, end = band
        width = end - start
        low, high = start + width // 4, end - width // 4
        if high <= low:
            low, high = start, end
        for salt in range(_MAX_SALT):
            name = f"{key}~cell:{i}:{salt}"
            if low <= store_slot(name) < high:
                found.append(name)
                break
        else:  # pragma: no cover - CRC16 reaches every slot long before this
            raise ConfigurationError(f"no salt in {_MAX_SALT} puts a cell of {key!r} in {band}")
    return tuple(found)


def split_rate(rate: Rate, cells: int) -> tuple[Rate, ...]:
    """``rate`` cut into ``cells`` shares whose limits and capacities add up to the rate's exactly.

    Raises ``ConfigurationError`` when a share would be empty (more cells than
    the limit or the capacity).
    """
    cells = check_cells(cells)
    if cells > rate.limit or cells > rate.capacity:
        raise ConfigurationError(
            f"cannot split {rate} into {cells} cells: each cell needs a limit and a burst of "
            f"at least 1; use at most {min(rate.limit, rate.capacity)} cells for this rate"
        )
    shares = []
    for i in range(cells):
        limit = rate.limit // cells + (i < rate.limit % cells)
        burst = None
        if rate.burst is not None:
            burst = rate.burst // cells + (i < rate.burst % cells)
        shares.append(Rate(limit, rate.period, burst))
    return tuple(shares)


def not_split(rates: Sequence[Rate], cells: int, cost: int) -> str | None:
    """Why a request of ``cost`` on ``rates`` cannot be decided on ``cells`` cells (a rate
    with fewer units than cells, or a cost the key could admit but no share of a cell
    can), or None when it can."""
    for rate in rates:
        if cells > rate.limit or cells > rate.capacity:
            return (
                f"{rate} cannot be split into {cells} cells (each needs a limit and a burst of 1)"
            )
    tightest = min(rates, key=lambda rate: rate.capacity // cells)
    if cost > tightest.capacity // cells and cost <= min(rate.capacity for rate in rates):
        return (
            f"a cost of {cost} fits {tightest} but not its smallest share of {cells} cells "
            f"({tightest.capacity // cells})"
        )
    return None
