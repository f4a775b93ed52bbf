"""What the two memcache stores share: settings, naming, and every operation as a step.

Each operation is planned here, without I/O, as ``(item, step)``: the one item that
holds what it touches, and a step on that item's live entries (``_memcache_items``).
``MemcacheStore`` runs one step a ``transact``; ``AsyncMemcacheStore`` runs the steps
that queued up on an item together.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Generator, Sequence
from typing import Any, TypeVar

from ratewarden import checks
from ratewarden.algorithms import concurrency, layered
from ratewarden.clock import Clock, SystemClock, check_clock
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.storage import _decisions, _plan
from ratewarden.storage import _memcache_wire as wire
from ratewarden.storage._keys import DEFAULT_PREFIX, check_prefix, escape
from ratewarden.storage._memcache_items import (
    Cache,
    Item,
    LiveStep,
    Step,
    injected_ttl_word,
    item_at,
    item_of,
    on_states,
    transact,
    ttl_word,
)
from ratewarden.storage._memcache_link import Servers
from ratewarden.storage._memcache_srv import Found
from ratewarden.storage._memcache_url import (
    Address,
    Where,
    check_addresses,
    parse_url,
    written,
)
from ratewarden.storage._ops import Op

__all__ = [
    "DEFAULT_CACHE_ITEMS",
    "DEFAULT_MAX_ITEM_BYTES",
    "DEFAULT_TIMEOUT",
    "Flow",
    "MemcacheBase",
    "Planned",
]

#: The store's default timeout, as the Redis store's: an outage costs a call 20 ms.
DEFAULT_TIMEOUT = 0.02
#: Items whose last value this process remembers (a write then needs no read first).
DEFAULT_CACHE_ITEMS = 10_000
#: memcached's own default largest item (``-I 1m``).
DEFAULT_MAX_ITEM_BYTES = 1024 * 1024

R = TypeVar("R")
Flow = Generator[bytes, wire.Reply, R]
#: An operation planned: its item, and its step on the item's live entries.
Planned = tuple[Item, LiveStep[R]]


#: The keywords a memcached store takes after its servers.
OPTIONS = ("clock", "prefix", "timeout", "cache_items", "max_item_bytes", "tls")


def check_options(kind: str, options: dict[str, object]) -> None:
    """Refuse a keyword the store does not take (a typo such as ``timout=``), naming it."""
    checks.refuse_unknown(kind, options, OPTIONS, "option")


class MemcacheBase:
    """Settings, naming and every operation as a step on one item (``_memcache_items``)."""

    def __init__(
        self,
        servers: str | Sequence[Address],
        *,
        clock: Clock | None = None,
        prefix: str = DEFAULT_PREFIX,
        timeout: float = DEFAULT_TIMEOUT,
        cache_items: int = DEFAULT_CACHE_ITEMS,
        max_item_bytes: int = DEFAULT_MAX_ITEM_BYTES,
        tls: ssl.SSLContext | bool | None = None,
    ) -> None:
        clock = check_clock(type(self).__name__, clock)
        where = (
            parse_url(servers)
            if isinstance(servers, str)
            else Where(check_addresses(servers if isinstance(servers, list | tuple) else [servers]))
        )
        if not checks.is_number(timeout, low_ok=False):
            raise ConfigurationError(
                f"memcache store timeout {timeout!r} must be a positive number of seconds "
                "(0.02 is 20 ms); a store never waits without a bound"
            )
        if isinstance(cache_items, bool) or not isinstance(cache_items, int) or cache_items < 0:
            raise ConfigurationError(f"cache_items {cache_items!r} must be a whole number >= 0")
        if not checks.is_number(max_item_bytes, 1024) or not isinstance(max_item_bytes, int):
            raise ConfigurationError(
                f"max_item_bytes {max_item_bytes!r} must be the servers' largest item (their -I, "
                "1 MB unless set): a whole number, 1024 or more"
            )
        self.prefix = check_prefix(prefix)
        self.timeout = float(timeout)
        self.max_item_bytes = max_item_bytes
        self.tls = _tls_context(where, tls)
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._real_clock = isinstance(self.clock, SystemClock)
        self._ttl_word = ttl_word if self._real_clock else injected_ttl_word
        self._where = where
        self._cache_items = cache_items
        # Servers from a DNS SRV record are looked up here, and again every ``refresh``
        # seconds of the store's clock.
        self._found = Found(where, monotonic=self.clock.now) if where.srv else None
        first = self._found.servers if self._found is not None else Servers(where.addresses)
        # The servers and the cached values of their items, swapped together when the
        # servers change: a CAS number is only meaningful to the server that gave it.
        self._view: tuple[Servers, Cache] = (first, Cache(cache_items))
        self._swap_lock = threading.Lock()
        self._shapes = _plan.Shapes()
        self._link: Any = None  # each twin's own

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Any:
        """A store on the servers a ``memcache://`` (TCP servers, Unix sockets),
        ``memcaches://`` or ``memcache+srv://`` URL names (``_memcache_url``), with the same
        options."""
        return cls(url, **options)

    @property
    def servers(self) -> Servers:
        """The servers in use now."""
        return self._now()[0]

    def _now(self) -> tuple[Servers, Cache]:
        """The servers in use and their items' cache; a refreshed SRV list swaps both."""
        view = self._view
        if self._found is not None:
            servers = self._found.current()
            if servers is not view[0]:
                with self._swap_lock:
                    view = self._view
                    if servers is not view[0]:
                        view = self._view = (servers, Cache(self._cache_items))
                        self._link.keep(servers.addresses)
        return view

    def _forget(self) -> None:
        """A new connection: its server may have restarted (CAS numbers from 1 again)."""
        self._view[1].clear()

    # -- naming

    def _head(self, key: str) -> str:
        return f"{self.prefix}:{{{escape(key)}}}"

    def node_of(
        self, key: str, *, stored: bool = False, rates: Rate | Sequence[Rate] | None = None
    ) -> str:
        """The server that holds ``key`` (a store key with ``stored``), as ``host:port`` (a
        Unix socket's path), for a breaker kept per node; ``""`` with one server (one
        circuit)."""
        servers = self.servers
        if len(servers.addresses) == 1 and self._found is None:
            return ""
        name = (item_of([key]) if stored else item_at(self._head(checks.check_key(key)), ())).wire
        return servers.names[servers.of(name)]

    # -- the operations, as steps on one item

    def _transact(
        self, item: Item, steps: Sequence[LiveStep[Any]], cache: Cache
    ) -> Flow[list[Any]]:
        """The flow of ``steps`` on ``item`` (it reads ``cache`` when first resumed)."""
        return transact(
            item,
            steps,
            self.clock.now_us,
            self._ttl_word,
            cache,
            self.max_item_bytes,
            real_clock=self._real_clock,
        )

    def _planned(self, item: Item, step: Step[R]) -> Planned[R]:
        return item, on_states(item.entries, step)

    def _hit_step(
        self, algorithm: str, key: str, rates: Rate | Sequence[Rate], cost: int
    ) -> Planned[Decision]:
        shape = self._shapes.get(algorithm, rates, cost)
        item = item_at(self._head(checks.check_key(key)), shape.suffixes)

        def step(states: list[Any], now: int) -> tuple[Decision, list[tuple[int, Any, int]]]:
            outcomes, writes = layered(shape.check, shape.params, states, now, shape.cost)
            if shape.single:
                decision = _decisions.single(shape.rates[0], outcomes[0], shape.cost)
            else:
                decision = _decisions.to_decision(shape.rates, outcomes, shape.cost)
            if writes is None:
                return decision, []
            return decision, [(i, state, now + ttl) for i, (state, ttl) in enumerate(writes)]

        return self._planned(item, step)

    def _reset_step(self, algorithm: str, key: str, rates: Rate | Sequence[Rate]) -> Planned[None]:
        shape = self._shapes.get(algorithm, rates, 0)
        item = item_at(self._head(checks.check_key(key)), shape.suffixes)

        def step(states: list[Any], now: int) -> tuple[None, list[tuple[int, Any, int]]]:
            return None, [(i, None, 0) for i, state in enumerate(states) if state is not None]

        return self._planned(item, step)

    def _acquire_step(
        self, key: str, limit: int, lease_id: str, slots: int, ttl_us: int
    ) -> Planned[Decision]:
        checks.check_slot_request(limit, slots, ttl_us, lease_id)
        item = item_of([_plan.slot_key(self.prefix, key)])

        def step(states: list[Any], now: int) -> tuple[Decision, list[tuple[int, Any, int]]]:
            outcome, state, ttl = concurrency.acquire(
                states[0], now, limit, lease_id, slots, ttl_us
            )
            decision = _decisions.slot_decision(limit, slots, outcome)
            return decision, [(0, state, now + ttl)] if outcome.allowed else []

        return self._planned(item, step)

    def _release_step(self, key: str, lease_id: str) -> Planned[bool]:
        item = item_of([_plan.slot_key(self.prefix, key)])
        lease_id = checks.check_lease_id(lease_id)

        def step(states: list[Any], now: int) -> tuple[bool, list[tuple[int, Any, int]]]:
            held, state, ttl = concurrency.release(states[0], now, lease_id)
            return held, [(0, state, now + ttl)] if held else []

        return self._planned(item, step)

    def _renew_step(self, key: str, lease_id: str, ttl_us: int) -> Planned[bool]:
        item = item_of([_plan.slot_key(self.prefix, key)])
        checks.check_slot_request(1, 1, ttl_us, lease_id)

        def step(states: list[Any], now: int) -> tuple[bool, list[tuple[int, Any, int]]]:
            held, state, ttl = concurrency.renew(states[0], now, lease_id, ttl_us)
            return held, [(0, state, now + ttl)] if held else []

        return self._planned(item, step)

    def _apply_step(self, op: Op) -> Planned[list[int]]:
        if not isinstance(op, Op):
            raise ConfigurationError(f"op {op!r} is not a ratewarden.storage.Op")
        item = item_of(op.keys)

        def step(states: list[Any], now: int) -> tuple[list[int], Sequence[Any]]:
            return op.step(op.args, states, now)

        return self._planned(item, step)

    def __repr__(self) -> str:
        tls = "s" if self.tls is not None else ""
        if self._where.srv:
            where = f"memcache{tls}+srv://{self._where.srv}"
        else:
            where = f"memcache{tls}://" + ",".join(map(written, self.servers.addresses))
        return f"{type(self).__name__}('{where}', timeout={self.timeout:g})"


def _tls_context(where: Where, tls: ssl.SSLContext | bool | None) -> ssl.SSLContext | None:
    """The TLS context of the URL's options or of ``tls=`` (never both), or None."""
    if tls is None or tls is False:
        return where.tls.context() if where.tls is not None else None
    sockets = [address for address in where.addresses if isinstance(address, str)]
    if sockets:
        raise ConfigurationError(
            f"memcache store: tls= with a Unix socket server ({sockets[0]}): TLS to a socket "
            "is not offered (the socket never leaves the host); leave tls= out"
        )
    if where.tls is not None:
        raise ConfigurationError(
            "memcache store: TLS given twice, by a memcaches:// URL and by tls=; give one"
        )
    if tls is True:
        return ssl.create_default_context()
    if not isinstance(tls, ssl.SSLContext):
        raise ConfigurationError(
            f"memcache store: tls={tls!r} must be True (the system's CAs), an ssl.SSLContext "
            "or None"
        )
    return tls
