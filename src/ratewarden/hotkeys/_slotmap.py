"""SlotMap: which primary of a Redis Cluster serves each slot, read live, and the bands it gives.

``read_slot_map(client)`` (``aread_slot_map`` for ``redis.asyncio``; a store over a
Cluster is taken for its client) asks the client's default node ``CLUSTER SHARDS``
(Redis 7+), or ``CLUSTER SLOTS`` when the server refuses that (Redis 6.2 does not
know it); the reply is parsed once, by ``SlotMap.from_shards`` or
``SlotMap.from_slots``, so the readers only send.

``SlotMap.bands`` is one band per primary for ``cell_keys`` and
``CellLimiter(bands=...)``. A primary that owns several ranges after a reshard
is given its largest one (the lowest of equals): a band must be contiguous for
its middle half to stay clear of a moved boundary, and the largest has the most
slots to spare. Bands are in slot order, so every process that reads the same
map finds the same cells. ``SlotMap.owners(keys)`` says which primary keeps
each key's state: whether a key's cells still spread after slots moved.

A map that leaves a slot unserved, serves one twice, or names a failed
primary (a cluster mid-failover or mid-reshard) is refused with
``ConfigurationError``: bands read from it would place cells on slots nobody
serves. Nothing is written to the cluster.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ratewarden.checks import init_checked
from ratewarden.errors import ConfigurationError
from ratewarden.hotkeys._placement import SLOTS, store_slot

__all__ = ["SlotMap", "SlotRange", "aread_slot_map", "read_slot_map"]

#: What a node's role is called when it is a primary (Valkey may say "primary").
_PRIMARY_ROLES = frozenset({"master", "primary"})
#: Unserved or doubly served ranges named in a message before "and N more".
_NAMED = 4


@dataclass(frozen=True, slots=True)
class SlotRange:
    """Slots ``start`` to ``end`` (exclusive, as a band's end) served by one primary:
    ``node`` is its Cluster node id, ``address`` its ``ip:port``."""

    start: int
    end: int
    node: str
    address: str


@init_checked
@dataclass(frozen=True, slots=True)
class SlotMap:
    """Every one of the 16,384 slots and the primary serving it: ``ranges`` in slot order,
    each starting where the previous one ends. ``source`` says where the map was read
    (for messages; two maps of the same ranges are equal wherever they were read)."""

    ranges: tuple[SlotRange, ...]
    source: str = field(default="SlotMap(ranges)", compare=False)

    def __post_init__(self) -> None:
        if not self.ranges:
            raise ConfigurationError(
                f"the slot map from {self.source} serves no slot: is the cluster created "
                "(redis-cli --cluster create), and is this node part of it?"
            )
        gaps, doubles, at = [], [], 0
        for served in self.ranges:
            if not 0 <= served.start < served.end <= SLOTS:
                raise ConfigurationError(
                    f"slot range {served!r} from {self.source} must have "
                    f"0 <= start < end <= {SLOTS}"
                )
            if served.start > at:
                gaps.append((at, served.start))
            elif served.start < at:
                doubles.append((served.start, min(at, served.end)))
            at = max(at, served.end)
        if at < SLOTS:
            gaps.append((at, SLOTS))
        if doubles:
            raise ConfigurationError(
                f"the slot map from {self.source} serves slots {_slots(doubles)} twice "
                "(its ranges overlap): a slot has one primary"
            )
        if gaps:
            raise ConfigurationError(
                f"the slot map from {self.source} leaves slots {_slots(gaps)} unserved "
                "(a cluster mid-failover or mid-reshard); read the map again when every "
                "slot is assigned (CLUSTER INFO: cluster_slots_assigned:16384)"
            )

    @classmethod
    def from_shards(cls, reply: Any, source: str = "CLUSTER SHARDS") -> SlotMap:
        """The map in a ``CLUSTER SHARDS`` reply as redis-py returns it, RESP2 (flat lists)
        or RESP3 (maps), bytes or decoded. A shard with no slots has no range."""
        found = []
        for shard in _items(reply, source):
            fields = _fields(shard, source)
            pairs = _items(fields.get("slots", ()), source)
            if len(pairs) % 2 or not all(type(slot) is int for slot in pairs):
                raise ConfigurationError(
                    f"shard slots {pairs!r} from {source} are not start/end pairs"
                )
            if not pairs:
                continue
            primary = _primary(fields, pairs, source)
            for i in range(0, len(pairs), 2):
                found.append(SlotRange(pairs[i], pairs[i + 1] + 1, *primary))
        return cls(_merged(found), source)

    @classmethod
    def from_slots(cls, reply: Any, source: str = "CLUSTER SLOTS") -> SlotMap:
        """The map in a ``CLUSTER SLOTS`` reply (each entry: first slot, last slot, then the
        primary as ``[ip, port, node id, ...]``). It says nothing of a primary's health."""
        found = []
        for entry in _items(reply, source):
            items = _items(entry, source)
            primary = _items(items[2], source) if len(items) > 2 else []
            if len(primary) < 3 or not all(type(slot) is int for slot in items[:2]):
                raise ConfigurationError(
                    f"slot entry {entry!r} from {source} must be [start, end, [ip, port, id]]"
                )
            address = f"{_text(primary[0])}:{_text(primary[1])}"
            found.append(SlotRange(items[0], items[1] + 1, _text(primary[2]), address))
        return cls(_merged(found), source)

    @property
    def bands(self) -> tuple[tuple[int, int], ...]:
        """One ``(start, end)`` band per primary, its largest range (the lowest of equals),
        in slot order: ``bands`` for ``cell_keys`` and ``CellLimiter``."""
        largest: dict[str, SlotRange] = {}
        for served in self.ranges:
            held = largest.get(served.node)
            if held is None or served.end - served.start > held.end - held.start:
                largest[served.node] = served
        return tuple(sorted((band.start, band.end) for band in largest.values()))

    def owners(self, keys: Iterable[str]) -> tuple[str, ...]:
        """The address of the primary that keeps each key's state (``store_slot``): for
        ``limiter.keys(key)``, whether that key's cells are on as many primaries as cells."""
        starts = [served.start for served in self.ranges]
        return tuple(self.ranges[bisect_right(starts, store_slot(key)) - 1].address for key in keys)


def read_slot_map(client: Any) -> SlotMap:
    """The live slot map of the Cluster a ``redis.RedisCluster`` client is connected to.

    ``client`` may also be a store over a Cluster (``RedisStore.from_url(
    "redis+cluster://...")``): its client is asked.

    Asks the client's default node ``CLUSTER SHARDS``, or ``CLUSTER SLOTS`` when
    the server refuses it. Connection errors are redis-py's own.
    """
    client = _cluster_client(client, "redis.cluster", "read_slot_map")
    node = client.get_default_node()
    try:
        reply = client.execute_command("CLUSTER", "SHARDS", target_nodes=node)
    except Exception as exc:
        # An error reply (Redis 6.2 knows no CLUSTER SHARDS; an ACL may deny it), not a
        # lost connection: redis-py's ResponseError.
        if not _is_class(exc, "redis.exceptions", "ResponseError"):
            raise
        reply = client.execute_command("CLUSTER", "SLOTS", target_nodes=node)
        return SlotMap.from_slots(reply, f"CLUSTER SLOTS of {node.name}")
    return SlotMap.from_shards(reply, f"CLUSTER SHARDS of {node.name}")


async def aread_slot_map(client: Any) -> SlotMap:
    """The asyncio twin of ``read_slot_map``, for a ``redis.asyncio.RedisCluster`` client
    (or an ``AsyncRedisStore`` over a Cluster)."""
    client = _cluster_client(client, "redis.asyncio.cluster", "aread_slot_map")
    await client.initialize()  # once per client: a new one has no default node yet
    node = client.get_default_node()
    try:
        reply = await client.execute_command("CLUSTER", "SHARDS", target_nodes=node)
    except Exception as exc:
        # An error reply (Redis 6.2 knows no CLUSTER SHARDS; an ACL may deny it), not a
        # lost connection: redis-py's ResponseError.
        if not _is_class(exc, "redis.exceptions", "ResponseError"):
            raise
        reply = await client.execute_command("CLUSTER", "SLOTS", target_nodes=node)
        return SlotMap.from_slots(reply, f"CLUSTER SLOTS of {node.name}")
    return SlotMap.from_shards(reply, f"CLUSTER SHARDS of {node.name}")


#: The reader for each client class's module, and the client it takes.
_READERS = {
    "redis.cluster": ("read_slot_map", "redis.RedisCluster"),
    "redis.asyncio.cluster": ("aread_slot_map", "redis.asyncio.RedisCluster"),
}


def _cluster_client(given: object, module: str, reader: str) -> Any:
    """The ``RedisCluster`` of ``module`` that ``given`` is, or that a store over a Cluster
    keeps (its ``client``: ``RedisStore.from_url("redis+cluster://...")``); anything else is
    refused (matched by name, as every redis class here: hotkeys import no redis or store
    at run time)."""
    if _is_class(given, module, "RedisCluster"):
        return given
    inner = getattr(given, "client", None)  # a store's client; a redis client's is a method
    inner = None if callable(inner) else inner
    if inner is not None and _is_class(inner, module, "RedisCluster"):
        return inner
    kind = _name(given)
    if inner is not None:  # a store: say which client it has
        kind = f"{kind} over {_name(inner)}"
    hint = ": only a Redis Cluster has a slot map"
    client = given if inner is None else inner
    for other, (twin, _) in _READERS.items():
        if other != module and _is_class(client, other, "RedisCluster"):
            hint = f"; for this one, use {twin}"
    raise ConfigurationError(
        f"{reader} needs a {_READERS[module][1]} client or a store over a Redis Cluster "
        f"(redis+cluster://...), not {kind}{hint}"
    )


def _name(value: object) -> str:
    """``value``'s class, or the redis-py class it extends (not a store's private subclass)."""
    kinds = type(value).__mro__
    kind = next((k for k in kinds if k.__module__.partition(".")[0] == "redis"), kinds[0])
    return f"{kind.__module__}.{kind.__qualname__}"


def _is_class(value: object, module: str, name: str) -> bool:
    """Whether ``value`` is an instance of ``module.name`` (or of a subclass)."""
    return any(c.__module__ == module and c.__name__ == name for c in type(value).__mro__)


def _primary(fields: dict[str, Any], pairs: list[Any], source: str) -> tuple[str, str]:
    """(node id, address) of the one primary of a shard serving ``pairs`` that has not failed."""
    nodes = [_fields(node, source) for node in _items(fields.get("nodes", ()), source)]
    primaries = [node for node in nodes if _text(node.get("role")) in _PRIMARY_ROLES]
    up = [node for node in primaries if _text(node.get("health")) not in {"fail", "failed"}]
    where = f"slots {_slots([(pairs[i], pairs[i + 1] + 1) for i in range(0, len(pairs), 2)])}"
    if not up:
        failed = ", ".join(_address(node) for node in primaries) or "none"
        raise ConfigurationError(
            f"{where} from {source} have no working primary (failed: {failed}): the cluster "
            "is failing over; read the map again when a replica has taken the slots over"
        )
    if len(up) > 1:
        found = ", ".join(_address(node) for node in up)
        raise ConfigurationError(f"{where} from {source} name several primaries: {found}")
    return _text(up[0].get("id")), _address(up[0])


def _address(node: dict[str, Any]) -> str:
    port = node.get("port", node.get("tls-port"))
    return f"{_text(node.get('ip'))}:{_text(port)}"


def _merged(found: list[SlotRange]) -> tuple[SlotRange, ...]:
    """``found`` in slot order, ranges of one primary that meet made one."""
    merged: list[SlotRange] = []
    for served in sorted(found, key=lambda r: (r.start, r.end)):
        last = merged[-1] if merged else None
        if last is not None and last.node == served.node and last.end == served.start:
            merged[-1] = SlotRange(last.start, served.end, last.node, last.address)
        else:
            merged.append(served)
    return tuple(merged)


def _items(value: Any, source: str) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise ConfigurationError(f"{value!r} from {source} is not a list: not a slot map reply")
    return list(value)


def _fields(value: Any, source: str) -> dict[str, Any]:
    """A RESP3 map, or a RESP2 flat list of names and values, as a dict with str names."""
    if isinstance(value, dict):
        pairs = list(value.items())
    else:
        flat = _items(value, source)
        if len(flat) % 2:
            raise ConfigurationError(f"{value!r} from {source} is not a list of names and values")
        pairs = list(zip(flat[::2], flat[1::2], strict=True))
    return {_text(name): item for name, item in pairs}


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _slots(ranges: list[tuple[int, int]]) -> str:
    """``[(0, 100), (200, 201)]`` as ``0-99, 200``, at most ``_NAMED`` of them."""
    named = [f"{s}-{e - 1}" if e - s > 1 else str(s) for s, e in ranges[:_NAMED]]
    more = len(ranges) - _NAMED
    return ", ".join(named) + (f" and {more} more" if more > 0 else "")
