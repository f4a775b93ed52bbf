"""SlotMap.from_shards / from_slots on literal replies: RESP2 and RESP3 forms, a band per primary,
and every reply that gives no bands (the live readers are in test_cell_slotmap.py)."""

from __future__ import annotations

from typing import Any

import pytest

from ratewarden.errors import ConfigurationError
from ratewarden.hotkeys import SlotMap, SlotRange, cell_keys


def node(n: int, role: str = "master", health: str = "online") -> dict[bytes, Any]:
    return {
        b"id": f"{n:040x}".encode(),
        b"port": 7000 + n,
        b"ip": b"10.0.0.1",
        b"endpoint": b"10.0.0.1",
        b"role": role.encode(),
        b"replication-offset": 0,
        b"health": health.encode(),
    }


def shard(slots: list[int], *nodes: dict[bytes, Any]) -> dict[bytes, Any]:
    return {b"slots": slots, b"nodes": list(nodes)}


def resp2(value: Any) -> Any:
    """A RESP3 reply as RESP2 sends it: every map a flat list of names and values."""
    if isinstance(value, dict):
        return [item for name, field in value.items() for item in (name, resp2(field))]
    if isinstance(value, list):
        return [resp2(item) for item in value]
    return value


#: Three primaries after a reshard: 1 owns 0-99 and 200-5460, 2 owns 100-199 and 5461-10922.
RESHARDED = [
    shard([10923, 16383], node(3)),
    shard([0, 99, 200, 5460], node(1), node(4, role="replica")),
    shard([100, 199, 5461, 10922], node(2)),
    shard([], node(5)),
]


def test_resp2_and_resp3_replies_give_one_map_with_a_band_per_primary() -> None:
    """The flat and the map form parse alike; each primary's band is its largest range, in slot
    order; a replica and a primary with no slots add nothing."""
    slot_map = SlotMap.from_shards(RESHARDED)
    assert SlotMap.from_shards(resp2(RESHARDED)) == slot_map
    assert slot_map.ranges[1] == SlotRange(100, 200, f"{2:040x}", "10.0.0.1:7002")
    assert slot_map.bands == ((200, 5461), (5461, 10923), (10923, 16384))


def test_equal_ranges_give_the_lowest_and_adjacent_ranges_are_one() -> None:
    """A primary with two ranges of one size is given the lower; CLUSTER SLOTS entries of one
    primary that meet are one range."""
    halves = SlotMap.from_shards(
        [shard([0, 4095, 8192, 12287], node(1)), shard([4096, 8191, 12288, 16383], node(2))]
    )
    assert halves.bands == ((0, 4096), (4096, 8192))
    joined = SlotMap.from_slots(
        [[0, 99, [b"10.0.0.1", 7001, b"a"]], [100, 16383, [b"10.0.0.1", 7001, b"a"]]]
    )
    assert joined.ranges == (SlotRange(0, 16384, "a", "10.0.0.1:7001"),)


def test_fewer_primaries_than_cells_take_the_bands_in_turn() -> None:
    """Not refused: 3 cells on 2 primaries put cells 0 and 2 on the first (as 6 cells on 3 put
    two on each), and SlotMap.owners shows it."""
    two = SlotMap.from_shards([shard([0, 8191], node(1)), shard([8192, 16383], node(2))])
    owners = two.owners(cell_keys("tenant:big", 3, two.bands))
    assert owners == ("10.0.0.1:7001", "10.0.0.1:7002", "10.0.0.1:7001")


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ([], "serves no slot"),
        ([shard([], node(1))], "serves no slot"),
        ([shard([0, 8191], node(1))], "leaves slots 8192-16383 unserved"),
        (
            [shard([0, 8191], node(1)), shard([8192, 9000, 9002, 16383], node(2))],
            "leaves slots 9001 unserved",
        ),
        ([shard([0, 16383], node(1)), shard([100, 199], node(2))], "serves slots 100-199 twice"),
        (
            [shard([0, 16383], node(1, health="fail"))],
            r"no working primary \(failed: 10.0.0.1:7001",
        ),
        ([shard([0, 16383], node(2, role="replica"))], r"no working primary \(failed: none"),
        ([shard([0, 16383], node(1), node(2))], "several primaries: 10.0.0.1:7001, 10.0.0.1:7002"),
        ([shard([0], node(1))], "not start/end pairs"),
        ([shard([0, 20000], node(1))], "must have 0 <= start < end <= 16384"),
        ({b"slots": []}, "is not a list"),
        ([[b"slots"]], "not a list of names and values"),
    ],
)
def test_maps_that_give_no_bands_are_refused(reply: Any, message: str) -> None:
    """Empty, partial, overlapping, failed-over, ambiguous or malformed replies raise a
    ConfigurationError saying what is wrong and naming where it was read."""
    with pytest.raises(ConfigurationError, match=message) as caught:
        SlotMap.from_shards(reply, "CLUSTER SHARDS of 10.0.0.9:7000")
    assert "10.0.0.9:7000" in str(caught.value)


def test_a_failed_old_primary_beside_its_successor_is_passed_over() -> None:
    """A shard that lists its failed old primary and the replica that took over: the map is the
    successor's."""
    slot_map = SlotMap.from_shards([shard([0, 16383], node(1, health="fail"), node(2))])
    assert slot_map.owners(["any"]) == ("10.0.0.1:7002",)
