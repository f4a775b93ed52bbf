"""The memcache store's items, and its one atomic step on an item, sans I/O.

Memcached has no scripts and no transaction over several items; what it has is
compare-and-set on one item. So the store keeps every state that one atomic step
may touch in **one item**: the states of a key's keys that share a Cluster hash tag
(``<prefix>:{<key>}``, ``_keys``). A Redis key ``<prefix>:{<key>}<rest>`` is the
entry ``<rest>`` of the item ``<prefix>:{<key>}``: every layer of a hit, every
algorithm on that key, its concurrency slots and the token budget's records. A
step reads the item, runs the same pure function the memory store runs under its
lock, and writes the item back only if nobody wrote it in between (its CAS number
is unchanged); if somebody did, it reads again and decides again. So a decision is
as exact and as atomic as on Redis, with any number of processes.

An item's value is JSON: ``{"rw": 1, "e": {entry: [state, expires at (us)]}}``.
Each entry keeps its own expiry on the store's clock; the item's memcached TTL
(whole seconds) is only there to let memcached reclaim an item nobody uses, and
outlives its longest entry by a second; an item that must outlive what memcached's TTL
can say (a Unix time after 2**31 - 1, in January 2038) gets none (``ttl_word``).

``transact`` is that step as a flow: it yields the wire requests for the item's
server and is sent the replies (``Reply``). The blocking and the asyncio stores
drive the same flow; the asyncio store hands it the steps that queued up on one
item while the last ran, decided together, in order, in one read and one write.
``Cache`` remembers the last value and CAS number this process wrote or read for
an item, so that the common step (nobody else wrote) is one write and no read: a
write against a stale CAS number fails and the step reads then.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Callable, Generator, Sequence
from typing import Any, NamedTuple, TypeVar

from ratewarden.errors import StorageError, StorageUnavailableError
from ratewarden.storage import _memcache_wire as wire

__all__ = [
    "INJECTED_TTL_FLOOR_S",
    "ITEM_OVERHEAD",
    "MAX_ATTEMPTS",
    "Cache",
    "Failed",
    "Item",
    "LiveStep",
    "Write",
    "injected_ttl_word",
    "item_at",
    "item_of",
    "on_states",
    "transact",
    "ttl_word",
]

#: Reads and writes one step may make before it gives up on an item that other
#: processes keep changing under it (then ``StorageUnavailableError``).
MAX_ATTEMPTS = 32

#: Memcached's longest key, in bytes.
_MAX_NAME = 250

_MONTH_S = 30 * 24 * 3600  # memcached reads a longer TTL as a Unix time
#: The last Unix time memcached takes as a TTL (19 Jan 2038 03:14:07 UTC): it reads a later one
#: as already past (1.6.18: the item is written, and gone at once) or wraps it around.
_LAST_UNIX_S = 2**31 - 1
#: The least TTL of an item written on an injected clock, as on Redis: memcached counts a
#: TTL in real time, which may run ahead of a clock that tests move by hand.
INJECTED_TTL_FLOOR_S = 86_400

#: Bytes an item takes beyond its name and value (memcached 1.6 on 64 bits: a 48-byte
#: header, the CAS number, the name's NUL and the value's CRLF are 59), rounded up.
ITEM_OVERHEAD = 64

#: ``(index into the entries asked, state, absolute expiry in us)``; an expiry at or
#: before now drops the entry (``MemoryTable._transact``'s writes).
Write = tuple[int, Any, int]

R = TypeVar("R")

#: ``(states of the entries asked, now_us) -> (result, writes)``
Step = Callable[[list[Any], int], tuple[R, Sequence[Write]]]

#: ``entries -> {entry: (state, expires at us)}``
Entries = dict[str, tuple[Any, int]]

#: ``(the item's live entries, now_us) -> (result, whether it changed them)``; it changes
#: them in place (``on_states`` makes one of a ``Step``).
LiveStep = Callable[[Entries, int], tuple[R, bool]]

#: How long after its last entry expired a cached item is taken to be gone from memcached:
#: its TTL there is that entry's, in whole seconds rounded up, and one more (``ttl_word``), and
#: memcached's own clock moves in whole seconds.
_GONE_US = 3_500_000


class Item(NamedTuple):
    """An item: its name as the store's keys spell it (``<prefix>:{<key>}``), the name
    memcached is asked for, and the entries of one step in it."""

    name: str
    wire: bytes
    entries: tuple[str, ...]


def item_of(keys: Sequence[str]) -> Item:
    """The one item that holds ``keys`` (store keys ``<prefix>:{<tag>}<rest>``).

    A name memcached accepts as it is (printable ASCII without spaces, at most 250
    bytes) is used as it is; any other is ``rw#`` and a hash of it. A readable name
    always has a ``{`` and a hashed one never does, so the two cannot meet.
    """
    name = ""
    entries = []
    for key in keys:
        close = key.find("}")
        if close < 0 or "{" not in key[:close]:
            raise StorageError(
                f"store key {key!r} has no hash tag: the memcache store cannot place it"
            )
        head = key[: close + 1]
        if name and head != name:
            raise StorageError(
                f"store keys {keys!r} are in more than one hash tag: memcached cannot update "
                "them in one step"
            )
        name = head
        entries.append(key[close + 1 :])
    return item_at(name, entries)


def item_at(name: str, entries: Sequence[str]) -> Item:
    """The item ``name`` (``<prefix>:{<tag>}``), for a step on ``entries`` of it: what
    ``item_of`` finds, for a caller that has the two parts already (a hit's head and its
    shape's suffixes) rather than the store keys they join into."""
    return Item(name, _wire_name(name), tuple(entries))


def _wire_name(name: str) -> bytes:
    if name.isascii() and name.isprintable() and " " not in name and len(name) <= _MAX_NAME:
        return name.encode("ascii")
    digest = hashlib.blake2b(name.encode("utf-8", "surrogatepass"), digest_size=20).hexdigest()
    return b"rw#" + digest.encode("ascii")


class Cache:
    """The last value and CAS number seen for up to ``size`` items, oldest dropped first, and
    which of them proved stale the last time (another process writes the item too)."""

    __slots__ = ("_doubted", "_items", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[bytes, tuple[int, Entries]] = OrderedDict()
        self._doubted: set[bytes] = set()

    def get(self, name: bytes) -> tuple[int, Entries] | None:
        return self._items.get(name)

    def doubted(self, name: bytes) -> bool:
        """Whether the item's cached value proved stale last time: read it before writing."""
        return name in self._doubted

    def put(self, name: bytes, cas: int, entries: Entries, trusted: bool = True) -> None:
        if self.size <= 0:
            return
        items = self._items
        items[name] = (cas, entries)
        items.move_to_end(name)
        if trusted:
            self._doubted.discard(name)
        else:
            self._doubted.add(name)
        if len(items) > self.size:
            self._doubted.discard(items.popitem(last=False)[0])

    def drop(self, name: bytes) -> None:
        self._items.pop(name, None)
        self._doubted.discard(name)

    def clear(self) -> None:
        """Forget every value (a new connection: the server may have restarted). New
        containers, so that a ``put`` under way in another thread lands in the old ones."""
        self._items = OrderedDict()
        self._doubted = set()

    def __len__(self) -> int:
        return len(self._items)


def _tuples(value: Any) -> Any:
    """JSON's lists back into the tuples the algorithms keep."""
    if isinstance(value, list):
        return tuple(_tuples(part) for part in value)
    return value


def decode(item: Item, value: bytes) -> Entries:
    """An item's entries, or ``StorageError`` when the value is not one this store wrote
    (another program's data under the name: it is left as it is)."""
    try:
        found = json.loads(value)
        if (
            not isinstance(found, dict)
            or found.get("rw") != 1
            or not isinstance(found.get("e"), dict)
        ):
            raise ValueError("not a ratewarden item")
        entries: Entries = {}
        for entry, pair in found["e"].items():
            if not isinstance(pair, list) or len(pair) != 2 or type(pair[1]) is not int:
                raise ValueError(f"entry {entry!r} is not [state, expiry]")
            entries[entry] = (_tuples(pair[0]), pair[1])
    except (ValueError, UnicodeDecodeError) as exc:
        raise StorageError(
            f"memcached item {item.wire.decode()!r} (for {item.name!r}) holds a value ratewarden "
            f"did not write ({exc}); it was left unchanged: delete it, or use another prefix "
            "(prefix= of the store, --key-prefix of ratewarden serve)"
        ) from None
    return entries


def encode(entries: Entries) -> bytes:
    return json.dumps({"rw": 1, "e": entries}, separators=(",", ":")).encode("ascii")


def ttl_word(us: int, floor_s: int = 0, unix_now: Callable[[], float] = time.time) -> int:
    """memcached's TTL word for an item that must live ``us`` more microseconds: whole
    seconds, a second over (``floor_s`` at least); past 30 days a Unix time (memcached's
    own rule); past the last Unix time memcached takes (``_LAST_UNIX_S``), 0: no TTL.

    Capping it there instead would drop, in 2038, a state that still counts (a 1/12y
    limit's, and with it every other state of its key's item); with none, the item stays
    until a write gives it a TTL again, or memcached evicts it for memory as any item."""
    seconds = max(-(-us // 1_000_000) + 1, floor_s)
    if seconds <= _MONTH_S:
        return seconds
    at = int(unix_now()) + seconds
    return at if at <= _LAST_UNIX_S else 0


def injected_ttl_word(us: int) -> int:
    """``ttl_word`` for a store on an injected clock: a day at least."""
    return ttl_word(us, INJECTED_TTL_FLOOR_S)


class Failed(NamedTuple):
    """A step of a batch that raised: its error, for its caller alone."""

    error: Exception


def on_states(entries: Sequence[str], step: Step[R]) -> LiveStep[R]:
    """``step`` (on the states of ``entries``, returning its writes) as a step on the item's
    live entries: the writes applied to them, and whether there were any."""

    def run(live: Entries, now: int) -> tuple[R, bool]:
        result, writes = step([_state(live, entry) for entry in entries], now)
        for index, state, expires_at in writes:
            if expires_at > now:
                live[entries[index]] = (state, expires_at)
            else:
                live.pop(entries[index], None)
        return result, bool(writes)

    return run


def transact(
    item: Item,
    steps: Sequence[LiveStep[Any]],
    now_us: Callable[[], int],
    ttl_word: Callable[[int], int],
    cache: Cache,
    max_item_bytes: int,
    *,
    real_clock: bool = False,
) -> Generator[bytes, wire.Reply, list[Any]]:
    """Run ``steps`` on ``item`` atomically, one after the other in their order: read (or
    take the cached value), decide, write only if the item is unchanged; on a change, read
    again and decide them all again. Returns each step's result, or ``Failed``.

    ``ttl_word(us)`` is the memcached TTL word for an item that must live ``us`` more
    microseconds. Steps that write nothing answer from a value just read, never from
    the cache alone: another process may have changed the item since. A value that would
    make the item larger than ``max_item_bytes`` (the servers' ``-I``) is not sent: memcached
    refuses it and deletes the item it was to replace, which forgets the key's usage.
    With ``real_clock`` (the store's clock is the system's, which memcached's TTLs follow),
    a cached item whose every entry expired more than ``_GONE_US`` ago is taken to be gone
    from the server, and is added rather than compared and set: one write instead of three
    round trips (a refused write, a read, an add) when it is.
    """
    cached = cache.get(item.wire)
    # The cache is trusted for an item only once a read found its remembered version still
    # current (or a write on it went through): another process writing the item makes it
    # stale, and a stale write costs three round trips (refused, a read, a write) where
    # reading first costs two. So an item seen for the first time, or one whose remembered
    # version proved stale, is read first; its remembered CAS number found unchanged, the
    # next step on it writes at once (one round trip).
    remembered: int | None = None
    if cached is None:
        trusted = False
    elif cache.doubted(item.wire):
        remembered, cached, trusted = cached[0], None, False
    else:
        trusted = True
    for _ in range(MAX_ATTEMPTS):
        if cached is None:
            reply = yield wire.get(item.wire)
            if reply.code == b"EN":
                cas, entries = None, {}
            elif reply.code == b"VA" and reply.cas is not None and reply.value is not None:
                cas, entries = reply.cas, decode(item, reply.value)
            else:
                raise _unexpected(item, reply)
            if remembered is not None:
                trusted, remembered = cas == remembered, None
            fresh = True
        else:
            cas, entries = cached
            fresh = False
        now = now_us()
        live = {entry: pair for entry, pair in entries.items() if pair[1] > now}
        presumed = False
        if not fresh and not live and real_clock:
            last = max((pair[1] for pair in entries.values()), default=0)
            if now - last > _GONE_US:
                # memcached has dropped it: add it afresh (refused if it has not)
                cas, presumed = None, True
        results: list[Any] = []
        wrote = False
        for step in steps:
            try:
                result, changed = step(live, now)
            except Exception as exc:  # a step's own failure is its caller's alone
                results.append(Failed(exc))
                continue
            results.append(result)
            wrote = wrote or changed
        if not wrote:
            if fresh:
                if cas is not None:
                    cache.put(item.wire, cas, entries, trusted)
                return results
            remembered, cached = cas, None  # decided on the cache alone: read, decide again
            continue
        if not live:
            if cas is None and not presumed:
                return results  # nothing there, and nothing to keep
            if cas is None:  # nothing to keep, but only taken to be gone: read, decide again
                remembered, cached = None, None
                continue
            reply = yield wire.delete(item.wire, cas)
            if reply.code == b"HD":
                cache.drop(item.wire)
                return results
        else:
            last = max(pair[1] for pair in live.values())
            value = encode(live)
            size = len(value) + len(item.wire) + ITEM_OVERHEAD
            if size > max_item_bytes:
                # -I bounds the whole item, so the message counts what memcached counts
                raise StorageError(
                    f"memcached item {item.wire.decode()!r} (for {item.name!r}) would take "
                    f"{size} bytes as memcached's -I counts them ({len(value)} of value, "
                    f"{len(item.wire)} of key, {ITEM_OVERHEAD} of memcached's per-item overhead, "
                    f"rounded up), more than max_item_bytes={max_item_bytes} (the servers' -I); "
                    "it was not written and keeps its last value"
                )
            reply = yield wire.store(item.wire, value, ttl_word(last - now), cas)
            if reply.code == b"HD" and reply.cas is not None:
                cache.put(item.wire, reply.cas, live, trusted)
                return results
        if reply.code not in (b"EX", b"NF", b"NS"):
            raise _unexpected(item, reply)
        cache.drop(item.wire)
        trusted = False  # another process writes the item: read it first next time too
        cached = None  # another write came first: read it, and decide again
    raise StorageUnavailableError(
        f"memcached item {item.name!r}: {MAX_ATTEMPTS} tries, each beaten by another writer; "
        "the key is busier than one item can take"
    )


def _state(live: Entries, entry: str) -> Any:
    pair = live.get(entry)
    return None if pair is None else pair[0]


def _unexpected(item: Item, reply: wire.Reply) -> StorageError:
    return StorageError(f"memcached answered {reply.code.decode()!r} for item {item.name!r}")
