"""What the blocking and the asyncio Redis stores share: everything but waiting for Redis.

``RedisBase`` holds a store's settings, picks the router its client gets, plans
each operation as one router call and how its reply is read (a ``Call``), and
names the store. ``RedisStore`` and ``AsyncRedisStore`` (``redis.py``) make
those calls, blocking or awaited, each through one method. ``FromUrl`` is
``from_url`` for every store built on a redis-py client (``RegionStore`` too):
settings checked, client made, store built and made its owner.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar, Generic, Self, TypeVar

from redis.crc import key_slot

from ratewarden import checks
from ratewarden.clock import Clock, SystemClock, check_clock
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError, StorageError
from ratewarden.rate import Rate
from ratewarden.storage import _decisions, _kernel, _plan
from ratewarden.storage._keys import DEFAULT_PREFIX, check_prefix, escape
from ratewarden.storage._ops import Op
from ratewarden.storage._redis_errors import raise_storage_error, read_reply
from ratewarden.storage._redis_link import DEFAULT_SPIN
from ratewarden.storage._redis_protocol import BatchTemplate, Sendable, Template, evalsha_command
from ratewarden.storage._scripts import Script, script

__all__ = ["DEFAULT_TIMEOUT", "Call", "FromUrl", "RedisBase", "check_spin", "check_timeout"]

#: Seconds a store waits for Redis per connect or reply before giving up.
DEFAULT_TIMEOUT = 0.02

#: Request templates a store keeps (one per call shape) before it starts again from empty.
_TEMPLATE_CACHE_SIZE = 1024

T = TypeVar("T")

#: The C kernel (``_kernel.speedups``), or None: it plans a plainly valid one-rate ``hit_all``.
_speedups = _kernel.speedups


def check_timeout(timeout: object) -> float:
    if not checks.is_number(timeout, low_ok=False):
        raise ConfigurationError(
            f"Redis store timeout {timeout!r} must be a positive number of seconds "
            "(0.02 is 20 ms); a store never waits without a bound"
        )
    return float(timeout)


def check_spin(spin: object, timeout: float) -> float:
    if not checks.is_number(spin) or spin >= timeout:
        raise ConfigurationError(
            f"Redis store spin {spin!r} must be a number of seconds from 0 (never spin) up to "
            f"less than the timeout {timeout}; the default is {DEFAULT_SPIN} (100 us)"
        )
    return float(spin)


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One operation as its router call, ``method`` (``"eval"`` or ``"command"``) with
    ``args``, and ``read``, which turns the reply into the answer. No ``method``: nothing
    is sent, and ``read(None)`` is the answer."""

    method: str
    args: tuple[Any, ...]
    read: Callable[[Any], T]


def _answer(value: T) -> Call[T]:
    """A ``Call`` that sends nothing and answers ``value``."""
    return Call("", (), lambda _: value)


def _ignore(reply: Any) -> None:
    return None


def _second(reply: Sequence[Any]) -> bool:
    """A lease script's ``{now_us, held}`` reply: whether the lease was held."""
    if type(reply) is not list or len(reply) != 2 or type(reply[1]) is not int:
        raise ValueError("a lease script answers a list of 2 numbers")
    return bool(reply[1])


def _ints(reply: Sequence[Any]) -> list[int]:
    if type(reply) is not list:  # a string would read as its bytes
        raise TypeError(f"a script's reply is a list of numbers, not {type(reply).__name__}")
    return [int(value) for value in reply]


def storage_error(exc: BaseException, where: str, timeout: float) -> StorageError:
    """The error ``raise_storage_error`` raises for ``exc``, as a value (one op's answer)."""
    try:
        raise_storage_error(exc, where, timeout)
    except StorageError as error:
        return error


