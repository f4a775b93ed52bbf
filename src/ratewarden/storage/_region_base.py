"""What RegionStore and AsyncRegionStore share: everything but waiting for Redis.

``RegionBase`` holds a region store's settings, fills in the budget's script
(an ``Op`` planned by ``RegionPlan``, ``_region_plan.py``, which names the keys
for the memory stores too; its ``ARGV[1]`` filled in when sent), plans each
exchange call as one pipelined round trip (a ``Batch``: the commands, and how
their replies become the answer), and maps a Redis error at its one boundary.
``regions.py`` sends them, blocking or awaited.

On a Redis Cluster the keys and the plans are the same: every script touches
one key, and every multi-key call is a pipeline, which redis-py's Cluster
pipeline splits by slot, sends to each slot's primary and answers in the
caller's order. What a Cluster adds is said where it happens: where the store
is (``_placement``) and a script that a primary does not know yet (``unloaded``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from redis.exceptions import NoScriptError, ResponseError

from ratewarden.clock import Clock
from ratewarden.errors import ConfigurationError
from ratewarden.storage._keys import DEFAULT_PREFIX, check_prefix
from ratewarden.storage._ops import Op
from ratewarden.storage._redis_errors import REDIS_ERRORS, raise_storage_error
from ratewarden.storage._redis_link import describe
from ratewarden.storage._redis_protocol import cluster_where
from ratewarden.storage._redis_store import DEFAULT_TIMEOUT, FromUrl, storage_error
from ratewarden.storage._region_budget import Entry, entries, held
from ratewarden.storage._region_plan import (
    DEMAND_INTERVALS,
    DEMAND_TTL_S,
    ROUND_TTL_S,
    PeerRound,
    RegionPlan,
    decode_regions,
    encode_regions,
    taken_field,
)
from ratewarden.storage._scripts import script

__all__ = ["Batch", "Entry", "RegionBase", "ints", "unanswered", "unloaded"]

T = TypeVar("T")

#: With an injected clock every TTL is at least a day of Redis time (lua/_prelude.lua).
_INJECTED_TTL_FLOOR_MS = 86_400_000
#: One pipelined command: the redis-py pipeline method, its arguments and keywords.
Command = tuple[str, tuple[Any, ...], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Batch(Generic[T]):
    """One pipelined round trip: ``commands`` in order, and ``read``, which turns their
    replies (a list, one each) into the answer."""

    commands: tuple[Command, ...]
    read: Callable[[list[Any]], T]


def _placement(client: Any) -> tuple[str, Mapping[str, Any]]:
    """Where ``client`` goes (for errors and ``repr``) and its connections' options."""
    pool = getattr(client, "connection_pool", None)
    if pool is not None:  # one server, or a Sentinel's primary
        return describe(pool.connection_kwargs), pool.connection_kwargs
    # A Cluster: redis.asyncio's keeps the nodes' options itself, the blocking one's its
    # nodes manager. Named by the nodes it was given, as RedisStore names it.
    kwargs = getattr(client, "connection_kwargs", None)
    if kwargs is None:
        kwargs = client.nodes_manager.connection_kwargs
    return cluster_where(client.startup_nodes), kwargs


def unloaded(replies: Sequence[Any]) -> list[int]:
    """The positions of a pipeline's script replies that were NOSCRIPT: on a Cluster, a
    primary that has not loaded the script yet (new, failed over, flushed); nothing ran."""
    return [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]


def unanswered(replies: Sequence[Any]) -> None:
    """Raise the first failure to get a reply among a pipeline's replies (read with
    ``raise_on_error=False``): a server, on a Cluster a primary, that could not be reached
    or did not answer in time. An error reply (``ResponseError``) is its command's own."""
    for reply in replies:
        if isinstance(reply, Exception) and not isinstance(reply, ResponseError):
            raise reply


