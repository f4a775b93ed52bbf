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

A reply of a shape Redis does not send (``_region_replies.py`` reads them) is
the store's ``StorageError``: ``read`` and ``reading`` make it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from redis.exceptions import NoScriptError, ResponseError

from ratewarden.clock import Clock
from ratewarden.errors import ConfigurationError, StorageError
from ratewarden.storage._decisions import REPLY_ERRORS
from ratewarden.storage._keys import DEFAULT_PREFIX, check_prefix
from ratewarden.storage._ops import Op
from ratewarden.storage._redis_errors import (
    REDIS_ERRORS,
    raise_storage_error,
    unusable,
    wrong_reply,
)
from ratewarden.storage._redis_link import describe
from ratewarden.storage._redis_protocol import cluster_where
from ratewarden.storage._redis_store import DEFAULT_TIMEOUT, FromUrl, storage_error
from ratewarden.storage._region_budget import Entry
from ratewarden.storage._region_plan import (
    DEMAND_INTERVALS,
    DEMAND_TTL_S,
    ROUND_TTL_S,
    PeerRound,
    RegionPlan,
    encode_regions,
    taken_field,
)
from ratewarden.storage._region_replies import (
    SCRIPT,
    UNREADABLE,
    active_members,
    all_entries,
    demand_and_taken,
    demand_count,
    ints,
    peer_round,
    written,
)
from ratewarden.storage._scripts import script

__all__ = ["Batch", "Entry", "RegionBase", "unanswered", "unloaded"]

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

    @property
    def what(self) -> str:
        """The commands, as the store's errors name them."""
        return "ratewarden's " + ", ".join(method.upper() for method, _, _ in self.commands)


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

    def _scripts_pipe(self, ops: Sequence[Op], source: bool) -> Any:
        """A pipeline of each op's script: by its SHA1, or with ``source`` as EVAL."""
        pipe = self.client.pipeline(transaction=False)
        for op in ops:
            found = self._registered(op)
            # By name: redis-py's blocking Cluster pipeline has an eval() of its own.
            sent = ("EVAL", found.script) if source else ("EVALSHA", found.sha)
            pipe.execute_command(*sent, len(op.keys), *op.keys, *self._args(op))
        return pipe

    def _answers(self, replies: Sequence[Any]) -> list[list[int] | Exception]:
        """Each script's reply as whole numbers, or the ``StorageError`` that ``apply`` raises
        for its error reply or a reply of another shape (the same words: the same boundary)."""
        found: list[list[int] | Exception] = []
        for reply in replies:
            if isinstance(reply, Exception):
                found.append(storage_error(reply, self.where, self._socket_timeout))
                continue
            try:
                found.append(ints(reply))
            except REPLY_ERRORS as exc:  # this op's answer alone
                found.append(self.wrong(reply, exc))
        return found

    def wrong(self, reply: Any, exc: BaseException, what: str = SCRIPT) -> StorageError:
        """The ``StorageError`` for ``reply`` to ``what``, which reading raised ``exc`` for
        (one of ``REPLY_ERRORS``): a reply of a shape Redis does not send."""
        return StorageError(wrong_reply(self.where, reply, exc, what))

    def read(self, read: Callable[[Any], T], reply: Any, what: str) -> T:
        """``read(reply)``, the reply to ``what``; a reply of another shape (one of
        ``REPLY_ERRORS``) raised as ``StorageError`` (``wrong_reply``)."""
        try:
            return read(reply)
        except REPLY_ERRORS as exc:
            raise self.wrong(reply, exc, what) from exc

    def unreadable(self, exc: BaseException, what: str = SCRIPT) -> StorageError:
        """The ``StorageError`` for what redis-py raised (``UNREADABLE``) reading the reply
        to ``what``."""
        got = f"a reply redis-py cannot read ({exc!r})"
        return StorageError(unusable(self.where, what, got))

    @contextmanager
    def reading(self, what: str = SCRIPT) -> Iterator[None]:
        """Around redis-py's reading of the replies to ``what`` alone: what it raises for a
        reply Redis does not send (``UNREADABLE``) comes out as ``StorageError``."""
        try:
            yield
        except UNREADABLE as exc:
            raise self.unreadable(exc, what) from exc

    # -- the exchange, each call one pipelined round trip ------------------------------------

    def _pipeline(self, batch: Batch[Any]) -> Any:
        """A pipeline of ``batch``'s commands, to send."""
        pipe = self.client.pipeline(transaction=False)
        for method, args, options in batch.commands:
            getattr(pipe, method)(*args, **options)
        return pipe

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
        return Batch(tuple(commands), written)

    def _active_batch(self, region: str, now_us: int, limit: int) -> Batch[list[str]]:
        key = self._active_key(region)
        command: Command = ("zrangebyscore", (key, now_us, "+inf"), {"start": 0, "num": limit})
        return Batch((command,), active_members)

    def _read_counts_batch(self, members: Sequence[str]) -> Batch[list[list[Entry]]]:
        commands: tuple[Command, ...] = tuple(
            ("hgetall", (self.budget_key(member),), {}) for member in members
        )
        return Batch(commands, all_entries)

    def _finish_round_batch(self, region: str, at_us: int) -> Batch[None]:
        command: Command = ("set", (self._round_key(region), at_us), {"ex": ROUND_TTL_S})
        return Batch((command,), written)

    def _read_round_batch(self, region: str, members: Sequence[str]) -> Batch[PeerRound]:
        commands: list[Command] = [
            ("get", (self._round_key(region),), {}),
            ("get", (self._config_key(region),), {}),
        ]
        commands.extend(("hgetall", (self.budget_key(member),), {}) for member in members)
        return Batch(tuple(commands), peer_round)

    def _publish_demand_batch(self, region: str, interval: int, demand: int) -> Batch[None]:
        key = self._demand_key(region)
        commands: tuple[Command, ...] = (
            # Added, not set: every process of the region adds the demand it counted.
            ("hincrby", (key, str(interval), demand), {}),
            ("hdel", (key, str(interval - DEMAND_INTERVALS)), {}),
            ("expire", (key, DEMAND_TTL_S), {}),
        )
        return Batch(commands, written)

    def _publish_taken_batch(self, region: str, interval: int, taken: str) -> Batch[None]:
        key = self._demand_key(region)
        commands: tuple[Command, ...] = (
            ("hset", (key, taken_field(interval), taken), {}),
            ("hdel", (key, taken_field(interval - DEMAND_INTERVALS)), {}),
            ("expire", (key, DEMAND_TTL_S), {}),
        )
        return Batch(commands, written)

    def _demand_and_taken_batch(
        self, region: str, interval: int, taken_interval: int
    ) -> Batch[tuple[int | None, str | None]]:
        fields = (str(interval), taken_field(taken_interval))
        return Batch((("hmget", (self._demand_key(region), fields), {}),), demand_and_taken)

    def _demand_batch(self, region: str, interval: int) -> Batch[int | None]:
        return Batch((("hget", (self._demand_key(region), str(interval)), {}),), demand_count)

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