class FromUrl:
    """``from_url`` for a store built on a redis-py client: ``cls(client, clock=...,
    prefix=..., timeout=..., **own options)``, with ``_connect`` making the client."""

    #: Keyword options of ``from_url`` that are the store's own, not the client's.
    _OWN_OPTIONS: ClassVar[tuple[str, ...]] = ()
    #: Whether ``close`` closes the client too (``from_url`` made it).
    _owns_client: bool

    @staticmethod
    def _connect(url: str, timeout: float, options: dict[str, Any]) -> Any:
        """The client for ``url`` (each store says how)."""
        raise NotImplementedError

    @classmethod
    def _check_own(cls, timeout: float, own: dict[str, Any]) -> None:
        """Refuse a bad own option before the client exists (nothing to clean up then)."""

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        clock: Clock | None = None,
        prefix: str = DEFAULT_PREFIX,
        timeout: float = DEFAULT_TIMEOUT,
        **options: Any,
    ) -> Self:
        """A store on the Redis ``url`` names; ``options`` go to the redis-py client (but
        for the store's own, such as ``RedisStore``'s ``spin``), which the store then owns:
        ``close`` closes it. Bad settings are refused before the client exists."""
        own = {name: options.pop(name) for name in cls._OWN_OPTIONS if name in options}
        timeout = check_timeout(timeout)
        check_prefix(prefix)
        cls._check_own(timeout, own)
        client = cls._connect(url, timeout, options)
        build: Any = cls  # each store's own constructor, which takes these
        store: Self = build(client, clock=clock, prefix=prefix, timeout=timeout, **own)
        store._owns_client = True
        return store


