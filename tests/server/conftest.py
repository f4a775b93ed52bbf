"""Fixtures for the rate limit service: one harness over every store and both service twins.

``rls(yaml_text, **service_options)`` returns a ``Harness``: ``ask(...)`` sends a
``RateLimitRequest`` and returns the ``RateLimitResponse``; ``clock`` is the
ManualClock every store uses; ``hooks`` records what the service reported.

Every service test runs over each backend in ``BACKENDS`` (memory, and real
redis-server standalone and 3-primary Cluster when ``ratewarden.storage.redis`` is
present) x both twins. A backend is a function ``(pytest request, clock, cleanup)
-> (sync store, async store)``; ``cleanup`` collects ``(twin, callable)`` to run at
teardown ("async" ones are awaited on the harness loop). Deselect the Redis ones
with ``-m "not redis"``.

Tests here that run ``main(["serve", ...])`` in this process (test_serve_store_start_check.py)
configure serve's loggers; ``serve_logging_untouched`` (tests/_serve_logging.py) starts every
test from them untouched and puts them back after.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2

from ratewarden.decision import Decision
from ratewarden.errors import StorageUnavailableError
from ratewarden.rate import Rate
from ratewarden.server import config
from ratewarden.server.service import (
    AsyncRateLimitService,
    DescriptorOutcome,
    RateLimitService,
    ServiceHooks,
)
from ratewarden.storage.memory import AsyncMemoryStore, MemoryStore
from ratewarden.testing import ManualClock
from tests._serve_logging import serve_logging_untouched  # noqa: F401  (autouse)
from tests._servers import STORE_TIMEOUT

#: A whole minute, hour and day since the epoch: windows of every unit start here.
ALIGNED = 1_700_006_400.0

#: The rules most service tests ask about: one descriptor key per kind of rule.
SERVICE_RULES = (Path(__file__).parent / "fixtures" / "service.yaml").read_text()

Response = rls_pb2.RateLimitResponse
OK = Response.OK
OVER = Response.OVER_LIMIT


def only_problem(paths: Sequence[Path], **options: Any) -> config.ConfigProblem:
    """The one problem ``config.load(paths, **options)`` fails with."""
    with pytest.raises(config.ConfigError) as caught:
        config.load(list(paths), **options)
    (problem,) = caught.value.errors
    return problem


def desc(
    *entries: tuple[str, str],
    hits: int | None = None,
    limit: tuple[int, int] | None = None,
) -> Any:
    """A RateLimitDescriptor: ``desc(("key", "value"), hits=0, limit=(rpu, unit_enum))``."""
    out = ratelimit_pb2.RateLimitDescriptor(
        entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key=k, value=v) for k, v in entries]
    )
    if hits is not None:
        out.hits_addend.value = hits
    if limit is not None:
        out.limit.requests_per_unit, out.limit.unit = limit
    return out


class RecordingHooks(ServiceHooks):
    """Keeps every outcome and store error the service reports."""

    def __init__(self) -> None:
        self.outcomes: list[DescriptorOutcome] = []
        self.store_errors: list[tuple[str, str, Exception]] = []

    def on_decision(
        self, domain: str, rule: config.DescriptorRule, outcome: DescriptorOutcome
    ) -> None:
        self.outcomes.append(outcome)

    def on_store_error(self, domain: str, rule: config.DescriptorRule, error: Exception) -> None:
        self.store_errors.append((domain, rule.path, error))


class Outage:
    """A switch that makes a store wrapper fail as an unreachable Redis does."""

    def __init__(self) -> None:
        self.down = False
        self.error: Exception = StorageUnavailableError("store unreachable (test outage)")

    def check(self) -> None:
        if self.down:
            raise self.error


class FlakyStore:
    """A real store behind an outage switch (the service only sees ``hit``, ``hit_all`` and
    ``apply`` raise). ``calls`` lists every ``(key, cost)`` asked for, ``steps`` every store
    call: ``("hit", [(key, cost)])``, ``("hit_all", [(key, cost), ...])`` or ``("apply",
    [(first store key, ARGV[2])])`` (``--charge-denied``'s fixed window: its cost); a
    ``hit_all`` the store declined (None: keys on several Cluster slots) is not a step."""

    def __init__(self, inner: MemoryStore | Any, outage: Outage) -> None:
        self.inner = inner
        self.outage = outage
        self.clock = inner.clock
        self.prefix = inner.prefix
        self.calls: list[tuple[str, int]] = []
        self.steps: list[tuple[str, list[tuple[str, int]]]] = []

    def _record(self, kind: str, calls: list[tuple[str, int]]) -> None:
        self.calls.extend(calls)
        self.steps.append((kind, calls))
        self.outage.check()

    def hit(self, algorithm: str, key: str, rates: Rate | Any, cost: int = 1) -> Decision:
        self._record("hit", [(key, cost)])
        decision: Decision = self.inner.hit(algorithm, key, rates, cost)
        return decision

    def hit_all(self, algorithm: str, calls: list[Any]) -> list[Decision] | None:
        if _together(self.inner, calls):
            self._record("hit_all", [(key, cost) for key, _, cost in calls])
        found: list[Decision] | None = self.inner.hit_all(algorithm, calls)
        return found

    def apply(self, op: Any) -> list[int]:
        self._record("apply", [(op.keys[0], int(op.args[1]))])
        found: list[int] = self.inner.apply(op)
        return found


class AsyncFlakyStore(FlakyStore):
    async def hit(self, algorithm: str, key: str, rates: Rate | Any, cost: int = 1) -> Decision:  # type: ignore[override]
        self._record("hit", [(key, cost)])
        decision: Decision = await self.inner.hit(algorithm, key, rates, cost)
        return decision

    async def hit_all(self, algorithm: str, calls: list[Any]) -> list[Decision] | None:  # type: ignore[override]
        if _together(self.inner, calls):
            self._record("hit_all", [(key, cost) for key, _, cost in calls])
        found: list[Decision] | None = await self.inner.hit_all(algorithm, calls)
        return found

    async def apply(self, op: Any) -> list[int]:  # type: ignore[override]
        self._record("apply", [(op.keys[0], int(op.args[1]))])
        found: list[int] = await self.inner.apply(op)
        return found


def _together(store: Any, calls: list[Any]) -> bool:
    """Whether ``store`` decides ``calls`` in one step (a Cluster only keys of one slot)."""
    if not getattr(store, "_clustered", False):
        return True
    from redis.crc import key_slot

    from ratewarden.storage._keys import escape

    return len({key_slot(escape(key).encode()) for key, _, _ in calls}) == 1


@dataclass
class Harness:
    """One service over one store, with its clock, hooks and outage switch."""

    service: RateLimitService | AsyncRateLimitService
    clock: ManualClock
    hooks: RecordingHooks
    outage: Outage
    store: FlakyStore
    loop: asyncio.AbstractEventLoop | None = None
    domain: str = "d"
    sent: list[Any] = field(default_factory=list)

    def ask(self, *descriptors: Any, domain: str | None = None, hits: int = 0) -> Any:
        request = rls_pb2.RateLimitRequest(
            domain=self.domain if domain is None else domain,
            descriptors=list(descriptors),
            hits_addend=hits,
        )
        return self.send(request)

    def send(self, request: Any) -> Any:
        self.sent.append(request)
        if isinstance(self.service, AsyncRateLimitService):
            assert self.loop is not None
            return self.loop.run_until_complete(self.service.should_rate_limit(request))
        return self.service.should_rate_limit(request)

    def codes(self, *descriptors: Any, hits: int = 0) -> list[int]:
        """``[overall, status 1, status 2, ...]`` of one request."""
        response = self.ask(*descriptors, hits=hits)
        return [response.overall_code, *(s.code for s in response.statuses)]

    def remaining(self, *entries: tuple[str, str]) -> int:
        """The remaining count of one descriptor, checked without consuming."""
        response = self.ask(desc(*entries, hits=0))
        return int(response.statuses[0].limit_remaining)

    @property
    def clustered(self) -> bool:
        """The store is a Redis Cluster: a request's counters sit on several slots."""
        inner = getattr(self.store, "inner", self.store)  # flaky=False: the store itself
        return bool(getattr(inner, "_clustered", False))


Cleanup = list[tuple[str, Callable[[], Any]]]
Backend = Callable[[pytest.FixtureRequest, ManualClock, Cleanup], tuple[Any, Any]]


def _memory(
    request: pytest.FixtureRequest, clock: ManualClock, cleanup: Cleanup
) -> tuple[Any, Any]:
    return MemoryStore(clock=clock), AsyncMemoryStore(clock=clock)


def _redis(request: pytest.FixtureRequest, clock: ManualClock, cleanup: Cleanup) -> tuple[Any, Any]:
    from ratewarden.storage.redis import AsyncRedisStore, RedisStore

    server = request.getfixturevalue("redis_server")
    client = server.client()
    client.flushall()
    store, astore = (
        RedisStore(client, clock=clock, timeout=STORE_TIMEOUT),
        AsyncRedisStore.from_url(server.url, clock=clock, timeout=STORE_TIMEOUT),
    )
    cleanup.extend([("sync", client.close), ("async", astore.aclose)])
    return store, astore


def _cluster(
    request: pytest.FixtureRequest, clock: ManualClock, cleanup: Cleanup
) -> tuple[Any, Any]:
    import redis

    from ratewarden.storage.redis import AsyncRedisStore, RedisStore

    cluster = request.getfixturevalue("redis_cluster")
    client = cluster.client()
    client.flushall(target_nodes=redis.RedisCluster.PRIMARIES)
    store, astore = (
        RedisStore(client, clock=clock, timeout=STORE_TIMEOUT),
        AsyncRedisStore.from_url(cluster.url, clock=clock, timeout=STORE_TIMEOUT),
    )
    cleanup.extend([("sync", client.close), ("async", astore.aclose)])
    return store, astore


BACKENDS: dict[str, Backend] = {"memory": _memory}
_BACKEND_PARAMS = [pytest.param("memory")]
if importlib.util.find_spec("ratewarden.storage.redis") is not None:
    BACKENDS.update(redis=_redis, cluster=_cluster)
    _BACKEND_PARAMS += [
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("cluster", marks=[pytest.mark.redis, pytest.mark.cluster]),
    ]


@pytest.fixture(params=_BACKEND_PARAMS)
def backend(request: pytest.FixtureRequest) -> Backend:
    return BACKENDS[request.param]


@pytest.fixture(params=["sync", "async"])
def twin(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def rls(
    request: pytest.FixtureRequest, backend: Backend, twin: str
) -> Iterator[Callable[..., Harness]]:
    """``rls(yaml_text, **options)``: a Harness for that config; options go to the service.

    ``flaky=False`` hands the service the store itself, without the outage switch."""
    loop = asyncio.new_event_loop()
    cleanup: Cleanup = []

    def make(text: str, *, start: float = ALIGNED, flaky: bool = True, **options: Any) -> Harness:
        clock = ManualClock(start)
        sync_store, async_store = backend(request, clock, cleanup)
        outage = Outage()
        hooks = RecordingHooks()
        loaded = config.loads(text, "test.yaml")
        if twin == "sync":
            store = FlakyStore(sync_store, outage) if flaky else sync_store
            service: Any = RateLimitService(loaded, store, hooks=hooks, **options)
            return Harness(service, clock, hooks, outage, store)
        astore = AsyncFlakyStore(async_store, outage) if flaky else async_store
        service = AsyncRateLimitService(loaded, astore, hooks=hooks, **options)
        return Harness(service, clock, hooks, outage, astore, loop)

    yield make
    for kind, close in cleanup:
        if kind == "async":
            loop.run_until_complete(close())
        else:
            close()
    loop.close()