def ints(reply: Sequence[Any]) -> list[int]:
    """A script's reply as whole numbers."""
    return [int(value) for value in reply]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _fields(fields: Mapping[Any, Any]) -> dict[str, int]:
    return {_text(name): int(count) for name, count in fields.items()}


def _entries(fields: Mapping[Any, Any]) -> list[Entry]:
    """A window hash as (window, region, count) entries; an empty hash has none."""
    return entries(_fields(fields))


def _peer_round(replies: list[Any]) -> PeerRound:
    hashes = [_fields(found) for found in replies[2:]]
    last = None if replies[0] is None else int(replies[0])
    regions = decode_regions(None if replies[1] is None else _text(replies[1]))
    return PeerRound(last, [entries(f) for f in hashes], [held(f) for f in hashes], regions)


def _nothing(replies: list[Any]) -> None:
    return None


def _members(replies: list[Any]) -> list[str]:
    return [_text(member) for member in replies[0]]


def _all_entries(replies: list[Any]) -> list[list[Entry]]:
    return [_entries(fields) for fields in replies]


def _count(replies: list[Any]) -> int | None:
    return None if replies[0] is None else int(replies[0])


def _count_and_taken(replies: list[Any]) -> tuple[int | None, str | None]:
    count, taken = replies[0]
    return (None if count is None else int(count)), (None if taken is None else _text(taken))