class RedisBase(FromUrl):
    """Everything but the I/O: settings, the router, planning, naming."""

    #: The clients a store takes, most specific first, and the router class each gets.
    _ROUTERS: ClassVar[tuple[tuple[type, Callable[..., Any]], ...]]
    #: What a store says when handed any other client (``{}``: that client's type).
    _WRONG_CLIENT: ClassVar[str]

    @checks.keywords_checked
    def __init__(
        self,
        client: Any,
        *,
        clock: Clock | None = None,
        prefix: str = DEFAULT_PREFIX,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        clock = check_clock(type(self).__name__, clock)
        self.clock: Clock = clock if clock is not None else SystemClock()
        # Without a clock, ARGV[1] is "" and the script reads Redis TIME.
        self._now_us: Callable[[], int] | None = None if clock is None else clock.now_us
        self.prefix = check_prefix(prefix)
        self.timeout = check_timeout(timeout)
        self._owns_client = False
        self._shapes = _plan.Shapes()
        # id(shape) -> (shape, its template); the shape is kept so that its id stays its own.
        self._templates: dict[int, tuple[_plan.Shape, Template]] = {}
        # The same for hit_all: ids of its calls' shapes -> (those shapes, their template).
        self._batch_templates: dict[
            tuple[int, ...], tuple[tuple[_plan.Shape, ...], BatchTemplate]
        ] = {}
        self._router: Any = self._route(client)
        self._clustered = bool(self._router.clustered)  # a hit_all needs its keys on one slot
        if _speedups is not None:
            # Handed all it plans with, once: it reads nothing of the store itself.
            self._planner = _speedups.BatchPlanner(
                shapes=self._shapes,
                prefix=self.prefix,
                script=script,
                now_us=self._now_us,
                clustered=self._clustered,
                rate_type=Rate,
            )
        self.client = client

    def _route(self, client: Any) -> Any:
        for kind, router in self._ROUTERS:
            if isinstance(client, kind):
                return router(client, self.timeout, *self._router_options())
        if isinstance(client, str):  # a URL, not shown: it may hold a password
            name = type(self).__name__
            raise ConfigurationError(
                f"{name} needs a redis client, not a str; open a URL with {name}.from_url(url)"
            )
        raise ConfigurationError(self._WRONG_CLIENT.format(_client_type(client)))

    def _router_options(self) -> tuple[Any, ...]:
        """What a router gets after the client and the timeout."""
        return ()

    # -- a decision: its EVALSHA, packed from a template per call shape -----------------------

    def _request(
        self, algorithm: str, key: str, rates: Rate | Sequence[Rate], cost: int
    ) -> tuple[_plan.Shape, Script, str, bytes]:
        """Validate a call: its shape, script, a key routed like its keys, and its EVALSHA.

        Raises ``ConfigurationError`` on bad input, before anything is sent.
        """
        shape = self._shapes.get(algorithm, rates, cost)
        if type(key) is not str or not key or not key.isascii():
            checks.check_key(key)
        found = self._templates.get(id(shape))
        if found is None or found[0] is not shape:
            found = self._template(shape)
        template = found[1]
        tag = escape(key)
        now_us = self._now_us
        packed = template.pack(tag, None if now_us is None else now_us())
        return shape, template.script, "{" + tag + "}", packed

    def _template(self, shape: _plan.Shape) -> tuple[_plan.Shape, Template]:
        args = [shape.cost, *(value for layer in shape.params for value in layer)]
        found = (shape, Template(script(shape.name), self.prefix, shape.suffixes, args))
        if len(self._templates) >= _TEMPLATE_CACHE_SIZE:
            self._templates.clear()
        self._templates[id(shape)] = found
        return found

    def node_of(
        self, key: str, *, stored: bool = False, rates: Rate | Sequence[Rate] | None = None
    ) -> str:
        """The Cluster primary (``host:port``) that holds ``key``'s state (a caller's key, or
        a key of this store with ``stored``), as the slot table knows it now; ``""`` on one
        server. What a breaker kept per node (``CircuitBreaker(per_node=True)``) asks.
        ``rates`` (the call's, when it has some) do not move a key here: every key of a
        call lives on the slot of its hash tag; a store that places calls by their rates
        (``AsyncSplitStore``) reads them."""
        if not self._clustered:
            return ""
        if type(key) is not str or not key or not key.isascii():
            checks.check_key(key)  # the store's own refusal, before the slot is hashed
        found: str = self._router.node_of(key if stored else "{" + escape(key) + "}")
        return found

    def _now(self) -> int | None:
        """ARGV[1] for a script: the clock's now, or None for "read Redis TIME"."""
        now_us = self._now_us
        return None if now_us is None else now_us()

    # -- every other operation: one Call ------------------------------------------------------

    def _hit_all_python(
        self, algorithm: str, calls: Sequence[_plan.BatchCall]
    ) -> Call[list[Decision] | None]:
        """Validate a ``hit_all`` (``ConfigurationError`` on bad input) and plan its script.

        On a Cluster, calls whose keys hash to different slots cannot share one
        script: the answer is None then, and nothing is sent. The reference of
        ``_hit_all_call``, and what it is without the kernel (or with ``RATEWARDEN_PURE=1``).
        """
        found = _plan.batch(self._shapes, algorithm, calls)
        if not found:
            return _answer([])
        tags = [escape(key) for key, _ in found]
        if self._clustered and len({key_slot(tag.encode()) for tag in tags}) > 1:
            return _answer(None)
        shapes = tuple([shape for _, shape in found])
        cached = self._batch_templates.get(tuple([id(shape) for shape in shapes]))
        if cached is None or any(a is not b for a, b in zip(cached[0], shapes, strict=True)):
            cached = self._batch_template(found, shapes)
        template = cached[1]
        packed = template.pack(tags, self._now())
        route_key = "{" + tags[0] + "}"
        return Call(
            "eval", (template.script, route_key, packed), partial(_decisions.decode_batch, found)
        )

    def _hit_all_kernel(
        self, algorithm: str, calls: Sequence[_plan.BatchCall]
    ) -> Call[list[Decision] | None]:
        """``_hit_all_python``, with a plainly valid batch of one-rate calls (on a Cluster, of
        one slot) planned by the C kernel: the same found, request bytes and route key. Any
        other batch (errors included) is planned by ``_hit_all_python``."""
        planned = self._planner.plan(algorithm, calls)
        if planned is None:
            return self._hit_all_python(algorithm, calls)
        args, found = planned
        return Call("eval", args, partial(_decisions.decode_batch, found))

    #: A ``hit_all``'s ``Call``: the kernel's plan when it is built, else the Python one.
    _hit_all_call = _hit_all_python if _speedups is None else _hit_all_kernel

    def _batch_template(
        self, found: _plan.Batch, shapes: tuple[_plan.Shape, ...]
    ) -> tuple[tuple[_plan.Shape, ...], BatchTemplate]:
        suffixes = [shape.suffixes for shape in shapes]
        args = _plan.batch_argv(found, None)[1:]  # everything after now
        template = BatchTemplate(script(shapes[0].name), self.prefix, suffixes, args)
        if len(self._batch_templates) >= _TEMPLATE_CACHE_SIZE:
            self._batch_templates.clear()
        # The shapes are kept so that their ids stay their own.
        cached = self._batch_templates[tuple([id(shape) for shape in shapes])] = (
            shapes,
            template,
        )
        return cached

    def _reset_call(self, algorithm: str, key: str, rates: Rate | Sequence[Rate]) -> Call[None]:
        plan = _plan.build(algorithm, self.prefix, key, rates, 0)
        return Call("command", (plan.keys[0], "DEL", *plan.keys), _ignore)

    def _script_call(
        self, name: str, keys: Sequence[str], args: Sequence[Sendable], read: Callable[[Any], T]
    ) -> Call[T]:
        """Script ``name`` run atomically on the keys' server (other scripts than the rate
        algorithms': concurrency leases, token budgets; all ``keys`` share one hash tag)."""
        found = script(name)
        return Call("eval", (found, keys[0], evalsha_command(found, keys, args)), read)

    # Concurrency slots: one hash per key, updated by the concurrency script.

    def _acquire_call(
        self, key: str, limit: int, lease_id: str, slots: int, ttl_us: int
    ) -> Call[Decision]:
        checks.check_slot_request(limit, slots, ttl_us, lease_id)
        args = _plan.slot_argv(self._now(), "acquire", lease_id, limit, slots, ttl_us)
        read = partial(_decisions.parse_acquire, limit, slots)
        return self._script_call("concurrency", [_plan.slot_key(self.prefix, key)], args, read)

    def _release_call(self, key: str, lease_id: str) -> Call[bool]:
        lease_id = checks.check_lease_id(lease_id)
        keys = [_plan.slot_key(self.prefix, key)]
        args = _plan.slot_argv(self._now(), "release", lease_id)
        return self._script_call("concurrency", keys, args, _second)

    def _renew_call(self, key: str, lease_id: str, ttl_us: int) -> Call[bool]:
        checks.check_slot_request(1, 1, ttl_us, lease_id)
        args = _plan.slot_argv(self._now(), "renew", lease_id, ttl_us=ttl_us)
        return self._script_call("concurrency", [_plan.slot_key(self.prefix, key)], args, _second)

    def _apply_call(self, op: Op) -> Call[list[int]]:
        """An op's script, with ``ARGV[1]`` filled in: the clock's now, or "" for Redis TIME."""
        args: list[Sendable] = list(op.args)
        now = self._now()
        args[0] = "" if now is None else now
        return self._script_call(op.script, op.keys, args, _ints)

    def _apply_all_calls(self, ops: Sequence[Op]) -> list[Call[list[int]]]:
        """Each op's ``_apply_call``, every op checked before anything is sent."""
        if isinstance(ops, Op) or not isinstance(ops, Sequence):
            raise TypeError(
                f"{type(self).__name__}.apply_all takes a sequence of Ops, not {ops!r}; "
                "apply(op) runs one"
            )
        for i, op in enumerate(ops):
            if not isinstance(op, Op) or not op.keys:
                raise TypeError(
                    f"{type(self).__name__}.apply_all: ops[{i}] is {op!r}, not an Op with "
                    "keys (ratewarden.storage.Op)"
                )
        return [self._apply_call(op) for op in ops]

    def _answers(
        self, calls: Sequence[Call[list[int]]], replies: Sequence[Any]
    ) -> list[list[int] | Exception]:
        """Each call's answer from its reply, or the ``StorageError`` standing for the error
        in its place (an error reply, or its server's failure)."""
        found: list[list[int] | Exception] = []
        for call, reply in zip(calls, replies, strict=True):
            if isinstance(reply, Exception):
                found.append(storage_error(reply, self._router.where, self.timeout))
            else:
                try:
                    found.append(read_reply(call.read, reply, self._router.where))
                except StorageError as error:  # this op's answer alone
                    found.append(error)
        return found

    def __repr__(self) -> str:
        clock = "" if self._now_us is None else f", clock={self.clock!r}"
        name = type(self).__name__
        where = self._router.where
        return f"{name}({where!r}, prefix={self.prefix!r}, timeout={self.timeout}{clock})"


def _client_type(client: object) -> str:
    """A client's type as redis-py exports it: ``redis.asyncio.Redis``, not ``Redis`` (the
    blocking and the asyncio client share the name)."""
    kind = type(client)
    package = "redis.asyncio" if kind.__module__.startswith("redis.asyncio.") else "redis"
    return f"{package}.{kind.__name__}" if kind.__module__.startswith("redis.") else kind.__name__
