"""The Redis stores' ``hit_all`` with the C plan and decode against the Python path, on real
servers: a standalone redis-server and a 3-primary Cluster (tests/_servers.py starts them).

Two stores share one server and one clock, under two prefixes: one plans and decodes in C
(``_hit_all_kernel``, ``_decisions.decode_batch``), the other is the reference
(``_hit_all_python``, ``_decisions._decode_batch``). The same random sequences of
``hit_all`` (gcra, fixed_window, token_bucket, sliding_window; often denied, sometimes
refused, on a Cluster sometimes split over slots) go to both: the Decisions (field by field)
or errors must be equal after every step, and so must every key each store wrote (its
value, as DUMP gives it, and whether it expires).
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.crc import key_slot

from ratewarden import Rate
from ratewarden.decision import Decision
from ratewarden.storage import _decisions, _kernel
from ratewarden.storage._keys import escape
from ratewarden.storage._redis_store import Call, RedisBase
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests._servers import RedisCluster, RedisServer
from tests.storage.test_speedups_decisions import fields
from tests.storage.test_speedups_redis import plainly_valid

pytestmark = [
    pytest.mark.redis,
    pytest.mark.skipif(
        _kernel.speedups is None, reason="ratewarden.storage._speedups is not built"
    ),
]


def python_call(store: RedisBase, algorithm: str, calls: Any) -> Call[list[Decision] | None]:
    """The Python plan, read by the Python decoder: the reference."""
    call = store._hit_all_python(algorithm, calls)
    if call.method:
        return Call(call.method, call.args, partial(_decisions._decode_batch, *call.read.args))  # type: ignore[attr-defined]
    return call


class PureStore(RedisStore):
    def _hit_all_call(self, algorithm: str, calls: Any) -> Call[list[Decision] | None]:
        return python_call(self, algorithm, calls)


class AsyncPureStore(AsyncRedisStore):
    def _hit_all_call(self, algorithm: str, calls: Any) -> Call[list[Decision] | None]:
        return python_call(self, algorithm, calls)


RATES = [Rate.parse("3/second"), Rate.parse("5/minute"), Rate.parse("2/second")]
RATE_ARGS: list[Any] = [*RATES, [RATES[0]], (RATES[1],), (RATES[0], RATES[2])]  # last: layered
call = st.tuples(
    st.sampled_from(["a", "b", "a{x}%", "a"]),
    st.sampled_from(range(len(RATE_ARGS))),
    st.sampled_from([0, 1, 1, 2, 4]),
)
steps = st.lists(
    st.tuples(
        st.sampled_from(["gcra", "fixed_window", "token_bucket", "sliding_window"]),
        st.lists(call, min_size=1, max_size=4),
        st.sampled_from([0, 0, 1, 250_000, 1_000_000, 61_000_000]),
    ),
    min_size=1,
    max_size=12,
)


def outcome(run: Any) -> object:
    try:
        found = run()
    except Exception as error:  # the errors themselves are compared
        return (type(error).__name__, str(error))
    return None if found is None else [fields(decision) for decision in found]


async def awaited(pending: Any) -> object:
    """``outcome`` of an awaited ``hit_all``."""
    try:
        found = await pending
    except Exception as error:  # the errors themselves are compared
        return (type(error).__name__, str(error))
    return None if found is None else [fields(decision) for decision in found]


def state(client: Any, prefix: str) -> dict[bytes, tuple[bytes, bool]]:
    """Every key of ``prefix`` without it: its DUMP and whether it expires."""
    if isinstance(client, redis.RedisCluster):
        names = client.keys(f"{prefix}:*", target_nodes=redis.RedisCluster.PRIMARIES)
    else:
        names = client.keys(f"{prefix}:*")
    return {
        name[len(prefix) :]: (client.dump(name), client.pttl(name) > 0) for name in sorted(names)
    }


def batch_of(calls: list[tuple[str, int, int]]) -> list[Any]:
    return [(key, RATE_ARGS[rate], cost) for key, rate, cost in calls]


@pytest.fixture(params=["standalone", pytest.param("cluster", marks=pytest.mark.cluster)])
def setup(request: pytest.FixtureRequest) -> RedisServer | RedisCluster:
    found: RedisServer | RedisCluster = request.getfixturevalue(
        "redis_server" if request.param == "standalone" else "redis_cluster"
    )
    return found


def blocking(setup: RedisServer | RedisCluster) -> Any:
    if isinstance(setup, RedisServer):
        return redis.Redis(host="127.0.0.1", port=setup.port)
    return redis.RedisCluster(host="127.0.0.1", port=setup.nodes[0].port)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sequence=steps)
def test_the_blocking_store_decides_and_writes_as_the_python_path(
    setup: RedisServer | RedisCluster, sequence: list[Any]
) -> None:
    client = blocking(setup)
    clock = ManualClock()
    ours = RedisStore(client, clock=clock, prefix="k")
    reference = PureStore(client, clock=clock, prefix="p")
    assert type(ours)._hit_all_call is RedisBase._hit_all_kernel
    try:
        for algorithm, calls, advance in sequence:
            batch = batch_of(calls)
            one_slot = len({key_slot(escape(key).encode()) for key, _, _ in batch}) == 1
            if plainly_valid(algorithm, batch) and (one_slot or not ours._clustered):
                assert ours._planner.plan(algorithm, batch) is not None  # planned in C
            got = outcome(partial(ours.hit_all, algorithm, batch))
            assert got == outcome(partial(reference.hit_all, algorithm, batch))
            clock.advance(advance / 1_000_000)
        assert state(client, "k") == state(client, "p")
    finally:
        for name in state(client, "k"):
            client.delete(b"k" + name, b"p" + name)
        client.close()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sequence=steps)
def test_the_asyncio_store_decides_and_writes_as_the_python_path(
    setup: RedisServer | RedisCluster, sequence: list[Any]
) -> None:
    client = blocking(setup)
    clock = ManualClock()

    async def run() -> None:
        if isinstance(setup, RedisServer):
            made: Any = aredis.Redis(host="127.0.0.1", port=setup.port)
        else:
            made = aredis.RedisCluster(host="127.0.0.1", port=setup.nodes[0].port)
        ours = AsyncRedisStore(made, clock=clock, prefix="k")
        reference = AsyncPureStore(made, clock=clock, prefix="p")
        try:
            for algorithm, calls, advance in sequence:
                batch = batch_of(calls)
                got = await awaited(ours.hit_all(algorithm, batch))
                assert got == await awaited(reference.hit_all(algorithm, batch))
                clock.advance(advance / 1_000_000)
        finally:
            await made.aclose()

    try:
        asyncio.run(run())
        assert state(client, "k") == state(client, "p")
    finally:
        for name in state(client, "k"):
            client.delete(b"k" + name, b"p" + name)
        client.close()