class RegionBase(RegionPlan, FromUrl):
    """A region's Redis as the budgets use it, but for the I/O: see ``regions.py``."""

    kept = "on Redis"

    #: The client classes a store takes (one server's, a Cluster's), and what it says when
    #: handed another (``{}``: its type).
    _CLIENTS: ClassVar[tuple[type, type]]
    _WRONG_CLIENT: ClassVar[str]
    #: The store of the rate caps: ``RedisStore`` or ``AsyncRedisStore``.
    _RATES: ClassVar[Callable[..., Any]]

    def __init__(
        self,
        client: Any,
        *,
        clock: Clock | None = None,
        prefix: str = DEFAULT_PREFIX,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self._check_client(client)
        self.prefix = check_prefix(prefix)
        self.client: Any = client
        #: The regions' rate caps (what ``hit`` decides), apart from the application's keys.
        self.rates = type(self)._RATES(
            client, clock=clock, prefix=f"{prefix}:region-rate", timeout=timeout
        )
        self.clock: Clock = self.rates.clock
        self.timeout: float = self.rates.timeout
        self._injected = clock is not None
        self.where, connection = _placement(client)
        self._socket_timeout = float(connection.get("socket_timeout") or 0)
        # script name -> redis-py's Script, which reloads it after a SCRIPT FLUSH
        self._scripts: dict[str, Any] = {}
        self._owns_client = False

    def _check_client(self, client: object) -> None:
        if not isinstance(client, self._CLIENTS):
            raise ConfigurationError(self._WRONG_CLIENT.format(type(client).__name__))

    # -- the budget's script (its Ops: ``RegionPlan``) ------------------------------------

    def _registered(self, op: Op) -> Any:
        found = self._scripts.get(op.script)
        if found is None:
            found = self._scripts[op.script] = self.client.register_script(script(op.script).source)
        return found

    def _args(self, op: Op) -> list[int | str]:
        """``op``'s ARGV as sent: ``ARGV[1]`` the clock's now, or "" for the server's TIME."""
        args = list(op.args)
        args[0] = self.clock.now_us() if self._injected else ""
        return args

    def _answers(self, replies: Sequence[Any]) -> list[list[int] | Exception]:
        """Each script's reply as whole numbers, or the ``StorageError`` that ``apply`` raises
        for its error reply (the same words: the same boundary)."""
        return [
            storage_error(reply, self.where, self._socket_timeout)
            if isinstance(reply, Exception)
            else ints(reply)
            for reply in replies
        ]

    # -- the exchange, each call one pipelined round trip ------------------------------------

    def _publish_active_batch(
        self,
        region: str,
        members: Mapping[str, int],
        now_us: int,
        regions: Sequence[str] | None = None,
    ) -> Batch[None]:
        key = self._active_key(region)
        commands: list[Command] = [("zremrangebyscore", (key, "-inf", now_us), {})]
        if regions is not None:
            config = (self._config_key(region), encode_regions(regions))
            commands.append(("set", config, {"ex": ROUND_TTL_S}))
        if members:
            commands.append(("zadd", (key, dict(members)), {}))
            ttl_ms = max(1, (max(members.values()) - now_us) // 1_000)
            if self._injected:
                # Redis counts the TTL in real time, which may run ahead of an
                # injected clock; the scores say what is live (as in the scripts).
                ttl_ms = max(ttl_ms, _INJECTED_TTL_FLOOR_MS)
            commands.append(("pexpire", (key, ttl_ms), {}))
        return Batch(tuple(commands), _nothing)

    def _active_batch(self, region: str, now_us: int, limit: int) -> Batch[list[str]]:
        key = self._active_key(region)
        command: Command = ("zrangebyscore", (key, now_us, "+inf"), {"start": 0, "num": limit})
        return Batch((command,), _members)

    def _read_counts_batch(self, members: Sequence[str]) -> Batch[list[list[Entry]]]:
        commands: tuple[Command, ...] = tuple(
            ("hgetall", (self.budget_key(member),), {}) for member in members
        )
        return Batch(commands, _all_entries)

    def _finish_round_batch(self, region: str, at_us: int) -> Batch[None]:
        command: Command = ("set", (self._round_key(region), at_us), {"ex": ROUND_TTL_S})
        return Batch((command,), _nothing)

    def _read_round_batch(self, region: str, members: Sequence[str]) -> Batch[PeerRound]:
        commands: list[Command] = [
            ("get", (self._round_key(region),), {}),
            ("get", (self._config_key(region),), {}),
        ]
        commands.extend(("hgetall", (self.budget_key(member),), {}) for member in members)
        return Batch(tuple(commands), _peer_round)

    def _publish_demand_batch(self, region: str, interval: int, demand: int) -> Batch[None]:
        key = self._demand_key(region)
        commands: tuple[Command, ...] = (
            # Added, not set: every process of the region adds the demand it counted.
            ("hincrby", (key, str(interval), demand), {}),
            ("hdel", (key, str(interval - DEMAND_INTERVALS)), {}),
            ("expire", (key, DEMAND_TTL_S), {}),
        )
        return Batch(commands, _nothing)

    def _publish_taken_batch(self, region: str, interval: int, taken: str) -> Batch[None]:
        key = self._demand_key(region)
        commands: tuple[Command, ...] = (
            ("hset", (key, taken_field(interval), taken), {}),
            ("hdel", (key, taken_field(interval - DEMAND_INTERVALS)), {}),
            ("expire", (key, DEMAND_TTL_S), {}),
        )
        return Batch(commands, _nothing)

    def _demand_and_taken_batch(
        self, region: str, interval: int, taken_interval: int
    ) -> Batch[tuple[int | None, str | None]]:
        fields = (str(interval), taken_field(taken_interval))
        return Batch((("hmget", (self._demand_key(region), fields), {}),), _count_and_taken)

    def _demand_batch(self, region: str, interval: int) -> Batch[int | None]:
        return Batch((("hget", (self._demand_key(region), str(interval)), {}),), _count)

    @contextmanager
    def _boundary(self) -> Iterator[None]:
        """The one error boundary of the script and the exchange: a Redis error met inside
        comes out as ``StorageUnavailableError`` (or ``StorageError``)."""
        try:
            yield
        except REDIS_ERRORS as exc:
            raise_storage_error(exc, self.where, self._socket_timeout)

    def __repr__(self) -> str:
        clock = "" if not self._injected else f", clock={self.clock!r}"
        return (
            f"{type(self).__name__}({self.where!r}, prefix={self.prefix!r}, "
            f"timeout={self.timeout}{clock})"
        )
